package agent

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

// parkedInConn counts the goroutines blocked in Peer.conn's wait for
// another caller's dial (not dialing themselves).
func parkedInConn() int {
	count := 0
	for _, g := range strings.Split(testutil.Stacks(), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "agent.(*Peer).conn(") &&
			!strings.Contains(g, "agent.(*Peer).dial(") {
			count++
		}
	}
	return count
}

// TestSharedDialCtxNotShared: a caller that waits for another caller's
// dial to a peer does not inherit that caller's ctx: when the dialer's
// ctx ends, the waiter (its own ctx live) dials itself and gets the
// connection. Before, it failed with the dialer's ErrCanceled.
func TestSharedDialCtxNotShared(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, em := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	// Agent "m", played here: its record is in the store (found with no
	// connection) and names a unix socket on this node, so a's first use
	// dials that socket.
	lu, err := em.Listen("unix", sockDir(t)+"/m.sock")
	require.NoError(t, err)
	defer lu.Close()
	md := meta.Metadata{Name: "m", Incarnation: 7, Version: 1, Unix: lu.Addr()}
	ms := openStore(t, srv.Endpoints())
	defer ms.Close()
	require.NoError(t, ms.Publish(ctx, md))

	// serve answers hellos on l, n connections; on the one numbered mute
	// it answers nothing (a dial that waits until its ctx ends), and it
	// reports each hello on hellos.
	serve := func(l *engine.Listener, n, mute int, hellos chan<- int) chan error {
		done := make(chan error, 1)
		go func() {
			for i := range n {
				ep, err := l.Accept(ctx)
				if err != nil {
					done <- err
					return
				}
				if _, err := ep.Recv(ctx); err != nil {
					ep.Close()
					done <- err
					return
				}
				if hellos != nil {
					hellos <- i
				}
				if i != mute {
					if err := ep.Send(ctx, encodeHello("m", 7, 0, 1, false)); err != nil {
						ep.Close()
						done <- err
						return
					}
				}
				for { // until a hangs up
					if _, err := ep.Recv(ctx); err != nil {
						break
					}
				}
				ep.Close()
			}
			done <- nil
		}()
		return done
	}
	p, err := a.Peer(ctx, "m")
	require.NoError(t, err)
	_, connected := p.Transport()
	require.False(t, connected)

	hellos := make(chan int, 2)
	unixDone := serve(lu, 2, 0, hellos)
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := p.Endpoint(actx)
		errA <- err
	}()
	require.Equal(t, 0, <-hellos) // A's dial waits for m's answer
	errB := make(chan error, 1)
	go func() {
		_, err := p.Endpoint(ctx)
		errB <- err
	}()
	for parkedInConn() == 0 && ctx.Err() == nil { // until B waits for A's dial
		runtime.Gosched()
	}
	require.NoError(t, ctx.Err())
	cancelA()
	require.ErrorIs(t, <-errA, engine.ErrCanceled)
	require.NoError(t, <-errB, "B's ctx is live")
	require.Equal(t, 1, <-hellos)
	require.NoError(t, p.Err())
	_, connected = p.Transport()
	require.True(t, connected)
	require.NoError(t, a.Close())
	require.NoError(t, <-unixDone)
}
