package agent

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newEngine(t testing.TB) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{
		Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 512 << 20},
		RDMA: engine.RDMAConfig{Disabled: true},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// sockDir is a short directory for unix sockets (paths are limited to
// 108 bytes).
func sockDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "ag")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type agentOpts struct {
	unix, tcp bool
	store     meta.Store
	queue     int
	dir       string
	inFlight  int // Config.MaxInFlight
}

func newAgent(t testing.TB, eng *engine.Engine, name string, o agentOpts) *Agent {
	t.Helper()
	cfg := Config{Name: name, Engine: eng, Store: o.store, NotifyQueue: o.queue, MaxInFlight: o.inFlight}
	if o.unix {
		dir := o.dir
		if dir == "" {
			dir = sockDir(t)
		}
		cfg.Unix = filepath.Join(dir, name+".sock")
	}
	if o.tcp {
		cfg.TCP = "127.0.0.1:0"
	}
	a, err := New(testCtx(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a
}

func alloc(t testing.TB, eng *engine.Engine, n int, loc engine.Location) *engine.Buffer {
	t.Helper()
	b, err := eng.Alloc(n, loc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Free() })
	return b
}

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// setBytes writes data at off of b, in host or Gaudi memory.
func setBytes(t testing.TB, eng *engine.Engine, b *engine.Buffer, off int, data []byte) {
	t.Helper()
	if !b.Location().IsGaudi() {
		copy(b.Bytes()[off:], data)
		return
	}
	h := alloc(t, eng, len(data), engine.Host)
	copy(h.Bytes(), data)
	require.NoError(t, eng.CopySync(testCtx(t), b.Slice(off, len(data)), h.All()))
	require.NoError(t, h.Free())
}

// getBytes reads n bytes at off of b.
func getBytes(t testing.TB, eng *engine.Engine, b *engine.Buffer, off, n int) []byte {
	t.Helper()
	if !b.Location().IsGaudi() {
		return append([]byte(nil), b.Bytes()[off:off+n]...)
	}
	h := alloc(t, eng, n, engine.Host)
	require.NoError(t, eng.CopySync(testCtx(t), h.All(), b.Slice(off, n)))
	out := append([]byte(nil), h.Bytes()...)
	require.NoError(t, h.Free())
	return out
}

// scriptedPeer plays one peer on l: it accepts a connection, takes its
// hello, sends msgs (calling before, if set, ahead of each) and holds the
// connection until the agent hangs up (10 s at most). The channel gets
// nil, or the first error.
func scriptedPeer(ctx context.Context, l *engine.Listener, msgs [][]byte, before func(m []byte)) <-chan error {
	done := make(chan error, 1)
	go func() {
		ep, err := l.Accept(ctx)
		if err != nil {
			done <- err
			return
		}
		defer ep.Close()
		if _, err := ep.Recv(ctx); err != nil { // the hello
			done <- err
			return
		}
		for _, m := range msgs {
			if before != nil {
				before(m)
			}
			if err := ep.Send(ctx, m); err != nil {
				done <- err
				return
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _ = ep.Recv(rctx) // until a hangs up
		done <- nil
	}()
	return done
}
