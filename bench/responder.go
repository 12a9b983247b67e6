package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/engine"
)

// The perf server's ping-pong responder (put_lat): see server.go for the
// session that starts and ends it.

// responder answers ping-pong rounds: it spins on its receive buffer's
// sequence and Puts its send buffer back.
type responder struct {
	ss     *session
	recv   *engine.Buffer
	send   *engine.Buffer
	key    engine.RemoteKey
	bind   *engine.Binding // host to host: checked and imported once
	seqOff int
	seed   byte   // of the bytes the client sends
	rounds uint64 // rounds answered; read once done is closed
	err    error
	abort  atomic.Bool
	done   chan struct{}
}

func (r *responder) free() error {
	var err error
	if r.bind != nil {
		err = r.bind.Close()
		r.bind = nil
	}
	if r.send == nil {
		return err
	}
	err = errors.Join(err, r.send.Free())
	r.send = nil
	return err
}

func (ss *session) startPingPong(ctx context.Context, m *ctlMsg) *ctlMsg {
	eng := ss.s.eng
	if ss.ep == nil {
		return refusal("not attached")
	}
	if ss.resp != nil {
		return refusal("a ping-pong is already running")
	}
	b, ok := ss.bufs[m.Buf]
	if !ok || b.b.Location().IsGaudi() {
		return refusal("no host buffer %d", m.Buf)
	}
	if m.Size != b.b.Size() || m.Size < 8 || m.SeqOff < 0 || m.SeqOff > m.Size-8 || m.SeqOff%8 != 0 {
		return refusal("bad ping-pong geometry: size %d, sequence at %d", m.Size, m.SeqOff)
	}
	key, err := engine.ParseRemoteKey(m.Key)
	if err != nil {
		return refusal("client key: %v", err)
	}
	if key.Len() != m.Size || key.Location().IsGaudi() {
		return refusal("client key is for %d bytes of %s, want %d bytes of host memory", key.Len(), key.Location(), m.Size)
	}
	send, err := eng.Alloc(m.Size, engine.Host)
	if err != nil {
		return refusal("allocate send buffer: %v", err)
	}
	r := &responder{ss: ss, recv: b.b, send: send, key: key, seqOff: m.SeqOff, seed: b.seed, done: make(chan struct{})}
	fillPattern(send.Bytes(), m.Seed, false)
	atomic.StoreUint64(r.seqPtr(send), 0)
	// Map the client's buffer now, not in the first round: a Get of a few
	// bytes into a scratch buffer leaves the client's memory alone.
	scratch, err := eng.Alloc(8, engine.Host)
	if err == nil {
		err = ss.ep.GetSync(ctx, scratch.All(), key.Slice(0, 8))
		err = errors.Join(err, scratch.Free())
	}
	if err == nil {
		r.bind, err = bind(ctx, ss.ep, send.All(), key)
	}
	if err != nil {
		_ = r.free()
		return refusal("map the client's buffer: %v", err)
	}
	ss.resp = r
	go r.run()
	return &ctlMsg{}
}

func (r *responder) seqPtr(b *engine.Buffer) *uint64 {
	return (*uint64)(unsafe.Pointer(&b.Bytes()[r.seqOff]))
}

// idleTimeout ends a responder whose client stopped sending.
var idleTimeout = 30 * time.Second

func (r *responder) run() {
	defer close(r.done)
	ep := r.ss.ep
	recvSeq, sendSeq := r.seqPtr(r.recv), r.seqPtr(r.send)
	sendS := r.send.All()
	// The binding is held by this goroutine for the whole ping-pong (see
	// pingPong.RoundTrip): each answer is then the checks and the copy.
	var held *engine.Held
	if r.bind != nil {
		if held, r.err = r.bind.Hold(); r.err != nil {
			return
		}
		defer held.Release()
	}
	ctx := context.Background()
	wait := newLandWait(r.ss.s.eng, ep)
	next := uint64(1)
	var lastCheck time.Time
	var lastRounds uint64
	// pending is the last answer's Put when it is a future (tcp): not
	// waited for before polling for the next round (it completes when the
	// client has it), only before the send buffer is written again.
	var pending *engine.Future
	settle := func() bool {
		if pending == nil {
			return true
		}
		for spins := 1; !pending.IsDone(); spins++ {
			wait.idle(spins)
			if spins&0xfff == 0 && r.abort.Load() {
				<-pending.Done()
				break
			}
		}
		r.err = pending.Err()
		pending = nil
		return r.err == nil
	}
	defer func() {
		if err := r.err; pending != nil {
			settle()
			if err != nil {
				r.err = err
			}
		}
	}()
	idle := 0
	for {
		v := atomic.LoadUint64(recvSeq)
		if v == next {
			if pending != nil && !settle() { // no call on the ipc path
				return
			}
			*sendSeq = next // this goroutine's buffer: a plain store (see pingPong.RoundTrip)
			if held != nil {
				// Done on return.
				r.err = held.Put()
			} else if f := ep.Put(ctx, sendS, r.key); f.IsDone() {
				r.err = f.Err()
			} else {
				pending = f
			}
			if r.err != nil {
				return
			}
			r.rounds = next // read after done is closed
			wait.round(next)
			next++
			idle = 0
			continue
		}
		if v == stopSeq {
			return
		}
		idle++
		spinPause()
		if r.bind == nil { // tcp: see landWait
			if pending == nil || !pending.IsDone() {
				wait.idle(idle)
			} else if !settle() {
				return
			}
		}
		if idle&0xfff != 0 {
			continue
		}
		if r.abort.Load() {
			r.err = errors.New("aborted")
			return
		}
		select {
		case <-ep.Done():
			r.err = fmt.Errorf("endpoint: %w", ep.Err())
			return
		default:
		}
		if wait.oneP && idle >= 1<<16 {
			runtime.Gosched() // let the engine's goroutines run (see landWait.oneP)
		}
		if idle&clockSpins != 0 { // see spinCheck
			continue
		}
		now := time.Now()
		if next != lastRounds || lastCheck.IsZero() {
			lastRounds, lastCheck = next, now
		} else if now.Sub(lastCheck) > idleTimeout {
			r.err = fmt.Errorf("no ping-pong round from the client for %v (waiting for round %d)", idleTimeout, next)
			return
		}
	}
}

func (ss *session) endPingPong(m *ctlMsg) *ctlMsg {
	r := ss.resp
	if r == nil {
		return refusal("no ping-pong running")
	}
	select {
	case <-r.done:
	case <-time.After(pingTimeout):
		r.abort.Store(true)
		<-r.done
	}
	ss.resp = nil
	ferr := r.free()
	if r.err != nil {
		return refusal("ping-pong: %v", r.err)
	}
	if ferr != nil {
		return refusal("free the send buffer: %v", ferr)
	}
	rounds := r.rounds
	if rounds != m.Seq {
		return refusal("answered %d rounds, the client sent %d", rounds, m.Seq)
	}
	if err := checkPattern(r.recv.Bytes(), r.seed, span{r.seqOff, 8}, "peer receive buffer"); err != nil {
		return refusal("%v", err)
	}
	return &ctlMsg{Rounds: rounds}
}
