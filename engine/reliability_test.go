package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/ipc"
)

// testValidity is a validity flag for crafted ImportReplies, closed at
// the end of the test. Safe off the test goroutine (no require).
func testValidity(t *testing.T) *ipc.Validity {
	t.Helper()
	v, err := ipc.NewValidity("test")
	if err != nil {
		t.Errorf("validity flag: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = v.Close() })
	return v
}

// unixPair is an owner engine listening on a unix socket and a peer
// engine dialed to it; ownerEP is the owner's side of the endpoint.
func unixPair(t *testing.T, cfg Config) (owner, peer *Engine, l *Listener, ep, ownerEP *Endpoint) {
	t.Helper()
	ctx := context.Background()
	owner, peer = newEngine(t, cfg), newEngine(t, cfg)
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ep, err = peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	ownerEP, err = l.Accept(ctx)
	require.NoError(t, err)
	return owner, peer, l, ep, ownerEP
}

// Issue 16 item 4: the owner's record of the peers that mapped an
// exported buffer forgets a peer whose endpoint ended (it kept every
// closed endpoint, and all it held, while the buffer stayed exported).
func TestRegressClosedPeerLeavesImporters(t *testing.T) {
	ctx := context.Background()
	owner, peer, l, ep, _ := unixPair(t, Config{Devices: DevicesNone})
	require.NoError(t, ep.Close())
	b, err := owner.Alloc(64<<10, Host)
	require.NoError(t, err)
	k, err := b.Export()
	require.NoError(t, err)
	src, err := peer.Alloc(64<<10, Host)
	require.NoError(t, err)
	const cycles = 20
	for i := 0; i < cycles; i++ {
		ep, err := peer.Dial(ctx, "unix", l.Addr())
		require.NoError(t, err)
		oep, err := l.Accept(ctx)
		require.NoError(t, err)
		require.NoError(t, ep.PutSync(ctx, src.All(), k))
		require.Equal(t, 1, b.importerCount())
		require.NoError(t, ep.Close())
		select {
		case <-oep.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the owner's endpoint did not end")
		}
		require.Equal(t, 0, b.importerCount(), "cycle %d: the closed peer is still recorded as an importer", i)
	}
}

// Issue 16 item 5: a Put or Get over a unix socket with a key whose
// allocation the owner just freed (and replaced by a new one) is refused
// every time; it reported success while the peer's mapping of the old
// memfd was still cached (the Invalidate not yet arrived).
func TestRegressIPCFreedKeyRefused(t *testing.T) {
	ctx := context.Background()
	owner, peer, _, ep, _ := unixPair(t, Config{Devices: DevicesNone})
	local, err := peer.Alloc(8192, Host)
	require.NoError(t, err)
	const iters = 200
	refused := 0
	for i := 0; i < iters; i++ {
		b, err := owner.Alloc(8192, Host)
		require.NoError(t, err)
		k, err := b.Export()
		require.NoError(t, err)
		require.NoError(t, ep.PutSync(ctx, local.All(), k)) // imported and cached
		require.NoError(t, b.Free())
		again, err := owner.Alloc(8192, Host) // the re-Alloc of the report
		require.NoError(t, err)
		put := i%2 == 0
		if put {
			err = ep.PutSync(ctx, local.All(), k)
		} else {
			err = ep.GetSync(ctx, local.All(), k)
		}
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			refused++
		}
		require.NoError(t, again.Free())
	}
	require.Equal(t, iters, refused, "Puts and Gets with a freed key reported success")
}

// Issue 16 item 6: the teardown of one endpoint purges only what that
// endpoint imported, not the imports of a newer endpoint of the same peer
// (it purged by the peer's pid and engine, so a peer that closed and
// redialed at once could see its first request refused as stale).
func TestRegressRedialKeepsNewImports(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 256 << 20}}
	owner, peer, l, ep1, old := unixPair(t, cfg)
	ep2, err := peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	cur, err := l.Accept(ctx)
	require.NoError(t, err)
	require.NotEqual(t, old.ch.Peer(), cur.ch.Peer())

	// The owner's side of the new endpoint holds an import of the peer's
	// memory (as it does while it serves a Put into its Gaudi memory)
	// when the old endpoint's teardown runs.
	pb, err := peer.Alloc(1<<20, Host)
	require.NoError(t, err)
	pk, err := pb.Export()
	require.NoError(t, err)
	release, err := cur.shmPath().Import(ctx, pk.k)
	require.NoError(t, err)
	require.NoError(t, ep1.Close())
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the owner's old endpoint did not end")
	}
	release()
	st := owner.shm().CacheStats()
	require.Zero(t, st.Purges, "the old endpoint's teardown purged the new endpoint's import")
	release, err = cur.shmPath().Import(ctx, pk.k)
	require.NoError(t, err)
	release()
	require.Equal(t, st.Misses, owner.shm().CacheStats().Misses, "the import had to be made again")

	// And the new endpoint's first Put into the owner's Gaudi memory works.
	d, err := owner.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	dk, err := d.Export()
	require.NoError(t, err)
	require.NoError(t, ep2.PutSync(ctx, pb.All(), dk))
}

// Issue 16 item 7: a key narrowed with Slice grants its range only. The
// forged widening of the report (a key sliced to [8192, +4096) re-encoded
// as [0, +1 MiB)) is refused by the owner on unix and TCP, and the
// narrowed key itself still works (on unix through the owner's copy, as
// its mapping would reach the whole buffer).
func TestRegressSlicedKeyCannotWiden(t *testing.T) {
	for _, tc := range []struct {
		network string
		// rootFirst: the peer has already mapped the allocation with the
		// root key (it held it, then narrowed it): the forged key names
		// the same allocation and must not ride on that import.
		rootFirst bool
	}{{"unix", false}, {"tcp", false}, {"unix", true}, {"tcp", true}} {
		network := tc.network
		t.Run(fmt.Sprintf("%s/rootFirst=%v", network, tc.rootFirst), func(t *testing.T) {
			ctx := context.Background()
			cfg := Config{Devices: DevicesNone, Transport: TransportTCP}
			owner, peer := newEngine(t, cfg), newEngine(t, cfg)
			l := listenLocal(t, owner, network)
			ep, err := peer.Dial(ctx, network, l.Addr())
			require.NoError(t, err)
			defer ep.Close()

			const size = 1 << 20
			b, err := owner.Alloc(size, Host)
			require.NoError(t, err)
			root, err := b.Export()
			require.NoError(t, err)
			narrow := root.Slice(8192, 4096)
			require.NoError(t, narrow.Err())

			// The peer gets the narrowed key's bytes and edits them.
			enc := narrow.Bytes()
			wide := bytes.Clone(enc)
			binary.LittleEndian.PutUint64(wide[80:], 0)     // grant offset
			binary.LittleEndian.PutUint64(wide[88:], size)  // grant length
			binary.LittleEndian.PutUint64(wide[112:], 0)    // view offset
			binary.LittleEndian.PutUint64(wide[120:], size) // view length
			forged, err := ParseRemoteKey(wide)
			require.NoError(t, err) // well-formed: only the owner can tell
			src, err := peer.Alloc(size, Host)
			require.NoError(t, err)
			if tc.rootFirst {
				zero, err := peer.Alloc(size, Host)
				require.NoError(t, err)
				require.NoError(t, ep.PutSync(ctx, zero.All(), root))
				require.NoError(t, zero.Free())
			}
			for i := range src.Bytes() {
				src.Bytes()[i] = 0xAB
			}
			err = ep.PutSync(ctx, src.All(), forged)
			require.ErrorIs(t, err, ErrInvalid, "a widened grant was accepted for a write")
			require.ErrorIs(t, ep.GetSync(ctx, src.All(), forged), ErrInvalid)
			// The view alone widened beyond the grant does not parse.
			viewOnly := bytes.Clone(enc)
			binary.LittleEndian.PutUint64(viewOnly[112:], 0)
			binary.LittleEndian.PutUint64(viewOnly[120:], size)
			_, err = ParseRemoteKey(viewOnly)
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, make([]byte, size), b.Bytes(), "the owner's buffer was written")

			// The narrowed key, as sent, works for its range.
			got, err := ParseRemoteKey(enc)
			require.NoError(t, err)
			require.NoError(t, ep.PutSync(ctx, src.Slice(0, 4096), got))
			require.Equal(t, bytes.Repeat([]byte{0xAB}, 4096), b.Bytes()[8192:8192+4096])
			require.Equal(t, make([]byte, 8192), b.Bytes()[:8192])
		})
	}
}

// Issue 16 item 5, for bindings: a unix Binding's Put or Get after the
// owner freed the buffer fails at once (it succeeded until the Invalidate
// arrived).
func TestRegressBindingFreedRefused(t *testing.T) {
	ctx := context.Background()
	owner, peer, _, ep, _ := unixPair(t, Config{Devices: DevicesNone})
	local, err := peer.Alloc(4096, Host)
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		b, err := owner.Alloc(4096, Host)
		require.NoError(t, err)
		k, err := b.Export()
		require.NoError(t, err)
		bd, err := ep.Bind(ctx, local.All(), k)
		require.NoError(t, err)
		require.NoError(t, bd.Put())
		require.NoError(t, b.Free())
		require.ErrorIs(t, bd.Put(), ErrInvalid)
		require.ErrorIs(t, bd.Get(), ErrInvalid)
		require.ErrorIs(t, bd.PutN(3), ErrInvalid)
		require.NoError(t, bd.Close())
	}
}
