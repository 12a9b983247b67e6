// Package pipe is an in-memory pair of data paths: two engines in one
// process whose endpoints move data by copying between each other's
// buffers, with every owner-side check made by the owner's engine
// (datapath.Env.Lookup) and Gaudi memory reached through its own engine's
// DMA. Only the control channel is a connection (an in-memory net.Pipe):
// the endpoint's semantics (keys, refusals, errors, cancellation, Close)
// are tested without sockets, as wireguard-go's conn/bindtest tests its
// device.
package pipe

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// Transport is one engine's end of a pair.
type Transport struct {
	local, peer datapath.Env
}

// New is the transport of the engine whose environment is local, paired
// with the engine whose environment is peer.
func New(local, peer datapath.Env) *Transport { return &Transport{local: local, peer: peer} }

// Kind is datapath.KindPipe.
func (t *Transport) Kind() datapath.Kind { return datapath.KindPipe }

// Connect makes the endpoint's path.
func (t *Transport) Connect(_ context.Context, c datapath.Ctrl) (datapath.Path, error) {
	return &Path{t: t, c: c}, nil
}

// Close does nothing: a path holds nothing between operations.
func (t *Transport) Close() error { return nil }

// Path is one endpoint's data path.
type Path struct {
	t *Transport
	c datapath.Ctrl

	served, bytesOut, bytesIn atomic.Uint64
}

// Kind is datapath.KindPipe.
func (p *Path) Kind() datapath.Kind { return datapath.KindPipe }

// Start runs the operation on a goroutine the engine tracks.
func (p *Path) Start(ctx context.Context, r datapath.Req, c datapath.Completer) {
	if err := r.Local.B.Acquire(); err != nil {
		c.Complete(0, err)
		return
	}
	var timer *time.Timer
	if !r.Deadline.IsZero() {
		timer = time.AfterFunc(time.Until(r.Deadline), func() {
			c.CompleteAll(gxerr.New(gxerr.Timeout, p.c.Name()+": pipe operation", nil))
		})
	}
	p.t.local.Go(func() {
		defer r.Local.B.Release()
		err := p.move(ctx, r)
		if timer != nil {
			timer.Stop()
		}
		c.Complete(0, err)
	})
}

// move performs r: the peer's engine checks the key and names its memory,
// then the bytes go through host memory, each side's Gaudi memory moved
// by its own engine's DMA.
func (p *Path) move(ctx context.Context, r datapath.Req) error {
	if err := p.c.Err(); err != nil {
		return err
	}
	need := wire.KeyRead
	if r.Put {
		need = wire.KeyWrite
	}
	theirs, st, msg := p.t.peer.Lookup(&r.Key, 0, r.Local.Len, need)
	if st != wire.StatusOK {
		return p.c.Refusal("request refused", wire.NewError(0, st, msg))
	}
	if err := theirs.B.Acquire(); err != nil {
		return p.c.Refusal("request refused", wire.NewError(0, wire.StatusStale, "buffer no longer exported"))
	}
	defer theirs.B.Release()
	// The owner's Close releases its buffers, held or not, once no copy
	// is in its gate: this one must be.
	if !p.t.peer.Enter() {
		return p.c.PeerErr("the peer's engine is closing", nil)
	}
	defer p.t.peer.Exit()
	src, srcEnv, dst, dstEnv := r.Local, p.t.local, theirs, p.t.peer
	if !r.Put {
		src, srcEnv, dst, dstEnv = theirs, p.t.peer, r.Local, p.t.local
	}
	if err := ctx.Err(); err != nil {
		return gxerr.Ctx(p.c.Name()+": pipe operation not started", err)
	}
	if err := copyThroughHost(ctx, dst, dstEnv, src, srcEnv); err != nil {
		return err
	}
	n := r.Local.Len
	if r.Put {
		p.bytesOut.Add(n)
	} else {
		p.bytesIn.Add(n)
	}
	return nil
}

// copyThroughHost copies src to dst (same length). Host to host is one
// copy; Gaudi memory is first (or last) moved by its engine's DMA into
// (out of) a host buffer of that engine.
func copyThroughHost(ctx context.Context, dst datapath.Mem, dstEnv datapath.Env, src datapath.Mem, srcEnv datapath.Env) error {
	if src.Len == 0 {
		return nil
	}
	var in []byte
	if src.IsGaudi() {
		stage, err := srcEnv.AllocHost(src.Len)
		if err != nil {
			return err
		}
		defer func() { _ = srcEnv.FreeHost(stage) }()
		sm := datapath.Mem{B: stage, Len: src.Len}
		if err := srcEnv.DMA(sm, src, time.Time{}).Wait(context.Background()); err != nil {
			return err
		}
		in = sm.Host()
	} else {
		in = src.Host()
	}
	if err := ctx.Err(); err != nil {
		return gxerr.Ctx("pipe operation stopped", err)
	}
	if !dst.IsGaudi() {
		copy(dst.Host(), in)
		return nil
	}
	stage, err := dstEnv.AllocHost(dst.Len)
	if err != nil {
		return err
	}
	defer func() { _ = dstEnv.FreeHost(stage) }()
	sm := datapath.Mem{B: stage, Len: dst.Len}
	copy(sm.Host(), in)
	return dstEnv.DMA(dst, sm, time.Time{}).Wait(context.Background())
}

// Handle takes no frame: the pair sends none of its own.
func (p *Path) Handle(*wire.Frame, wire.Message) (bool, error) { return false, nil }

// Sink is nil: no Data frames.
func (p *Path) Sink() wire.DataSink { return nil }

// Landed is never called (no sink).
func (p *Path) Landed() {}

// Tick does nothing.
func (p *Path) Tick() {}

// Failed does nothing: operations check the endpoint before they start.
func (p *Path) Failed(error) {}

// Closed does nothing.
func (p *Path) Closed(error) {}

// Stats adds the path's counters.
func (p *Path) Stats(s *datapath.Stats) {
	s.BytesOut += p.bytesOut.Load()
	s.BytesIn += p.bytesIn.Load()
	s.Lanes = 1
}

// Bind prepares copies between local host memory and the peer's host
// memory k names.
func (p *Path) Bind(_ context.Context, local datapath.Mem, k wire.RemoteKey, _ *wire.RemoteKey, _ time.Time) (datapath.Bound, error) {
	theirs, st, msg := p.t.peer.Lookup(&k, 0, local.Len, wire.KeyRead|wire.KeyWrite)
	if st != wire.StatusOK {
		return nil, p.c.Refusal("bind refused", wire.NewError(0, st, msg))
	}
	if local.IsGaudi() || theirs.IsGaudi() {
		return nil, gxerr.New(gxerr.NotSupported, "pipe bindings are between host buffers", nil)
	}
	if err := local.B.Acquire(); err != nil {
		return nil, err
	}
	if err := theirs.B.Acquire(); err != nil {
		local.B.Release()
		return nil, gxerr.New(gxerr.Invalid, p.c.Name()+": stale key", err)
	}
	return &bound{p: p, mine: local, theirs: theirs}, nil
}

type bound struct {
	p            *Path
	mine, theirs datapath.Mem
	closed       bool
}

func (b *bound) Do(put bool, n int, _ bool) error {
	if err := b.p.c.Err(); err != nil {
		return err
	}
	env := b.p.t.local
	if !env.Enter() {
		return gxerr.Closed
	}
	defer env.Exit()
	// The owner's memory: inside its engine's gate too (its Close
	// releases its buffers, held or not, once no copy is in), and refused
	// once its owner freed it (the binding's reference only keeps it
	// mapped).
	peer := b.p.t.peer
	if !peer.Enter() {
		return b.p.c.PeerErr("the peer's engine is closing", nil)
	}
	defer peer.Exit()
	if err := b.theirs.B.Acquire(); err != nil {
		return gxerr.New(gxerr.Invalid, b.p.c.Name()+": the peer's buffer is no longer exported", err)
	}
	b.theirs.B.Release() // the binding's own reference remains
	dst, src := b.theirs.Host(), b.mine.Host()
	if !put {
		dst, src = src, dst
	}
	for range n {
		copy(dst, src)
	}
	return nil
}

func (b *bound) Flush() error { return nil }

func (b *bound) Close() error {
	if !b.closed {
		b.closed = true
		b.mine.B.Release()
		b.theirs.B.Release()
	}
	return nil
}

func (b *bound) Inline() bool { return true }
