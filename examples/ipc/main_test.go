package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(peerEnv); sock != "" { // the re-executed peer
		if err := peer(sock, os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	testutil.Main(m)
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, os.Args[0], []string{"-test.run=^$"}, nil))
	require.Contains(t, out.String(), "the peer's gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), "peer's host memory: verified")
	require.Contains(t, out.String(), "peer's gaudi0 memory: verified")
	require.Contains(t, out.String(), "1000 bound 8-byte puts: verified")
}

// TestRunCatchesShiftedBytes: bytes that came back 256 bytes off their
// place fail the check.
func TestRunCatchesShiftedBytes(t *testing.T) {
	shift := func(b *engine.Buffer) { copy(b.Bytes()[256:], b.Bytes()) }
	err := run(io.Discard, os.Args[0], []string{"-test.run=^$"}, shift)
	require.Error(t, err)
	require.Contains(t, err.Error(), "data differs")
}
