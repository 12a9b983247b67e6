package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// peerWithSection connects agent a to agent b (over unix), which
// publishes a host section "sec" of n bytes; src is a host buffer of a's
// of n bytes.
func peerWithSection(t *testing.T, n int) (a, b *Agent, p *Peer, src *engine.Buffer) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a = newAgent(t, ea, "a", agentOpts{})
	b = newAgent(t, eb, "b", agentOpts{unix: true})
	require.NoError(t, b.Publish("sec", alloc(t, eb, n, engine.Host).Slice(0, n)))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	p, err = a.Peer(ctx, "b")
	require.NoError(t, err)
	return a, b, p, alloc(t, ea, n, engine.Host)
}

// TestNilCtx: every method that takes a context refuses a nil one with
// ErrInvalid, as the engine does, instead of panicking (a nil ctx
// reached ctx.Done() on the first wait).
func TestNilCtx(t *testing.T) {
	ctx := testCtx(t)
	a, b, p, src := peerWithSection(t, 8192)
	descs := []Desc{{Local: src.Slice(0, 4096), Section: "sec"}}
	rd := []RemoteDesc{{Section: "sec", Len: 4096}}
	prep, err := p.Prepare(ctx, []engine.Slice{src.Slice(0, 4096)}, rd)
	require.NoError(t, err)
	var nilCtx context.Context
	pending := a.Write(ctx, "b", descs) // Wait(nil) on a transfer done or not

	tests := []struct {
		name string
		call func() error
	}{
		{"Agent.Peer", func() error { _, err := a.Peer(nilCtx, "b"); return err }},
		{"Agent.Connect", func() error { _, err := a.Connect(nilCtx, b.Metadata().Unix); return err }},
		{"Peer.Endpoint", func() error { _, err := p.Endpoint(nilCtx); return err }},
		{"Agent.Prepare", func() error { _, err := a.Prepare(nilCtx, "b", []engine.Slice{src.Slice(0, 4096)}, rd); return err }},
		{"Peer.Prepare", func() error { _, err := p.Prepare(nilCtx, []engine.Slice{src.Slice(0, 4096)}, rd); return err }},
		{"Prepared.Write", func() error { return prep.Write(nilCtx, nil).Wait(ctx) }},
		{"Prepared.Read", func() error { return prep.Read(nilCtx, nil).Wait(ctx) }},
		{"Agent.Recv", func() error { _, err := a.Recv(nilCtx); return err }},
		{"Agent.Notify", func() error { return a.Notify(nilCtx, "b", []byte("x")) }},
		{"Peer.Notify", func() error { return p.Notify(nilCtx, []byte("x")) }},
		{"Agent.Write", func() error { return a.Write(nilCtx, "b", descs).Wait(ctx) }},
		{"Agent.Read", func() error { return a.Read(nilCtx, "b", descs).Wait(ctx) }},
		{"Peer.Write", func() error { return p.Write(nilCtx, descs).Wait(ctx) }},
		{"Peer.Read", func() error { return p.Read(nilCtx, descs).Wait(ctx) }},
		{"Xfer.Wait", func() error { return pending.Wait(nilCtx) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tc.call() })
			require.ErrorIs(t, err, engine.ErrInvalid)
		})
	}
	require.NoError(t, pending.Wait(ctx))
}

// TestPrepareEndsWithCtx: Prepare of a list whose ctx has ended returns
// the ctx's error (it checked every descriptor, for as long as a list
// of millions takes, whatever the ctx).
func TestPrepareEndsWithCtx(t *testing.T) {
	ctx := testCtx(t)
	_, _, p, src := peerWithSection(t, 1<<20)
	for _, n := range []int{1, 3 * prepareCtxEvery} {
		local := make([]engine.Slice, n)
		remote := make([]RemoteDesc, n)
		for i := range n {
			local[i] = src.Slice(i*8, 8)
			remote[i] = RemoteDesc{Section: "sec", Off: i * 8, Len: 8}
		}
		ended, cancel := context.WithCancel(ctx)
		cancel()
		_, err := p.Prepare(ended, local, remote)
		require.ErrorIs(t, err, engine.ErrCanceled, "%d descriptors", n)
		_, err = p.Prepare(ctx, local, remote)
		require.NoError(t, err, "%d descriptors", n)
	}
}
