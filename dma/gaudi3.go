package dma

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// Gaudi3 direct PDMA mode (docs/gaudi3.md). Intel's driver gives user
// space no command queue on Gaudi3, so the Device drives user-owned PDMA
// channels itself: it maps each channel's CH_A register block
// (MAP_BLOCK + mmap), gives it a submission ring in host memory mapped
// into the device MMU, and points its completion queue at a u64 counter in
// a kernel CB created with CB_FLAGS_MAP. Behind the same API as the
// Gaudi1/2 CS path:
//
//   - the "queues" (H2DQueues, D2HQueues, D2DQueues, Chunk.Queue) are
//     PDMA channel numbers;
//   - a CB holds LIN_PDMA packets; every one carries one completion write
//     (to a scratch word in HBM) and advances the channel's counter, so a
//     chunk's completion needs no trailing NOP and no assumption about
//     the order in which a channel finishes its packets;
//   - Submit copies each chunk's packets into its channel's ring (NOP
//     padding so that no packet wraps) and stores the new MSQ_PI; the
//     sequence number it returns is the Device's own, and it records the
//     counter value each channel must reach;
//   - Wait/WaitCS compare the counters in memory with those targets and
//     sleep in WAIT_CS on the channel's user interrupt (KERNEL_CQ form)
//     where the driver takes it, else sleep-poll the counter: never spin.
//
// Failure handling, where the driver's CS machinery does it on Gaudi1/2:
// a device reset (RESET_COUNT moves) ends every unfinished submission
// ABORTED and the channels are programmed again. Submit and Wait look at
// RESET_COUNT (and Submit at DEVICE_STATUS) at most once per millisecond
// while the device is well, not per submission (two ioctls would cost
// more than the rest of one): a submission written in the millisecond
// after a reset ends ABORTED too;
// a submission unfinished after Options.CSTimeout ends TIMEDOUT and the
// channels it used are stopped (MSQ reconfiguration) and programmed again,
// ending the other unfinished submissions on them ABORTED, as the
// driver's TDR and reset would. The driver sees none of this work ("the
// workload wasn't submitted through the driver", _hl_interrupt_wait_ioctl).
//
// Unconfirmed readings this rests on (docs/gaudi3.md section 10): that each
// LIN_PDMA with advcnt_hbw_complq adds 1 to the counter once its data and
// completion write are done; that a completion write may target HBM; that
// setting CQ_RECONFIG stops the queue so MSQ_PI/CI and the ring may be
// reprogrammed; that die 0's MSI-X doorbell serves every channel.

// Defaults of direct mode.
const (
	// DefaultCSTimeout bounds a Gaudi3 direct-mode submission (see
	// Options.CSTimeout), the driver's default TDR on Gaudi1/2.
	DefaultCSTimeout = 30 * time.Second

	// g3RingSize is each channel's submission ring: a power of two within
	// SCAL's direct-mode bounds (2^16..2^24, gaudi3.SCALMinRing/MaxRing).
	g3RingSize = 1 << 20

	// g3MaxChunk is the most bytes of packets one chunk may hold: half a
	// ring, so that a chunk always fits after the padding before the
	// ring's end.
	g3MaxChunk = g3RingSize / 2

	// g3MaxPending bounds the submissions in flight, as the driver's
	// completion slots bound CSs on Gaudi1/2 (hlsim's default
	// MaxPendingCS): Submit waits for one to retire, retrying like a CS
	// that gets EAGAIN.
	g3MaxPending = 64

	// g3EndedKeep is how many submissions a failure is remembered for:
	// every Wait on a failed submission reports the failure until
	// g3EndedKeep later ones were made (the driver keeps a CS's fence
	// for its completion slots' window, then answers WAIT_CS on it as a
	// gone CS, COMPLETED). It bounds the record of failures nobody
	// waits for.
	g3EndedKeep = 4096
)

// g3PILimit is where a channel's free-running MSQ_PI is brought back to
// 0 (by programming the channel again once it is idle) so that it never
// overflows 32 bits (SW-172941, docs/gaudi3.md 5.5). A variable for tests.
var g3PILimit uint64 = 1 << 31

// doorbeller is implemented by the emulator, which cannot trap stores to
// the register blocks it maps: after storing MSQ_PI or reprogramming a
// channel the Device calls Doorbell with the block. Wrappers of an
// emulated backend should forward it (without it the emulator finds the
// stores by polling).
type doorbeller interface{ Doorbell(block []byte) }

// g3Dev is a Device's direct-mode state.
type g3Dev struct {
	d                   *Device
	chans               []uint32 // channels used, in slot order
	h2d, d2h, d2d       []uint32
	intrFirst, intrN    uint32
	tdr                 time.Duration
	bell                doorbeller
	setupMu             sync.Mutex // guards ready and the resources below
	ready               bool
	slots               []*g3Chan
	byCh                map[uint32]*g3Chan
	cqHandle, cqVA      uint64
	cqMem               []byte
	counters            atomic.Pointer[[g3Chans]uint64] // cqMem's counters once set up, nil after teardown (Progress)
	scratch, scratchVA  uint64                          // HBM allocation handle and VA: completion writes land here
	scratchSlab         *slab                           // the slab the scratch page is carved from (slab.go), or nil
	intrOff             atomic.Bool
	t0                  time.Time    // clock's origin
	lastCheck           atomic.Int64 // clock of the last RESET_COUNT read in a polling wait
	lastHealth          atomic.Int64 // clock of checkHealth's last look that found the device well (0: look)
	healthEvery         time.Duration
	mu                  sync.Mutex // guards what follows; taken after channel locks
	epoch               uint32     // RESET_COUNT the channels were programmed under
	nextSeq             uint64
	pending             map[uint64]*g3CS
	ended               map[uint64]CSStatus // failed submissions of the last g3EndedKeep (endLocked)
	submitted, programs atomic.Uint64
}

// g3Chan is one PDMA channel in use.
type g3Chan struct {
	slot    int
	ch      uint32
	mu      sync.Mutex // guards what follows
	regs    []byte     // the mapped CH_A block
	ring    []byte     // host pages
	ringVA  uint64
	pi      uint32 // MSQ_PI as last written
	ci      uint32 // MSQ_CI as last read (room): it only grows until program
	issued  uint64 // counter value once everything written has completed
	counter *uint64
	intr    uint32
	hasIntr bool
}

// g3Chans is the most PDMA channels direct mode uses (newG3).
const g3Chans = 3

// g3CS is a submission in flight.
type g3CS struct {
	seq   uint64
	epoch uint32
	start time.Duration // clock at submission
	parts []g3Part
	buf   [g3Chans]g3Part // parts' first backing (a CS uses at most every channel once)
}

type g3Part struct {
	c      *g3Chan
	target uint64
}

// on reports whether cs has a part on one of the channels in.
func (cs *g3CS) on(in map[*g3Chan]bool) bool {
	for _, p := range cs.parts {
		if in[p.c] {
			return true
		}
	}
	return false
}

func (c *g3Chan) reg(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.regs[off])) }
func (c *g3Chan) store(off int, v uint32) {
	atomic.StoreUint32(c.reg(off), v)
}
func (c *g3Chan) load(off int) uint32 { return atomic.LoadUint32(c.reg(off)) }
func (c *g3Chan) count() uint64       { return atomic.LoadUint64(c.counter) }

// g3Preference orders channels: die 0 SPDMA0 first, then die 1 (whose
// interrupt doorbell is an open question), channels 6-11 last (SCAL wants
// priority 7 on them for SW-110596, which user space cannot set).
func g3Preference(mask uint64) []uint32 {
	var out []uint32
	for _, r := range [][2]int{{0, 6}, {12, 18}, {18, 24}, {6, 12}} {
		for ch := r[0]; ch < r[1]; ch++ {
			if ch != gaudi3.KDMAChannel && mask&(1<<ch) != 0 {
				out = append(out, uint32(ch))
			}
		}
	}
	return out
}

// clock is the time since g.t0, from the monotonic clock alone: a
// polling wait reads it at every poll, and reading the wall clock too
// would double the cost.
func (g *g3Dev) clock() time.Duration { return time.Since(g.t0) }

// newG3 plans direct mode from HW_IP_INFO: two channels for host-to-device
// and device-to-device copies, one for device-to-host (as the Gaudi2 path
// uses two streams of PDMA_0 and one of PDMA_1). No channel is touched
// until the first command buffer or submission.
func newG3(d *Device, info hlsys.HwIPInfo, b Backend) *g3Dev {
	g := &g3Dev{d: d, intrFirst: uint32(info.FirstAvailableInterruptID), intrN: uint32(info.NumberOfUserInterrupts),
		nextSeq: 1, pending: map[uint64]*g3CS{}, ended: map[uint64]CSStatus{}, healthEvery: healthEvery, t0: time.Now()}
	g.bell, _ = b.(doorbeller)
	g.tdr = d.opts.CSTimeout
	if g.tdr <= 0 {
		g.tdr = DefaultCSTimeout
		if t, ok := b.(interface{ CSTimeout() time.Duration }); ok && t.CSTimeout() > 0 {
			g.tdr = t.CSTimeout()
		}
	}
	chs := g3Preference(info.PDMAUserOwnedChMask())
	switch {
	case len(chs) == 0:
	case len(chs) == 1:
		g.chans, g.h2d, g.d2h = chs[:1], chs[:1], chs[:1]
	case len(chs) == 2:
		g.chans, g.h2d, g.d2h = chs[:2], chs[:1], chs[1:2]
	default:
		g.chans, g.h2d, g.d2h = chs[:g3Chans], chs[:2], chs[2:g3Chans]
	}
	g.d2d = g.h2d
	return g
}

// ensure sets direct mode up on first use.
func (g *g3Dev) ensure() error {
	g.setupMu.Lock()
	defer g.setupMu.Unlock()
	if g.ready {
		return nil
	}
	if len(g.chans) == 0 {
		return newErr("set up Gaudi3 direct PDMA mode on "+g.d.Name(), ErrNotSupported, "the driver leaves no PDMA channel to user space (pdma_user_owned_ch_mask is 0)", nil)
	}
	if err := g.setup(); err != nil {
		g.teardown()
		return g.d.ioErr("set up Gaudi3 direct PDMA mode on "+g.d.Name(), "", err)
	}
	g.ready = true
	g.counters.Store((*[g3Chans]uint64)(unsafe.Pointer(&g.cqMem[0])))
	return nil
}

func (g *g3Dev) setup() error {
	b := g.d.b
	pg := uint64(os.Getpagesize())
	h, err := hlsys.CBCreate(b, uint32(pg), hlsys.CBFlagsMap)
	if err != nil {
		return fmt.Errorf("completion counters CB: %w", err)
	}
	g.cqHandle = h
	if g.cqVA, err = hlsys.CBDeviceVA(b, h); err != nil {
		return fmt.Errorf("completion counters device VA: %w", err)
	}
	if g.cqMem, err = b.Mmap(int64(h), int(pg)); err != nil {
		return fmt.Errorf("mmap completion counters: %w", err)
	}
	if g.d.subAllocates(pg) {
		// A host page of a slab (slab.go), not an allocation page of its
		// own (32 MiB by default on Gaudi3).
		if g.scratchSlab, g.scratchVA, err = g.d.carve("completion-write scratch", pg); err != nil {
			return fmt.Errorf("completion-write scratch: %w", err)
		}
	} else {
		if g.scratch, err = hlsys.MemAlloc(b, g.d.allocPage, 0, 0); err != nil {
			return fmt.Errorf("completion-write scratch: %w", err)
		}
		if g.scratchVA, err = hlsys.MemMapDevice(b, g.scratch, 0, 0); err != nil {
			return fmt.Errorf("map completion-write scratch: %w", err)
		}
	}
	if g.epoch, err = g.resetCount(); err != nil {
		return err
	}
	g.byCh = map[uint32]*g3Chan{}
	for slot, ch := range g.chans {
		c := &g3Chan{slot: slot, ch: ch, counter: (*uint64)(unsafe.Pointer(&g.cqMem[8*slot]))}
		g.slots = append(g.slots, c)
		g.byCh[ch] = c
		addr, err := gaudi3.ChAMapAddr(int(ch))
		if err != nil {
			return err
		}
		bh, bsize, err := hlsys.MemMapBlock(b, addr)
		if err != nil {
			return fmt.Errorf("MAP_BLOCK of PDMA channel %d: %w", ch, err)
		}
		if bsize < gaudi3.RegSpecial {
			return fmt.Errorf("PDMA channel %d: block size %d", ch, bsize)
		}
		if c.regs, err = b.Mmap(int64(bh), int(bsize)); err != nil {
			return fmt.Errorf("mmap PDMA channel %d: %w", ch, err)
		}
		if c.ring, err = AllocHostPages(g3RingSize); err != nil {
			return err
		}
		if c.ringVA, err = hlsys.MemMapHost(b, pointerOf(c.ring), g3RingSize, 0, 0); err != nil {
			return fmt.Errorf("map the ring of PDMA channel %d: %w", ch, err)
		}
		if uint32(slot) < g.intrN {
			c.intr, c.hasIntr = g.intrFirst+uint32(slot), true
		}
		g.program(c, true)
	}
	return nil
}

// teardown releases what setup made (setupMu held; Close or failed setup).
func (g *g3Dev) teardown() {
	b := g.d.b
	log := g.d.log
	// Stop the channels before their rings go: a submission nobody waited
	// for would otherwise read its next packet from freed memory (an MMU
	// fault, a device reset). The emulator's stop waits for the packet
	// running; how soon a stop takes effect on hardware is not confirmed
	// (docs/gaudi3.md).
	for _, c := range g.slots {
		if c.regs != nil {
			g.stop(c)
		}
	}
	for _, c := range g.slots {
		if c.regs != nil {
			if err := b.Munmap(c.regs); err != nil {
				log.Warn().Err(err).Uint32("channel", c.ch).Msg("munmap PDMA channel block")
			}
			c.regs = nil
		}
		if c.ringVA != 0 {
			if err := hlsys.MemUnmap(b, c.ringVA); err != nil {
				log.Warn().Err(err).Msg("unmap PDMA ring")
				c.ring = nil // still pinned: leave the pages
			}
			c.ringVA = 0
		}
		if c.ring != nil {
			_ = FreeHostPages(c.ring)
			c.ring = nil
		}
	}
	g.slots, g.byCh = nil, nil
	if g.scratchSlab != nil {
		if err := g.d.uncarve("completion-write scratch", g.scratchSlab, g.scratchVA, uint64(os.Getpagesize()), false); err != nil {
			log.Warn().Err(err).Msg("release the completion-write scratch's slab")
		}
		g.scratchSlab, g.scratchVA = nil, 0
	}
	if g.scratchVA != 0 {
		_ = hlsys.MemUnmap(b, g.scratchVA)
		g.scratchVA = 0
	}
	if g.scratch != 0 {
		_ = hlsys.MemFree(b, g.scratch)
		g.scratch = 0
	}
	g.counters.Store(nil)
	if g.cqMem != nil {
		_ = b.Munmap(g.cqMem)
		g.cqMem = nil
	}
	if g.cqHandle != 0 {
		_ = hlsys.CBDestroy(b, g.cqHandle)
		g.cqHandle = 0
	}
	g.ready = false
}

// close releases direct mode (Device.Close, gate held). With running
// (the context is released first: CloseRunning, a reset the driver
// reported) it only stops the channels: a stop is a register store the
// engine may act on later, so nothing a channel may still read or write
// (its ring, the counters, the completion-write scratch) is unmapped or
// freed before the backend is closed; released then frees the host side.
func (g *g3Dev) close(running bool) {
	if g == nil {
		return
	}
	g.setupMu.Lock()
	defer g.setupMu.Unlock()
	if !running {
		g.teardown()
		return
	}
	for _, c := range g.slots {
		if c.regs != nil {
			g.stop(c)
		}
	}
}

// busy reports whether a submission is still unfinished (Close, gate
// held): its channels may still read its packets and move its bytes.
func (g *g3Dev) busy() bool {
	if g == nil {
		return false
	}
	g.setupMu.Lock()
	defer g.setupMu.Unlock()
	if !g.ready {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cs := range g.pending {
		if !cs.reached() {
			return true
		}
	}
	return false
}

// released forgets direct mode's resources once the backend is closed
// (d.gone): the backend's Close unmapped the register blocks and the
// counters' CB, and the context's teardown (after the driver's reset of a
// device left running) unmapped and freed the rest; only the rings' host
// pages, no longer pinned, are left to free.
func (g *g3Dev) released() {
	if g == nil {
		return
	}
	g.setupMu.Lock()
	defer g.setupMu.Unlock()
	for _, c := range g.slots {
		c.regs, c.ringVA = nil, 0
		if c.ring != nil {
			_ = FreeHostPages(c.ring)
			c.ring = nil
		}
	}
	g.slots, g.byCh = nil, nil
	if g.scratchSlab != nil {
		// Forgotten with the context: closeSlabs forgets the slab.
		_ = g.d.uncarve("completion-write scratch", g.scratchSlab, g.scratchVA, uint64(os.Getpagesize()), true)
	}
	g.counters.Store(nil)
	g.cqMem, g.cqHandle, g.scratch, g.scratchVA, g.scratchSlab = nil, 0, 0, 0, nil
	g.ready = false
}

func (g *g3Dev) ring(c *g3Chan) {
	if g.bell != nil {
		g.bell.Doorbell(c.regs)
	}
}

// stop stops channel c's queue (CQ_RECONFIG): it drops its queued work.
func (g *g3Dev) stop(c *g3Chan) {
	c.store(gaudi3.RegCQReconfig, gaudi3.CQReconfigEn.Put(0, 1))
	g.ring(c)
}

// program (re)programs channel c (its lock held, or during setup): stop
// the queue (CQ_RECONFIG), ring base and size in MSQ mode, indices 0, the
// completion queue (counter, interrupt message), start. With zero the
// counter restarts at 0; otherwise it keeps its value, so that
// submissions that completed before stay completed.
func (g *g3Dev) program(c *g3Chan, zero bool) {
	g.stop(c)
	c.store(gaudi3.RegDescSubmitFifoCfg, gaudi3.FifoCfgMode.Put(0, gaudi3.FifoCfgMSQ))
	c.store(gaudi3.RegMSQBaseHi, uint32(c.ringVA>>32))
	c.store(gaudi3.RegMSQBaseLo, uint32(c.ringVA))
	c.store(gaudi3.RegMSQSize, gaudi3.MSQSizeVal.Put(0, g3RingSize-1))
	c.store(gaudi3.RegMSQCI, 0)
	c.store(gaudi3.RegMSQPI, 0)
	c.store(gaudi3.RegFenceCnt0, 0)
	if zero {
		atomic.StoreUint64(c.counter, 0)
	}
	c.issued, c.pi, c.ci = c.count(), 0, 0
	va := g.cqVA + 8*uint64(c.slot)
	c.store(gaudi3.RegECQBaseLo, uint32(va))
	c.store(gaudi3.RegECQBaseHi, uint32(va>>32))
	c.store(gaudi3.RegECQBaseSize, gaudi3.ECQCounterSize)
	cfg := gaudi3.ECQEnable.Put(0, 1)
	cfg = gaudi3.ECQComplMode.Put(cfg, gaudi3.ECQModeUser)
	if c.hasIntr {
		msix := uint64(gaudi3.CfgBarBase + gaudi3.MSIXOffset)
		c.store(gaudi3.RegECQLBWAddrLo, uint32(msix))
		c.store(gaudi3.RegECQLBWAddrHi, uint32(msix>>32))
		c.store(gaudi3.RegECQLBWPayload, c.intr)
		cfg = gaudi3.ECQLBWWrEn.Put(cfg, 1)
	}
	c.store(gaudi3.RegECQChCfg, cfg)
	c.store(gaudi3.RegCQReconfig, 0)
	g.ring(c)
	g.programs.Add(1)
}

// resetCount reads INFO RESET_COUNT (hard + soft resets).
func (g *g3Dev) resetCount() (uint32, error) {
	out := new([2]uint32)
	var pin runtime.Pinner // the driver writes through the raw address
	pin.Pin(out)
	defer pin.Unpin()
	a := &hlsys.InfoArgs{ReturnPointer: uint64(uintptr(unsafe.Pointer(out))), ReturnSize: 8, Op: hlsys.InfoResetCount}
	if err := hlsys.Info(g.d.b, a); err != nil {
		return 0, fmt.Errorf("INFO RESET_COUNT: %w", err)
	}
	return out[0] + out[1], nil
}

// lockAll locks the given channels in slot order (each once) and returns
// them for unlockAll.
func lockAll(cs []*g3Chan) []*g3Chan {
	return lockAllInto(nil, cs)
}

// lockAllInto is lockAll appending the locked channels to dst (a caller's
// buffer: a submission's usual one or two channels need no allocation).
func lockAllInto(dst, cs []*g3Chan) []*g3Chan {
	dst = append(dst[:0], cs...)
	slices.SortFunc(dst, func(a, b *g3Chan) int { return a.slot - b.slot })
	dst = slices.Compact(dst)
	for _, c := range dst {
		c.mu.Lock()
	}
	return dst
}

func unlockAll(cs []*g3Chan) {
	for _, c := range cs {
		c.mu.Unlock()
	}
}

// recover ends the unfinished submissions that use any of chans (locked,
// g.mu held): those whose counters reached their targets completed, the
// others end with status (ABORTED after a reset, TIMEDOUT for the one the
// TDR caught is set by the caller). It then programs the channels again.
// chans must hold every channel on which those submissions have work
// left (stopSetLocked), or a channel left running writes for a
// submission reported ended.
func (g *g3Dev) recoverLocked(chans []*g3Chan, status CSStatus, zero bool) {
	in := map[*g3Chan]bool{}
	for _, c := range chans {
		in[c] = true
	}
	for seq, cs := range g.pending {
		if !cs.on(in) {
			continue
		}
		if !cs.reached() {
			g.endLocked(seq, status)
		}
		delete(g.pending, seq)
	}
	for _, c := range chans {
		g.program(c, zero)
	}
}

// endLocked records that submission seq failed with status (g.mu held),
// forgetting failures older than g3EndedKeep submissions.
func (g *g3Dev) endLocked(seq uint64, status CSStatus) {
	for old := range g.ended {
		if old+g3EndedKeep < g.nextSeq {
			delete(g.ended, old)
		}
	}
	g.ended[seq] = status
}

func (cs *g3CS) reached() bool {
	for _, p := range cs.parts {
		if p.c.count() < p.target {
			return false
		}
	}
	return true
}

// checkReset programs every channel again if the device was reset since
// they were programmed; the submissions in flight then end ABORTED.
// Channel locks must not be held.
func (g *g3Dev) checkReset() error {
	rc, err := g.resetCount()
	if err != nil {
		return err
	}
	g.mu.Lock()
	same := rc == g.epoch
	g.mu.Unlock()
	if same {
		return nil
	}
	if st, err := hlsys.GetDeviceStatus(g.d.b); err != nil || !DeviceStatus(st).Operational() {
		return nil // still resetting: the channels are programmed once it is over
	}
	chans := lockAll(g.slots)
	g.mu.Lock()
	if rc != g.epoch {
		g.d.log.Warn().Uint32("reset_count", rc).Msg("device reset: Gaudi3 PDMA channels programmed again, submissions in flight aborted")
		g.recoverLocked(chans, CSAborted, false)
		g.epoch = rc
	}
	g.mu.Unlock()
	unlockAll(chans)
	return nil
}
