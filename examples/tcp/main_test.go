package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, nil))
	require.Contains(t, out.String(), "server's gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), "client's gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), "over tcp")
	require.Contains(t, out.String(), "peer's host memory: 1 MiB put and got back into gaudi0: verified")
	require.Contains(t, out.String(), "peer's gaudi0 memory: 1 MiB put and got back into gaudi0: verified")
}

// TestClientTakesServerLine: the two-machine mode's doc says to pass the
// line the server printed ("ADDR KEYS") as -keys; the client takes it, the
// server's whole output, or the keys alone.
func TestClientTakesServerLine(t *testing.T) {
	ready := make(chan string, 1)
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- serverReady("127.0.0.1:0", io.Discard, stop, ready) }()
	var line string
	select {
	case line = <-ready:
	case err := <-errc:
		require.NoError(t, err)
	}
	addr, keys, _ := strings.Cut(line, " ")
	// What -serve writes on stdout: its device, then the line.
	whole := "server's gaudi0: Gaudi2, emulated (dma/hlsim), not a real Gaudi\n" + line + "\n"
	for _, k := range []string{whole, line, keys} {
		var out bytes.Buffer
		err := client(addr, k, &out, nil)
		if err != nil {
			close(stop)
			<-errc
		}
		require.NoError(t, err, "-keys %.40q...", k)
		require.Contains(t, out.String(), "peer's host memory: 1 MiB put and got back into gaudi0: verified")
	}
	close(stop)
	require.NoError(t, <-errc)
}

// TestRunCatchesShiftedBytes: bytes that came back 256 bytes off their
// place fail the check.
func TestRunCatchesShiftedBytes(t *testing.T) {
	shift := func(eng *engine.Engine, dev *engine.Buffer) error {
		const n, by = 1 << 20, 256
		tmp, err := eng.Alloc(n, engine.Host)
		if err != nil {
			return err
		}
		defer tmp.Free()
		ctx := context.Background()
		if err := eng.CopySync(ctx, tmp.All(), dev.All()); err != nil {
			return err
		}
		return eng.CopySync(ctx, dev.Slice(by, n-by), tmp.Slice(0, n-by))
	}
	err := run(io.Discard, shift)
	require.Error(t, err)
	require.Contains(t, err.Error(), "data differs")
}
