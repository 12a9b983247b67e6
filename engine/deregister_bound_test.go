package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeregisterWhileBound: a Binding holds its local buffer until it is
// closed (Deregister's documented contract): after Deregister of
// registered memory that a binding is bound to, the binding's Get still
// writes that memory and its Put still reads it, while new operations
// on the buffer fail with ErrFreed; once the binding is closed the
// buffer is released and nothing touches the memory any more. (The
// godoc used to promise that nothing touched it once Deregister returned
// and the operations in flight completed; a Get after Deregister wrote
// it.)
func TestDeregisterWhileBound(t *testing.T) {
	for _, pm := range pairMakers[:2] {
		t.Run(pm.name, func(t *testing.T) {
			p := pm.make(t)
			ctx := context.Background()
			rb, rk := exported(t, p.b, 4096, Host)
			fill(rb.Bytes(), 3)
			mem := make([]byte, 4096)
			reg, err := p.a.Register(mem)
			require.NoError(t, err)
			bd, err := p.ab.Bind(ctx, reg.All(), rk)
			require.NoError(t, err)
			require.NoError(t, reg.Deregister())
			require.False(t, reg.released.Load(), "Deregister is deferred while bound")
			require.ErrorIs(t, p.ab.Get(ctx, reg.All(), rk).Wait(ctx), ErrFreed, "a new operation on a deregistered buffer")
			require.Equal(t, make([]byte, 4096), mem, "the refused Get wrote the memory")

			require.NoError(t, bd.Get(), "the binding still holds the buffer")
			require.Equal(t, rb.Bytes(), mem, "the bound Get after Deregister wrote the memory")
			fill(mem, 4)
			require.NoError(t, bd.Put())
			require.Equal(t, mem, rb.Bytes(), "the bound Put after Deregister read the memory")

			require.NoError(t, bd.Close())
			require.True(t, reg.released.Load(), "the binding's Close ends the deferred Deregister")
			want := bytes.Clone(mem)
			fill(rb.Bytes(), 5)
			require.ErrorIs(t, bd.Get(), ErrClosed)
			require.Equal(t, want, mem, "the memory was touched after Deregister and the binding's Close")
		})
	}
}
