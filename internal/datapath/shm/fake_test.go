package shm

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
)

// Fakes of the engine's side, enough for the transport's bookkeeping
// (the data movement is tested through the engine: engine/ipc*_test.go).
// Methods the fakes do not implement panic (the embedded interface is
// nil).

type fakeEnv struct {
	datapath.Env
	wg    sync.WaitGroup
	freed atomic.Int32
}

func (e *fakeEnv) Logger() zerolog.Logger        { return zerolog.Nop() }
func (e *fakeEnv) FreeHost(b datapath.Buf) error { e.freed.Add(1); return nil }
func (e *fakeEnv) Go(fn func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
}

type fakeCtrl struct {
	datapath.Ctrl
	mu  sync.Mutex
	err error
}

func (c *fakeCtrl) Name() string     { return "peer \"fake\"" }
func (c *fakeCtrl) Peer() ipc.PeerID { return ipc.PeerID{PID: 1, Conn: 1} }
func (c *fakeCtrl) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
func (c *fakeCtrl) fail(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}
func (c *fakeCtrl) PeerErr(what string, cause error) error {
	return gxerr.New(gxerr.Peer, c.Name()+": "+what, cause)
}

// fakeBuf is a buffer with the engine's freed-and-referenced state.
type fakeBuf struct {
	datapath.Buf
	id    uint64
	refs  atomic.Int64
	freed atomic.Bool
	st    datapath.BufState
}

func (b *fakeBuf) ID() uint64                { return b.id }
func (b *fakeBuf) Len() uint64               { return 4096 }
func (b *fakeBuf) IsGaudi() bool             { return false }
func (b *fakeBuf) State() *datapath.BufState { return &b.st }
func (b *fakeBuf) Acquire() error {
	if b.freed.Load() {
		return gxerr.Freed
	}
	b.refs.Add(1)
	return nil
}
func (b *fakeBuf) Release() { b.refs.Add(-1) }

// newTestPath is a transport on a fake engine and the path of a fake
// endpoint.
func newTestPath() (*Transport, *Path, *fakeCtrl, *fakeEnv) {
	env := &fakeEnv{}
	t := New(env, Config{})
	c := &fakeCtrl{}
	p, err := t.Connect(context.Background(), c)
	if err != nil {
		panic(err)
	}
	return t, p.(*Path), c, env
}
