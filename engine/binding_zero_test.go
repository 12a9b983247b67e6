package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBindingZeroValue: a Binding not made by Endpoint.Bind (a declared
// Binding{}, or a nil *Binding) refuses every method with ErrInvalid,
// PutN and GetN of no operation too. Each panicked: the zero binding on
// its nil data path binding, the nil one on its lock.
func TestBindingZeroValue(t *testing.T) {
	inv := func(t *testing.T, err error) { t.Helper(); require.ErrorIs(t, err, ErrInvalid) }
	checkZeroMethods(t, []zeroCall[Binding]{
		{"Put", func(t *testing.T, b *Binding) { inv(t, b.Put()) }},
		{"Get", func(t *testing.T, b *Binding) { inv(t, b.Get()) }},
		{"PutN", func(t *testing.T, b *Binding) { inv(t, b.PutN(3)); inv(t, b.PutN(0)) }},
		{"GetN", func(t *testing.T, b *Binding) { inv(t, b.GetN(3)); inv(t, b.GetN(0)) }},
		{"Flush", func(t *testing.T, b *Binding) { inv(t, b.Flush()) }},
		{"Hold", func(t *testing.T, b *Binding) {
			h, err := b.Hold()
			require.Nil(t, h)
			inv(t, err)
		}},
		{"Close", func(t *testing.T, b *Binding) { inv(t, b.Close()) }},
	})
}
