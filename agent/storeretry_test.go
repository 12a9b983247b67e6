package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestEtcdPublishWhileUnreachable: a Publish and a Withdraw that fail
// because the store is unreachable (ErrUnavailable) still changed the
// agent's record (the section stays offered, a Publish again of it is
// refused): the store gets that record once it answers again, and peers
// that look the agent up there find it, not the one before.
func TestEtcdPublishWhileUnreachable(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	// a reaches etcd through the relay Pause cuts; b directly.
	a := newAgent(t, ea, "a", agentOpts{unix: true, store: openStore(t, srv.Endpoints())})
	reader := openStore(t, srv.DirectEndpoints())
	t.Cleanup(func() { require.NoError(t, reader.Close()) })
	kv := alloc(t, ea, 8192, engine.Host)
	require.NoError(t, a.Publish("old", kv.Slice(0, 4096)))

	srv.Pause()
	require.ErrorIs(t, a.Publish("kv", kv.Slice(4096, 4096)), meta.ErrUnavailable)
	require.ErrorIs(t, a.Withdraw("old"), meta.ErrUnavailable)
	require.ErrorIs(t, a.Publish("kv", kv.Slice(4096, 4096)), engine.ErrInvalid, "kv stays published")
	require.NoError(t, srv.Resume())

	want := a.Metadata()
	require.Eventually(t, func() bool {
		md, err := reader.Lookup(ctx, "a")
		return err == nil && md.Version == want.Version
	}, 30*time.Second, 50*time.Millisecond, "the store never got the record of the failed Publish")
	md, err := reader.Lookup(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, want.Sections, md.Sections)

	b := newAgent(t, eb, "b", agentOpts{store: openStore(t, srv.DirectEndpoints())})
	src := alloc(t, eb, 4096, engine.Host)
	copy(src.Bytes(), pattern(4096, 3))
	require.NoError(t, b.Write(ctx, "a", []Desc{{Local: src.All(), Section: "kv"}}).Wait(ctx))
	require.Equal(t, src.Bytes(), kv.Bytes()[4096:])
}
