package tcp

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// hostBuf is host memory as a datapath.Buf, counting its holds (a
// freed one refuses them).
type hostBuf struct {
	mem      []byte
	st       datapath.BufState
	acquires atomic.Int64
	releases atomic.Int64
	freed    bool
}

func (b *hostBuf) ID() uint64        { return 1 }
func (b *hostBuf) Len() uint64       { return uint64(len(b.mem)) }
func (b *hostBuf) IsGaudi() bool     { return false }
func (b *hostBuf) Addr() uint64      { return 0 }
func (b *hostBuf) HostBytes() []byte { return b.mem }
func (b *hostBuf) Release()          { b.releases.Add(1) }

func (b *hostBuf) Acquire() error {
	if b.freed {
		return gxerr.New(gxerr.Freed, "the test freed it", nil)
	}
	b.acquires.Add(1)
	return nil
}
func (b *hostBuf) Shared() *ipc.Shared       { return nil }
func (b *hostBuf) State() *datapath.BufState { return &b.st }
func (b *hostBuf) ExportDMABuf() (datapath.DMABuf, error) {
	return datapath.DMABuf{}, gxerr.NotSupported
}

// fakeEnv is an engine of host memory and, when dev is set, "device"
// memory whose DMAs are copies; Lookup grants mem (dev for keys of Gaudi
// memory) to any key, at its view's offset, but those of badAlloc.
type fakeEnv struct {
	mem   *hostBuf
	dev   *devBuf // device memory (keys of MemGaudi), when set
	lanes int
	wg    sync.WaitGroup
	// lookups counts Lookup's calls.
	lookups atomic.Int64

	gateOnce sync.Once
	gate     datapath.Gate
	// hold, when set, holds the goroutines Go starts until it is closed.
	hold atomic.Pointer[chan struct{}]
}

func (e *fakeEnv) Logger() zerolog.Logger { return zerolog.Nop() }
func (e *fakeEnv) Config() datapath.Config {
	return datapath.Config{TCPLanes: e.lanes}
}

// badAlloc is the allocation id of keys the fake owner refuses.
const badAlloc = 666

func (e *fakeEnv) Lookup(k *wire.RemoteKey, off, n uint64, need wire.KeyFlags) (datapath.Mem, wire.Status, string) {
	e.lookups.Add(1)
	if k.AllocID == badAlloc {
		return datapath.Mem{}, wire.StatusBadKey, "refused by the test"
	}
	if off > math.MaxUint64-k.Offset {
		return datapath.Mem{}, wire.StatusOutOfRange, "beyond"
	}
	off += k.Offset // the view's start
	var mem datapath.Buf = e.mem
	if k.MemType == wire.MemGaudi {
		if e.dev == nil {
			return datapath.Mem{}, wire.StatusNotSupported, "no device memory"
		}
		mem = e.dev
	}
	if n > mem.Len() || off > mem.Len()-n || k.Length > mem.Len() {
		// (As the engine's, a key names memory of its length: what is
		// inside its view is inside the memory.)
		return datapath.Mem{}, wire.StatusOutOfRange, "beyond"
	}
	return datapath.Mem{B: mem, Off: off, Len: n}, wire.StatusOK, ""
}

// devBuf is "device" memory: a Gaudi buffer whose bytes the fake DMA
// reaches.
type devBuf struct{ hostBuf }

func (b *devBuf) IsGaudi() bool     { return true }
func (b *devBuf) HostBytes() []byte { return nil }

func bytesOf(b datapath.Buf) []byte {
	if d, ok := b.(*devBuf); ok {
		return d.mem
	}
	return b.HostBytes()
}

// dmaWaiter is a fake DMA's.
type dmaWaiter struct{ done chan struct{} }

func (w *dmaWaiter) Done() <-chan struct{} { return w.done }
func (w *dmaWaiter) IsDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}
func (w *dmaWaiter) Err() error { return nil }
func (w *dmaWaiter) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DMA copies on a goroutine of the fake engine.
func (e *fakeEnv) DMA(dst, src datapath.Mem, deadline time.Time) datapath.Waiter {
	w := &dmaWaiter{done: make(chan struct{})}
	e.Go(func() {
		copy(bytesOf(dst.B)[dst.Off:dst.Off+dst.Len], bytesOf(src.B)[src.Off:src.Off+src.Len])
		close(w.done)
	})
	return w
}
func (e *fakeEnv) Copy(ctx context.Context, dst, src datapath.Mem, deadline time.Time) datapath.Waiter {
	panic("no copies")
}
func (e *fakeEnv) AllocHost(n uint64) (datapath.Buf, error) {
	return &hostBuf{mem: make([]byte, n)}, nil
}
func (e *fakeEnv) FreeHost(b datapath.Buf) error { return nil }
func (e *fakeEnv) WrapHost(mem []byte, onDestroy func() error) (datapath.Buf, error) {
	return &hostBuf{mem: mem}, nil
}
func (e *fakeEnv) Go(fn func()) {
	e.wg.Add(1)
	hold := e.hold.Load()
	go func() {
		defer e.wg.Done()
		if hold != nil {
			<-*hold
		}
		fn()
	}()
}
func (e *fakeEnv) Gate() *datapath.Gate {
	e.gateOnce.Do(func() { e.gate.Init(new(atomic.Bool)) })
	return &e.gate
}
func (e *fakeEnv) Enter() bool                              { return true }
func (e *fakeEnv) Exit()                                    {}
func (e *fakeEnv) Slot(ctx context.Context) (func(), error) { return func() {}, nil }
func (e *fakeEnv) CountInline(n, size uint64)               {}

// fakeCtrl is an endpoint's control channel over a wire.Conn, with a
// reader that lands Data frames through its path and dispatches replies
// (a small stand-in for the engine's endpoint).
type fakeCtrl struct {
	env    *fakeEnv
	conn   *wire.Conn
	dialer bool
	peer   wire.Hello
	path   *path

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]func(wire.Frame, error)
	failed  error
	done    chan struct{}
	readEnd chan struct{}
	serving sync.WaitGroup
}

var _ datapath.Ctrl = (*fakeCtrl)(nil)

func (c *fakeCtrl) Env() datapath.Env           { return c.env }
func (c *fakeCtrl) Name() string                { return "fake" }
func (c *fakeCtrl) Conn() *wire.Conn            { return c.conn }
func (c *fakeCtrl) Peer() ipc.PeerID            { return ipc.PeerID{} }
func (c *fakeCtrl) PeerHello() *wire.Hello      { return &c.peer }
func (c *fakeCtrl) Dialer() bool                { return c.dialer }
func (c *fakeCtrl) MarkActive()                 {}
func (c *fakeCtrl) Done() <-chan struct{}       { return c.done }
func (c *fakeCtrl) TakeReplies() []wire.Message { return nil }
func (c *fakeCtrl) QueueReply(m wire.Message) error {
	c.env.Go(func() { _ = c.conn.Send(m) })
	return nil
}
func (c *fakeCtrl) NewID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID += 2
	return c.nextID
}
func (c *fakeCtrl) Ours(id uint64) bool { return (id&1 == 1) == c.dialer }
func (c *fakeCtrl) Expect(id uint64, fn func(wire.Frame, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	c.pending[id] = fn
	return nil
}
func (c *fakeCtrl) ExpectRequest(_ context.Context, id uint64, r datapath.Replier) error {
	return c.Expect(id, r.Reply)
}
func (c *fakeCtrl) RequestSlot(context.Context) (func(), error) { return func() {}, nil }
func (c *fakeCtrl) Forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}
func (c *fakeCtrl) RoundTrip(context.Context, uint64, wire.Message) (wire.Frame, error) {
	return wire.Frame{}, errors.New("unused")
}
func (c *fakeCtrl) Serve(fn func() wire.Message) bool {
	c.serving.Add(1)
	go func() {
		defer c.serving.Done()
		if m := fn(); m != nil {
			_ = c.Conn().Send(m)
		}
	}()
	return true
}
func (c *fakeCtrl) Fail(err error) {
	c.mu.Lock()
	if c.failed != nil {
		c.mu.Unlock()
		return
	}
	c.failed = err
	pend := c.pending
	c.pending = map[uint64]func(wire.Frame, error){}
	c.mu.Unlock()
	_ = c.conn.Close()
	c.path.Failed(err)
	for _, fn := range pend {
		fn(wire.Frame{}, err)
	}
	close(c.done)
}
func (c *fakeCtrl) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}
func (c *fakeCtrl) PeerErr(what string, cause error) error { return gxerr.New(gxerr.Peer, what, cause) }
func (c *fakeCtrl) ReplyErr(f wire.Frame) error {
	m, err := f.Message()
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *wire.Completion:
		if m.Status == wire.StatusOK {
			return nil
		}
	case *wire.Error:
		return gxerr.New(gxerr.Peer, "refused", m)
	}
	return gxerr.New(gxerr.Peer, "bad reply", nil)
}
func (c *fakeCtrl) Refusal(what string, m *wire.Error) error { return gxerr.New(gxerr.Peer, what, m) }
func (c *fakeCtrl) SendErr(err error) error                  { return gxerr.New(gxerr.Peer, "send", err) }

// read is the endpoint's reader.
func (c *fakeCtrl) read() {
	defer close(c.readEnd)
	for {
		f, err := c.conn.RecvRouted(context.Background(), c.path.Sink())
		if err != nil {
			c.Fail(gxerr.New(gxerr.Peer, "connection lost", err))
			c.path.Closed(c.Err())
			return
		}
		if f.Routed {
			c.path.Landed()
			continue
		}
		switch f.Header.Type {
		case wire.TypeCompletion, wire.TypeError, wire.TypeListReply:
			c.mu.Lock()
			fn := c.pending[f.Header.RequestID]
			delete(c.pending, f.Header.RequestID)
			c.mu.Unlock()
			if fn != nil {
				f.Payload = append([]byte(nil), f.Payload...)
				fn(f, nil)
			}
			continue
		}
		m, err := f.Message()
		if err == nil {
			var ok bool
			ok, err = c.path.Handle(&f, m)
			if !ok && err == nil && f.Header.Type != wire.TypeHeartbeat {
				err = errors.New("unexpected frame")
			}
		}
		if err != nil {
			c.Fail(gxerr.New(gxerr.Peer, "malformed frame", err))
			c.path.Closed(c.Err())
			return
		}
	}
}

// close ends the endpoint and waits for everything it started.
func (c *fakeCtrl) close() {
	c.Fail(gxerr.New(gxerr.Closed, "closed", nil))
	<-c.readEnd
	c.serving.Wait()
	c.env.wg.Wait()
}

// pair connects two fake endpoints over loopback TCP, each with a TCP
// path whose owner memory is mem; peerCaps are the caps each announces.
func pair(t testing.TB, size int, caps wire.Caps) (a, b *fakeCtrl) {
	t.Helper()
	ca, cb := loopback(t)
	mk := func(nc net.Conn, dialer bool) *fakeCtrl { return fakeEnd(t, nc, dialer, size, caps) }
	a, b = mk(ca, true), mk(cb, false)
	t.Cleanup(func() {
		a.close()
		b.close()
	})
	return a, b
}

// fakeSpin is the fake endpoints' Config.TCPReadSpin (benchmarks set
// the engine's default; tests run without).
var fakeSpin time.Duration

// loopback is a connected pair of TCP connections.
func loopback(t testing.TB) (ca, cb net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		acc <- c
	}()
	ca, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ca, <-acc
}

// fakeEnd makes a fake endpoint over nc with a TCP path whose owner
// memory is size bytes; caps are what its peer announced.
func fakeEnd(t testing.TB, nc net.Conn, dialer bool, size int, caps wire.Caps) *fakeCtrl {
	t.Helper()
	env := &fakeEnv{mem: &hostBuf{mem: make([]byte, size)}}
	c := &fakeCtrl{env: env, conn: wire.NewConn(Frame(nc, fakeSpin), wire.ConnConfig{MaxFrame: MaxFrame}), dialer: dialer,
		pending: map[uint64]func(wire.Frame, error){}, done: make(chan struct{}), readEnd: make(chan struct{})}
	c.peer.Caps = caps
	if dialer {
		c.nextID = 1
	}
	p, err := New(env).Connect(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	c.path = p.(*path)
	go c.read()
	return c
}

// completion is a datapath.Completer that records its result.
type completion struct {
	done chan struct{}
	once sync.Once
	err  error
}

func newCompletion() *completion { return &completion{done: make(chan struct{})} }

func (c *completion) Complete(_ int, err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}

func (c *completion) CompleteAll(err error) { c.Complete(0, err) }

func (c *completion) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(20 * time.Second):
		t.Fatal("the operation never completed")
		return nil
	}
}
