package rdmapath

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// fakeCtrl is a control channel whose round trips wait for an answer the
// test gives (answer) or for their ctx.
type fakeCtrl struct {
	env    datapath.Env
	ids    atomic.Uint64
	sent   chan wire.Message // every request sent
	answer chan error        // the owner's answer to the request in flight (nil: OK)

	mu     sync.Mutex
	failed error
	done   chan struct{}
}

var _ datapath.Ctrl = (*fakeCtrl)(nil)

func newFakeCtrl(env datapath.Env) *fakeCtrl {
	return &fakeCtrl{env: env, sent: make(chan wire.Message, 16), answer: make(chan error, 1), done: make(chan struct{})}
}

func (c *fakeCtrl) Env() datapath.Env      { return c.env }
func (c *fakeCtrl) Name() string           { return "peer" }
func (c *fakeCtrl) Conn() *wire.Conn       { return nil }
func (c *fakeCtrl) Peer() ipc.PeerID       { return ipc.PeerID{} }
func (c *fakeCtrl) PeerHello() *wire.Hello { return &wire.Hello{} }
func (c *fakeCtrl) Dialer() bool           { return true }
func (c *fakeCtrl) NewID() uint64          { return 2*c.ids.Add(1) + 1 }
func (c *fakeCtrl) Ours(id uint64) bool    { return id&1 == 1 }
func (c *fakeCtrl) Expect(uint64, func(wire.Frame, error)) error {
	return errors.New("fakeCtrl: Expect")
}
func (c *fakeCtrl) ExpectRequest(context.Context, uint64, datapath.Replier) error {
	return errors.New("fakeCtrl: ExpectRequest")
}
func (c *fakeCtrl) RequestSlot(context.Context) (func(), error) { return func() {}, nil }
func (c *fakeCtrl) Forget(uint64) bool                          { return true }

// RoundTrip returns the answer, the endpoint's failure, or ctx's error.
func (c *fakeCtrl) RoundTrip(ctx context.Context, id uint64, m wire.Message) (wire.Frame, error) {
	if err := c.Err(); err != nil {
		return wire.Frame{}, err
	}
	c.sent <- m
	select {
	case err := <-c.answer:
		if err != nil {
			return wire.Frame{}, err
		}
		return wire.Frame{}, nil
	case <-c.done:
		return wire.Frame{}, c.Err()
	case <-ctx.Done():
		return wire.Frame{}, ctx.Err()
	}
}

func (c *fakeCtrl) QueueReply(wire.Message) error     { return nil }
func (c *fakeCtrl) TakeReplies() []wire.Message       { return nil }
func (c *fakeCtrl) Serve(fn func() wire.Message) bool { go fn(); return true }
func (c *fakeCtrl) MarkActive()                       {}

func (c *fakeCtrl) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = err
		close(c.done)
	}
}

func (c *fakeCtrl) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

func (c *fakeCtrl) Done() <-chan struct{} { return c.done }

func (c *fakeCtrl) PeerErr(what string, cause error) error {
	return gxerr.New(gxerr.Peer, "peer: "+what, cause)
}
func (c *fakeCtrl) ReplyErr(wire.Frame) error { return nil }
func (c *fakeCtrl) Refusal(what string, m *wire.Error) error {
	return gxerr.New(gxerr.Peer, what, m)
}
func (c *fakeCtrl) SendErr(err error) error { return c.PeerErr("send", err) }

// completion is a Completer that records its result.
type completion struct {
	once sync.Once
	done chan struct{}
	err  error
	n    atomic.Int32 // Complete and CompleteAll calls
}

func newCompletion() *completion { return &completion{done: make(chan struct{})} }

func (c *completion) Complete(_ int, err error) { c.CompleteAll(err) }
func (c *completion) CompleteAll(err error) {
	c.n.Add(1)
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}

func (c *completion) resolved() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
