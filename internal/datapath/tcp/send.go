package tcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// errSourceFailed marks a sendMem failure in reading the source (a
// device DMA), after which the connection is still in step.
var errSourceFailed = errors.New("reading the source failed")

// errStopped: sendMem stopped before a frame because stop said so (or
// ctx ended while it waited for a staging buffer); the connection is in
// step.
var errStopped = errors.New("sending stopped")

// sendMem sends s as Data frames of request id at offsets base.. of its
// stream (the first one behind first, when given), checking stop before
// each frame. Host memory goes
// out from where it is; Gaudi memory through two staging buffers, the DMA
// of chunk k+1 overlapping the send of chunk k. It returns the bytes whose
// frames went out; it returns once no DMA reads s any more.
func (p *path) sendMem(ctx context.Context, id, base uint64, s datapath.Mem, first wire.Message, stop func() bool) (uint64, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	conn := p.c.Conn()
	n := s.Len
	if n == 0 {
		if first != nil {
			return 0, conn.Send(first)
		}
		return 0, nil
	}
	var sent uint64
	send := func(off uint64, b []byte) error {
		if stop() {
			return errStopped
		}
		var err error
		if off == 0 && first != nil {
			// Replies waiting ride along; without any, the request alone
			// goes from an array on the stack.
			msgs := p.c.TakeReplies()
			var one [1]wire.Message
			if msgs == nil {
				one[0] = first
				msgs = one[:]
			} else {
				msgs = append(msgs, first)
			}
			err = conn.SendWithData(msgs, id, base, b)
		} else {
			err = conn.SendData(id, base+off, b)
		}
		if err == nil {
			sent += uint64(len(b))
			p.bytesOut.Add(uint64(len(b)))
		}
		return err
	}
	if !s.IsGaudi() {
		b := s.Host()
		for off := uint64(0); off < n; off += Chunk {
			if err := send(off, b[off:min(off+Chunk, n)]); err != nil {
				return sent, err
			}
		}
		return sent, nil
	}
	pool := p.out
	var stage [2]datapath.Buf
	var fut [2]datapath.Waiter
	defer func() {
		for k, b := range stage {
			if b != nil {
				if fut[k] != nil {
					<-fut[k].Done()
				}
				pool.Put(b)
			}
		}
	}()
	// One buffer is waited for, a second taken only if free: senders
	// that each hold one and wait for another would deadlock.
	b, err := pool.Get(ctx, p.c.Done())
	if err != nil {
		if ctx.Err() != nil {
			return 0, errStopped
		}
		return 0, err
	}
	stage[0] = b
	if n > Chunk {
		stage[1] = pool.TryGet()
	}
	fetch := func(k int, off uint64) {
		m := min(Chunk, n-off)
		fut[k] = p.env.DMA(datapath.Mem{B: stage[k], Len: m}, s.Sub(off, m), time.Time{})
	}
	// A DMA that fails does not stop the stream: the receiver expects n
	// bytes, so the rest goes out as zeros and the failure is reported
	// (a failed transfer leaves its destination undefined).
	var srcErr error
	fetch(0, 0)
	for i, off := 0, uint64(0); off < n; i, off = i+1, off+Chunk {
		k := i & 1
		if stage[1] == nil {
			k = 0
		}
		m := min(Chunk, n-off)
		if fut[k] != nil {
			if err := fut[k].Wait(context.Background()); err != nil && srcErr == nil {
				srcErr = fmt.Errorf("%w: %w", errSourceFailed, err)
			}
			fut[k] = nil
		}
		if srcErr != nil {
			clear(stage[k].HostBytes()[:m])
		}
		next := off + Chunk
		if stage[1] != nil && next < n && srcErr == nil && !stop() {
			fetch(k^1, next) // overlaps the send below
		}
		if err := send(off, stage[k].HostBytes()[:m]); err != nil {
			return sent, err
		}
		if stage[1] == nil && next < n && srcErr == nil && !stop() {
			fetch(0, next)
		}
	}
	return sent, srcErr
}

// sendZeros sends zeros as the bytes [off, n) of request id: the rest of
// a Put whose sending stopped, for a peer that does not understand
// wire.Cancel and waits for every byte.
func (p *path) sendZeros(id, off, n uint64) error {
	z := p.t.zeros()
	conn := p.c.Conn()
	for ; off < n; off += Chunk {
		if err := conn.SendData(id, off, z[:min(Chunk, n-off)]); err != nil {
			return err
		}
	}
	return nil
}
