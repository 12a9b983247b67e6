package etcdmeta

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/internal/testutil"
)

// storeGoroutines counts the goroutines the stores of this process run
// (spawn's: watches and keep-alive loops).
func storeGoroutines() int {
	return strings.Count(testutil.Stacks(), "etcdmeta.(*Store).spawn.func1(")
}

// TestInvalidNames: a name no record can have (meta's name rules: empty,
// over meta.MaxName bytes, not UTF-8, a control character) is not looked
// for in etcd: Lookup is ErrNotFound without a request (a 2 MiB name
// used to fail as ErrUnavailable, the client refusing to send it), Watch
// runs nothing (it used to re-read such a key every 2 s for the store's
// life), and List does not remember such keys found under the prefix.
func TestInvalidNames(t *testing.T) {
	srv := etcdtest.New(t)
	s := open(t, srv, 0)
	ctx := ctxT(t)
	tests := []struct{ name, n string }{
		{"empty", ""},
		{"over MaxName", strings.Repeat("x", meta.MaxName+1)},
		{"2 MiB", strings.Repeat("x", 2<<20)},
		{"NUL", "a\x00b"},
		{"newline", "a\nb"},
		{"not UTF-8", "a\xffb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := s.Stats().Requests
			_, err := s.Lookup(ctx, tt.n)
			require.ErrorIs(t, err, meta.ErrNotFound)
			require.NotErrorIs(t, err, meta.ErrUnavailable)
			require.Less(t, len(err.Error()), 200, "the error does not quote the name whole")
			require.Equal(t, reqs, s.Stats().Requests, "no request for a name no record can have")
			before := storeGoroutines()
			stop := s.Watch(tt.n, func(ev meta.Event) { t.Errorf("event for %q: %+v", tt.n, ev) })
			require.Equal(t, before, storeGoroutines(), "a watch of a name no record can have runs nothing")
			stop()
		})
	}
	// Keys under the prefix whose name part no record can have.
	cli := rawClient(t, srv.Endpoints())
	junk := []string{strings.Repeat("j", 1<<20), "bad\x01name"}
	for _, n := range junk {
		_, err := cli.Put(ctx, s.key(n), "junk")
		require.NoError(t, err)
	}
	all, err := s.List(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
	for _, n := range junk {
		_, ok := s.lastRead(n)
		require.False(t, ok, "List keeps no state for a name of %d bytes no record can have", len(n))
	}
}
