package hlsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// The Gaudi3 model: Intel's out-of-tree driver gives user space no queue
// for copies (its only queue, 0, is the driver's CPU queue), so user space
// maps the CH_A register block of a user-owned PDMA channel
// (HL_MEM_OP_MAP_BLOCK + mmap), points the channel's submission ring at
// memory it mapped into the device MMU, writes LIN_PDMA packets there and
// stores the new byte count to MSQ_PI (docs/gaudi3.md). The model backs
// each mapped CH_A block with an emulated register file: a worker per
// channel notices MSQ_PI moving (by polling the register, or at once when
// the backend's Doorbell hint is called), executes the packets against the
// emulated HBM and host memory, advances the channel's completion counter
// in memory and raises its user interrupt, which WAIT_CS can sleep on.
//
// What the model assumes where docs/gaudi3.md leaves a question open
// (every one of these is unconfirmed; RULES.md G3 rows say so):
//   - each LIN_PDMA with advcnt_hbw_complq set adds 1 to the 64-bit counter
//     at ECMPLTN_Q_BASE, after its data and its completion write are done;
//     a packet with advcnt but without a completion write is refused (the
//     sources never show one);
//   - the channel runs its packets in ring order, one at a time;
//   - a packet that straddles the ring end, a ring size that is not a
//     power of two, and MSQ_PI moving backwards are channel errors;
//   - the interrupt message goes out only when ECMPLTN_Q_LBW_ADDR is die
//     0's MSI-X doorbell (CfgBarBase + MSIXOffset), its payload naming the
//     user interrupt;
//   - writing a DESC_SUBMIT_FIFO_CFG mode other than MSQ stops the channel
//     and resets MSQ_PI and MSQ_CI (HLT3 gaudi3_pdma_reset_pqm_ch says the
//     write resets PI, CI, base and size);
//   - a device reset clears every CH_A register of the context;
//   - a channel error (bad packet, MMU fault) makes the driver reset the
//     device: direct mode has no per-submission status, and what the
//     driver does on a user PDMA channel's error is not in the note.
//
// A "submission" for Stats and fault injection is one doorbell: the bytes
// between two MSQ_PI values the worker takes in one go (one Doorbell call
// each when the user calls the hint, its faults drawn then; what one poll
// sees otherwise). A delayed completion does not stop the channel: later
// doorbells run, and their completions are signalled after it, in order.

// Gaudi3 emulated layout and limits.
const (
	// g3DRAMBase is the Gaudi3 driver's dram_base_address (DRAM_PHYS_BASE,
	// gaudi3_set_fixed_properties); the model hands out DRAM VAs from it.
	g3DRAMBase = 0x0201_0000_0000_0000
	// g3PMMUBase is VA_HOST_SPACE_PAGE_START (gaudi3P.h); the model puts
	// its 2 MiB host pages at the same VA with bit 55 set.
	g3PMMUBase     = 0xFF70_0000_0000_0000
	g3PMMUHugeBase = g3PMMUBase | 1<<55
	g3PMMUSpan     = 1 << 47

	// The user interrupt range hw_ip_info reports. GAUDI3_NUM_USER_INTERRUPTS
	// is 256 (gaudi3P.h); GAUDI3_IRQ_NUM_USER_FIRST was not read, so the
	// first id is the emulator's choice.
	g3FirstUserInterrupt = 64
	g3UserInterrupts     = 256
	g3AnyCQInterrupt     = hlsys.WaitCSFlagsAnyCQInterrupt >> hlsys.WaitCSFlagsInterruptShift
	// g3AnyDecInterrupt is HL_COMMON_DEC_INTERRUPT_ID: a wait on any
	// decoder interrupt, which nothing in the model raises.
	g3AnyDecInterrupt = hlsys.WaitCSFlagsAnyDecInterrupt >> hlsys.WaitCSFlagsInterruptShift

	// g3QueueSize is GAUDI3_QUEUE_ID_SIZE: one queue, the driver's
	// GAUDI3_QUEUE_ID_CPU_PQ (0).
	g3QueueSize = 1

	// g3IdlePoll is how often a channel worker looks at MSQ_PI when
	// nobody calls the Doorbell hint, after work; each look that finds
	// none doubles the interval, up to g3IdlePollMax (an idle channel
	// then wakes a few times a second: the model burns no core).
	g3IdlePoll    = 2 * time.Millisecond
	g3IdlePollMax = 128 * time.Millisecond
)

// G3UserChannelMask is the pdma_user_owned_ch_mask the model reports:
// every channel but the KDMA one (gaudi3_init_pdma).
const G3UserChannelMask = (1<<gaudi3.PDMAChannels - 1) &^ (1 << gaudi3.KDMAChannel)

// g3chan is one PDMA channel's CH_A block as a context sees it.
type g3chan struct {
	c    *hctx
	ch   int
	regs []byte // the emulated register file: 4 KiB (the device's registers)
	// views are the user's mmaps of the block (memMu): each a mapping of
	// its own of regs' shared page (mmapBlock), as each mmap of the
	// block is a vma of its own in the driver.
	views [][]byte
	// viewAddrs holds the views' first bytes, for Doorbell, which takes
	// no memMu (replaced, never changed, under memMu).
	viewAddrs atomic.Pointer[[]*byte]
	bell      bell // rung by Doorbell
	// gen counts the drops of the queue's work (a stop, a reset: advanced
	// under bmu), for a doorbell to see one that came after it looked
	// at the queue (see mark).
	gen atomic.Uint64
	// markHook, when set (tests), runs in Doorbell before it takes bmu.
	markHook func()

	// bmu guards the doorbells announced and how far the worker took
	// work, which Doorbell reads: it is never held while packets run, so
	// a doorbell does not wait for the channel's running work, as a
	// register store does not. A worker holding mu takes bmu inside it.
	bmu     sync.Mutex
	marks   []g3mark // doorbells announced through Doorbell, in order
	taken   uint32   // MSQ_PI up to which the worker took work
	tactive bool     // active, as bmu sees it (else taken is MSQ_CI's)
	// released: the context let go of the register file (g3Release),
	// which may be unmapped from then on; a Doorbell that found the
	// channel before reads no register after it (set under bmu).
	released bool

	mu      sync.Mutex // guards what follows; held while a doorbell runs
	active  bool       // MSQ mode programmed and seen
	ci      uint32     // bytes consumed
	pend    []g3done   // executed doorbells whose completion is not yet signalled
	stalled bool       // HangNextCS: the channel is stuck at a doorbell
	halted  bool       // stalled by a channel error, its submission already counted aborted
	pkt     []byte
	segs    []seg
	// dma moves a packet's bytes (engine.copy, memset) with its bounce
	// buffer and translation scratch, kept from packet to packet.
	dma *engine
}

func (g *g3chan) reg(off int) *uint32 { return (*uint32)(unsafe.Pointer(&g.regs[off])) }
func (g *g3chan) load(off int) uint32 { return atomic.LoadUint32(g.reg(off)) }
func (g *g3chan) store(off int, v uint32) {
	atomic.StoreUint32(g.reg(off), v)
}

// g3mark is a doorbell: the MSQ_PI it announced and its injected faults.
type g3mark struct {
	pi          uint32
	hang, abort bool
	delay       time.Duration
}

// g3done is a doorbell executed, its completion due at at.
type g3done struct {
	incs uint64
	at   time.Time
}

// g3BlockChannel returns the channel whose CH_A block starts exactly at
// addr, if it is user-owned (gaudi3_get_hw_block_id, as the first reading
// describes it: the exact block start, user-owned CH_A only).
func g3BlockChannel(addr uint64) (int, bool) {
	for ch := 0; ch < gaudi3.PDMAChannels; ch++ {
		a, err := gaudi3.ChAMapAddr(ch)
		if err == nil && a == addr {
			return ch, G3UserChannelMask&(1<<ch) != 0
		}
	}
	return 0, false
}

// mapBlock serves HL_MEM_OP_MAP_BLOCK (memMu held): on Gaudi3 the CH_A
// block of a user-owned PDMA channel, given by its exact absolute address;
// the handle is (block id | HL_MMAP_TYPE_BLOCK) << PAGE_SHIFT as map_block
// builds it, the size the block's 4 KiB.
func (c *hctx) mapBlock(a *hlsys.MemArgs) error {
	if !c.d.amap.gaudi3 {
		return unix.EOPNOTSUPP // the Gaudi1/2 block lists are not emulated
	}
	ch, ok := g3BlockChannel(a.U[0])
	if !ok {
		c.log.Debug().Uint64("addr", a.U[0]).Msg("MAP_BLOCK: not the start of a user-mappable block")
		return unix.EINVAL
	}
	if _, err := c.g3channel(ch); err != nil {
		return err
	}
	c.d.st.blocks.Add(1)
	// hl_mem_ioctl writes out.block_handle and out.block_size (the u32
	// after it) without clearing the args.
	a.U[0] = (uint64(ch+1) | hlsys.MmapTypeBlock) << 12
	a.U[1] = a.U[1]&^0xFFFF_FFFF | gaudi3.ChASize
	return nil
}

// g3channel returns channel ch's register file, creating it (memMu held).
func (c *hctx) g3channel(ch int) (*g3chan, error) {
	if g := c.g3chans[ch]; g != nil {
		return g, nil
	}
	regs, err := unix.Mmap(-1, 0, gaudi3.ChASize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, unix.ENOMEM
	}
	g := &g3chan{c: c, ch: ch, regs: regs, bell: newBell(), dma: &engine{c: c}}
	c.g3chans[ch] = g
	c.bells[ch].Store(g)
	c.engWG.Add(1)
	go g.run()
	return g, nil
}

func (g *g3chan) run() {
	c := g.c
	defer c.engWG.Done()
	t := time.NewTimer(g3IdlePoll)
	defer t.Stop()
	poll := g3IdlePoll
	// rang: the worker spun and a doorbell rang. It spins on even when
	// the ring found nothing to do, which happens when the worker took
	// the new MSQ_PI before Doorbell announced it (a submitter stores
	// MSQ_PI, then calls Doorbell): parking then would make the next
	// doorbell wake it.
	rang := false
	for {
		worked := rang
		rang = false
		for g.step() {
			worked = true
		}
		if worked {
			poll = g3IdlePoll
			if g.spin() {
				rang = true
				continue
			}
		} else {
			poll = min(2*poll, g3IdlePollMax)
		}
		t.Reset(g.nextWake(poll))
		if !g.bell.park() {
			rang = true
			continue
		}
		if worked {
			g.c.d.st.parks.Add(1)
		}
		select {
		case <-c.quit:
			return
		case <-g.bell.ch:
			rang = true
		case <-t.C:
		}
		g.bell.unpark()
	}
}

// spin polls for a doorbell for up to Config.EngineSpin, as the gaudi2
// model's idle engines poll their queues (engine.spin: a channel's queue
// manager picks up a new MSQ_PI without being woken), and reports whether
// one came (false: park). It follows work only, not the idle poll (which
// would make an idle channel spin every g3IdlePoll), and a channel holding
// delayed completions does not spin: its timer is due.
func (g *g3chan) spin() bool {
	g.mu.Lock()
	held := len(g.pend) > 0
	g.mu.Unlock()
	return !held && g.bell.spin(g.c.quit, g.c.d.cfg.EngineSpin)
}

// nextWake is when the worker looks again: at the next delayed completion
// or after poll.
func (g *g3chan) nextWake(poll time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pend) > 0 {
		return min(max(time.Until(g.pend[0].at), 0), poll)
	}
	return poll
}

// flushLocked signals the completions that are due, in order: the
// counter of a channel only grows, so a completion held back by
// DelayNextCS holds back the later ones of its channel too (their data
// has moved meanwhile).
//
// A completion without a delay (at zero) is due at once: no clock read
// for it, on the path from a copy's end to its counter.
//
// A completion whose counter write faults is a channel error (G8): the
// channel halts, that submission and the ones whose completion waits
// behind it end ABORTED (counted here), and flushLocked returns the
// fault for the caller to report once it released g.mu (channelError).
func (g *g3chan) flushLocked() error {
	var now time.Time
	k := 0
	var err error
	for k < len(g.pend) {
		if at := g.pend[k].at; !at.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if at.After(now) {
				break
			}
		}
		if err = g.complete(g.pend[k].incs); err != nil {
			g.stalled, g.halted = true, true // until the reset, as on an execute error
			g.c.d.st.aborted.Add(uint64(len(g.pend) - k))
			k = len(g.pend)
			break
		}
		g.c.d.st.completed.Add(1)
		k++
	}
	if k > 0 {
		g.pend = g.pend[:copy(g.pend, g.pend[k:])] // keeps its array: step's append does not allocate
	}
	return err
}

// channelError reports a PDMA channel error that halted the channel
// (g.mu released): the event, then the device's conditional reset (G8).
func (g *g3chan) channelError(err error) {
	c := g.c
	c.d.st.faults.Add(1)
	bits := uint64(hlsys.NotifierGeneralHWErr)
	var fe *faultError
	if errors.As(err, &fe) && c.d.newInfo {
		bits |= notifierPageFault
	}
	c.log.Warn().Err(err).Int("channel", g.ch).Msg("PDMA channel error: the device resets")
	c.notify(bits)
	c.d.condReset(c, hlsys.NotifierDeviceReset, "PDMA channel error")
}

// step runs the next doorbell's packets; it reports whether there may be
// more to do.
func (g *g3chan) step() bool {
	c := g.c
	g.mu.Lock()
	if g.stopped() {
		if g.active {
			g.stopLocked()
		}
		g.mu.Unlock()
		return false
	}
	if g.active && g.load(gaudi3.RegMSQCI) != g.ci {
		// Software writes MSQ_CI only while the queue is stopped, and
		// the channel's own writes keep it at ci: software stopped and
		// programmed the channel between two looks of a worker that polls
		// (without the Doorbell hint a stop of a few microseconds is not
		// seen). Hardware sees the stop itself; the model takes it now.
		// A reprogramming that leaves MSQ_CI at ci stays unseen.
		g.stopLocked()
		g.mu.Unlock()
		return false
	}
	if !g.active {
		g.active, g.ci = true, g.load(gaudi3.RegMSQCI)
		g.bmu.Lock()
		g.tactive, g.taken = true, g.ci
		g.bmu.Unlock()
	}
	if err := g.flushLocked(); err != nil {
		g.mu.Unlock()
		g.channelError(err)
		return false
	}
	pi := g.load(gaudi3.RegMSQPI)
	if g.stalled || pi == g.ci || !c.d.operational() {
		g.mu.Unlock()
		return false
	}
	if h := c.d.pollHook.Load(); h != nil {
		(*h)()
	}
	var m g3mark
	found := false
	g.bmu.Lock()
	// MSQ_PI again, under the doorbell lock: a Doorbell since the look
	// above (doorbells take bmu only) announced a PI beyond pi, and its
	// mark, popped below as not in (ci, pi], would be lost with its
	// injected fault while the worker found its packets by polling and
	// counted them again. MSQ_PI only moves on: it is still not ci.
	pi = g.load(gaudi3.RegMSQPI)
	end := pi
	for len(g.marks) > 0 && !found {
		m = g.marks[0]
		// Popped by moving the rest down: the queue keeps its array
		// (a few marks at most), and Doorbell's append does not allocate.
		g.marks = g.marks[:copy(g.marks, g.marks[1:])]
		found = m.pi-g.ci <= pi-g.ci && m.pi != g.ci
	}
	if found {
		end = m.pi
	}
	g.taken = end
	g.bmu.Unlock()
	if !found {
		// Found by polling: no doorbell announced it.
		m.hang, m.abort, m.delay = c.d.injected()
		c.d.st.submitted.Add(1)
	}
	if m.hang {
		g.stalled = true
		g.mu.Unlock()
		return false
	}
	if m.abort {
		// A channel error halts the channel until the device is reset
		// (the reset is not immediate when the context has an eventfd).
		g.stalled, g.halted = true, true
		g.mu.Unlock()
		c.d.st.aborted.Add(1)
		c.d.condReset(c, hlsys.NotifierDeviceReset, "injected abort on a PDMA channel")
		return false
	}
	if h := c.d.execHook.Load(); h != nil {
		(*h)()
	}
	start := c.d.dmaBegin()
	incs, err := g.execute(end)
	done := c.d.dmaEnd(start)
	if err != nil {
		g.stalled, g.halted = true, true // until the reset, as on an injected abort
		g.mu.Unlock()
		c.d.st.aborted.Add(1)
		g.channelError(err)
		return false
	}
	var at time.Time // due at once
	if m.delay > 0 {
		at = c.d.t0.Add(done + m.delay)
	}
	g.pend = append(g.pend, g3done{incs: incs, at: at})
	if err := g.flushLocked(); err != nil {
		g.mu.Unlock()
		g.channelError(err)
		return false
	}
	g.mu.Unlock()
	return true
}

// execute runs the packets from the consumer index to end (g.mu held)
// and returns how many advanced the completion queue. MSQ_CI follows each
// packet.
func (g *g3chan) execute(end uint32) (incs uint64, err error) {
	c := g.c
	base := uint64(g.load(gaudi3.RegMSQBaseHi))<<32 | uint64(g.load(gaudi3.RegMSQBaseLo))
	size := uint64(gaudi3.MSQSizeVal.Get(g.load(gaudi3.RegMSQSize))) + 1
	if gaudi3.CheckRingSize(size) != nil {
		return 0, &packetError{msg: "MSQ_SIZE+1 is not a power of two"}
	}
	if end-g.ci > uint32(size) {
		return 0, &packetError{msg: "MSQ_PI moved backwards or by more than the ring"}
	}
	for g.ci != end {
		off := uint64(g.ci) & (size - 1)
		avail := min(uint64(end-g.ci), size-off)
		if cap(g.pkt) < gaudi3.LinPDMAWrCompSize {
			g.pkt = make([]byte, gaudi3.LinPDMAWrCompSize)
		}
		buf := g.pkt[:min(avail, gaudi3.LinPDMAWrCompSize)]
		c.memMu.RLock()
		g.segs, err = c.translate(g.segs[:0], base+off, uint64(len(buf)))
		if err == nil {
			err = gatherAt(g.segs, 0, buf)
		}
		c.memMu.RUnlock()
		if err != nil {
			return incs, err
		}
		// A LIN_PDMA (the usual packet) is decoded without boxing it.
		var inc bool
		lin, n, isLin, derr := gaudi3.DecodeLinPDMA(buf)
		if !isLin {
			var p gaudi3.Packet
			if p, n, derr = gaudi3.Decode(buf); derr == nil {
				inc, err = g.exec(p, int(off))
			}
		} else if derr == nil {
			inc, err = g.execLin(lin, int(off))
		}
		if derr != nil {
			return incs, &packetError{off: int(off), msg: "ring packet: " + derr.Error()}
		}
		if err != nil {
			return incs, err
		}
		if inc {
			incs++
		}
		c.d.st.packets.Add(1)
		g.ci += uint32(n)
		g.store(gaudi3.RegMSQCI, g.ci)
	}
	return incs, nil
}

// exec runs one packet; inc reports a completion-queue advance.
func (g *g3chan) exec(p gaudi3.Packet, off int) (inc bool, err error) {
	switch p := p.(type) {
	case gaudi3.NOP:
		return false, nil
	case gaudi3.LinPDMA:
		return g.execLin(p, off)
	}
	return false, &packetError{off: off, msg: "only LIN_PDMA and NOP are executed", notEmulated: true}
}

// execLin runs a LIN_PDMA: its bytes, then its completion write.
func (g *g3chan) execLin(p gaudi3.LinPDMA, off int) (inc bool, err error) {
	if p.AdvanceCQ && !p.WrComp {
		return false, &packetError{off: off, op: gaudi3.OpLinPDMA, msg: "advcnt_hbw_complq without a completion write", notEmulated: true}
	}
	if p.Fence {
		return false, &packetError{off: off, op: gaudi3.OpLinPDMA, msg: "fence", notEmulated: true}
	}
	if err := g.linPDMA(p); err != nil {
		return false, err
	}
	if p.WrComp {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], p.WrCompData)
		if err := g.write(p.WrCompAddr, b[:]); err != nil {
			return false, err
		}
	}
	return p.AdvanceCQ, nil
}

func (g *g3chan) linPDMA(p gaudi3.LinPDMA) error {
	if p.Size == 0 {
		return nil
	}
	c, e := g.c, g.dma
	c.memMu.RLock()
	defer c.memMu.RUnlock()
	n := uint64(p.Size)
	dsts, err := c.translate(e.segsA[:0], p.Dst, n)
	e.segsA = dsts
	if err != nil {
		return err
	}
	if p.Memset {
		err = e.memset(dsts, p.Src, n)
	} else {
		var srcs []seg
		srcs, err = c.translate(e.segsB[:0], p.Src, n)
		e.segsB = srcs
		if err != nil {
			return err
		}
		err = e.copy(dsts, srcs, n)
	}
	if err == nil {
		c.d.st.bytes.Add(n)
	}
	return err
}

// write stores b at device address addr.
func (g *g3chan) write(addr uint64, b []byte) error {
	c := g.c
	c.memMu.RLock()
	defer c.memMu.RUnlock()
	segs, err := c.translate(g.dma.segsA[:0], addr, uint64(len(b)))
	g.dma.segsA = segs
	if err == nil {
		err = scatterAt(segs, 0, b)
	}
	return err
}

// complete advances the completion counter by incs and sends the
// interrupt message (g.mu held). A counter write that faults is
// returned: nothing is signalled.
func (g *g3chan) complete(incs uint64) error {
	cfg := g.load(gaudi3.RegECQChCfg)
	if incs == 0 || gaudi3.ECQEnable.Get(cfg) == 0 {
		return nil
	}
	c := g.c
	addr := uint64(g.load(gaudi3.RegECQBaseHi))<<32 | uint64(g.load(gaudi3.RegECQBaseLo))
	c.memMu.RLock()
	var buf [2]seg // an 8-byte counter spans at most two pages
	segs, err := c.translate(buf[:0], addr, 8)
	if err == nil {
		if len(segs) == 1 && segs[0].mem != nil && addr%8 == 0 {
			atomic.AddUint64((*uint64)(unsafe.Pointer(&segs[0].mem[0])), incs)
		} else {
			var b [8]byte
			if err = gatherAt(segs, 0, b[:]); err == nil {
				binary.LittleEndian.PutUint64(b[:], binary.LittleEndian.Uint64(b[:])+incs)
				err = scatterAt(segs, 0, b[:])
			}
		}
	}
	c.memMu.RUnlock()
	if err != nil {
		return fmt.Errorf("completion counter write: %w", err)
	}
	g.store(gaudi3.RegECQBasePI, g.load(gaudi3.RegECQBasePI)+uint32(incs))
	if gaudi3.ECQLBWWrEn.Get(cfg) == 0 {
		return nil
	}
	lbw := uint64(g.load(gaudi3.RegECQLBWAddrHi))<<32 | uint64(g.load(gaudi3.RegECQLBWAddrLo))
	if lbw != gaudi3.CfgBarBase+gaudi3.MSIXOffset {
		return nil
	}
	c.g3Interrupt(g.load(gaudi3.RegECQLBWPayload))
	return nil
}

// MappedBlocks is the number of successful MAP_BLOCK calls (Gaudi3 PDMA
// channel blocks) over the device's life.
func (d *Device) MappedBlocks() uint64 { return d.st.blocks.Load() }

// g3Reset is a hard reset for the context's channels: their registers
// are cleared and the blocked interrupt waits end aborted
// (hl_release_pending_user_interrupts: -EIO, ABORTED). Arming the release
// watchdog (reset.go) aborts the waits only: the channels run on.
func (c *hctx) g3Reset() {
	c.g3EachLocked((*g3chan).resetLocked)
	c.g3AbortWaits()
}

// g3Busy reports whether one of the context's PDMA channels is not idle
// as the driver's release check sees it: hpriv_release (common/device.c)
// reads is_device_idle once the context is gone, and gaudi3_is_device_idle
// -> gaudi3_is_pdma_group_idle (gaudi3/gaudi3.c) reads each PDMA group's
// queue manager and DMA status for every channel, the user-owned ones
// included (no pdma_user_owned_ch_mask there). The model's busy channel:
// queue running (not stopped by software) with work it has not taken
// (MSQ_PI beyond what it consumed), a hung doorbell, or completions held
// back. A doorbell running is waited for (mu); a stopped queue is idle,
// its work dropped (stopLocked).
func (c *hctx) g3Busy() bool {
	c.memMu.RLock()
	chans := c.g3chans
	c.memMu.RUnlock()
	for _, g := range chans {
		if g == nil {
			continue
		}
		g.mu.Lock()
		busy := !g.stopped() && (g.stalled || len(g.pend) > 0 || g.unconsumedLocked())
		g.mu.Unlock()
		if busy {
			return true
		}
	}
	return false
}

// unconsumedLocked reports whether MSQ_PI is beyond what the channel
// consumed (its own ci once it saw the queue programmed, MSQ_CI before).
func (g *g3chan) unconsumedLocked() bool {
	ci := g.ci
	if !g.active {
		ci = g.load(gaudi3.RegMSQCI)
	}
	return g.load(gaudi3.RegMSQPI) != ci
}

// g3AbortWaits ends the blocked interrupt waits -EIO, ABORTED
// (hl_release_pending_user_interrupts).
func (c *hctx) g3AbortWaits() {
	c.irq.mu.Lock()
	for w := range c.irq.waiters {
		delete(c.irq.waiters, w)
		w.aborted = true
		close(w.done)
	}
	c.irq.mu.Unlock()
}

// g3Release frees the register files (teardown, workers stopped; memMu
// held). With keep (the device closed under the context) a block the
// user still has mapped stays, in g3kept, until Munmap or Close: the
// mapping holds the context (hl_hw_block_mmap's hl_ctx_get, put in
// hw_block_vm_close). Otherwise the context's Close undoes the user's
// mappings (hlsys.Backend).
func (c *hctx) g3Release(keep bool) {
	for i, g := range c.g3chans {
		if g != nil {
			c.bells[i].Store(nil)
			// A Doorbell that found the channel before the Store reads
			// its registers under bmu only, and none once released: it
			// may still come (a user store to a mapped block is harmless
			// at any time, RULES D12), and the file may be unmapped below.
			g.bmu.Lock()
			g.released = true
			g.bmu.Unlock()
			c.g3chans[i] = nil
			if keep && len(g.views) > 0 {
				c.g3kept = append(c.g3kept, g)
				continue
			}
			c.unmapBlock(g)
		}
	}
}
