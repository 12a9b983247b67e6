package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeldZeroValue: a Held not made by Binding.Hold (a declared Held{},
// or a nil *Held) refuses Put and Get with ErrInvalid, and Release does
// nothing. Put, Get and Release panicked on its nil binding (a nil *Held
// in every method).
func TestHeldZeroValue(t *testing.T) {
	checkZeroMethods(t, []zeroCall[Held]{
		{"Put", func(t *testing.T, h *Held) { require.ErrorIs(t, h.Put(), ErrInvalid) }},
		{"Get", func(t *testing.T, h *Held) { require.ErrorIs(t, h.Get(), ErrInvalid) }},
		{"Release", func(t *testing.T, h *Held) { h.Release() }},
	})
}
