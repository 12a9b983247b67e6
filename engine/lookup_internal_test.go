package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLookupHidesInternalBuffers: Lookup finds only the buffers the
// caller made (Alloc, Register), never the engine's own: a peer's
// memory mapped by the "unix" transport, bounce buffers. It returned
// them, and Free of the Slice's buffer unmapped a peer's memory the
// import cache still handed out (the next Put to that key failed, its
// owner said to have freed it), or took a bounce buffer from the
// transfers using it.
func TestLookupHidesInternalBuffers(t *testing.T) {
	p := listenDialPair(t, "unix", filepath.Join(t.TempDir(), "s.sock"))
	ctx := context.Background()
	_, hk := exported(t, p.b, 1<<20, Host)
	_, dk := exported(t, p.b, 1<<20, Gaudi(0))
	src, err := p.a.Alloc(1<<20, Host)
	require.NoError(t, err)
	reg, err := p.a.Register(make([]byte, 4096))
	require.NoError(t, err)
	require.NoError(t, p.ab.PutSync(ctx, src.All(), hk))
	require.NoError(t, p.ab.PutSync(ctx, src.All(), dk))
	mine := map[*Buffer]bool{src: true, reg: true}
	internal := 0
	p.a.mu.Lock()
	var all []*Buffer
	for _, b := range p.a.buffers {
		all = append(all, b)
	}
	p.a.mu.Unlock()
	for _, b := range all {
		if b.loc.gaudi {
			continue
		}
		s, err := p.a.Lookup(b.Addr(), 1)
		if mine[b] {
			require.NoError(t, err)
			require.Same(t, b, s.Buffer())
			continue
		}
		internal++
		require.ErrorIs(t, err, ErrInvalid, "Lookup found internal buffer %d", b.id)
		require.Nil(t, s.Buffer())
	}
	require.NotZero(t, internal, "no internal buffer to look up: the test tests nothing")
	// The import still works.
	require.NoError(t, p.ab.PutSync(ctx, src.All(), hk))
}
