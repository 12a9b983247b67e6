package hlsim

import (
	"encoding/binary"
	"errors"
	"sync"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// bounceSize is the staging buffer of an engine (host-to-host copies,
// overlapping copies, memset patterns).
const bounceSize = 1 << 20

var errAborted = errors.New("CS aborted")

// engine executes the jobs of one queue in order, on its own goroutine.
type engine struct {
	c    *hctx
	q    int
	bell bell // rung by push

	mu      sync.Mutex
	jobs    []*job
	head    int
	running bool

	bounce []byte // bounceSize+8, allocated on first use
	cbBuf  []byte // Gaudi2 CB fetched through the MMU
	segsA  []seg
	segsB  []seg
}

func newEngine(c *hctx, q int) *engine {
	return &engine{c: c, q: q, bell: newBell()}
}

// push queues j and wakes the engine; it reports whether the engine was
// parked (see csIoctl).
func (e *engine) push(j *job) bool {
	e.mu.Lock()
	e.jobs = append(e.jobs, j)
	e.mu.Unlock()
	return e.bell.ring()
}

func (e *engine) busy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running || e.head < len(e.jobs)
}

// pop returns the next job, blocking while the queue is empty; nil when
// the context is being torn down.
func (e *engine) pop() *job {
	for {
		e.mu.Lock()
		if e.head < len(e.jobs) {
			j := e.jobs[e.head]
			e.jobs[e.head] = nil
			e.head++
			if e.head == len(e.jobs) {
				e.jobs, e.head = e.jobs[:0], 0
			}
			e.running = true
			e.mu.Unlock()
			return j
		}
		e.running = false
		e.mu.Unlock()
		if e.spin() {
			continue
		}
		if !e.bell.park() {
			continue
		}
		e.c.d.st.parks.Add(1)
		select {
		case <-e.bell.ch:
		case <-e.c.quit:
			e.bell.unpark()
			return nil
		}
		e.bell.unpark()
	}
}

// spin polls the queue for up to Config.EngineSpin, as a queue manager
// does, and reports whether a job arrived (false: park).
func (e *engine) spin() bool { return e.bell.spin(e.c.quit, e.c.d.cfg.EngineSpin) }

func (e *engine) run() {
	defer e.c.engWG.Done()
	for {
		j := e.pop()
		if j == nil {
			return
		}
		e.execJob(j)
	}
}

func (e *engine) execJob(j *job) {
	c := e.c
	if j.cs.aborting.Load() {
		c.jobDone(j, false)
		return
	}
	start := c.d.dmaBegin()
	err := e.runCB(j)
	c.d.dmaEnd(start)
	if err != nil && err != errAborted {
		e.fault(j, err)
	}
	c.jobDone(j, err != nil && err != errAborted)
}

// fault reports a job that failed in the engine: the CS ends ABORTED and
// the context sees the matching notifier event.
func (e *engine) fault(j *job, err error) {
	c := e.c
	c.d.st.faults.Add(1)
	var bits uint64
	var pe *packetError
	if errors.As(err, &pe) {
		bits = hlsys.NotifierUndefinedOpcode
	} else {
		bits = hlsys.NotifierGeneralHWErr
		if c.d.newInfo {
			bits |= notifierPageFault
		}
	}
	c.log.Warn().Err(err).Int("queue", e.q).Uint64("seq", j.cs.seq).Msg("engine fault: CS fails")
	c.notify(bits)
}

// runCB fetches the job's CB and executes its packets in order.
func (e *engine) runCB(j *job) error {
	c := e.c
	cb := j.cb
	if cb == nil {
		// Gaudi2: the QMAN fetches the CB through the MMU now.
		if cap(e.cbBuf) < int(j.size) {
			e.cbBuf = make([]byte, j.size)
		}
		cb = e.cbBuf[:j.size]
		c.memMu.RLock()
		segs, err := c.translate(e.segsA[:0], j.va, uint64(j.size))
		e.segsA = segs[:0]
		if err == nil {
			err = gatherAt(segs, 0, cb)
		}
		c.memMu.RUnlock()
		if err != nil {
			return err
		}
	}
	gaudi2 := c.d.amap.gaudi2
	for off := 0; off < len(cb); {
		if j.cs.aborting.Load() {
			return errAborted
		}
		if len(cb)-off < 8 {
			return &packetError{off: off, msg: "truncated packet"}
		}
		ctl := binary.LittleEndian.Uint32(cb[off+4:])
		op := packetOpcode(ctl)
		switch op {
		case opNOP:
			off += 8
		case opLinDMA:
			if len(cb)-off < hlsys.LinDMAPacketSize {
				return &packetError{off: off, op: op, msg: "truncated LIN_DMA"}
			}
			if err := e.linDMA(cb[off:off+hlsys.LinDMAPacketSize], off); err != nil {
				return err
			}
			off += hlsys.LinDMAPacketSize
		default:
			known := gaudi2Known[op]
			if !gaudi2 {
				known = gaudi1PacketSizes[op] != 0
			}
			if known {
				return &packetError{off: off, op: op, msg: "only LIN_DMA and NOP are executed", notEmulated: true}
			}
			return &packetError{off: off, op: op, msg: "undefined opcode"}
		}
		c.d.st.packets.Add(1)
	}
	return nil
}

// linDMA executes one LIN_DMA packet: a copy with memmove semantics, or a
// memset with the 64-bit value in src_addr.
func (e *engine) linDMA(p []byte, off int) error {
	c := e.c
	tsize := uint64(binary.LittleEndian.Uint32(p[0:]))
	ctl := binary.LittleEndian.Uint32(p[4:])
	src := binary.LittleEndian.Uint64(p[8:])
	dst := binary.LittleEndian.Uint64(p[16:])
	if c.d.amap.gaudi2 {
		if ctl&g2LinDMAEndian != 0 {
			return &packetError{off: off, op: opLinDMA, msg: "endian swap", notEmulated: true}
		}
	} else {
		if ctl&g1LinDMAUnmodeled != 0 {
			return &packetError{off: off, op: opLinDMA, msg: "transpose/dtype/compression", notEmulated: true}
		}
		if ctl&hlsys.LinDMALin == 0 {
			// The parser lets it through; what the DMA engine does with a
			// non-linear descriptor is not in the driver source.
			return &packetError{off: off, op: opLinDMA, msg: "lin=0 (non-linear transfer)", notEmulated: true}
		}
		dst &= hlsys.Gaudi1DstAddrMask
	}
	if tsize == 0 {
		return nil
	}
	c.memMu.RLock()
	defer c.memMu.RUnlock()
	dsts, err := c.translate(e.segsA[:0], dst, tsize)
	e.segsA = dsts[:0]
	if err != nil {
		return err
	}
	if ctl&hlsys.LinDMAMemSet != 0 {
		err = e.memset(dsts, src, tsize)
	} else {
		var srcs []seg
		srcs, err = c.translate(e.segsB[:0], src, tsize)
		e.segsB = srcs[:0]
		if err != nil {
			return err
		}
		err = e.copy(dsts, srcs, tsize)
	}
	if err == nil {
		c.d.st.bytes.Add(tsize)
	}
	return err
}

func (e *engine) buf() []byte {
	if e.bounce == nil {
		e.bounce = make([]byte, bounceSize+8)
	}
	return e.bounce
}

// copy moves n bytes from the src pieces to the dst pieces. When the two
// ranges share memory it stages through the bounce buffer in the
// direction that gives memmove semantics.
func (e *engine) copy(dst, src []seg, n uint64) error {
	if overlap(dst, src) {
		return e.staged(dst, src, n)
	}
	var i, j int
	var di, si uint64
	for n > 0 {
		d, s := &dst[i], &src[j]
		k := min(d.n-di, s.n-si)
		var err error
		switch {
		case d.mem != nil && s.mem != nil:
			copy(d.mem[di:di+k], s.mem[si:si+k])
		case d.mem != nil:
			if readHost(d.mem[di:di+k], s.host+si) != nil {
				err = &hostFault{s.host + si}
			}
		case s.mem != nil:
			if writeHost(d.host+di, s.mem[si:si+k]) != nil {
				err = &hostFault{d.host + di}
			}
		default:
			err = e.hostToHost(d.host+di, s.host+si, k)
		}
		if err != nil {
			return err
		}
		di, si, n = di+k, si+k, n-k
		if di == d.n {
			i, di = i+1, 0
		}
		if si == s.n {
			j, si = j+1, 0
		}
	}
	return nil
}

func (e *engine) hostToHost(dst, src, n uint64) error {
	b := e.buf()[:bounceSize]
	for n > 0 {
		k := min(n, bounceSize)
		if readHost(b[:k], src) != nil {
			return &hostFault{src}
		}
		if writeHost(dst, b[:k]) != nil {
			return &hostFault{dst}
		}
		dst, src, n = dst+k, src+k, n-k
	}
	return nil
}

// staged copies overlapping ranges chunk by chunk through the bounce
// buffer: backwards when the destination lies above the source.
func (e *engine) staged(dst, src []seg, n uint64) error {
	b := e.buf()[:bounceSize]
	if segAddr(dst[0]) > segAddr(src[0]) {
		for end := n; end > 0; {
			k := min(end, bounceSize)
			off := end - k
			if err := gatherAt(src, off, b[:k]); err != nil {
				return err
			}
			if err := scatterAt(dst, off, b[:k]); err != nil {
				return err
			}
			end = off
		}
		return nil
	}
	for off := uint64(0); off < n; {
		k := min(n-off, bounceSize)
		if err := gatherAt(src, off, b[:k]); err != nil {
			return err
		}
		if err := scatterAt(dst, off, b[:k]); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// memset fills the dst pieces with the little-endian 64-bit value,
// repeated from the first byte of the transfer.
func (e *engine) memset(dst []seg, value, n uint64) error {
	b := e.buf()
	fill := min(n, bounceSize) + 8
	for i := uint64(0); i+8 <= fill; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], value)
	}
	var t uint64 // offset in the transfer, for the pattern phase
	for _, d := range dst {
		for done := uint64(0); done < d.n; {
			k := min(d.n-done, bounceSize)
			ph := t % 8
			pat := b[ph : ph+k]
			if d.mem != nil {
				copy(d.mem[done:done+k], pat)
			} else if writeHost(d.host+done, pat) != nil {
				return &hostFault{d.host + done}
			}
			done += k
			t += k
		}
	}
	return nil
}

// gatherAt reads len(buf) bytes at offset off of the pieces.
func gatherAt(segs []seg, off uint64, buf []byte) error {
	for _, s := range segs {
		if len(buf) == 0 {
			return nil
		}
		if off >= s.n {
			off -= s.n
			continue
		}
		k := min(s.n-off, uint64(len(buf)))
		if s.mem != nil {
			copy(buf[:k], s.mem[off:off+k])
		} else if readHost(buf[:k], s.host+off) != nil {
			return &hostFault{s.host + off}
		}
		buf, off = buf[k:], 0
	}
	return nil
}

// scatterAt writes buf at offset off of the pieces.
func scatterAt(segs []seg, off uint64, buf []byte) error {
	for _, s := range segs {
		if len(buf) == 0 {
			return nil
		}
		if off >= s.n {
			off -= s.n
			continue
		}
		k := min(s.n-off, uint64(len(buf)))
		if s.mem != nil {
			copy(s.mem[off:off+k], buf[:k])
		} else if writeHost(s.host+off, buf[:k]) != nil {
			return &hostFault{s.host + off}
		}
		buf, off = buf[k:], 0
	}
	return nil
}

// segAddr is the process address of a piece.
func segAddr(s seg) uint64 {
	if s.mem != nil {
		return uint64(sliceAddr(s.mem))
	}
	return s.host
}

// overlap reports whether any dst piece shares process memory with any src
// piece (conservatively true for very fragmented ranges).
func overlap(dst, src []seg) bool {
	if len(dst)*len(src) > 1024 {
		return true
	}
	for _, d := range dst {
		da := segAddr(d)
		for _, s := range src {
			sa := segAddr(s)
			if da < sa+s.n && sa < da+d.n {
				return true
			}
		}
	}
	return false
}
