package etcdmeta

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
)

// limit bounds every wait of these tests (never a timing assertion: only
// a bound so a broken build fails instead of hanging).
const limit = 30 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}

func TestPublishLookupList(t *testing.T) {
	srv := etcdtest.New(t)
	a, b := open(t, srv, 0), open(t, srv, 0)
	ctx := ctxT(t)
	ra, rb := record("prefill-0", 11, 1), record("decode-0", 22, 1)
	require.NoError(t, a.Publish(ctx, ra))
	require.NoError(t, b.Publish(ctx, rb))

	for _, s := range []*Store{a, b} {
		got, err := s.Lookup(ctx, "prefill-0")
		require.NoError(t, err)
		require.Equal(t, ra, got)
		got, err = s.Lookup(ctx, "decode-0")
		require.NoError(t, err)
		require.Equal(t, rb, got)
		_, err = s.Lookup(ctx, "nobody")
		require.ErrorIs(t, err, meta.ErrNotFound)
		_, err = s.Lookup(ctx, "")
		require.ErrorIs(t, err, meta.ErrNotFound)
		all, err := s.List(ctx)
		require.NoError(t, err)
		require.Equal(t, []meta.Metadata{rb, ra}, all, "sorted by name")
	}
	st := a.Stats()
	require.Equal(t, uint64(1), st.Publishes)
	require.Equal(t, uint64(3), st.Lookups, "the empty name is refused without a request")
	require.Equal(t, uint64(1), st.Lists)
	require.Equal(t, uint64(1), st.LeaseGrants)
	require.Zero(t, st.Malformed)
}

func TestPublishRefuses(t *testing.T) {
	srv := etcdtest.New(t)
	s := open(t, srv, 0)
	ctx := ctxT(t)
	err := s.Publish(ctx, meta.Metadata{Name: "x"}) // incarnation 0
	require.ErrorIs(t, err, meta.ErrMalformed)
	require.NoError(t, s.Publish(ctx, record("x", 1, 1)))
	require.Error(t, s.Publish(ctx, record("y", 1, 1)), "one store publishes one agent")
	require.Zero(t, s.Stats().Malformed)
}

func TestRepublishWatch(t *testing.T) {
	srv := etcdtest.New(t)
	pub, obs := open(t, srv, 0), open(t, srv, 0)
	ctx := ctxT(t)
	require.NoError(t, pub.Publish(ctx, record("a", 5, 1)))
	_, err := obs.Lookup(ctx, "a")
	require.NoError(t, err)
	rec := newRecorder()
	stop := obs.Watch("a", rec.fn)
	defer stop()
	// Published after the Lookup: the watch starts at the Lookup's
	// revision, so it sees this even if it is made before the watch
	// stream is set up.
	r2 := record("a", 5, 2)
	r2.Sections = append(r2.Sections, meta.Section{Name: "weights", Len: 1 << 20, Location: "gaudi0", Key: make([]byte, 112)})
	require.NoError(t, pub.Publish(ctx, r2))
	ev := rec.waitFor(t, limit, "Put of version 2", func(ev meta.Event) bool { return ev.Kind == meta.Put && ev.Meta.Version == 2 })
	require.Equal(t, r2, ev.Meta)
	require.Equal(t, "a", ev.Name)
	require.Len(t, rec.all(), 1, "only the new version: the watch starts from the lookup")

	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close(), "Close is idempotent")
	ev = rec.waitFor(t, limit, "Gone after Close", func(ev meta.Event) bool { return ev.Kind == meta.Gone })
	require.Equal(t, r2, ev.Meta, "Gone carries the last record seen")
	_, err = obs.Lookup(ctx, "a")
	require.ErrorIs(t, err, meta.ErrNotFound, "Close revoked the lease")
	require.ErrorIs(t, pub.Publish(ctx, r2), ErrClosed)
	_, err = pub.Lookup(ctx, "a")
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, uint64(1), obs.Stats().Watches)
}

func TestWatchStop(t *testing.T) {
	srv := etcdtest.New(t)
	pub, obs := open(t, srv, 0), open(t, srv, 0)
	ctx := ctxT(t)
	rec := newRecorder()
	stop := obs.Watch("a", rec.fn) // before anything exists: from now
	require.NoError(t, pub.Publish(ctx, record("a", 5, 1)))
	rec.waitFor(t, limit, "Put", func(ev meta.Event) bool { return ev.Kind == meta.Put })
	stop()
	stop()
	require.NoError(t, pub.Publish(ctx, record("a", 5, 2)))
	// A second watch sees version 2; the stopped one must not.
	rec2 := newRecorder()
	defer obs.Watch("a", rec2.fn)()
	_, err := obs.Lookup(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, pub.Publish(ctx, record("a", 5, 3)))
	rec2.waitFor(t, limit, "Put of version 3", func(ev meta.Event) bool { return ev.Meta.Version == 3 })
	for _, ev := range rec.all() {
		require.Equal(t, uint64(1), ev.Meta.Version, "event after stop: %+v", ev)
	}
	// A watch made after Close is inert.
	require.NoError(t, obs.Close())
	obs.Watch("a", func(meta.Event) { panic("called after Close") })()
}

func TestNameTaken(t *testing.T) {
	srv := etcdtest.New(t)
	first, second, obs := open(t, srv, 0), open(t, srv, 0), open(t, srv, 0)
	ctx := ctxT(t)
	require.NoError(t, first.Publish(ctx, record("same", 1, 1)))
	err := second.Publish(ctx, record("same", 2, 1))
	require.ErrorIs(t, err, ErrNameTaken)
	var taken *NameTakenError
	require.True(t, errors.As(err, &taken))
	require.Equal(t, NameTakenError{Name: "same", Incarnation: 1, Ours: 2}, *taken)
	got, err := obs.Lookup(ctx, "same")
	require.NoError(t, err)
	require.Equal(t, uint64(1), got.Incarnation, "the live record is untouched")

	rec := newRecorder()
	defer obs.Watch("same", rec.fn)()
	require.NoError(t, first.Close())
	require.NoError(t, second.Publish(ctx, record("same", 2, 1)), "the name is free once the first incarnation is gone")
	rec.waitFor(t, limit, "Put of incarnation 2", func(ev meta.Event) bool { return ev.Kind == meta.Put && ev.Meta.Incarnation == 2 })
	evs := rec.all()
	require.Equal(t, meta.Gone, evs[0].Kind)
	require.Equal(t, uint64(1), evs[0].Meta.Incarnation)
}

// TestLeaseExpiryOnSIGKILL: a publisher process killed with SIGKILL sends
// no revocation; its record ends with its lease and watchers see Gone; a
// new incarnation under the same name is then accepted and seen.
func TestLeaseExpiryOnSIGKILL(t *testing.T) {
	srv := etcdtest.New(t)
	obs := open(t, srv, 0)
	ctx := ctxT(t)
	child := startChild(t, srv, "victim", 77)
	got, err := obs.Lookup(ctx, "victim")
	require.NoError(t, err)
	require.Equal(t, uint64(77), got.Incarnation)
	rec := newRecorder()
	defer obs.Watch("victim", rec.fn)()

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	// TTL 2 s (etcd's minimum may make it a little longer) plus slack.
	ev := rec.waitFor(t, limit, "Gone after SIGKILL", func(ev meta.Event) bool { return ev.Kind == meta.Gone })
	require.Equal(t, uint64(77), ev.Meta.Incarnation)
	_, err = obs.Lookup(ctx, "victim")
	require.ErrorIs(t, err, meta.ErrNotFound)

	startChild(t, srv, "victim", 78)
	ev = rec.waitFor(t, limit, "Put of the new incarnation", func(ev meta.Event) bool { return ev.Kind == meta.Put })
	require.Equal(t, uint64(78), ev.Meta.Incarnation)
}

// TestEtcdRestart: with etcd down, reads fail with ErrUnavailable (bounded
// by the caller's context); after a restart, reads and watches work again
// and the publisher's record is back, though etcd was down longer than
// the publisher's lease TTL.
func TestEtcdRestart(t *testing.T) {
	srv := etcdtest.New(t)
	const ttl = 2 * time.Second
	pub, obs := open(t, srv, ttl), open(t, srv, ttl)
	ctx := ctxT(t)
	require.NoError(t, pub.Publish(ctx, record("p", 9, 1)))
	_, err := obs.Lookup(ctx, "p")
	require.NoError(t, err)
	rec := newRecorder()
	defer obs.Watch("p", rec.fn)()

	require.NoError(t, srv.Stop())
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = obs.Lookup(short, "p")
	cancel()
	require.ErrorIs(t, err, meta.ErrUnavailable)
	var ue *UnavailableError
	require.True(t, errors.As(err, &ue), "%v", err)
	require.Equal(t, srv.Endpoints(), ue.Endpoints)
	_, err = obs.List(ctx) // bounded by RequestTimeout (2 s here)
	require.ErrorIs(t, err, meta.ErrUnavailable)
	err = pub.Publish(ctx, record("p", 9, 2))
	require.ErrorIs(t, err, meta.ErrUnavailable)
	_, err = Open(ctx, Config{Endpoints: srv.Endpoints(), DialTimeout: 500 * time.Millisecond})
	require.ErrorIs(t, err, meta.ErrUnavailable)

	// Down for longer than the TTL: the publisher's client gives its
	// lease up; it must take a new one and republish once etcd is back.
	time.Sleep(3 * ttl)
	require.NoError(t, srv.Restart())
	eventually(t, limit, func() error {
		if n := pub.Stats().LeaseGrants; n < 2 {
			return errors.New("no new lease yet")
		}
		return nil
	})
	// Outlive the old lease (extended by etcd's restart): the record
	// stays, under the new one.
	time.Sleep(2 * ttl)
	got, err := obs.Lookup(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, record("p", 9, 1), got)
	// Watches resume: a new version is seen.
	require.NoError(t, pub.Publish(ctx, record("p", 9, 3)))
	rec.waitFor(t, limit, "Put of version 3 after the restart", func(ev meta.Event) bool { return ev.Kind == meta.Put && ev.Meta.Version == 3 })
}

// TestRecoverWriteFails: when the lease is lost and the recovery's grant
// succeeds but its write of the record does not (etcd cut off between
// the two), the next attempt still writes the record, under the lease it
// was granted: the record is back. Before, the second attempt took the
// granted lease for a written record, kept that lease alive and never
// wrote the record (a flake of TestClusterNetns). The TTL is long enough
// that the granted lease outlives the cut: were it to expire, its loss
// would start a recovery that hides the fault.
func TestRecoverWriteFails(t *testing.T) {
	srv := etcdtest.New(t)
	const ttl = 6 * time.Second
	pub, obs := open(t, srv, ttl), open(t, srv, ttl)
	ctx := ctxT(t)
	grants := 0 // guarded by pub.pmu: afterGrant runs under it
	resumed := make(chan error, 1)
	pub.afterGrant = func() {
		if grants++; grants != 2 { // the first grant of the recovery
			return
		}
		srv.Pause()
		go func() {
			// Longer than RequestTimeout (2 s): the write fails.
			time.Sleep(2500 * time.Millisecond)
			resumed <- srv.Resume()
		}()
	}
	require.NoError(t, pub.Publish(ctx, record("r", 6, 1)))

	srv.Pause()
	time.Sleep(ttl + 2*time.Second) // the client gives the lease up; etcd expires it
	require.NoError(t, srv.Resume())
	select {
	case err := <-resumed:
		require.NoError(t, err)
	case <-time.After(limit):
		t.Fatal("the recovery took no new lease")
	}
	eventually(t, limit, func() error {
		_, err := obs.Lookup(ctx, "r")
		return err
	})
	got, err := obs.Lookup(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, record("r", 6, 1), got)
	require.Equal(t, uint64(2), pub.Stats().LeaseGrants, "the recovery wrote under the lease it was granted")
}

// TestWatchCompaction: a watch cut off from etcd while the record was
// deleted and the history compacted re-reads its key when it reconnects
// and reports the deletion it missed.
func TestWatchCompaction(t *testing.T) {
	srv := etcdtest.New(t)
	pub, obs := open(t, srv, 0), open(t, srv, 0)
	ctx := ctxT(t)
	require.NoError(t, pub.Publish(ctx, record("c", 3, 1)))
	rec := newRecorder()
	defer obs.Watch("c", rec.fn)()
	rec.waitFor(t, limit, "initial Put", func(ev meta.Event) bool { return ev.Kind == meta.Put })

	srv.Pause() // obs is cut off; etcd runs on
	direct := rawClient(t, srv.DirectEndpoints())
	_, err := direct.Delete(ctx, pub.key("c"))
	require.NoError(t, err)
	r, err := direct.Put(ctx, "/other", "x")
	require.NoError(t, err)
	_, err = direct.Compact(ctx, r.Header.Revision)
	require.NoError(t, err)
	require.NoError(t, srv.Resume())

	ev := rec.waitFor(t, limit, "Gone", func(ev meta.Event) bool { return ev.Kind == meta.Gone })
	require.Equal(t, uint64(3), ev.Meta.Incarnation)
	require.NotZero(t, obs.Stats().Resyncs, "the Gone came from a re-read")
}

// TestMalformedIgnored: values that do not decode, or name another agent
// than their key, are never returned.
func TestMalformedIgnored(t *testing.T) {
	srv := etcdtest.New(t)
	s := open(t, srv, 0)
	ctx := ctxT(t)
	cli := rawClient(t, srv.Endpoints())
	good := record("good", 1, 1)
	require.NoError(t, s.Publish(ctx, good))
	_, err := cli.Put(ctx, s.key("junk"), "not a record")
	require.NoError(t, err)
	other, err := (&meta.Metadata{Name: "elsewhere", Incarnation: 2}).Encode()
	require.NoError(t, err)
	_, err = cli.Put(ctx, s.key("liar"), string(other))
	require.NoError(t, err)

	all, err := s.List(ctx)
	require.NoError(t, err)
	require.Equal(t, []meta.Metadata{good}, all)
	for _, name := range []string{"junk", "liar"} {
		_, err := s.Lookup(ctx, name)
		require.ErrorIs(t, err, meta.ErrNotFound, name)
	}
	require.Equal(t, uint64(4), s.Stats().Malformed)

	// A watcher of a good record sees Gone when junk replaces it.
	rec := newRecorder()
	defer s.Watch("good", rec.fn)()
	_, err = cli.Put(ctx, s.key("good"), "junk")
	require.NoError(t, err)
	ev := rec.waitFor(t, limit, "Gone", func(ev meta.Event) bool { return ev.Kind == meta.Gone })
	require.Equal(t, good, ev.Meta)
	// A malformed value under our own name does not block republishing.
	require.NoError(t, s.Publish(ctx, record("good", 1, 2)))
	rec.waitFor(t, limit, "Put", func(ev meta.Event) bool { return ev.Kind == meta.Put })
}

func rawClient(t *testing.T, endpoints []string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestCloseWhileUnreachable: Close gives up revoking after a bounded time
// and still ends every goroutine (the leak check of TestMain); the record
// then ends with its lease, and the keep-alive loop of a store whose lease
// was lost stops on Close too.
func TestCloseWhileUnreachable(t *testing.T) {
	srv := etcdtest.New(t)
	const ttl = 2 * time.Second
	pub, obs := open(t, srv, ttl), open(t, srv, ttl)
	ctx := ctxT(t)
	require.NoError(t, pub.Publish(ctx, record("z", 4, 1)))
	require.NoError(t, obs.Publish(ctx, record("obs", 5, 1)))
	rec := newRecorder()
	defer obs.Watch("z", rec.fn)()
	rec.waitFor(t, limit, "initial Put", func(ev meta.Event) bool { return ev.Kind == meta.Put })

	srv.Pause()
	time.Sleep(2 * ttl) // both stores' clients give their leases up: obs retries a grant
	done := make(chan error, 1)
	go func() { done <- pub.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(limit):
		t.Fatal("Close did not return while etcd was unreachable")
	}
	require.NoError(t, srv.Resume())
	ev := rec.waitFor(t, limit, "Gone once the unrevoked lease ends", func(ev meta.Event) bool { return ev.Kind == meta.Gone })
	require.Equal(t, uint64(4), ev.Meta.Incarnation)
	eventually(t, limit, func() error {
		_, err := obs.Lookup(ctx, "obs")
		return err
	})
	require.NoError(t, obs.Close())
}
