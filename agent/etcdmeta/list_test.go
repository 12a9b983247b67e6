package etcdmeta

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
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
