package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	for _, kernel := range []string{"6.5", "6.8"} {
		t.Run(kernel, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run(&out, kernel, nil))
			s := out.String()
			for _, want := range []string{
				"emulated by dma/hlsim",
				"pool exported once",
				"through the runtime's copier: verified",
				"tensor put to a peer over TCP: verified",
				"on the borrowed fd: 1 exports, 0 CS/WAIT/CB ioctls, 0 memory ops, 0 closes; device CSs: 0",
				"detached; the runtime unmapped its pool",
			} {
				require.Contains(t, s, want)
			}
		})
	}
}

// TestRunCatchesShiftedBytes: bytes that came back 256 KiB off their place
// fail the check of the copies through the runtime.
func TestRunCatchesShiftedBytes(t *testing.T) {
	shift := func(b []byte) { copy(b[256<<10:], b) }
	err := run(io.Discard, "6.8", shift)
	require.Error(t, err)
	require.Contains(t, err.Error(), "data differs")
}
