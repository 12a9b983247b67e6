package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListenerZeroValue: a Listener not made by Engine.Listen (a declared
// Listener{}, or a nil *Listener) refuses Accept and Close with
// ErrInvalid, and Addr and Transport give zero values. Each panicked on
// its nil handshake listener.
func TestListenerZeroValue(t *testing.T) {
	checkZeroMethods(t, []zeroCall[Listener]{
		{"Addr", func(t *testing.T, l *Listener) { require.Empty(t, l.Addr()) }},
		{"Transport", func(t *testing.T, l *Listener) { require.Equal(t, TransportAuto, l.Transport()) }},
		{"Accept", func(t *testing.T, l *Listener) {
			ep, err := l.Accept(context.Background())
			require.Nil(t, ep)
			require.ErrorIs(t, err, ErrInvalid)
		}},
		{"Close", func(t *testing.T, l *Listener) { require.ErrorIs(t, l.Close(), ErrInvalid) }},
	})
}
