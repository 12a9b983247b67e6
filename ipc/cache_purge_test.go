package ipc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHandleCachePurgePeerVisitsOnlyItsEntries: PurgePeer, run under the
// lock imports need at every endpoint teardown, visits only the purged
// peer's entries, however many other peers' entries are cached (MaxRegions
// < 0: no bound). Before the fix it walked the whole index, so a peer
// reconnecting in a loop made every teardown O(all entries).
func TestHandleCachePurgePeerVisitsOnlyItsEntries(t *testing.T) {
	const others = 500
	c := NewHandleCache(CacheConfig[int]{MaxRegions: -1})
	defer func() { require.NoError(t, c.Close()) }()
	imp := func(k Key) (int, uint64, error) { return int(k.AllocID), 1, nil }
	get := func(k Key) {
		h, err := c.Get(k, imp)
		require.NoError(t, err)
		c.Put(h)
	}
	big := PeerID{PID: 1, PIDNS: 7}
	for i := range others {
		get(Key{Peer: big, AllocID: uint64(i), Generation: 1})
	}
	for _, tc := range []struct {
		name    string
		peer    PeerID
		allocs  []uint64
		replace bool // ask a newer generation of the first alloc before the purge
	}{
		{name: "two entries", peer: PeerID{PID: 2, PIDNS: 7, Conn: 1}, allocs: []uint64{1, 2}},
		{name: "next connection", peer: PeerID{PID: 2, PIDNS: 7, Conn: 2}, allocs: []uint64{1, 2, 3}},
		{name: "replaced generation", peer: PeerID{PID: 3, PIDNS: 7}, allocs: []uint64{5, 6}, replace: true},
		{name: "nothing cached", peer: PeerID{PID: 4, PIDNS: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, a := range tc.allocs {
				get(Key{Peer: tc.peer, AllocID: a, Generation: 1})
			}
			if tc.replace {
				get(Key{Peer: tc.peer, AllocID: tc.allocs[0], Generation: 2})
			}
			c.mu.Lock()
			before := c.purgeVisited
			c.mu.Unlock()
			c.PurgePeer(tc.peer)
			c.mu.Lock()
			visited := c.purgeVisited - before
			c.mu.Unlock()
			require.EqualValues(t, len(tc.allocs), visited, "entries PurgePeer visited")
			require.Equal(t, others, c.Stats().Cached, "only the purged peer's entries left")
			c.mu.Lock()
			n := 0
			for p, m := range c.byPeer {
				require.NotEmpty(t, m, "an empty set of peer %v kept", p)
				for a, h := range m {
					require.Same(t, c.index[slot{p, a}], h)
					n++
				}
			}
			require.Len(t, c.index, n, "entries of the index missing by peer")
			c.mu.Unlock()
			for _, a := range tc.allocs {
				require.Nil(t, c.TryGet(Key{Peer: tc.peer, AllocID: a, Generation: 1}))
			}
		})
	}
	// The other peer's entries are still cached, and a purge removes them all.
	h := c.TryGet(Key{Peer: big, AllocID: others - 1, Generation: 1})
	require.NotNil(t, h)
	c.Put(h)
	c.PurgePeer(big)
	require.Zero(t, c.Stats().Cached)
	require.Zero(t, c.Stats().Regions)
}
