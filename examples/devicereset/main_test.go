package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func gaudi2() engine.Config {
	return engine.Config{Devices: engine.DevicesEmulated,
		Emulator: engine.EmulatorConfig{Model: "gaudi2", DRAMSize: 256 << 20, CSTimeout: time.Second}}
}

func TestRun(t *testing.T) {
	// Gaudi2: the driver's TDR times the hung submission out. (Gaudi3
	// copies bypass the driver's CSs: gxfer times them out itself and no
	// reset follows; engine's TestDeviceResetReopens resets one.)
	var out bytes.Buffer
	require.NoError(t, run(&out, gaudi2(), nil))
	t.Log(out.String())
	require.Contains(t, out.String(), "gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), "device lost")
	require.Contains(t, out.String(), "resets: 1")
	require.Contains(t, out.String(), "old buffer: lost: true")
	require.Contains(t, out.String(), "round trip verified")
}

// TestRunCatchesShiftedBytes: bytes that came back 256 bytes off their
// place fail the new buffer's check.
func TestRunCatchesShiftedBytes(t *testing.T) {
	shift := func(eng *engine.Engine, b *engine.Buffer) error {
		const n, by = 1 << 20, 256
		tmp, err := eng.Alloc(n, engine.Host)
		if err != nil {
			return err
		}
		defer tmp.Free()
		ctx := context.Background()
		if err := eng.CopySync(ctx, tmp.All(), b.All()); err != nil {
			return err
		}
		return eng.CopySync(ctx, b.Slice(by, n-by), tmp.Slice(0, n-by))
	}
	err := run(io.Discard, gaudi2(), shift)
	require.Error(t, err)
	require.Contains(t, err.Error(), "came back different")
}
