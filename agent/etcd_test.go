package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta"
	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// openStore opens a store on etcd at endpoints (a short lease, so that
// lease ends are seen within the test).
func openStore(t testing.TB, endpoints []string) *etcdmeta.Store {
	t.Helper()
	s, err := etcdmeta.Open(testCtx(t), etcdmeta.Config{Endpoints: endpoints, TTL: 2 * time.Second, RequestTimeout: 2 * time.Second})
	require.NoError(t, err)
	return s // the agent closes it
}

// TestEtcdLookup: agents find each other by name through etcd; once a
// peer is cached, transfers, prepared posts and notifications make no
// store request at all.
func TestEtcdLookup(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	sa := openStore(t, srv.Endpoints())
	a := newAgent(t, ea, "a", agentOpts{store: sa})
	b := newAgent(t, eb, "b", agentOpts{unix: true, tcp: true, store: openStore(t, srv.Endpoints())})
	kv := alloc(t, eb, 1<<20, engine.Gaudi(0))
	require.NoError(t, b.Publish("kv", kv.All()))
	src := alloc(t, ea, 64<<10, engine.Host)
	data := pattern(64<<10, 5)
	copy(src.Bytes(), data)

	descs := []Desc{{Local: src.Slice(0, 32<<10), Section: "kv", Off: 4096}, {Local: src.Slice(32<<10, 32<<10), Section: "kv", Off: 512 << 10}}
	require.NoError(t, a.Write(ctx, "b", descs).Wait(ctx))
	require.Equal(t, data[:32<<10], getBytes(t, eb, kv, 4096, 32<<10))
	require.Equal(t, data[32<<10:], getBytes(t, eb, kv, 512<<10, 32<<10))
	require.Equal(t, uint64(1), a.Stats().StoreLookups)

	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b.Incarnation(), p.Incarnation())
	px, err := a.Prepare(ctx, "b", []engine.Slice{src.Slice(0, 4096)}, []RemoteDesc{{Section: "kv"}})
	require.NoError(t, err)
	before := sa.Stats()
	for i := range 200 {
		require.NoError(t, a.Write(ctx, "b", descs, WithNotify([]byte{byte(i)})).Wait(ctx))
		_, err := b.Recv(ctx)
		require.NoError(t, err)
		require.NoError(t, a.Read(ctx, "b", descs).Wait(ctx))
		require.NoError(t, px.Write(ctx, nil).Wait(ctx))
		require.NoError(t, a.Notify(ctx, "b", []byte("x")))
		_, err = b.Recv(ctx)
		require.NoError(t, err)
	}
	after := sa.Stats()
	require.Equal(t, before.Requests, after.Requests, "no etcd request on the cached transfer path")
	require.Equal(t, before.Lookups, after.Lookups)
	require.Equal(t, uint64(1), a.Stats().StoreLookups)
	require.Greater(t, a.Stats().CacheHits, uint64(600))
}

// TestEtcdLeaseEnd: when b's lease ends (its store cut off from etcd while
// b and its endpoint live on), a's watch drops b: the in-flight transfer
// fails with ErrPeer naming b and the connection is closed. Once b's
// store is back (it republishes), a finds b again.
func TestEtcdLeaseEnd(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	// a reaches etcd directly; b through the relay Pause cuts.
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.DirectEndpoints())})
	b := newAgent(t, eb, "b", agentOpts{unix: true, store: openStore(t, srv.Endpoints())})
	kv := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("kv", kv.All()))
	src := alloc(t, ea, 1<<20, engine.Gaudi(0))
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.Slice(0, 4096), Section: "kv"}}).Wait(ctx))
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)

	em, err := ea.Emulator(0)
	require.NoError(t, err)
	em.DelayNextCS(1, 10*time.Second) // keeps the next transfer in flight
	x := a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "kv"}})
	srv.Pause()
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("b's lease ended and a did not drop it")
	}
	err = x.Wait(ctx)
	require.ErrorIs(t, err, engine.ErrPeer)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "b", pe.Name)
	require.Contains(t, p.Err().Error(), "left the store")
	require.Eventually(t, func() bool { return a.Stats().Outbound == 0 }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, srv.Resume())
	require.Eventually(t, func() bool {
		return a.Write(ctx, "b", []Desc{{Local: src.Slice(0, 4096), Section: "kv"}}).Wait(ctx) == nil
	}, 30*time.Second, 50*time.Millisecond)
	p2, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b.Incarnation(), p2.Incarnation())
}

// TestEtcdDown: with etcd stopped, transfers to cached peers keep
// working; lookups of others fail with meta.ErrUnavailable, and work
// again once etcd is back.
func TestEtcdDown(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	b := newAgent(t, eb, "b", agentOpts{tcp: true, store: openStore(t, srv.Endpoints())})
	c := newAgent(t, eb, "c", agentOpts{unix: true, store: openStore(t, srv.Endpoints())})
	kv := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("kv", kv.Slice(0, 1<<19)))
	require.NoError(t, c.Publish("kv", kv.Slice(1<<19, 1<<19)))
	src := alloc(t, ea, 4096, engine.Host)
	copy(src.Bytes(), pattern(4096, 9))
	d := []Desc{{Local: src.All(), Section: "kv", Off: 100}}
	require.NoError(t, a.Write(ctx, "b", d).Wait(ctx))

	require.NoError(t, srv.Stop())
	for range 50 {
		require.NoError(t, a.Write(ctx, "b", d).Wait(ctx))
	}
	require.Equal(t, src.Bytes(), kv.Bytes()[100:100+4096])
	err := a.Write(ctx, "c", d).Wait(ctx)
	require.ErrorIs(t, err, meta.ErrUnavailable)

	require.NoError(t, srv.Restart())
	require.Eventually(t, func() bool {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return a.Write(lctx, "c", d).Wait(lctx) == nil
	}, time.Minute, 100*time.Millisecond)
	require.Equal(t, src.Bytes(), kv.Bytes()[1<<19+100:1<<19+100+4096])
	require.NoError(t, a.Write(ctx, "b", d).Wait(ctx))
}

// TestEtcdRestartedAgent: an agent closed (its record withdrawn) and
// started again under the same name is a new incarnation: the peer drops
// the old one at its Gone and resolves the new one.
func TestEtcdRestartedAgent(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	dir := sockDir(t)
	b1, err := New(ctx, Config{Name: "b", Engine: eb, Unix: dir + "/b1.sock", Store: openStore(t, srv.Endpoints())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b1.Close() })
	kv := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b1.Publish("kv", kv.All()))
	src := alloc(t, ea, 4096, engine.Host)
	d := []Desc{{Local: src.All(), Section: "kv"}}
	require.NoError(t, a.Write(ctx, "b", d).Wait(ctx))
	p1, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.NoError(t, b1.Close())
	<-p1.Done()
	require.ErrorIs(t, p1.Err(), engine.ErrPeer)

	b2 := newAgent(t, eb, "b", agentOpts{unix: true, dir: dir, store: openStore(t, srv.Endpoints())})
	require.NoError(t, b2.Publish("kv", kv.All()))
	require.NoError(t, a.Write(ctx, "b", d).Wait(ctx))
	p2, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b2.Incarnation(), p2.Incarnation())
	require.NotEqual(t, b1.Incarnation(), p2.Incarnation())
	// A Put of b2's record (a new section) drops a's cached copy too.
	require.NoError(t, b2.Publish("more", kv.Slice(0, 4096)))
	<-p2.Done()
	p3, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	_, err = p3.Section("more")
	require.NoError(t, err)
}

// TestEtcdConcurrentPublish: sections published concurrently all end up
// in the store's record, at the agent's last Version. Before, the
// versions' store writes raced and the last one to land won: the store
// was left with an older record, missing sections (3 runs in 30 failed).
func TestEtcdConcurrentPublish(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	eb := newEngine(t)
	st := openStore(t, srv.Endpoints())
	b := newAgent(t, eb, "b", agentOpts{unix: true, store: st})
	const n = 64
	kv := alloc(t, eb, n*4096, engine.Host)
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- b.Publish(fmt.Sprintf("s%02d", i), kv.Slice(i*4096, 4096)) }()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	md, err := st.Lookup(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b.Metadata(), md)
	require.Len(t, md.Sections, n)
}

// TestEtcdLookupCtxEnds: a lookup ended by the caller's ctx fails with
// the ctx's error (engine.ErrCanceled, engine.ErrTimeout), as a dial or a
// transfer does, and is counted so: before, the store's error came back,
// a meta.ErrUnavailable (the caller's cancel read as etcd down).
func TestEtcdLookupCtxEnds(t *testing.T) {
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	b := newAgent(t, eb, "b", agentOpts{unix: true, store: openStore(t, srv.Endpoints())})
	kv := alloc(t, eb, 4096, engine.Host)
	require.NoError(t, b.Publish("kv", kv.All()))
	src := alloc(t, ea, 4096, engine.Host)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	tests := []struct {
		name  string
		ctx   context.Context
		want  error
		count func(ErrorStats) uint64
	}{
		{"canceled", canceled, engine.ErrCanceled, func(e ErrorStats) uint64 { return e.Canceled }},
		{"deadline passed", expired, engine.ErrTimeout, func(e ErrorStats) uint64 { return e.Timeout }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.count(a.Stats().Errors)
			_, err := a.Peer(tt.ctx, "b")
			require.ErrorIs(t, err, tt.want)
			require.NotErrorIs(t, err, meta.ErrUnavailable)
			require.Equal(t, before+1, tt.count(a.Stats().Errors))
			err = a.Write(tt.ctx, "b", []Desc{{Local: src.All(), Section: "kv"}}).Wait(testCtx(t))
			require.ErrorIs(t, err, tt.want)
			require.NotErrorIs(t, err, meta.ErrUnavailable)
		})
	}
	_, err := a.Peer(testCtx(t), "b")
	require.NoError(t, err, "with a live ctx b is found")
}
