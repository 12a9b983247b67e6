package main

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, nil))
	require.Contains(t, out.String(), "decode's gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), `prefill found "decode"`)
	require.Contains(t, out.String(), `decode got "request 42: 64 blocks" from prefill`)
	require.Contains(t, out.String(), "decode checked 64 blocks of 64 KiB: verified (over ipc, 64 descriptors in 64 puts)")
	require.Contains(t, out.String(), "prefill forgot decode: ")
	require.Contains(t, out.String(), "peer forgotten")
}

// TestRunCatchesShiftedBytes: a block that landed 256 bytes off its place
// in its slot fails decode's check.
func TestRunCatchesShiftedBytes(t *testing.T) {
	shift := func(eng *engine.Engine, kv *engine.Buffer) error {
		const by = 256
		tmp, err := eng.Alloc(blockSize, engine.Host)
		if err != nil {
			return err
		}
		defer tmp.Free()
		ctx := context.Background()
		slot := kv.Slice(blockSize, blockSize) // block 0's
		if err := eng.CopySync(ctx, tmp.All(), slot); err != nil {
			return err
		}
		return eng.CopySync(ctx, kv.Slice(blockSize+by, blockSize-by), tmp.Slice(0, blockSize-by))
	}
	err := run(io.Discard, shift)
	require.Error(t, err)
	require.Contains(t, err.Error(), "block 0 differs")
}
