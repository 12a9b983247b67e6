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
	require.Contains(t, out.String(), "decode's gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), `prefill found "decode"`)
	require.Contains(t, out.String(), `decode got "request 42: 64 blocks" from prefill`)
	require.Contains(t, out.String(), "decode checked 64 blocks of 64 KiB: verified (over ipc, 64 descriptors in 64 puts)")
}
