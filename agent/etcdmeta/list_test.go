package etcdmeta

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
)

// putRecord writes m under its key with cli (no lease: it stays until
// deleted), as a store would publish it.
func putRecord(ctx context.Context, t *testing.T, cli *clientv3.Client, s *Store, m meta.Metadata) {
	t.Helper()
	b, err := m.Encode()
	require.NoError(t, err)
	_, err = cli.Put(ctx, s.key(m.Name), string(b))
	require.NoError(t, err)
}

// records are n records named agent-00, agent-01, ... (sorted by name).
func records(n int) []meta.Metadata {
	out := make([]meta.Metadata, 0, n)
	for i := range n {
		out = append(out, record(fmt.Sprintf("agent-%02d", i), uint64(i+1), 1))
	}
	return out
}

// pagedStore is a store on a new etcd server that lists 3 keys a page,
// with records(10) put under its prefix by cli.
func pagedStore(t *testing.T) (context.Context, *clientv3.Client, *Store, []meta.Metadata) {
	t.Helper()
	srv := etcdtest.New(t)
	cli := rawClient(t, srv.Endpoints())
	ctx := ctxT(t)
	s := open(t, srv, 0)
	s.listPage = 3
	want := records(10)
	for _, m := range want {
		putRecord(ctx, t, cli, s, m)
	}
	return ctx, cli, s, want
}

// TestListPages: List reads the records in pages of listPage keys, one
// request each, and returns them all, sorted by name, with one Lists
// count per List. It used to read them all with one request.
func TestListPages(t *testing.T) {
	srv := etcdtest.New(t)
	cli := rawClient(t, srv.Endpoints())
	ctx := ctxT(t)
	tests := []struct {
		records, pages int
	}{
		{0, 1},
		{1, 1},
		{3, 1},
		{4, 2},
		{9, 3},
		{10, 4},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("records=%d", tt.records), func(t *testing.T) {
			s := open(t, srv, 0)
			s.listPage = 3
			_, err := cli.Delete(ctx, s.Prefix(), clientv3.WithPrefix())
			require.NoError(t, err)
			want := records(tt.records)
			// Written in reverse: the order is List's, not etcd's
			// revisions'.
			for i := len(want) - 1; i >= 0; i-- {
				putRecord(ctx, t, cli, s, want[i])
			}
			before := s.Stats()
			got, err := s.List(ctx)
			require.NoError(t, err)
			if len(want) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, want, got)
			}
			after := s.Stats()
			require.Equal(t, uint64(tt.pages), after.Requests-before.Requests, "range requests")
			require.Equal(t, uint64(1), after.Lists-before.Lists)
		})
	}
}

// TestListSnapshot: a List is one snapshot, at its first page's revision:
// a record published, replaced or deleted between two of its pages (on
// a later page) is listed as it was at that revision, and the store's
// last reads are of that revision, so a watch from them reports the
// changes the List did not.
func TestListSnapshot(t *testing.T) {
	ctx, cli, s, want := pagedStore(t)
	var deletedAt int64
	pages := 0
	s.betweenPages = func() {
		if pages++; pages != 1 {
			return
		}
		// After the first page (agent-00..02); each change is on a
		// later page.
		putRecord(ctx, t, cli, s, record("agent-10", 11, 1))
		putRecord(ctx, t, cli, s, record("agent-07", 8, 2))
		resp, err := cli.Delete(ctx, s.key("agent-08"))
		require.NoError(t, err)
		require.Equal(t, int64(1), resp.Deleted)
		deletedAt = resp.Header.Revision
	}
	got, err := s.List(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got, "as of the first page")
	require.Equal(t, 3, pages, "betweenPages ran between each two of the 4 pages")
	st, ok := s.lastRead("agent-08")
	require.True(t, ok)
	require.True(t, st.present)
	require.Less(t, st.rev, deletedAt, "read before the deletion")

	// A watch from the List's reads sees what happened since.
	rec7, rec8 := newRecorder(), newRecorder()
	defer s.Watch("agent-07", rec7.fn)()
	defer s.Watch("agent-08", rec8.fn)()
	ev := rec7.waitFor(t, limit, "Put of version 2", func(ev meta.Event) bool { return ev.Kind == meta.Put })
	require.Equal(t, record("agent-07", 8, 2), ev.Meta)
	ev = rec8.waitFor(t, limit, "Gone", func(ev meta.Event) bool { return ev.Kind == meta.Gone })
	require.Equal(t, want[8], ev.Meta)

	s.betweenPages = nil
	got, err = s.List(ctx)
	require.NoError(t, err)
	now := append(append(append([]meta.Metadata(nil), want[:7]...), record("agent-07", 8, 2), want[9]), record("agent-10", 11, 1))
	require.Equal(t, now, got, "a new List sees the changes")
}

// TestListCompacted: when etcd compacts the revision of a List's first
// page before its next page, the List reads every page again at a new
// revision (listing what changed meanwhile); if that revision is
// compacted too, the List fails with ErrUnavailable, caused by the
// compaction.
func TestListCompacted(t *testing.T) {
	tests := []struct {
		name     string
		compacts int // listings whose revision is compacted after their first page
		hooks    int // betweenPages calls
		requests uint64
	}{
		// Pages 1 and 2 (refused), then the 3 pages of the new
		// listing (9 records).
		{"once", 1, 1 + 2, 2 + 3},
		{"twice", 2, 2, 2 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cli, s, want := pagedStore(t)
			hooks := 0
			s.betweenPages = func() {
				if hooks++; hooks > tt.compacts {
					return
				}
				// A change after the listing's revision, then a
				// compaction past it.
				_, err := cli.Delete(ctx, s.key(want[9-hooks].Name))
				require.NoError(t, err)
				resp, err := cli.Put(ctx, "/other", "x")
				require.NoError(t, err)
				_, err = cli.Compact(ctx, resp.Header.Revision)
				require.NoError(t, err)
			}
			_, err := s.Lookup(ctx, "agent-08") // the store knows it: present
			require.NoError(t, err)
			before := s.Stats()
			got, err := s.List(ctx)
			if tt.compacts > 1 {
				require.ErrorIs(t, err, meta.ErrUnavailable)
				require.ErrorIs(t, err, rpctypes.ErrCompacted)
			} else {
				require.NoError(t, err)
				require.Equal(t, append(want[:8:8], want[9]), got, "as of the new listing's revision: agent-08 deleted")
				st, ok := s.lastRead("agent-07")
				require.True(t, ok)
				require.True(t, st.present)
				_, ok = s.lastRead("agent-08")
				require.False(t, ok, "the List found it absent at its revision")
			}
			require.Equal(t, tt.hooks, hooks)
			after := s.Stats()
			require.Equal(t, tt.requests, after.Requests-before.Requests)
			require.Equal(t, uint64(1), after.Lists-before.Lists)
		})
	}
}
