package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}}))
	require.Contains(t, out.String(), "emulated")
	require.Contains(t, out.String(), "verified")
}
