package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/engine"
)

// The peer tests over the ipc, tcp and rdma transports: this process (the
// client) moves data to and from the buffers of a perf server (Serve)
// through an engine Endpoint, and the two agree on buffers over the
// control channel (Peer, in peer.go). This file holds the workloads: Puts
// or Gets between two buffers (rmaWork) and the put_lat ping-pong, whose
// polling for landed bytes is in landwait.go.

func init() {
	for _, t := range []Test{
		{Name: "put_lat", Peer: PeerDst, Latency: true,
			Desc: "ping-pong: Put into the peer's buffer, the peer polls its memory and Puts back; latency = round trip / 2, like ucx_perftest put_lat (with Gaudi memory at either end: the Put's completion round trip)"},
		{Name: "put_bw", Peer: PeerDst,
			Desc: "Puts into the peer's buffer, -O outstanding, the same buffers every iteration (like ucx_perftest put_bw)"},
		{Name: "get_lat", Peer: PeerSrc, Latency: true,
			Desc: "Get round trip: one Get from the peer's buffer at a time, submit to completion"},
		{Name: "get_bw", Peer: PeerSrc,
			Desc: "Gets from the peer's buffer, -O outstanding, the same buffers every iteration"},
	} {
		t.Transport, t.AlsoOver, t.Src, t.Dst = "ipc", []string{"tcp", "rdma"}, Host, Host
		t.Prepare = prepareIPC(t.Name, t.Peer == PeerDst)
		if t.Name == "put_lat" {
			t.checkSize = checkPingPongSize
		}
		Register(t)
	}
}

// seedFor derives a pattern seed from the test and size, so that a
// stale buffer of another test or size cannot pass verification.
func seedFor(name string, size int, salt byte) byte {
	s := byte(size*7) ^ salt
	for _, c := range []byte(name) {
		s = s*31 + c
	}
	return s
}

func prepareIPC(name string, put bool) func(ctx context.Context, env *Env, size int) (Workload, error) {
	return func(ctx context.Context, env *Env, size int) (Workload, error) {
		if env.Peer == nil {
			return nil, errors.New("no peer")
		}
		if name == "put_lat" && env.local() == Host && env.remote() == Host {
			return newPingPong(ctx, env, size)
		}
		return newRMA(ctx, env, size, put, seedFor(name, size, 0x5a))
	}
}

// rmaWork runs Puts or Gets between one local buffer and one buffer of
// the peer, both allocated once per size and reused by every iteration.
type rmaWork struct {
	p     *Peer
	eng   *engine.Engine
	put   bool
	seed  byte
	local *engine.Buffer
	ls    engine.Slice
	rid   uint64 // the server's buffer
	rk    engine.RemoteKey
	rlive bool
	bind  *engine.Binding // host to host: checked and imported once
	// held: bind held for Stream over ipc, where each put is one call
	// (see Stream); nil until the first Stream, and after Verify.
	held *engine.Held
}

// resolvedOK is returned for operations that completed in the caller.
var resolvedOK = engine.ResolvedFuture(nil)

// bind returns a Binding for host-to-host transfers, nil otherwise (Gaudi
// memory on either side, or an endpoint that cannot bind, goes through
// Put/Get).
func bind(ctx context.Context, ep *engine.Endpoint, local engine.Slice, rk engine.RemoteKey) (*engine.Binding, error) {
	if local.Buffer().Location().IsGaudi() || rk.Location().IsGaudi() {
		return nil, nil
	}
	b, err := ep.Bind(ctx, local, rk)
	if errors.Is(err, engine.ErrNotSupported) {
		return nil, nil
	}
	return b, err
}

func newRMA(ctx context.Context, env *Env, size int, put bool, seed byte) (_ Workload, err error) {
	w := &rmaWork{p: env.Peer, eng: env.Engine, put: put, seed: seed}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	if w.local, err = w.eng.Alloc(size, location(env.local(), env)); err != nil {
		return nil, fmt.Errorf("allocate %s local buffer: %w", FormatSize(size), err)
	}
	w.ls = w.local.All()
	// The source holds the pattern, the destination its complement.
	if err := fillBuffer(ctx, w.eng, w.local, seed, !put); err != nil {
		return nil, fmt.Errorf("fill local buffer: %w", err)
	}
	if w.rid, w.rk, err = w.p.alloc(ctx, env.remote(), size, seed, put); err != nil {
		return nil, err
	}
	w.rlive = true
	if err := w.p.preImport(ctx, w.rk); err != nil {
		return nil, err
	}
	if w.bind, err = bind(ctx, w.p.ep, w.ls, w.rk); err != nil {
		return nil, err
	}
	return w, nil
}

// Submit implements Workload.
func (w *rmaWork) Submit(ctx context.Context, n int) *engine.Future {
	if n != 1 {
		return engine.ResolvedFuture(fmt.Errorf("%w: batches of peer operations", engine.ErrNotSupported))
	}
	if w.bind != nil {
		var err error
		if w.put {
			err = w.bind.Put()
		} else {
			err = w.bind.Get()
		}
		if err != nil {
			return engine.ResolvedFuture(err)
		}
		return resolvedOK
	}
	if w.put {
		return w.p.ep.Put(ctx, w.ls, w.rk)
	}
	return w.p.ep.Get(ctx, w.ls, w.rk)
}

// CanStream implements streamer: host-to-host operations run through a
// Binding, in the caller.
func (w *rmaWork) CanStream() bool { return w.bind != nil }

// Stream implements streamer: n Puts (or Gets) back to back through the
// binding, each a copy of the whole message into (out of) the peer's
// memory. Over ipc each put is one Put call of the held binding, which
// returns with the bytes in the peer's memory (complete, and visible to
// the peer: coherent shared memory), as each of ucx_perftest's put_bw
// puts is one uct_ep_put_bcopy call into the peer's segment; over rdma
// PutN posts the writes, up to 128 in flight, and Flush completes them.
func (w *rmaWork) Stream(ctx context.Context, n int) error {
	if w.p.ep.Transport() != engine.TransportIPC {
		if w.put {
			return w.bind.PutN(n)
		}
		return w.bind.GetN(n)
	}
	if w.held == nil {
		h, err := w.bind.Hold()
		if err != nil {
			return err
		}
		w.held = h
	}
	if w.put {
		for range n {
			if err := w.held.Put(); err != nil {
				return err
			}
		}
		return nil
	}
	for range n {
		if err := w.held.Get(); err != nil {
			return err
		}
	}
	return nil
}

// StreamChunk implements chunker: over rdma a Stream call is one PutN
// (GetN) of at least the binding's window of writes (reads), as
// ib_write_bw posts and polls in one loop. A PutN returns with up to the
// window in flight, whose completions then pass to the CQ's goroutine
// until the next call polls them itself; with 4 calls per window at
// 64 KiB (streamChunk's then), Soft-RoCE's put_bw read 0.88-0.92x
// ib_write_bw, with the window per call 0.95-1.03x (docs/rdma-rows.md).
func (w *rmaWork) StreamChunk(size int) int {
	return rmaStreamChunk(w.p.ep.Transport(), size)
}

// rdmaBindWindow is the writes or reads an RDMA binding keeps in flight
// in PutN and GetN (engine.Binding.PutN).
const rdmaBindWindow = 128

// rmaStreamChunk is rmaWork.StreamChunk for an endpoint of transport tr.
func rmaStreamChunk(tr engine.TransportKind, size int) int {
	if tr == engine.TransportRDMA {
		return max(streamChunk(size), rdmaBindWindow)
	}
	return streamChunk(size)
}

// OpMeaning implements opDescriber.
func (w *rmaWork) OpMeaning(streamed bool) string {
	verb, into := "put", "into the peer's mapped memory"
	if !w.put {
		verb, into = "get", "out of the peer's mapped memory"
	}
	switch {
	case streamed && w.p.ep.Transport() == engine.TransportIPC:
		return fmt.Sprintf("one %s = one %s call of a held Binding: checks that the peer's buffer is still exported, copies the message %s and returns with it in place (complete; visible to the peer's loads, coherent shared memory, no completion step); the run ends with Flush", verb, cases(verb), into)
	case streamed:
		return fmt.Sprintf("one %s = one RDMA %s posted by Binding.%sN (up to 128 in flight), complete once Flush returns, which ends the run", verb, map[bool]string{true: "write", false: "read"}[w.put], cases(verb))
	case w.bind != nil:
		return fmt.Sprintf("one %s = one Binding.%s call, returning once it has completed", verb, cases(verb))
	}
	return fmt.Sprintf("one %s = one Endpoint.%s, from its submission to its future's completion", verb, cases(verb))
}

// cases capitalises an operation's name ("put" -> "Put").
func cases(op string) string { return strings.ToUpper(op[:1]) + op[1:] }

// Flush implements flusher: the binding's operations still in flight
// (RDMA) are done on return.
func (w *rmaWork) Flush() error { return w.bind.Flush() }

// release ends the hold on the binding (the engine's Close waits for it).
func (w *rmaWork) release() {
	if w.held != nil {
		w.held.Release()
		w.held = nil
	}
}

// Verify implements Workload: the destination, here or at the peer, holds
// the source's pattern.
func (w *rmaWork) Verify(ctx context.Context) error {
	w.release()
	if w.put {
		return w.p.verify(ctx, w.rid, w.seed)
	}
	return checkBuffer(ctx, w.eng, w.local, w.seed, span{}, "local destination")
}

// Close implements Workload.
func (w *rmaWork) Close() error {
	var errs []error
	w.release()
	if w.bind != nil {
		errs = append(errs, w.bind.Close())
	}
	if w.local != nil {
		errs = append(errs, w.local.Free())
	}
	if w.rlive {
		ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
		errs = append(errs, w.p.free(ctx, w.rid))
		cancel()
	}
	return errors.Join(errs...)
}

// stopSeq is the sequence number that ends the server's ping-pong
// responder.
const stopSeq = ^uint64(0)

// pingTimeout bounds one ping-pong round: a peer that does not answer
// within it has failed.
var pingTimeout = 10 * time.Second

// clockSpins: a polling loop reads the clock once every clockSpins+1
// spins (see spinCheck).
const clockSpins = 0xffff

// pingPong is put_lat between host buffers, like ucx_perftest's: the
// client Puts its send buffer into the server's receive buffer; the last
// aligned 8 bytes carry the round's sequence number. The server polls its
// receive buffer, and on the expected number Puts its send buffer (same
// sequence) into the client's receive buffer, which the client polls.
// Both sides spin on atomic loads: no wakeup is involved.
type pingPong struct {
	p      *Peer
	eng    *engine.Engine
	ep     *engine.Endpoint
	size   int
	seqOff int

	send, recv   *engine.Buffer // this side's
	sendS        engine.Slice
	sendSeq      *uint64
	recvSeq      *uint64
	rid          uint64 // the server's receive buffer
	rk           engine.RemoteKey
	rlive        bool
	running      bool // the server's responder is running
	seq          uint64
	seedC, seedS byte            // patterns of the client's and the server's send buffers
	bind         *engine.Binding // host to host: checked and imported once
	held         *engine.Held    // bind, held by the rounds' goroutine (see RoundTrip)
	f            *engine.Future  // without a binding: the Put of the round Send started
	wait         *landWait
}

// checkPingPongSize: put_lat between host buffers (the ping-pong) carries
// its sequence number in the message's last aligned 8 bytes.
func checkPingPongSize(env *Env, size int) error {
	if env.local() == Host && env.remote() == Host && size < 8 {
		return fmt.Errorf("put_lat needs messages of at least 8 bytes (they carry the ping-pong sequence number), got %d", size)
	}
	return nil
}

func newPingPong(ctx context.Context, env *Env, size int) (_ Workload, err error) {
	if err := checkPingPongSize(env, size); err != nil {
		return nil, err
	}
	w := &pingPong{p: env.Peer, eng: env.Engine, ep: env.Peer.ep, size: size, seqOff: (size - 8) &^ 7,
		seedC: seedFor("put_lat", size, 0x11), seedS: seedFor("put_lat", size, 0x22), wait: newLandWait(env.Peer.eng, env.Peer.ep)}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	if w.send, err = w.eng.Alloc(size, engine.Host); err != nil {
		return nil, fmt.Errorf("allocate %s send buffer: %w", FormatSize(size), err)
	}
	if w.recv, err = w.eng.Alloc(size, engine.Host); err != nil {
		return nil, fmt.Errorf("allocate %s receive buffer: %w", FormatSize(size), err)
	}
	fillPattern(w.send.Bytes(), w.seedC, false)
	fillPattern(w.recv.Bytes(), w.seedS, true)
	w.sendS = w.send.All()
	w.sendSeq = (*uint64)(unsafe.Pointer(&w.send.Bytes()[w.seqOff]))
	w.recvSeq = (*uint64)(unsafe.Pointer(&w.recv.Bytes()[w.seqOff]))
	atomic.StoreUint64(w.sendSeq, 0)
	atomic.StoreUint64(w.recvSeq, 0)
	if w.rid, w.rk, err = w.p.alloc(ctx, Host, size, w.seedC, true); err != nil {
		return nil, err
	}
	w.rlive = true
	if err := w.p.preImport(ctx, w.rk); err != nil {
		return nil, err
	}
	if w.bind, err = bind(ctx, w.ep, w.sendS, w.rk); err != nil {
		return nil, err
	}
	if w.bind != nil {
		if w.held, err = w.bind.Hold(); err != nil {
			return nil, err
		}
	}
	key, err := w.recv.Export()
	if err != nil {
		return nil, fmt.Errorf("export the receive buffer: %w", err)
	}
	if _, err := w.p.call(ctx, &ctlMsg{Op: opPingPong, Buf: w.rid, Key: key.Bytes(), Size: size, Seed: w.seedS,
		HasSeq: true, SeqOff: w.seqOff}, ctlTimeout); err != nil {
		return nil, err
	}
	w.running = true
	return w, nil
}

// OpMeaning implements opDescriber.
func (w *pingPong) OpMeaning(bool) string {
	if w.held != nil {
		return "one message = one Put call of a held Binding (the message copied into the peer's mapped memory), seen by the other side polling its memory; a round trip is two messages"
	}
	return "one message = one Endpoint.Put into the peer's buffer, seen by the other side polling its memory; a round trip is two messages"
}

// Submit implements Workload; the runner calls RoundTrip instead.
func (w *pingPong) Submit(ctx context.Context, n int) *engine.Future {
	if n != 1 {
		return engine.ResolvedFuture(fmt.Errorf("%w: batches of ping-pong rounds", engine.ErrNotSupported))
	}
	return engine.ResolvedFuture(w.RoundTrip(ctx))
}

// RoundTrip runs one ping-pong round: Put, then poll until the peer's
// answer lands in the receive buffer.
func (w *pingPong) RoundTrip(ctx context.Context) error {
	if err := w.Send(ctx); err != nil {
		return err
	}
	return w.Await(ctx)
}

// Send starts a round: its Put is issued (through a binding, done: the
// bytes are in the peer's memory).
func (w *pingPong) Send(ctx context.Context) error {
	w.seq++
	want := w.seq
	w.wait.round(want)
	// The send buffer is this goroutine's (the Put reads it here, or on a
	// worker after a queue handoff): a plain store, no locked instruction
	// on the critical path. Only the polled receive buffer needs atomics.
	*w.sendSeq = want
	if w.bind == nil {
		w.f = w.ep.Put(ctx, w.sendS, w.rk)
		return nil
	}
	// A Put into the peer's host memory through a binding is done on
	// return. The binding is held (its lock and the engine's close gate
	// taken once, not per round): over ipc the Put is then its checks
	// (loads) and the copy, with no atomic read-modify-write on the round
	// trip, as ucx_perftest's put_short is a memcpy into the peer's
	// segment.
	return w.held.Put()
}

// Await returns once the answer of the round Send started has landed.
func (w *pingPong) Await(ctx context.Context) error {
	if w.bind == nil {
		f := w.f
		w.f = nil
		return w.roundTripFuture(ctx, w.seq, f)
	}
	return w.poll(ctx, w.seq)
}

// poll spins until the answer of round want has landed. The load is
// atomic: a plain MOV on amd64 (TSO: the peer's stores are seen in the
// order it made them), LDAR (load-acquire) on arm64, where the polled
// word is not otherwise ordered with the bytes stored before it.
func (w *pingPong) poll(ctx context.Context, want uint64) error {
	var t0 time.Time
	for spins := 1; atomic.LoadUint64(w.recvSeq) != want; spins++ {
		spinPause()
		if spins&0xfff != 0 {
			continue
		}
		if err := w.check(ctx, &t0, spins, want); err != nil {
			return err
		}
	}
	return nil
}

// roundTripFuture is a round whose Put is a future (tcp; ipc without a
// binding): the round is over once the answer has landed in the receive
// buffer and the Put has completed (the send buffer is then ours again).
// The Put's completion is not waited for before polling: over tcp it
// comes back with the answer.
func (w *pingPong) roundTripFuture(ctx context.Context, want uint64, f *engine.Future) error {
	var t0 time.Time
	for spins := 1; ; spins++ {
		if atomic.LoadUint64(w.recvSeq) == want && f.IsDone() {
			return f.Err()
		}
		if f.IsDone() && f.Err() != nil {
			return f.Err()
		}
		w.wait.idle(spins)
		if spins&0xfff != 0 {
			continue
		}
		if err := w.check(ctx, &t0, spins, want); err != nil {
			if !f.IsDone() {
				<-f.Done() // the send buffer is in use until it is done
			}
			return err
		}
	}
}

// check runs every 4096 polls of a round: timeout, cancellation and the
// endpoint's failure end it.
func (w *pingPong) check(ctx context.Context, t0 *time.Time, spins int, want uint64) error {
	if err := spinCheck(t0, spins, w.wait.oneP); err != nil {
		return fmt.Errorf("ping-pong round %d: no answer from %s: %w", want, w.p, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-w.ep.Done():
		return fmt.Errorf("ping-pong round %d: %w", want, w.ep.Err())
	default:
	}
	return nil
}

// release ends the hold on the binding (the engine's Close waits for it).
func (w *pingPong) release() {
	if w.held != nil {
		w.held.Release()
	}
}

// stop ends the server's responder and returns its verdict on the bytes
// it received.
func (w *pingPong) stop(ctx context.Context) error {
	if !w.running {
		return nil
	}
	w.running = false
	w.release()
	*w.sendSeq = stopSeq
	perr := w.ep.PutSync(ctx, w.sendS, w.rk)
	r, err := w.p.call(ctx, &ctlMsg{Op: opPingPongEnd, Seq: w.seq}, ctlTimeout)
	if err := errors.Join(perr, err); err != nil {
		return err
	}
	if r.Rounds != w.seq {
		return fmt.Errorf("the peer answered %d ping-pong rounds, want %d", r.Rounds, w.seq)
	}
	return nil
}

// Verify implements Workload: the server checked the bytes it received;
// the client checks the answer it received last.
func (w *pingPong) Verify(ctx context.Context) error {
	if err := w.stop(ctx); err != nil {
		return err
	}
	if got := atomic.LoadUint64(w.recvSeq); got != w.seq {
		return fmt.Errorf("verification failed: the last answer carries sequence %d, want %d", got, w.seq)
	}
	return checkPattern(w.recv.Bytes(), w.seedS, span{w.seqOff, 8}, "local receive buffer")
}

// Close implements Workload.
func (w *pingPong) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	errs := []error{w.stop(ctx)}
	w.release()
	if w.bind != nil {
		errs = append(errs, w.bind.Close())
	}
	for _, b := range []*engine.Buffer{w.send, w.recv} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if w.rlive {
		errs = append(errs, w.p.free(ctx, w.rid))
	}
	return errors.Join(errs...)
}
