package staging

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// ErrSource wraps the error of a device DMA that failed under
// Pipeline.ZeroOnDMAError: the chunk went out as zeros.
var ErrSource = errors.New("staging: source DMA failed")

// Net starts the network half of chunk i: the m bytes at off of the
// transfer, in host (staging memory, host.Len = m). Out sends host; In
// fills it. It returns a function that waits for the chunk's end (nil:
// it ended already), or an error when the chunk could not start (the
// pipeline then ends with it, after waiting for what had started).
type Net func(i int, off uint64, host datapath.Mem) (wait func() error, err error)

// Pipeline moves device memory through host staging buffers, chunk by
// chunk, overlapping the device DMA of one chunk with the network
// transfer of another: with two staging buffers, Out fetches chunk i+1
// from the device while chunk i goes out, and In lands chunk i on the
// device while chunk i+1 comes in.
//
// Every wait for a resource (a transfer's turn, a staging buffer) ends
// when ctx ends or Done is closed. When ctx ends no further chunk is
// started; the pipeline returns gxerr.Ctx(...) once every DMA and network
// transfer it started has ended: only then do the staging buffers go back
// to the pool, and only then is the device memory no longer touched.
// The DMAs run without a deadline for the same reason (a deadline is the
// caller's: it resolves its future early and keeps the memory held).
type Pipeline struct {
	Env  datapath.Env
	Pool *Pool
	// Turns, when not nil, is taken for the whole transfer (a token per
	// transfer, cap(Turns) at most half the pool's buffers): a transfer
	// that takes two buffers then never waits for its second while
	// others hold them all.
	Turns chan struct{}
	// Done ends the waits (the endpoint's end); Err, when not nil and not
	// returning nil, is the error a wait that failed returns then.
	Done <-chan struct{}
	Err  func() error
	// Chunk is the bytes per chunk (at most Pool.Size()).
	Chunk uint64
	// TrySecond takes the second staging buffer only if one is free at
	// once, moving chunk after chunk through one buffer otherwise (a
	// caller that cannot take turns); by default both are waited for.
	TrySecond bool
	// ZeroOnDMAError (Out): a chunk whose device DMA failed goes out as
	// zeros and the stream goes on (the receiver expects every byte);
	// the DMA's error, wrapping ErrSource, is returned at the end.
	ZeroOnDMAError bool
	// Name prefixes error messages (the peer); Label names the transfers
	// ("RDMA": "waiting for RDMA staging").
	Name, Label string
}

// run is one transfer's state.
type run struct {
	p     *Pipeline
	dev   datapath.Mem
	stage [2]datapath.Buf
	bufs  int // staging buffers held: 1 or 2
	dma   [2]datapath.Waiter
	net   [2]func() error
}

func (p *Pipeline) msg(what string) string {
	return fmt.Sprintf("%s: %s", p.Name, what)
}

// failed is the error of a wait that ended because Done was closed (or
// err if none is known).
func (p *Pipeline) failed(err error) error {
	if p.Err != nil {
		if f := p.Err(); f != nil {
			return f
		}
	}
	return err
}

// start takes the transfer's turn and its staging buffers.
func (p *Pipeline) start(ctx context.Context, dev datapath.Mem) (*run, error) {
	if p.Turns != nil {
		select {
		case p.Turns <- struct{}{}:
		case <-p.Done:
			return nil, p.failed(gxerr.Closed)
		case <-ctx.Done():
			return nil, gxerr.Ctx(p.msg("waiting for "+p.Label+" staging"), ctx.Err())
		}
	}
	r := &run{p: p, dev: dev}
	for k := range r.stage {
		if uint64(k)*p.Chunk >= dev.Len {
			break
		}
		var b datapath.Buf
		if k == 1 && p.TrySecond {
			if b = p.Pool.TryGet(); b == nil {
				break
			}
		} else {
			var err error
			if b, err = p.Pool.Get(ctx, p.Done); err != nil {
				r.finish()
				return nil, p.failed(err)
			}
		}
		r.stage[k] = b
		r.bufs++
	}
	return r, nil
}

// finish waits for everything started, then gives the buffers and the
// turn back; it returns the first error of those waits.
func (r *run) finish() error {
	var err error
	for k := range r.stage {
		if e := r.waitNet(k); err == nil {
			err = e
		}
		if e := r.waitDMA(k); err == nil {
			err = e
		}
		if r.stage[k] != nil {
			r.p.Pool.Put(r.stage[k])
			r.stage[k] = nil
		}
	}
	if r.p.Turns != nil {
		<-r.p.Turns
	}
	return err
}

func (r *run) waitNet(k int) error {
	w := r.net[k]
	if w == nil {
		return nil
	}
	r.net[k] = nil
	return w()
}

// waitDMA waits for the DMA of buffer k to retire (not bounded by ctx:
// until then it touches the buffer and the device memory).
func (r *run) waitDMA(k int) error {
	w := r.dma[k]
	if w == nil {
		return nil
	}
	r.dma[k] = nil
	return w.Wait(context.Background())
}

func (r *run) chunk(off uint64) uint64 { return min(r.p.Chunk, r.dev.Len-off) }

// host is the staging memory of chunk at off in buffer k.
func (r *run) host(k int, off uint64) datapath.Mem {
	return datapath.Mem{B: r.stage[k], Len: r.chunk(off)}
}

func (r *run) startNet(net Net, i, k int, off uint64) error {
	w, err := net(i, off, r.host(k, off))
	r.net[k] = w
	return err
}

// Out moves dev to the network: for each chunk, a device-to-host DMA
// into a staging buffer, then net sends it.
func (p *Pipeline) Out(ctx context.Context, dev datapath.Mem, net Net) (err error) {
	if dev.Len == 0 {
		return nil
	}
	r, err := p.start(ctx, dev)
	if err != nil {
		return err
	}
	defer func() {
		if e := r.finish(); err == nil {
			err = e
		}
	}()
	var srcErr error
	fetch := func(k int, off uint64) {
		r.dma[k] = p.Env.DMA(r.host(k, off), dev.Sub(off, r.chunk(off)), time.Time{})
	}
	if err := ctx.Err(); err != nil {
		return gxerr.Ctx(p.msg(p.Label+" staging stopped"), err)
	}
	fetch(0, 0)
	for i, off := 0, uint64(0); off < dev.Len; i, off = i+1, off+p.Chunk {
		k := i & 1
		if r.bufs == 1 {
			k = 0
		}
		if err := ctx.Err(); err != nil { // no further chunk: finish drains those started
			return gxerr.Ctx(p.msg(p.Label+" staging stopped"), err)
		}
		if err := r.waitDMA(k); err != nil {
			if !p.ZeroOnDMAError {
				return err
			}
			if srcErr == nil {
				srcErr = fmt.Errorf("%w: %w", ErrSource, err)
			}
		}
		if srcErr != nil {
			clear(r.host(k, off).Host())
		}
		next := off + p.Chunk
		if r.bufs == 2 && next < dev.Len {
			if err := r.waitNet(k ^ 1); err != nil {
				return err
			}
			if srcErr == nil {
				fetch(k^1, next)
			}
		}
		if err := r.startNet(net, i, k, off); err != nil {
			return err
		}
		if r.bufs == 1 && next < dev.Len {
			if err := r.waitNet(0); err != nil {
				return err
			}
			if srcErr == nil {
				fetch(0, next)
			}
		}
	}
	return srcErr
}

// In moves the network's bytes into dev: for each chunk, net fills a
// staging buffer, then a host-to-device DMA lands it.
func (p *Pipeline) In(ctx context.Context, dev datapath.Mem, net Net) (err error) {
	if dev.Len == 0 {
		return nil
	}
	r, err := p.start(ctx, dev)
	if err != nil {
		return err
	}
	defer func() {
		if e := r.finish(); err == nil {
			err = e
		}
	}()
	if err := ctx.Err(); err != nil {
		return gxerr.Ctx(p.msg(p.Label+" staging stopped"), err)
	}
	if err := r.startNet(net, 0, 0, 0); err != nil {
		return err
	}
	for i, off := 0, uint64(0); off < dev.Len; i, off = i+1, off+p.Chunk {
		k := i & 1
		if r.bufs == 1 {
			k = 0
		}
		if err := r.waitNet(k); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return gxerr.Ctx(p.msg(p.Label+" staging stopped"), err)
		}
		next := off + p.Chunk
		if r.bufs == 2 && next < dev.Len {
			if err := r.waitDMA(k ^ 1); err != nil {
				return err
			}
			if err := r.startNet(net, i+1, k^1, next); err != nil {
				return err
			}
		}
		r.dma[k] = p.Env.DMA(dev.Sub(off, r.chunk(off)), r.host(k, off), time.Time{})
		if r.bufs == 1 && next < dev.Len {
			if err := r.waitDMA(0); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return gxerr.Ctx(p.msg(p.Label+" staging stopped"), err)
			}
			if err := r.startNet(net, i+1, 0, next); err != nil {
				return err
			}
		}
	}
	return nil
}
