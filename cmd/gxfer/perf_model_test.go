package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDMANamedPerModel: perf and info name the packets a model's copies
// use: Gaudi3 copies are LIN_PDMA packets on user PDMA channels, never
// LIN_DMA (the Gaudi1/2 command-submission packet).
func TestDMANamedPerModel(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "-model", "gaudi3", "-t", "h2d,d2h,d2d", "-s", "8", "-n", "2", "-w", "1"},
		{"info", "-model", "gaudi3"},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, out, errs := gxfer(t, args...)
			require.Equal(t, exitOK, code, errs)
			require.Contains(t, out, "Gaudi3")
			require.NotContains(t, out, "LIN_DMA", "a Gaudi3 is driven with LIN_PDMA")
		})
	}
}
