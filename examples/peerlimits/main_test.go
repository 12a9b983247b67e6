package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	for _, line := range []string{
		"server: room for 2 endpoints, PeerIdleEvict 100ms",
		"newcomer: let in, its Put landed",
		"busy: still connected, its Put landed",
		"quiet: closed to make room, its next Put failed with ErrPeer",
		"server: room for 2 endpoints, PeerIdleEvict never",
		"newcomer: refused (ErrTooManyPeers): the two endpoints keep their slots",
	} {
		require.Contains(t, out.String(), line)
	}
}
