package rdma

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/verbs"
)

// OpKind is the kind of a work request.
type OpKind uint8

// Work request kinds.
const (
	OpWrite    OpKind = iota + 1 // RDMA write: Local -> Remote
	OpWriteImm                   // RDMA write with immediate data (consumes a receive at the peer)
	OpRead                       // RDMA read: Remote -> Local
	OpSend                       // send: Local -> the peer's posted receive
	OpSendImm                    // send with immediate data
	OpRecv                       // receive (PostRecv only)
)

func (k OpKind) String() string {
	switch k {
	case OpWrite:
		return "RDMA write"
	case OpWriteImm:
		return "RDMA write with immediate"
	case OpRead:
		return "RDMA read"
	case OpSend:
		return "send"
	case OpSendImm:
		return "send with immediate"
	case OpRecv:
		return "receive"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Seg is a local range of a registered MR.
type Seg struct {
	MR       *MR
	Off, Len uint64
}

// RemoteAddr is a peer address and the rkey of the peer MR holding it.
type RemoteAddr struct {
	Addr uint64
	RKey uint32
}

// WR is one send-queue work request.
type WR struct {
	Op     OpKind
	Local  []Seg      // gather list (write, send) or scatter list (read); copied at post
	Remote RemoteAddr // write, read
	Imm    uint32     // OpWriteImm, OpSendImm
	// Inline copies the (small) data into the work request at post time
	// (QPConfig.MaxInline bytes at most); the local memory is free at once.
	Inline    bool
	Fence     bool // wait for earlier RDMA reads to finish first
	Solicited bool
	Done      Completer // called once with the completion (nil: none)
}

// RecvWR is one receive work request: where an incoming send lands.
type RecvWR struct {
	Local []Seg
	Done  Completer
}

// QPConfig configures an RC queue pair. Zero fields take the defaults.
type QPConfig struct {
	SendCQ *CQ // required
	RecvCQ *CQ // default SendCQ

	MaxSend    int // send queue depth (default 128)
	MaxRecv    int // receive queue depth (default 128)
	MaxSendSGE int // default 4 (at most the device's)
	MaxRecvSGE int // default 4
	MaxInline  int // inline data bytes (default 0)

	Port     int    // default 1
	GIDIndex int    // source GID index (default 0)
	Access   Access // what the peer may do to this side's MRs (default AccessDefault)
	MTU      MTU    // path MTU cap (default the port's active MTU)

	Timeout     uint8 // local ACK timeout: 4.096us * 2^Timeout (default 14, ~67ms)
	RetryCount  uint8 // transport retries (default 7)
	RNRRetry    uint8 // receiver-not-ready retries (default 7: forever)
	MinRNRTimer uint8 // default 12 (0.64ms)
	MaxRDAtomic uint8 // outstanding RDMA reads each way (default min(16, device))
}

// QP is a reliable-connected queue pair. Post, PostRecv and Do are safe for
// concurrent use.
type QP struct {
	pd             *PD
	d              *Device
	v              *verbs.QP
	sendCQ, recvCQ *CQ
	cfg            QPConfig
	portMTU        MTU
	local          Endpoint

	mu      sync.Mutex // posting and state changes
	closing atomic.Bool
	remote  Endpoint
	// posting scratch (mu)
	sRecs []slotRec
	sIDs  []uint64
	sSGE  []verbs.SGE
	sWR   []verbs.SendWR
	rRecs []slotRec
	rIDs  []uint64
	rSGE  []verbs.SGE
	rWR   []verbs.RecvWR

	sendOut, recvOut, outstanding atomic.Int64
	drained                       chan struct{}
	drainOnce                     sync.Once

	closeMu sync.Mutex
	closed  bool // closeMu
}

// NewQP creates an RC queue pair, moved to INIT. Exchange Endpoint with the
// peer, then call Connect.
func (pd *PD) NewQP(cfg QPConfig) (*QP, error) {
	d := pd.d
	if cfg.SendCQ == nil {
		return nil, fmt.Errorf("%w: QPConfig.SendCQ is required", ErrInvalid)
	}
	if cfg.RecvCQ == nil {
		cfg.RecvCQ = cfg.SendCQ
	}
	if cfg.SendCQ.d != d || cfg.RecvCQ.d != d {
		return nil, fmt.Errorf("%w: CQ of another device", ErrInvalid)
	}
	if cfg.MaxSend <= 0 {
		cfg.MaxSend = 128
	}
	if cfg.MaxRecv <= 0 {
		cfg.MaxRecv = 128
	}
	devSGE := max(1, d.attr.MaxSGE)
	if cfg.MaxSendSGE <= 0 {
		cfg.MaxSendSGE = min(4, devSGE)
	}
	if cfg.MaxRecvSGE <= 0 {
		cfg.MaxRecvSGE = min(4, devSGE)
	}
	if cfg.Port == 0 {
		cfg.Port = 1
	}
	if cfg.Access == 0 {
		cfg.Access = AccessDefault
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 14
	}
	if cfg.RetryCount == 0 {
		cfg.RetryCount = 7
	}
	if cfg.RNRRetry == 0 {
		cfg.RNRRetry = 7
	}
	if cfg.MinRNRTimer == 0 {
		cfg.MinRNRTimer = 12
	}
	if cfg.MaxRDAtomic == 0 {
		cfg.MaxRDAtomic = 16
		if a := d.attr.MaxQPRdAtom; a > 0 && a < 16 {
			cfg.MaxRDAtomic = uint8(a)
		}
		if a := d.attr.MaxQPInitRdAtom; a > 0 && int(cfg.MaxRDAtomic) > a {
			cfg.MaxRDAtomic = uint8(min(a, 255))
		}
	}
	if cfg.MaxSend > cfg.SendCQ.cfg.Size || cfg.MaxRecv > cfg.RecvCQ.cfg.Size {
		return nil, fmt.Errorf("%w: queue depth %d/%d exceeds CQ size", ErrInvalid, cfg.MaxSend, cfg.MaxRecv)
	}
	pi, err := d.Port(cfg.Port)
	if err != nil {
		return nil, err
	}
	gid, err := d.GID(cfg.Port, cfg.GIDIndex)
	if err != nil {
		return nil, err
	}
	mtu := pi.ActiveMTU
	if cfg.MTU != 0 && cfg.MTU < mtu {
		mtu = cfg.MTU
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg.SendCQ.closed || cfg.RecvCQ.closed {
		return nil, ErrClosed
	}
	if err := pd.addChildLocked(); err != nil {
		return nil, err
	}
	v, err := pd.pd.CreateQP(verbs.QPInitAttr{
		SendCQ: cfg.SendCQ.v, RecvCQ: cfg.RecvCQ.v, Type: verbs.QPTypeRC,
		Cap: verbs.QPCap{
			MaxSendWR: uint32(cfg.MaxSend), MaxRecvWR: uint32(cfg.MaxRecv),
			MaxSendSGE: uint32(cfg.MaxSendSGE), MaxRecvSGE: uint32(cfg.MaxRecvSGE),
			MaxInlineData: uint32(cfg.MaxInline),
		},
	})
	if err != nil {
		pd.children--
		return nil, err
	}
	if err := v.Modify(&verbs.QPAttr{
		State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(cfg.Port), AccessFlags: cfg.Access,
	}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		_ = v.Close()
		pd.children--
		return nil, err
	}
	qp := &QP{
		pd: pd, d: d, v: v, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ, cfg: cfg, portMTU: mtu,
		drained: make(chan struct{}),
	}
	qp.local = Endpoint{QPN: v.QPN(), PSN: rand.Uint32() & psnMask, GID: gid, LID: pi.LID, MTU: mtu}
	cfg.SendCQ.qps++
	cfg.RecvCQ.qps++
	d.addLocked(qp)
	d.counts.QPs++
	return qp, nil
}

// QPN is the queue pair number.
func (qp *QP) QPN() uint32 { return qp.local.QPN }

// Endpoint is what the peer needs to connect to this QP.
func (qp *QP) Endpoint() Endpoint { return qp.local }

// Remote is the peer endpoint given to Connect (zero before).
func (qp *QP) Remote() Endpoint {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.remote
}

// Connect moves the QP to RTR and RTS towards the peer's endpoint. The path
// MTU is the smaller of both sides'.
func (qp *QP) Connect(remote Endpoint) error {
	if err := remote.Validate(); err != nil {
		return err
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closing.Load() {
		return ErrClosed
	}
	mtu := min(qp.portMTU, remote.MTU)
	rtr := verbs.QPAttr{
		State: verbs.QPSRTR, PathMTU: mtu, DestQPN: remote.QPN, RQPSN: remote.PSN,
		MaxDestRDAtomic: qp.cfg.MaxRDAtomic, MinRNRTimer: qp.cfg.MinRNRTimer,
		AH: verbs.AHAttr{
			IsGlobal: !remote.GID.IsZero(), DGID: remote.GID, SGIDIndex: uint8(qp.cfg.GIDIndex),
			HopLimit: 64, DLID: remote.LID, PortNum: uint8(qp.cfg.Port),
		},
	}
	if err := qp.v.Modify(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRDAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("rdma: QP %d to RTR: %w", qp.local.QPN, err)
	}
	rts := verbs.QPAttr{
		State: verbs.QPSRTS, Timeout: qp.cfg.Timeout, RetryCnt: qp.cfg.RetryCount, RNRRetry: qp.cfg.RNRRetry,
		SQPSN: qp.local.PSN, MaxRDAtomic: qp.cfg.MaxRDAtomic,
	}
	if err := qp.v.Modify(&rts, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRDAtomic); err != nil {
		return fmt.Errorf("rdma: QP %d to RTS: %w", qp.local.QPN, err)
	}
	qp.remote = remote
	return nil
}

// State queries the QP's state.
func (qp *QP) State() (QPState, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closing.Load() {
		return verbs.QPSUnknown, ErrClosed
	}
	a, err := qp.v.Query(verbs.QPAttrState)
	return a.State, err
}

// SetError moves the QP to the error state: its outstanding and future work
// requests complete with ErrFlushed (the peer's QP is not told).
func (qp *QP) SetError() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closing.Load() {
		return ErrClosed
	}
	return qp.v.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState)
}

// Outstanding is the number of work requests posted and not yet completed.
func (qp *QP) Outstanding() int { return int(qp.outstanding.Load()) }

func (qp *QP) checkSegs(segs []Seg, maxSGE int) (total uint64, err error) {
	if len(segs) > maxSGE {
		return 0, fmt.Errorf("%w: %d segments, QP takes %d", ErrInvalid, len(segs), maxSGE)
	}
	for _, s := range segs {
		if s.MR == nil {
			return 0, fmt.Errorf("%w: segment without MR", ErrInvalid)
		}
		if s.MR.pd != qp.pd {
			return 0, fmt.Errorf("%w: MR of another PD", ErrInvalid)
		}
		if s.Len > math.MaxUint32 || s.Off > s.MR.Len() || s.Len > s.MR.Len()-s.Off {
			return 0, fmt.Errorf("%w: segment [%d, +%d) outside the MR (%d bytes)", ErrInvalid, s.Off, s.Len, s.MR.Len())
		}
		total += s.Len
	}
	return total, nil
}

func (qp *QP) checkWR(w *WR) error {
	total, err := qp.checkSegs(w.Local, qp.cfg.MaxSendSGE)
	if err != nil {
		return err
	}
	switch w.Op {
	case OpWrite, OpWriteImm, OpSend, OpSendImm:
	case OpRead:
		if w.Inline {
			return fmt.Errorf("%w: inline RDMA read", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: op %v on the send queue", ErrInvalid, w.Op)
	}
	if w.Inline && total > uint64(qp.cfg.MaxInline) {
		return fmt.Errorf("%w: %d inline bytes, QP takes %d", ErrInvalid, total, qp.cfg.MaxInline)
	}
	return nil
}

var wrOpcode = [...]verbs.WROpcode{
	OpWrite: verbs.WRRDMAWrite, OpWriteImm: verbs.WRRDMAWriteWithImm, OpRead: verbs.WRRDMARead,
	OpSend: verbs.WRSend, OpSendImm: verbs.WRSendWithImm,
}

// Post posts wrs to the send queue as one chain (one cgo call). It returns
// how many were posted: on an error, wrs[n:] were not posted and their
// Completers will not be called. Validation errors (ErrInvalid) and a full
// queue (ErrQueueFull) post nothing.
func (qp *QP) Post(wrs []WR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	nsge := 0
	for i := range wrs {
		if err := qp.checkWR(&wrs[i]); err != nil {
			return 0, fmt.Errorf("rdma: WR %d: %w", i, err)
		}
		nsge += len(wrs[i].Local)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	recs := qp.sRecs[:0]
	for i := range wrs {
		recs = append(recs, slotRec{done: wrs[i].Done, qp: qp, op: wrs[i].Op})
	}
	ids := grow(qp.sIDs, len(wrs))
	err := qp.reserveSend(recs, ids)
	clear(recs)
	qp.sRecs = recs[:0]
	if err != nil {
		return 0, err
	}
	sges := grow(qp.sSGE, nsge)[:0]
	vw := qp.sWR[:0]
	for i := range wrs {
		var v verbs.SendWR
		v, sges = sendWR(&wrs[i], sges, ids[i])
		vw = append(vw, v)
	}
	qp.sIDs, qp.sSGE = ids, sges
	posted, err := qp.sendReserved(vw, ids)
	clear(vw) // drop SGE references
	qp.sWR = vw[:0]
	return posted, err
}

// reserveSend takes room in the send queue and CQ slots for the work
// requests recs describes, writing their wr_ids to ids: all or none (mu
// held). A closing QP is ErrClosed, no room ErrQueueFull.
func (qp *QP) reserveSend(recs []slotRec, ids []uint64) error {
	if qp.closing.Load() {
		return ErrClosed
	}
	if int(qp.sendOut.Load())+len(recs) > qp.cfg.MaxSend {
		return fmt.Errorf("%w: send queue (%d in flight, depth %d)", ErrQueueFull, qp.sendOut.Load(), qp.cfg.MaxSend)
	}
	if !qp.sendCQ.slots.alloc(recs, ids) {
		return fmt.Errorf("%w: CQ has %d work requests in flight", ErrQueueFull, qp.sendCQ.cfg.Size)
	}
	return nil
}

// sendReserved posts vw, whose wr_ids are ids from reserveSend, as one
// chain (mu held). It returns how many were posted; those not posted
// give their room and slots back.
func (qp *QP) sendReserved(vw []verbs.SendWR, ids []uint64) (int, error) {
	qp.sendBegin(len(vw))
	posted, err := qp.v.PostSend(vw)
	return qp.sendEnd(ids, posted, err)
}

// sendBegin counts n work requests about to be posted (mu held).
func (qp *QP) sendBegin(n int) {
	qp.sendOut.Add(int64(n))
	qp.outstanding.Add(int64(n))
}

// sendEnd ends the post sendBegin counted of the work requests with
// wr_ids ids, of which the first posted were: those not posted give their
// room and slots back (mu held).
func (qp *QP) sendEnd(ids []uint64, posted int, err error) (int, error) {
	n := len(ids)
	if err != nil {
		qp.unpost(qp.sendCQ, ids[posted:n], &qp.sendOut)
		if posted > 0 {
			qp.sendCQ.posted()
		}
		return posted, fmt.Errorf("rdma: post send on QP %d: %w", qp.local.QPN, err)
	}
	qp.sendCQ.posted()
	return n, nil
}

// sendWR is w as the verbs binding posts it, with wr_id id; its segments
// are appended to sges, which it returns.
func sendWR(w *WR, sges []verbs.SGE, id uint64) (verbs.SendWR, []verbs.SGE) {
	start := len(sges)
	for _, s := range w.Local {
		if s.Len > 0 { // some HCAs read a 0 byte count as 2 GiB
			sges = append(sges, verbs.SGE{Addr: s.MR.Addr() + s.Off, Length: uint32(s.Len), LKey: s.MR.LKey()})
		}
	}
	f := verbs.SendSignaled
	if w.Inline {
		f |= verbs.SendInline
	}
	if w.Fence {
		f |= verbs.SendFence
	}
	if w.Solicited {
		f |= verbs.SendSolicited
	}
	return verbs.SendWR{
		ID: id, Opcode: wrOpcode[w.Op], Flags: f, SGE: sges[start:len(sges):len(sges)],
		Imm: w.Imm, RemoteAddr: w.Remote.Addr, RKey: w.Remote.RKey,
	}, sges
}

// PostRecv posts receive buffers (one cgo call), like Post.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	nsge := 0
	for i := range wrs {
		if _, err := qp.checkSegs(wrs[i].Local, qp.cfg.MaxRecvSGE); err != nil {
			return 0, fmt.Errorf("rdma: receive WR %d: %w", i, err)
		}
		nsge += len(wrs[i].Local)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closing.Load() {
		return 0, ErrClosed
	}
	n := len(wrs)
	if int(qp.recvOut.Load())+n > qp.cfg.MaxRecv {
		return 0, fmt.Errorf("%w: receive queue (%d in flight, depth %d)", ErrQueueFull, qp.recvOut.Load(), qp.cfg.MaxRecv)
	}
	recs := qp.rRecs[:0]
	for i := range wrs {
		recs = append(recs, slotRec{done: wrs[i].Done, qp: qp, op: OpRecv})
	}
	ids := grow(qp.rIDs, n)
	if !qp.recvCQ.slots.alloc(recs, ids) {
		clear(recs)
		return 0, fmt.Errorf("%w: CQ has %d work requests in flight", ErrQueueFull, qp.recvCQ.cfg.Size)
	}
	clear(recs)
	qp.rRecs = recs[:0]
	sges := grow(qp.rSGE, nsge)[:0]
	vw := qp.rWR[:0]
	for i := range wrs {
		start := len(sges)
		for _, s := range wrs[i].Local {
			if s.Len > 0 {
				sges = append(sges, verbs.SGE{Addr: s.MR.Addr() + s.Off, Length: uint32(s.Len), LKey: s.MR.LKey()})
			}
		}
		vw = append(vw, verbs.RecvWR{ID: ids[i], SGE: sges[start:len(sges):len(sges)]})
	}
	qp.rIDs, qp.rSGE = ids, sges
	qp.recvOut.Add(int64(n))
	qp.outstanding.Add(int64(n))
	posted, err := qp.v.PostRecv(vw)
	clear(vw)
	qp.rWR = vw[:0]
	if err != nil {
		qp.unpost(qp.recvCQ, ids[posted:n], &qp.recvOut)
		if posted > 0 {
			qp.recvCQ.posted()
		}
		return posted, fmt.Errorf("rdma: post receive on QP %d: %w", qp.local.QPN, err)
	}
	qp.recvCQ.posted()
	return n, nil
}

func (qp *QP) unpost(cq *CQ, ids []uint64, out *atomic.Int64) {
	cq.slots.release(ids)
	out.Add(-int64(len(ids)))
	if qp.outstanding.Add(-int64(len(ids))) == 0 && qp.closing.Load() {
		qp.drainOnce.Do(func() { close(qp.drained) })
	}
}

// retire frees a completed work request's queue entry (before its
// Completer runs, so that the Completer can post again).
func (qp *QP) retire(op OpKind) {
	if op == OpRecv {
		qp.recvOut.Add(-1)
	} else {
		qp.sendOut.Add(-1)
	}
}

// finished counts a work request done once its Completer has run.
func (qp *QP) finished() {
	if qp.outstanding.Add(-1) == 0 && qp.closing.Load() {
		qp.drainOnce.Do(func() { close(qp.drained) })
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

type waiter struct{ ch chan Completion }

func (w *waiter) Complete(c Completion) { w.ch <- c }

var waiters = sync.Pool{New: func() any { return &waiter{ch: make(chan Completion, 1)} }}

func await(ctx context.Context, w *waiter, cq *CQ) (Completion, error) {
	if cq.cfg.Manual { // progress the CQ here until the completion arrives
		for {
			select {
			case c := <-w.ch:
				waiters.Put(w)
				return c, c.Err
			default:
			}
			if ctx.Err() != nil {
				return Completion{}, ctx.Err()
			}
			if cq.Progress() == 0 {
				runtime.Gosched()
			}
		}
	}
	select {
	case c := <-w.ch:
		waiters.Put(w)
		return c, c.Err
	case <-ctx.Done():
		// The work request still owns its buffers until it completes; the
		// waiter is dropped and its completion lands in its buffer.
		return Completion{}, ctx.Err()
	}
}

// Do posts one work request and waits for its completion (the synchronous
// twin of Post). If ctx ends first it returns ctx.Err(), but the work
// request is still in flight and still owns its memory.
func (qp *QP) Do(ctx context.Context, wr WR) (Completion, error) {
	w := waiters.Get().(*waiter)
	wr.Done = w
	if _, err := qp.Post([]WR{wr}); err != nil {
		waiters.Put(w)
		return Completion{}, err
	}
	return await(ctx, w, qp.sendCQ)
}

// DoRecv posts one receive and waits for a message to land in it.
func (qp *QP) DoRecv(ctx context.Context, wr RecvWR) (Completion, error) {
	w := waiters.Get().(*waiter)
	wr.Done = w
	if _, err := qp.PostRecv([]RecvWR{wr}); err != nil {
		waiters.Put(w)
		return Completion{}, err
	}
	return await(ctx, w, qp.recvCQ)
}

// FlushTimeout bounds how long QP.Close waits for flushed completions.
var FlushTimeout = 5 * time.Second

// Close moves the QP to the error state, waits (up to FlushTimeout) until
// every outstanding work request has completed (flushed, so every
// Completer runs), and destroys the QP. Completers still pending after the
// timeout are called with ErrClosed, once the QP is destroyed. Do not
// call Close from a Completer.
// A second Close returns nil.
func (qp *QP) Close() error { return qp.close() }

func (qp *QP) closeForDevice() error { return qp.close() }

func (qp *QP) close() error {
	qp.closeMu.Lock()
	defer qp.closeMu.Unlock()
	if qp.closed {
		return nil
	}
	qp.mu.Lock()
	qp.closing.Store(true) // no more posts
	qp.mu.Unlock()
	sweep := false
	if qp.outstanding.Load() > 0 {
		_ = qp.v.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState)
		if qp.sendCQ.cfg.Manual || qp.recvCQ.cfg.Manual {
			sweep = !qp.progressUntilDrained()
		} else {
			t := time.NewTimer(FlushTimeout)
			select {
			case <-qp.drained:
			case <-t.C:
				sweep = true
			}
			t.Stop()
		}
	}
	if err := qp.v.Close(); err != nil {
		return err
	}
	// The work requests not flushed in time end with ErrClosed only now
	// that the QP is destroyed: their memory is no longer reachable by
	// the NIC when their Completers hand it back.
	defer func() {
		if sweep {
			qp.sweep()
		}
	}()
	qp.closed = true
	d := qp.d
	d.mu.Lock()
	qp.sendCQ.qps--
	qp.recvCQ.qps--
	qp.pd.children--
	d.removeLocked(qp)
	d.counts.QPs--
	d.mu.Unlock()
	return nil
}

// progressUntilDrained drives Manual CQs until the QP's flushed work
// requests are delivered (true) or FlushTimeout passes (false).
func (qp *QP) progressUntilDrained() bool {
	deadline := time.Now().Add(FlushTimeout)
	for {
		select {
		case <-qp.drained:
			return true
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		n := qp.sendCQ.Progress()
		if qp.recvCQ != qp.sendCQ {
			n += qp.recvCQ.Progress()
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// sweep ends the QP's outstanding work requests with ErrClosed.
func (qp *QP) sweep() {
	recs := qp.sendCQ.slots.sweep(qp)
	if qp.recvCQ != qp.sendCQ {
		recs = append(recs, qp.recvCQ.slots.sweep(qp)...)
	}
	for _, r := range recs {
		qp.sendCQ.deliver(r, Completion{Op: r.op, Err: ErrClosed, QPN: qp.local.QPN})
	}
}
