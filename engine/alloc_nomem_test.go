package engine

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma"
)

// TestAllocNoMemory: an Alloc that finds no room fails with ErrNoMemory
// (still wrapping the cause); it returned an error of no gxfer kind, and
// still did for a host size within a page of math.MaxInt.
func TestAllocNoMemory(t *testing.T) {
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 64 << 20}})
	for _, tc := range []struct {
		name  string
		size  int
		loc   Location
		cause error
	}{
		{"gaudi: more than its DRAM", 128 << 20, Gaudi(0), dma.ErrNoMemory},
		{"host: more than the address space maps", 1 << 62, Host, nil},
		// Sizes whose rounding to whole pages overflows an int: the
		// host refused them with an error of no gxfer kind.
		{"host: the largest int", math.MaxInt, Host, nil},
		{"host: the largest int less a page", math.MaxInt - 4095, Host, nil},
		{"gaudi: the largest int", math.MaxInt, Gaudi(0), dma.ErrNoMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := e.Alloc(tc.size, tc.loc)
			require.Nil(t, b)
			require.ErrorIs(t, err, ErrNoMemory)
			if tc.cause != nil {
				require.ErrorIs(t, err, tc.cause)
			}
		})
	}
	// The room is there again once freed: the refusal held nothing.
	b, err := e.Alloc(48<<20, Gaudi(0))
	require.NoError(t, err)
	require.NoError(t, b.Free())
}
