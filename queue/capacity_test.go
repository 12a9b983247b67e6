package queue

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewCapacityBounds: New clamps its capacity into [1, MaxCapacity].
// Above MaxCapacity, make(chan) used to end the process ("fatal error:
// runtime: out of memory" for 1<<40, which no recover catches) or panic
// ("makechan: size out of range" for MaxInt).
func TestNewCapacityBounds(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		want     int
	}{
		{"min int", math.MinInt, 1},
		{"negative", -5, 1},
		{"zero", 0, 1},
		{"one", 1, 1},
		{"default engine depth", 4096, 4096},
		{"max", MaxCapacity, MaxCapacity},
		{"max plus one", MaxCapacity + 1, MaxCapacity},
		{"1<<40", 1 << 40, MaxCapacity},
		{"max int", math.MaxInt, MaxCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[*int](tt.capacity, FailFast)
			require.Equal(t, tt.want, q.Cap())
			q.Close()
		})
	}
}
