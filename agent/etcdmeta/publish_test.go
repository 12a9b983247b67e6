package etcdmeta

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
)

// TestPublishStaleVersion: a record of this store's agent with a lower
// Version than the one it published last is stale (what agents publish
// concurrently reaches the store in any order): it is not written, and
// the newer record stays. Before, the last call won: the store went back
// to the older record, without the sections published since.
func TestPublishStaleVersion(t *testing.T) {
	srv := etcdtest.New(t)
	s := open(t, srv, 0)
	ctx := ctxT(t)
	v3 := record("v", 8, 3)
	v3.Sections = append(v3.Sections, meta.Section{Name: "later", Len: 1, Location: "host"})
	require.NoError(t, s.Publish(ctx, v3))
	require.NoError(t, s.Publish(ctx, record("v", 8, 2)), "a stale record is no error: a newer one is published")
	got, err := s.Lookup(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, v3, got)
	require.NoError(t, s.Publish(ctx, v3), "the same Version again is written")
	v4 := record("v", 8, 4)
	require.NoError(t, s.Publish(ctx, v4))
	got, err = s.Lookup(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, v4, got)
}
