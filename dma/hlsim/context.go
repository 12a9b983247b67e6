package hlsim

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// Context states.
const (
	ctxOpen   = iota
	ctxClosed // Close was called: ioctls return os.ErrClosed, like a closed fd
	ctxGone   // the device was closed: ioctls return ENODEV
	ctxKilled // a hard reset killed the holder (Config.Kill): ioctls return ENODEV until Close
)

// hctx is an open compute context: what the driver calls hl_fpriv plus
// hl_ctx. It implements hlsys.Backend.
//
// Lock order: csMu, then memMu, then the per-CS mutex; evMu, tdrMu and
// the device's faultMu are leaves. d.mu is never taken while holding a
// context lock, except by teardown after all context locks are released.
type hctx struct {
	d     *Device
	log   zerolog.Logger
	state atomic.Uint32

	// csMu's group is the submitter's and the waiters' (every WAIT_CS
	// poll takes csMu); tdrMu's group is also written by the engines as
	// CSs end (releaseTDR). Apart, a cache line each, an engine ending a
	// CS does not take csMu's line from a waiter polling it, nor the
	// poll tdrMu's from the engine (measured: 0.1-0.2 us off each 4 KiB
	// copy of BenchmarkGaudiOverhead at batch 1).
	_       cpu.CacheLinePad
	csMu    sync.Mutex
	closed  bool
	nextSeq uint64 // next CS sequence number (starts at 1)
	slots   []*cs  // completion slots, indexed by seq & (MaxPendingCS-1)

	// tdrMu guards mirror, the TDR timer and the CSs' TDR state (tdr.go).
	_      cpu.CacheLinePad
	tdrMu  sync.Mutex
	mirror []*cs         // scheduled CSs not yet ended, oldest first
	tdrT   *time.Timer   // the TDR timer, made by the first arming
	tdrAt  time.Duration // when tdrT fires (Device.clock), 0: not pending
	_      cpu.CacheLinePad

	evMu    sync.Mutex
	eventfd int    // registered eventfd (our dup), or -1
	events  uint64 // notifier events since the last GET_EVENTS

	// memMu guards the MMU tables, allocations and CBs, and the lifetime
	// of the memory they refer to: engines hold it for reading while they
	// translate and move one packet's bytes, so memory is never unmapped
	// under a running DMA.
	memMu      sync.RWMutex
	memDead    bool
	dmmu       *vaSpace // Gaudi2 DRAM VA range, nil on Gaudi1
	pmmu       *vaSpace // host mappings, 4 KiB pages
	pmmuHuge   *vaSpace // host mappings, 2 MiB pages
	allocs     map[uint64]*allocation
	nextHandle uint64
	dramUsed   uint64
	cbs        map[uint64]*cbuf
	nextCB     uint64
	cbMmaps    map[*byte]*cbuf // user mmaps of CBs, by first byte

	engines map[uint32]*engine // by queue id, started on first use (csMu)

	// Gaudi3: the register files of the mapped PDMA CH_A blocks (memMu)
	// and the interrupt waits.
	g3chans [gaudi3.PDMAChannels]*g3chan
	// g3kept: the channels whose blocks the user still had mapped when
	// a Device.Close released the context (teardown); Munmap or Close
	// unmaps them (memMu).
	g3kept []*g3chan
	// bells holds g3chans for Doorbell, which finds a channel without
	// memMu: the engines take memMu's read lock for every packet, and a
	// submission taking it too would move its cache line between cores.
	bells [gaudi3.PDMAChannels]atomic.Pointer[g3chan]
	irq   g3irq
	quit  chan struct{}
	engWG sync.WaitGroup

	// eachHook, when set (tests), runs in g3EachLocked after it read
	// the channels.
	eachHook func()

	outMu    sync.Mutex
	outcomes *outcomeStore // CS outcome store (CS_FLAGS_TIMESTAMP), made at the first push

	waiting atomic.Int32 // WAIT_CS calls blocked on a CS (tests)

	// drainCond is signalled when the last job of an aborted CS leaves
	// its engine.
	drainMu   sync.Mutex
	drainCond sync.Cond

	// Timer callbacks (TDR, delayed completion) in progress.
	bgMu     sync.Mutex
	bgCond   sync.Cond
	bgN      int
	bgClosed bool

	// tdrPosted: the CS_TIMEOUT event was posted since the open (the
	// driver posts it for the first TDR only: captured_err_info's
	// cs_timeout.write_enable, set again by hl_device_open).
	tdrPosted atomic.Bool

	// held: Close found a DMA-BUF export still open, so the context
	// lives on until it is gone (Config.HeldExports, held.go).
	held atomic.Bool

	closeOnce sync.Once
	released  chan struct{} // closed once teardown has finished
}

func newCtx(d *Device) *hctx {
	c := &hctx{
		d:          d,
		log:        d.log,
		nextSeq:    1,
		slots:      make([]*cs, d.cfg.MaxPendingCS),
		eventfd:    -1,
		allocs:     map[uint64]*allocation{},
		nextHandle: 1,
		cbs:        map[uint64]*cbuf{},
		nextCB:     1,
		cbMmaps:    map[*byte]*cbuf{},
		engines:    map[uint32]*engine{},
		quit:       make(chan struct{}),
		released:   make(chan struct{}),
	}
	c.irq.waiters = map[*g3waiter]struct{}{}
	c.bgCond.L = &c.bgMu
	c.drainCond.L = &c.drainMu
	a := &d.amap
	if a.gaudi2 {
		c.dmmu = newVASpace(a.dramBase, a.dmmuEnd-a.dramBase, a.dramPage)
	}
	c.pmmu = newVASpace(a.pmmuBase, a.pmmuHuge-a.pmmuBase, pageSize)
	c.pmmuHuge = newVASpace(a.pmmuHuge, a.pmmuEnd-a.pmmuHuge, hugePageSize)
	return c
}

// usable returns the error for an ioctl on a closed context.
func (c *hctx) usable() error {
	switch c.state.Load() {
	case ctxClosed:
		return os.ErrClosed
	case ctxGone, ctxKilled:
		return unix.ENODEV
	}
	return nil
}

// Ioctl implements hlsys.Backend. The request must use this node's
// numbering: a legacy 'H' request on an accel node (or the reverse) is
// refused with ENOTTY, as are unknown requests. arg points at the ioctl's
// argument struct; user pointers inside it are reached with
// process_vm_readv/writev.
func (c *hctx) Ioctl(req uintptr, arg unsafe.Pointer) error {
	if err := c.usable(); err != nil {
		return err
	}
	n, nr, ok := hlsys.Decode(req)
	if !ok || n != c.d.num {
		return unix.ENOTTY
	}
	if arg == nil {
		return unix.EFAULT
	}
	switch nr {
	case hlsys.IoctlInfo:
		return c.info((*hlsys.InfoArgs)(arg))
	case hlsys.IoctlCB:
		return c.cbIoctl((*hlsys.CBArgs)(arg))
	case hlsys.IoctlCS:
		c.d.driverBegin()
		defer c.d.driverEnd()
		return c.csIoctl((*hlsys.CSArgs)(arg))
	case hlsys.IoctlWaitCS:
		return c.waitIoctl((*hlsys.WaitCSArgs)(arg))
	case hlsys.IoctlMemory:
		return c.memIoctl((*hlsys.MemArgs)(arg))
	case hlsys.IoctlDebug:
		return unix.EOPNOTSUPP // the DEBUG (profiler) ioctl is not emulated
	}
	return unix.ENOTTY
}

// Close releases the context: CSs in flight end ABORTED (blocked WAIT_CS
// calls return -EIO), the engine goroutines stop, every allocation,
// mapping and CB of the context is released and the registered eventfd
// is closed. DMA-BUF fds already exported stay valid (they hold the
// memory). A release under the release watchdog, or of a context whose
// CSs are in flight while the device needs a reset, hard-resets the
// device (reset.go). Close is idempotent; afterwards every call returns
// os.ErrClosed.
func (c *hctx) Close() error {
	if c.holdForExports() {
		return nil // released once its exports are gone (held.go)
	}
	c.teardown(false)
	c.memMu.Lock()
	c.releaseUserMaps() // those a Device.Close left mapped (teardown)
	c.memMu.Unlock()
	return nil
}

func (c *hctx) teardown(gone bool) {
	c.closeOnce.Do(func() {
		// A device closed under an open context (gone) leaves the user
		// mmaps in place: in the driver each holds its own reference
		// (hl_mem_mgr_mmap, hl_hw_block_mmap) until the user unmaps it
		// (hl_mmap_mem_buf_vm_close, hw_block_vm_close), and the fd
		// outlives the device (device_disable_open_processes). Munmap
		// or Close undoes them. A context whose Close already ran (held
		// by its exports) has none left to the user.
		keep := gone && c.state.Load() != ctxClosed
		if gone {
			c.state.Store(ctxGone)
		} else {
			c.state.Store(ctxClosed)
		}
		c.csMu.Lock()
		c.closed = true
		c.csMu.Unlock()

		d := c.d
		reset := d.releaseReset(c)
		c.abortAll(nil)
		c.stopTDR()
		close(c.quit)
		c.engWG.Wait()
		c.g3Drop()
		c.waitBG()

		c.memMu.Lock()
		c.memDead = true
		c.g3Release(keep)
		c.releaseMemory(keep)
		c.memMu.Unlock()

		c.evMu.Lock()
		if c.eventfd >= 0 {
			_ = unix.Close(c.eventfd)
			c.eventfd = -1
		}
		c.evMu.Unlock()

		d.mu.Lock()
		if d.ctx == c {
			d.ctx = nil
			d.lastClose = time.Now()
		}
		if reset && !d.closed {
			d.status.Store(hlsys.DeviceStatusOperational)
		}
		d.mu.Unlock()
		close(c.released)
		c.log.Debug().Bool("device_closed", gone).Bool("reset", reset).Msg("compute context released")
	})
}

// Numbering implements hlsys.Backend.
func (c *hctx) Numbering() hlsys.Numbering { return c.d.num }

// Name implements hlsys.Backend: "hlsimN (emulated)".
func (c *hctx) Name() string { return c.d.name + " (emulated)" }

// Emulated implements hlsys.Backend.
func (c *hctx) Emulated() bool { return true }

// CSTimeout is the emulated TDR (Config.CSTimeout). On Gaudi3 the driver
// does not see direct-mode work, so the device path applies it itself
// (dma.Options.CSTimeout).
func (c *hctx) CSTimeout() time.Duration { return c.d.cfg.CSTimeout }

// KernelRelease is the emulated kernel release; the driver layer picks the
// DMA-BUF export form from it.
func (c *hctx) KernelRelease() string { return c.d.cfg.Kernel }

// hasEventFD reports whether an eventfd is registered.
func (c *hctx) hasEventFD() bool {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	return c.eventfd >= 0
}

// notify records notifier events and signals the registered eventfd.
func (c *hctx) notify(bits uint64) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	c.events |= bits
	if c.eventfd >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(c.eventfd, one[:])
	}
}

// enterBG registers a timer callback; it returns false once the context
// is being torn down.
func (c *hctx) enterBG() bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgClosed {
		return false
	}
	c.bgN++
	return true
}

func (c *hctx) exitBG() {
	c.bgMu.Lock()
	c.bgN--
	if c.bgN == 0 {
		c.bgCond.Broadcast()
	}
	c.bgMu.Unlock()
}

func (c *hctx) waitBG() {
	c.bgMu.Lock()
	c.bgClosed = true
	for c.bgN > 0 {
		c.bgCond.Wait()
	}
	c.bgMu.Unlock()
}
