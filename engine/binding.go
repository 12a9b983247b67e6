package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// Binding prepares repeated transfers between one local host slice and one
// slice of a peer's buffer: the arguments are checked and the buffers
// referenced once (the shape of a UCT endpoint with an unpacked remote
// key). Use it for small messages in a loop, or to stream puts; Endpoint
// Put/Get are the general, asynchronous operations. A goroutine that runs
// many operations in a row can Hold it (see Held): the lock and the
// engine's close gate are then taken once, not per call.
//
// On a "unix" endpoint the peer's host memory is imported once, and each
// Put or Get is only a copy into or out of its mapping. On an RDMA
// endpoint the local slice is registered and the work request built once:
// each Put is one RDMA write (Get one read), whose completion the caller
// takes from the completion queue itself; PutN and GetN post chains of
// them, keeping up to 128 in flight, and Flush waits for those. (While
// bindings take completions themselves, the engine's completion queue
// goroutine polls on a timer instead of sleeping on events: when they stop,
// another operation's completion may wait up to 2 ms for it.)
//
// A Binding not made by Endpoint.Bind (a declared Binding{}, or a nil
// *Binding) refuses every method with ErrInvalid.
type Binding struct {
	ep *Endpoint
	n  uint64         // bytes per operation
	bd datapath.Bound // the binding of the endpoint's data path

	mu     sync.RWMutex // Put/Get hold it shared; Close exclusively
	closed bool
	ops    atomic.Uint64 // added to the engine's Stats at Close (one atomic per op here)
}

// Bind prepares transfers between local and remote (same length; local
// host memory; the peer's host memory over "unix", any peer memory whose
// key carries an rkey over RDMA). The binding holds local's buffer until
// its Close: a Free or Deregister of that buffer is deferred until then,
// and the binding's Put and Get still read and write it.
func (ep *Endpoint) Bind(ctx context.Context, local Slice, remote RemoteKey) (*Binding, error) {
	if ep.invalid() {
		return nil, errNoEndpoint
	}
	e := ep.e
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := ep.Err(); err != nil {
		return nil, err
	}
	// In the starts gate: Close waits for a Bind under way before it
	// releases buffers (the binding imports the peer's memory as one).
	if !e.enterStart() {
		return nil, ErrClosed
	}
	defer e.exitStart()
	if err := e.validateSlice(local); err != nil {
		return nil, err
	}
	if remote.err != nil {
		return nil, remote.err
	}
	if err := remote.k.Check(0, remote.k.Len); err != nil {
		return nil, newErr(ErrInvalid, "remote key view", err)
	}
	var mk *wire.RemoteKey
	if k, ok := remote.mapKey(); ok {
		mk = &k
	}
	bd, err := ep.path.Bind(ctx, local.mem(), remote.k, mk, e.opConfig(nil).deadline)
	if err != nil {
		return nil, err
	}
	return &Binding{ep: ep, n: local.n, bd: bd}, nil
}

// Put copies the local slice into the peer's. It returns when the data is
// in the peer's memory.
func (b *Binding) Put() error { return b.do(true, 1, true) }

// Get copies the peer's slice into the local one.
func (b *Binding) Get() error { return b.do(false, 1, true) }

// PutN runs n Puts back to back: each copies the whole local slice into
// the peer's, as n calls of Put would, but the binding is checked and its
// lock taken once for all of them, and Stats count them with one atomic
// (the loop of a bandwidth test, like UCT's put_bw posting its puts). A
// binding closed or whose peer memory goes away meanwhile is noticed at
// the next call. n <= 0 does nothing (a Binding not made by Bind is
// ErrInvalid still). On an RDMA endpoint PutN returns
// once the n writes are posted, up to 128 of them still in flight (the
// next call, Put, Get, Flush or Close waits for them; an error of theirs
// is returned by the call that sees it). To stream over RDMA, pass n of
// 128 or more: while PutN runs it takes its completions itself, and at
// its return those of the writes left in flight pass to the completion
// queue's goroutine. On Soft-RoCE, 64 KiB writes streamed 4 per call
// reached 0.88-0.92x ib_write_bw, 128 per call 0.95-1.03x.
func (b *Binding) PutN(n int) error { return b.copyN(n, true) }

// GetN runs n Gets back to back (see PutN).
func (b *Binding) GetN(n int) error { return b.copyN(n, false) }

func (b *Binding) copyN(n int, put bool) error {
	if n <= 0 && !b.invalid() {
		return nil
	}
	return b.do(put, n, false)
}

// Flush returns once every operation of the binding has completed (on an
// RDMA endpoint, the writes and reads PutN and GetN left in flight; over
// "unix" they are done on return already), with the first error among
// them.
func (b *Binding) Flush() error {
	if b.invalid() {
		return errNoBinding
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return errBindingClosed()
	}
	return b.bd.Flush()
}

// do runs n operations of the data path's binding, refusing a closed
// binding (the endpoint's and the peer memory's errors are Bound.Do's).
func (b *Binding) do(put bool, n int, wait bool) error {
	if b.invalid() {
		return errNoBinding
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return errBindingClosed()
	}
	b.ep.ch.MarkUsed() // in use (see Endpoint.start)
	err := b.bd.Do(put, n, wait)
	b.ops.Add(uint64(n))
	return err
}

func errBindingClosed() error { return newErr(ErrClosed, "binding closed", nil) }

// Close releases the binding (after in-progress Puts and Gets return; on
// an RDMA endpoint, once the operations in flight have completed) and
// adds its operations to the engine's Stats. Idempotent. Its error is an
// operation's left in flight.
func (b *Binding) Close() error {
	if b.invalid() {
		return errNoBinding
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.bd.Close()
	if n := b.ops.Load(); n > 0 {
		if b.bd.Inline() {
			b.ep.e.env().CountInline(n, b.n)
		} else {
			b.ep.e.st.RecordDone(n, b.n, false)
		}
	}
	return err
}
