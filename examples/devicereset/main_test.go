package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	// Gaudi2: the driver's TDR times the hung submission out. (Gaudi3
	// copies bypass the driver's CSs: gxfer times them out itself and no
	// reset follows; engine's TestDeviceResetReopens resets one.)
	var out bytes.Buffer
	require.NoError(t, run(&out, engine.Config{Devices: engine.DevicesEmulated,
		Emulator: engine.EmulatorConfig{Model: "gaudi2", DRAMSize: 256 << 20, CSTimeout: 100 * time.Millisecond}}))
	t.Log(out.String())
	require.Contains(t, out.String(), "gaudi0: Gaudi2, emulated (dma/hlsim)")
	require.Contains(t, out.String(), "device lost")
	require.Contains(t, out.String(), "resets: 1")
	require.Contains(t, out.String(), "old buffer: lost: true")
	require.Contains(t, out.String(), "round trip verified")
}
