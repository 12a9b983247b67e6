package cq

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDepthBounds: the sizes NewHostActor and NewDeviceActor allocate
// from are clamped into [1, MaxDepth] (a negative RetireHorizon turns the
// horizon off). A huge depth or MaxOutstanding used to end the process in
// make(chan) ("fatal error: runtime: out of memory" for 1<<40, which no
// recover catches), and a RetireHorizon above 1<<62 panicked in make
// (its power of two overflowed int).
func TestDepthBounds(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		wantIn  int // capacity of a host actor's inbox and of a device actor's
		wantHzn int // horizon slots
	}{
		{"min int", math.MinInt, -1, 0},
		{"zero", 0, -1, 0},
		{"one", 1, 1, 1},
		{"three", 3, 3, 4},
		{"max", MaxDepth, MaxDepth, MaxDepth},
		{"max plus one", MaxDepth + 1, MaxDepth, MaxDepth},
		{"1<<40", 1 << 40, MaxDepth, MaxDepth},
		{"max int", math.MaxInt, MaxDepth, MaxDepth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHostActor(tt.n)
			hostCap := cap(h.in)
			h.Close()
			a := NewDeviceActor("fake", newFakeWaiter(), ActorConfig{MaxOutstanding: tt.n, RetireHorizon: tt.n})
			devCap, slots := cap(a.in), len(a.horizon.slots)
			a.Close(0)
			if tt.wantIn < 0 { // the defaults
				require.Equal(t, 1024, hostCap)
				require.Equal(t, 256, devCap)
			} else {
				require.Equal(t, tt.wantIn, hostCap)
				require.Equal(t, tt.wantIn, devCap)
			}
			require.Equal(t, tt.wantHzn, slots)
		})
	}
}
