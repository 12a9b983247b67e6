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
	require.Contains(t, out.String(), "over tcp")
	require.Contains(t, out.String(), "peer's host memory: 1 MiB put and got back into gaudi0: verified")
	require.Contains(t, out.String(), "peer's gaudi0 memory: 1 MiB put and got back into gaudi0: verified")
}
