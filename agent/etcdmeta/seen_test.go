package etcdmeta

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
)

// TestSeenBounded: the store's last read of each name (where a watch
// starts) does not grow with the names it is asked about: a name found
// absent is not kept, and at most maxSeen names are. A store used to keep
// an entry, the whole record for one found, for every name it ever read.
func TestSeenBounded(t *testing.T) {
	srv := etcdtest.New(t)
	s := open(t, srv, 0)
	ctx := ctxT(t)
	for i := range 200 {
		_, err := s.Lookup(ctx, fmt.Sprintf("gone-%d", i))
		require.ErrorIs(t, err, meta.ErrNotFound)
	}
	_, err := s.List(ctx)
	require.NoError(t, err)
	s.mu.Lock()
	n := len(s.seen)
	s.mu.Unlock()
	require.Zero(t, n, "names found absent are not kept")

	for i := range maxSeen + 100 {
		s.noteRead(fmt.Sprintf("agent-%d", i), readState{rev: int64(i + 1), present: true})
	}
	s.mu.Lock()
	n = len(s.seen)
	s.mu.Unlock()
	require.Equal(t, maxSeen, n)
}
