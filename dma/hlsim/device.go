package hlsim

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Model is the emulated Gaudi generation.
type Model int

// Emulated models. The zero value of Config.Model selects ModelGaudi2.
const (
	// ModelGaudi1 is the first Gaudi (PCI id 0x1000): physical DRAM
	// addresses, kernel CBs on the external DMA queues 0-7, a CB parser at
	// submission.
	ModelGaudi1 Model = iota + 1
	// ModelGaudi2 (PCI id 0x1020): DRAM behind the device MMU, user CBs
	// (device VA + USER_ALLOC_CB) on PDMA_0_0, PDMA_0_1, PDMA_1_0 (queues
	// 0, 1, 4) and the EDMA queues; no parser beyond the queue and address
	// checks.
	ModelGaudi2
	// ModelGaudi3 (PCI id 0x1060, Intel's out-of-tree driver): memory as
	// on Gaudi2, no user queue (the CS ioctl's only queue is the driver's
	// CPU queue), copies in direct PDMA mode through mapped CH_A register
	// blocks (gaudi3.go, RULES.md G rows).
	ModelGaudi3
)

// String returns "Gaudi", "Gaudi2" or "Gaudi3".
func (m Model) String() string {
	switch m {
	case ModelGaudi1:
		return "Gaudi"
	case ModelGaudi2:
		return "Gaudi2"
	case ModelGaudi3:
		return "Gaudi3"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// ParseModel is the model a name such as engine.EmulatorConfig.Model
// gives, case ignored: "gaudi2" or "" (the default), "gaudi1" or
// "gaudi", "gaudi3".
func ParseModel(name string) (Model, error) {
	switch strings.ToLower(name) {
	case "gaudi2", "":
		return ModelGaudi2, nil
	case "gaudi1", "gaudi":
		return ModelGaudi1, nil
	case "gaudi3":
		return ModelGaudi3, nil
	}
	return 0, fmt.Errorf("unknown emulated model %q", name)
}

// Defaults and limits of Config.
const (
	DefaultDRAMSize     = 4 << 30
	DefaultDRAMPageSize = 2 << 20
	// Gaudi3DRAMPageSize is Gaudi3's default ALLOC page and dram_page_size,
	// PAGE_SIZE_32MB (gaudi3_set_fixed_properties, docs/gaudi3.md), the
	// Gaudi3 model's default DRAMPageSize.
	Gaudi3DRAMPageSize  = 32 << 20
	DefaultKernel       = "6.8"
	DefaultMaxPendingCS = 64 // Gaudi2 (GAUDI2_MAX_PENDING_CS) and Gaudi3
	// DefaultMaxPendingCSGaudi1 is GAUDI_MAX_PENDING_CS.
	DefaultMaxPendingCSGaudi1 = 16 << 10
	DefaultCSTimeout          = 30 * time.Second
	// DefaultReleaseWatchdog is HL_DEVICE_RELEASE_WATCHDOG_TIMEOUT_SEC.
	DefaultReleaseWatchdog = 30 * time.Second
	DefaultEngineSpin      = 100 * time.Microsecond

	// MaxDRAMSize bounds Config.DRAMSize so the emulated address map stays
	// free of overlaps (the DRAM is sparse; only touched pages cost memory).
	MaxDRAMSize = 256 << 30

	// MaxMaxPendingCS bounds Config.MaxPendingCS: the most completion
	// slots the driver gives an ASIC (GAUDI_MAX_PENDING_CS, SZ_16K, on
	// Gaudi1; Gaudi2 has 64). Every context allocates its slots whole
	// when it opens, so 1<<40 ended the process there ("fatal error:
	// runtime: out of memory").
	MaxMaxPendingCS = 16 << 10
)

// Config describes one emulated ASIC and its driver. The zero value is a
// Gaudi2 with 4 GiB of DRAM on a 6.8 kernel.
type Config struct {
	Model        Model  // default ModelGaudi2
	DRAMSize     uint64 // user DRAM, default 4 GiB; rounded down to DRAMPageSize
	DRAMPageSize uint64 // dram_page_size and default ALLOC page; default 2 MiB (Gaudi3: Gaudi3DRAMPageSize, the driver's); a multiple of 4 KiB
	Index        int    // N in "hlsimN"

	// Kernel is the emulated kernel uAPI generation: "6.1" (up to "6.2")
	// means legacy 'H' request numbers and the {handle, size} DMA-BUF
	// export; "6.3".."6.6" legacy numbers and the {addr, size, offset}
	// export as those kernels implement it (offset validated but ignored
	// when the importer's SG table is built, size at least one page);
	// "6.7" and later (default "6.8") DRM accel numbers and the fixed
	// export (offset honoured, size a multiple of the page size). See
	// RULES.md. Releases before 6.1 are refused, and so are releases
	// before 6.7 for ModelGaudi3, whose only driver has the 6.7+ uAPI on
	// every kernel (RULES.md G13).
	Kernel string

	// MaxPendingCS is the number of CS completion slots (a power of
	// two, at most MaxMaxPendingCS; default the driver's: 64, 16K on
	// Gaudi1): CS returns EAGAIN while slot seq&(MaxPendingCS-1) still
	// holds a CS in flight.
	MaxPendingCS int

	// EngineSpin is how long an idle DMA engine keeps polling its queue
	// before it parks (default 100 us, negative: parks at once). A
	// hardware queue manager picks up new work without being woken; an
	// engine goroutine parked on a channel pays a goroutine wake-up
	// (several microseconds across cores, tens when the other core's
	// thread sleeps: measured on a 2-vCPU VM) per submission instead,
	// which the real device does not have. 100 us covers the pause
	// between two 256-copy batches of BenchmarkGaudiOverhead, 50 us did
	// not. The spin is bounded, so an idle device burns no CPU.
	EngineSpin time.Duration

	// CSTimeout is the TDR (the driver's timeout_locked), default 30 s. A
	// CS still in flight after it ends TIMEDOUT. CS_FLAGS_CUSTOM_TIMEOUT
	// overrides it per CS (in seconds).
	CSTimeout time.Duration

	// NoResetOnLockup is the driver's reset_on_lockup=0 (a module
	// parameter, default 1): a TDR does not reset the device but marks it
	// as needing a reset (DEVICE_STATUS NEEDS_RESET: CS, WAIT_CS, MEMORY,
	// CB and most INFO ops EBUSY, Open EPERM) until the context is
	// released. By default a TDR goes through the driver's conditional
	// reset (reset.go, RULES.md R rows), unless the timed-out CS had
	// CS_FLAGS_SKIP_RESET_ON_TIMEOUT.
	NoResetOnLockup bool

	// ReleaseWatchdog is how long the driver waits, after notifying a
	// context that registered an eventfd of a reset (a TDR, Reset), for
	// that context to be released before it hard-resets the device and
	// kills the process holding it: HL_DEVICE_RELEASE_WATCHDOG_TIMEOUT_SEC
	// (30 s, the default), a define the driver lets only debugfs change
	// (device_release_watchdog_timeout_sec), not a module parameter.
	ReleaseWatchdog time.Duration

	// Kill stands for the SIGKILL with which a hard reset ends a process
	// that still holds the device open (device_kill_open_processes, 1 s
	// after the CSs were rolled back). Nil (the default) means the
	// emulator sends SIGKILL to its own process, as the driver would.
	// Non-nil (tests) is called instead, and the context is then dead:
	// every later call on its Backend but Close fails with ENODEV (an
	// emulator-only answer: on hardware the process no longer exists),
	// and the device stays IN_RESET until that Backend is closed.
	Kill func()

	// HeldExports models what an exported DMA-BUF holds (RULES.md R12):
	// the export takes a reference on the compute fd's file (memory.c
	// export_dmabuf: get_file, paired with fput in hl_release_dmabuf),
	// so closing the Backend while any DMA-BUF of the context is still
	// open somewhere (its fd, a dup, another process, an importer) does
	// not release the context: it lives on, with its memory, its CSs, its
	// eventfd and the release watchdog, and is released once the last
	// export is gone. A release watchdog expiring meanwhile hard-resets
	// and kills, as for an open context. Off by default (the emulator
	// then releases at Close, as it always did). It needs the write-lease
	// probe of exportsLive (without it Close releases at once) and covers
	// Gaudi2/Gaudi3 exports, not Gaudi1's, nor CB mmaps.
	HeldExports bool

	// Logger receives the emulator's logs (validation failures at debug
	// level, engine faults and TDR at warn). Default: disabled.
	Logger zerolog.Logger
}

// Stats are cumulative counters of a Device, over all its contexts.
type Stats struct {
	CSSubmitted uint64 // CSs accepted by the CS ioctl; on Gaudi3, doorbells announcing new work (RULES G6)
	CSCompleted uint64 // ended COMPLETED
	CSAborted   uint64 // ended ABORTED (reset, context close, AbortNextCS, engine fault)
	CSTimedOut  uint64 // ended TIMEDOUT (TDR)

	PacketsExecuted uint64        // packets run by the engines
	BytesMoved      uint64        // LIN_DMA bytes copied or set
	DMABusy         time.Duration // time engines spent executing CBs, summed over engines
	// DMAActive is the wall time during which at least one engine was
	// executing: the union of the engines' busy intervals. Unlike DMABusy
	// it never exceeds the elapsed time, so "elapsed minus DMAActive" is
	// the time the device sat idle.
	DMAActive time.Duration
	// EmuActive is the wall time during which an engine was executing or
	// a CS ioctl was running (the emulated driver validating the CS,
	// reading its chunk array, building and queueing the jobs, arming
	// the TDR): DMAActive plus the emulated driver's submission work that
	// did not overlap it. WAIT_CS is not counted (a poller's time is its
	// own).
	EmuActive time.Duration

	// EngineParks counts the times a DMA engine (Gaudi3: a PDMA channel's
	// worker, after work), idle for its whole EngineSpin window, went to
	// sleep (the next job or doorbell then wakes it).
	EngineParks uint64

	EngineFaults uint64 // jobs that failed in an engine (MMU fault, bad packet)
	// Resets counts hard resets of the device (RESET_COUNT): a TDR or
	// Reset without a registered eventfd, the release watchdog expiring,
	// the release of a context under the watchdog or needing a reset.
	// Arming the watchdog is not a reset.
	Resets uint64
	// Kills counts the processes a hard reset killed (Config.Kill, or the
	// emulator's own SIGKILL, which the counter cannot outlive).
	Kills uint64
	// UserMappings is the number of user mmaps (kernel CBs, Gaudi3 PDMA
	// blocks) not yet undone by Munmap or by the context's Close: 0 once
	// every context released what it mapped. A Device.Close leaves them
	// mapped (hl_device_fini: each mapping holds its own reference until
	// the user unmaps it).
	UserMappings int64
}

// Device is one emulated ASIC plus its driver instance. Its methods are
// safe for concurrent use.
type Device struct {
	cfg       Config
	log       zerolog.Logger
	name      string
	num       hlsys.Numbering
	exportNew bool // {addr, size, offset} export (kernel >= 6.3)
	exportFix bool // export honours the offset, size a page multiple (kernel >= 6.7)
	newInfo   bool // 304-byte HW_IP_INFO, 40-byte HW_IDLE (kernel >= 6.3)
	leases    bool // write-lease probe of exported memfds works (see exportsLive)
	amap      addrMap

	expMu   sync.Mutex
	exports map[int]exportRec // importer views of exported fds, by fd number (DMABufView)

	// beforeSchedule, when set (tests), runs after a CS passed validation
	// and got its sequence number, just before it is scheduled: the window
	// in which hl_hw_queue_schedule_cs sees a device that went
	// non-operational.
	beforeSchedule func()
	// execHook, when set (tests), runs in a Gaudi3 channel's worker as it
	// starts a doorbell's packets (the channel's mu held); atomic, as the
	// worker may find work by polling MSQ_PI, a store the race detector
	// does not see (the register page is not Go memory), so nothing else
	// orders the test's setting of it before the worker's read.
	execHook atomic.Pointer[func()]
	// pollHook, when set (tests), runs in a Gaudi3 channel's worker after
	// it saw MSQ_PI move and before it takes the doorbell lock; atomic,
	// as a test sets it while the worker polls.
	pollHook atomic.Pointer[func()]
	// testGrace, when set (tests: a fuzz target, which checks no timing),
	// is the wait before a hard reset's kill instead of killGrace; set
	// before the first reset.
	testGrace time.Duration

	mu        sync.Mutex // guards closed, ctx, open stats
	closed    bool
	ctx       *hctx
	opens     uint64
	lastOpen  time.Time
	lastClose time.Time
	status    atomic.Uint32 // hlsys.DeviceStatus*

	// The driver's reset state (reset.go), under mu: the release
	// watchdog (wdActive is also read without mu, by WAIT_CS), the
	// context it watches and its timer; quit is closed by Close; bg
	// counts hard resets running in the background.
	wdActive atomic.Bool
	wdCtx    *hctx
	wdT      *time.Timer
	quit     chan struct{}
	bg       sync.WaitGroup

	faultMu   sync.Mutex
	faulty    atomic.Bool // some fault is armed: hangN, abortN or delayN > 0
	hangN     int
	abortN    int
	delayN    int
	delayTime time.Duration

	// Device-wide memory (not per context): Gaudi1 physical DRAM arena and
	// the SRAM of both models. Read and written by engines under the
	// context's memMu read lock; released in Close after the context.
	arenaFD int // Gaudi1: memfd of the DRAM arena, -1 otherwise
	arena   []byte
	sram    []byte

	st struct {
		// submitted is counted by the submitting side (CS ioctl,
		// Doorbell), the rest mostly by the engines: apart, on its own
		// cache line, a submission does not take the engines' counters
		// from the core that runs them.
		submitted                             atomic.Uint64
		_                                     cpu.CacheLinePad
		completed, aborted, timedout          atomic.Uint64
		packets, bytes, faults, resets, parks atomic.Uint64
		kills                                 atomic.Uint64
		blocks                                atomic.Uint64 // Gaudi3 MAP_BLOCK calls that succeeded
		userMaps                              atomic.Int64  // user mmaps not yet undone (Stats.UserMappings)
		busy                                  atomic.Int64
	}
	// actMu guards dmaT and emuT, which an engine's execution opens and
	// closes together. Their times are the device clock's (clock).
	actMu sync.Mutex
	dmaT  activity  // engines executing (Stats.DMAActive)
	emuT  activity  // engines executing or a CS ioctl running (Stats.EmuActive)
	t0    time.Time // clock's origin
	mono0 int64     // CLOCK_MONOTONIC at t0 (ns): ktime is mono0 + clock()
}

// New creates an emulated device. It fails when the configuration is
// invalid or when the kernel refuses what the emulator needs
// (process_vm_readv on itself, memfd_create).
func New(cfg Config) (_ *Device, err error) {
	if cfg.Model == 0 {
		cfg.Model = ModelGaudi2
	}
	if cfg.Model != ModelGaudi1 && cfg.Model != ModelGaudi2 && cfg.Model != ModelGaudi3 {
		return nil, fmt.Errorf("hlsim: unknown model %v", cfg.Model)
	}
	if cfg.DRAMPageSize == 0 {
		cfg.DRAMPageSize = DefaultDRAMPageSize
		if cfg.Model == ModelGaudi3 {
			cfg.DRAMPageSize = Gaudi3DRAMPageSize
		}
	}
	if cfg.DRAMPageSize%pageSize != 0 {
		return nil, fmt.Errorf("hlsim: DRAMPageSize %#x is not a multiple of 4 KiB", cfg.DRAMPageSize)
	}
	if cfg.DRAMSize == 0 {
		cfg.DRAMSize = DefaultDRAMSize
	}
	if cfg.DRAMSize > MaxDRAMSize {
		return nil, fmt.Errorf("hlsim: DRAMSize %#x above the emulator's limit %#x", cfg.DRAMSize, uint64(MaxDRAMSize))
	}
	cfg.DRAMSize -= cfg.DRAMSize % cfg.DRAMPageSize
	if cfg.DRAMSize == 0 {
		return nil, errors.New("hlsim: DRAMSize smaller than one DRAM page")
	}
	if cfg.Kernel == "" {
		cfg.Kernel = DefaultKernel
	}
	if err := CheckKernel(cfg.Kernel); err != nil {
		return nil, err
	}
	major, minor, _ := parseKernel(cfg.Kernel)
	if cfg.Model == ModelGaudi3 && !atLeast(major, minor, 6, 7) {
		// Only the out-of-tree driver serves Gaudi3, with /dev/accel
		// nodes, the DRM accel numbers and the fixed export on every
		// kernel (RULES.md G13): there is no legacy-numbered Gaudi3.
		return nil, fmt.Errorf("hlsim: kernel %q: Gaudi3's driver (HabanaAI/drivers.accel.habanalabs.kernel) has the accel numbering and the 6.7+ export on every kernel; emulate it with Kernel 6.7 or later", cfg.Kernel)
	}
	if cfg.MaxPendingCS == 0 {
		// The driver's max_pending_cs: GAUDI2_MAX_PENDING_CS (64) on
		// Gaudi2, GAUDI_MAX_PENDING_CS (SZ_16K) on Gaudi1 (gaudi2P.h,
		// gaudiP.h; *_set_fixed_properties). Gaudi3 keeps 64.
		cfg.MaxPendingCS = DefaultMaxPendingCS
		if cfg.Model == ModelGaudi1 {
			cfg.MaxPendingCS = DefaultMaxPendingCSGaudi1
		}
	}
	if cfg.MaxPendingCS < 1 || cfg.MaxPendingCS&(cfg.MaxPendingCS-1) != 0 {
		return nil, fmt.Errorf("hlsim: MaxPendingCS %d is not a power of two", cfg.MaxPendingCS)
	}
	if cfg.MaxPendingCS > MaxMaxPendingCS {
		return nil, fmt.Errorf("hlsim: MaxPendingCS %d above the limit %d", cfg.MaxPendingCS, MaxMaxPendingCS)
	}
	switch {
	case cfg.EngineSpin == 0:
		cfg.EngineSpin = DefaultEngineSpin
	case cfg.EngineSpin < 0:
		cfg.EngineSpin = 0
	}
	if cfg.CSTimeout <= 0 {
		cfg.CSTimeout = DefaultCSTimeout
	}
	if cfg.ReleaseWatchdog <= 0 {
		cfg.ReleaseWatchdog = DefaultReleaseWatchdog
	}
	if cfg.Index < 0 {
		return nil, fmt.Errorf("hlsim: negative Index %d", cfg.Index)
	}
	if err := probeHostAccess(); err != nil {
		return nil, fmt.Errorf("hlsim: host memory access (process_vm_readv on self) unavailable: %w", err)
	}

	mono0 := monotonicNow()
	d := &Device{
		t0:        time.Now(),
		mono0:     mono0,
		cfg:       cfg,
		name:      "hlsim" + strconv.Itoa(cfg.Index),
		num:       hlsys.Legacy,
		exportNew: atLeast(major, minor, 6, 3),
		newInfo:   atLeast(major, minor, 6, 3),
		arenaFD:   -1,
		exports:   map[int]exportRec{},
		quit:      make(chan struct{}),
	}
	// Accel registration and the DRM ioctl numbers arrived together with
	// the dma-buf offset fix in the 6.7 merge window.
	if atLeast(major, minor, 6, 7) {
		d.num = hlsys.Accel
		d.exportFix = true
	}
	d.log = cfg.Logger.With().Str("device", d.name).Str("model", cfg.Model.String()).Logger()
	d.amap = newAddrMap(cfg)
	d.leases = probeLeases()
	defer func() {
		if err != nil {
			d.releaseDeviceMemory()
		}
	}()
	if d.sram, err = anonMap(int(d.amap.sramSize)); err != nil {
		return nil, fmt.Errorf("hlsim: SRAM: %w", err)
	}
	if cfg.Model == ModelGaudi1 {
		d.arenaFD, d.arena, err = newMemfd(d.name+"-dram", cfg.DRAMSize)
		if err != nil {
			return nil, fmt.Errorf("hlsim: DRAM arena: %w", err)
		}
	}
	d.status.Store(hlsys.DeviceStatusOperational)
	d.log.Debug().Str("kernel", cfg.Kernel).Str("numbering", d.num.String()).
		Uint64("dram_size", cfg.DRAMSize).Bool("export_leases", d.leases).Msg("emulated device created")
	return d, nil
}

// Name returns "hlsimN".
func (d *Device) Name() string { return d.name }

// Model returns the emulated model.
func (d *Device) Model() Model { return d.cfg.Model }

// KernelRelease returns the emulated kernel release (Config.Kernel).
func (d *Device) KernelRelease() string { return d.cfg.Kernel }

// numbering returns the ioctl numbering of the emulated compute node.
func (d *Device) numbering() hlsys.Numbering { return d.num }

// Accel reports whether the emulated compute node takes the DRM accel
// ioctl numbers (/dev/accel/accelN, kernel 6.7 on) rather than the
// legacy 'H' ones (/dev/hlN): Config.Kernel decides.
func (d *Device) Accel() bool { return d.num == hlsys.Accel }

// Backend is an open compute context of the emulated device: the methods
// of dma.Backend (give it to dma.NewDevice, or Open to dma.OpenBackend).
// hlsim does not import dma, whose own tests run against the emulator.
type Backend interface {
	Ioctl(req uintptr, arg unsafe.Pointer) error
	Mmap(offset int64, length int) ([]byte, error)
	Munmap(b []byte) error
	Close() error
	Name() string
	Emulated() bool
}

// Open opens the compute node. Only one context may be open at a time, as
// with the driver: a second Open fails with an error wrapping unix.EBUSY
// until the first context is closed; while that context is being released
// or the device is resetting it fails with EAGAIN, while the device is in
// malfunction (SetStatus) with EPERM, after Close with ENODEV.
func (d *Device) Open() (Backend, error) {
	c, err := d.open()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// open is Open, giving the context as the driver binding takes it.
func (d *Device) open() (*hctx, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fail := func(e unix.Errno) error { return &hlsys.Error{Op: "open", Node: d.name, Errno: e} }
	// The order of hl_device_open: device state first (in reset: EAGAIN,
	// malfunction or needs-reset: EPERM), then a context in release
	// (EAGAIN), then an active compute context (EBUSY, "another user is
	// working on it").
	switch st := d.status.Load(); {
	case d.closed:
		return nil, fail(unix.ENODEV)
	case st == hlsys.DeviceStatusInReset || st == hlsys.DeviceStatusInResetAfterDeviceRelease:
		return nil, fail(unix.EAGAIN)
	case st != hlsys.DeviceStatusOperational:
		return nil, fail(unix.EPERM)
	case d.ctx != nil && d.ctx.state.Load() != ctxOpen:
		return nil, fail(unix.EAGAIN) // the previous context is being released
	case d.ctx != nil:
		return nil, fail(unix.EBUSY)
	}
	c := newCtx(d)
	d.ctx = c
	d.opens++
	d.lastOpen = time.Now()
	d.log.Debug().Uint64("open", d.opens).Msg("compute context opened")
	return c, nil
}

// Close tears the device down: an open context is released (its CSs are
// aborted, its goroutines stopped, its memory freed) and answers ENODEV
// to every later ioctl. DMA-BUF fds already exported stay valid, and so
// do the context's user mmaps (kernel CBs, Gaudi3 PDMA blocks) until its
// Munmap or Close undoes them: in the driver each mapping holds its own
// reference (hl_mem_mgr_mmap's on the CB, dropped in
// hl_mmap_mem_buf_vm_close; hl_hw_block_mmap's hl_ctx_get, dropped in
// hw_block_vm_close; both in common/), and hl_device_fini, failing to
// kill the process, only cuts the fd off from the device
// (device_disable_open_processes, common/device.c). Close is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	c := d.ctx
	d.stopWatchdogLocked()
	close(d.quit)
	d.mu.Unlock()
	if c != nil {
		c.teardown(true)
	}
	d.bg.Wait() // a hard reset in progress
	d.status.Store(hlsys.DeviceStatusMalfunction)
	d.releaseDeviceMemory()
	d.log.Debug().Msg("emulated device closed")
	return nil
}

func (d *Device) releaseDeviceMemory() {
	if d.sram != nil {
		_ = unix.Munmap(d.sram)
		d.sram = nil
	}
	if d.arena != nil {
		_ = unix.Munmap(d.arena)
		d.arena = nil
	}
	if d.arenaFD >= 0 {
		_ = unix.Close(d.arenaFD)
		d.arenaFD = -1
	}
}

// DelayNextCS makes the next n submitted CSs complete only delay after
// their packets have executed (the TDR still applies). It replaces an
// earlier DelayNextCS; n <= 0 cancels it.
func (d *Device) DelayNextCS(n int, delay time.Duration) {
	d.faultMu.Lock()
	d.delayN, d.delayTime = max(n, 0), delay
	d.armedLocked()
	d.faultMu.Unlock()
}

// HangNextCS makes the next n submitted CSs never complete by themselves:
// their packets are not executed (the queue goes on with later work). The
// TDR then fires after the CS timeout, with the driver's consequences
// (reset.go): a conditional reset, or NEEDS_RESET with
// Config.NoResetOnLockup, or only the CS_TIMEOUT event for a CS with
// SKIP_RESET_ON_TIMEOUT; the hung CS itself ends only with the hard reset
// or the release of its context. It replaces an earlier HangNextCS; n <= 0
// cancels it.
func (d *Device) HangNextCS(n int) {
	d.faultMu.Lock()
	d.hangN = max(n, 0)
	d.armedLocked()
	d.faultMu.Unlock()
}

// AbortNextCS makes the next n submitted CSs end ABORTED (WAIT_CS -EIO)
// without executing their packets. It replaces an earlier AbortNextCS;
// n <= 0 cancels it.
func (d *Device) AbortNextCS(n int) {
	d.faultMu.Lock()
	d.abortN = max(n, 0)
	d.armedLocked()
	d.faultMu.Unlock()
}

// armedLocked records whether a fault is armed (faultMu held).
func (d *Device) armedLocked() { d.faulty.Store(d.hangN > 0 || d.abortN > 0 || d.delayN > 0) }

// injected returns the faults for the next CS and consumes them.
func (d *Device) injected() (hang, abort bool, delay time.Duration) {
	if !d.faulty.Load() { // no lock on every submission's path
		return false, false, 0
	}
	d.faultMu.Lock()
	defer d.faultMu.Unlock()
	defer d.armedLocked()
	if d.hangN > 0 {
		d.hangN--
		hang = true
	}
	if d.abortN > 0 {
		d.abortN--
		abort = true
	}
	if d.delayN > 0 {
		d.delayN--
		delay = d.delayTime
	}
	return hang, abort, delay
}

// ForceStatus makes the device report status (a DEVICE_STATUS value:
// uint32(dma.StatusMalfunction) and the like) until a hard reset or
// another ForceStatus: fault injection for the states the emulator does
// not reach by itself (MALFUNCTION after a failed reset). Every ioctl
// then reacts as the driver does in that state (hl_device_operational).
// DeviceStatusOperational restores normal operation. It has no effect
// after Close.
func (d *Device) ForceStatus(status uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.status.Store(status)
	}
}

// operational is hl_device_operational: OPERATIONAL and
// IN_DEVICE_CREATION are operational; IN_RESET,
// IN_RESET_AFTER_DEVICE_RELEASE, MALFUNCTION and NEEDS_RESET are not.
func (d *Device) operational() bool {
	switch d.status.Load() {
	case hlsys.DeviceStatusOperational, hlsys.DeviceStatusInDeviceCreation:
		return true
	}
	return false
}

// Stats returns a snapshot of the counters.
func (d *Device) Stats() Stats {
	dmaActive, emuActive := d.active()
	return Stats{
		CSSubmitted:     d.st.submitted.Load(),
		CSCompleted:     d.st.completed.Load(),
		CSAborted:       d.st.aborted.Load(),
		CSTimedOut:      d.st.timedout.Load(),
		PacketsExecuted: d.st.packets.Load(),
		BytesMoved:      d.st.bytes.Load(),
		DMABusy:         time.Duration(d.st.busy.Load()),
		DMAActive:       dmaActive,
		EmuActive:       emuActive,
		EngineParks:     d.st.parks.Load(),
		EngineFaults:    d.st.faults.Load(),
		Resets:          d.st.resets.Load(),
		Kills:           d.st.kills.Load(),
		UserMappings:    d.st.userMaps.Load(),
	}
}

// CheckKernel refuses a Config.Kernel release the emulator does not
// take: one it cannot parse, or older than 6.1.
func CheckKernel(release string) error {
	major, minor, ok := parseKernel(release)
	if !ok {
		return fmt.Errorf("hlsim: cannot parse kernel release %q", release)
	}
	if !atLeast(major, minor, 6, 1) {
		return fmt.Errorf("hlsim: kernel %q: only 6.1 and later uAPI generations are emulated", release)
	}
	return nil
}

func parseKernel(s string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimSpace(s), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	// Allow "6.8.0-rc1": only the leading digits of minor matter.
	m := parts[1]
	if i := strings.IndexFunc(m, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		m = m[:i]
	}
	minor, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return 0, 0, false
	}
	return major, minor, true
}

func atLeast(major, minor, wantMajor, wantMinor int) bool {
	return major > wantMajor || (major == wantMajor && minor >= wantMinor)
}

// newMemfd creates a sparse memfd of size bytes and maps it shared.
func newMemfd(name string, size uint64) (int, []byte, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		_ = unix.Close(fd)
		return -1, nil, fmt.Errorf("ftruncate: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		_ = unix.Close(fd)
		return -1, nil, fmt.Errorf("mmap: %w", err)
	}
	return fd, mem, nil
}

// anonMap maps size bytes of zeroed, emulator-owned memory.
func anonMap(size int) ([]byte, error) {
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
}

// probeLeases checks that a write lease on a private O_RDWR reopen of a
// memfd tells whether other O_RDWR opens (exported DMA-BUF fds) exist.
func probeLeases() bool {
	fd, err := unix.MemfdCreate("hlsim-lease-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	ref, err := reopenFD(fd, unix.O_RDWR|unix.O_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(ref)
	if writeLeaseBusy(ref) != errNotBusy {
		return false
	}
	exp, err := reopenFD(fd, unix.O_RDWR|unix.O_CLOEXEC)
	if err != nil {
		return false
	}
	busy := writeLeaseBusy(ref)
	_ = unix.Close(exp)
	return busy == errBusy && writeLeaseBusy(ref) == errNotBusy
}

var (
	errBusy    = errors.New("busy")
	errNotBusy = errors.New("not busy")
)

// writeLeaseBusy takes and drops a write lease on fd: the kernel grants it
// only when no other open file description of the inode has it open for
// reading or writing.
func writeLeaseBusy(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK)
	switch {
	case err == nil:
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
		return errNotBusy
	case errors.Is(err, unix.EAGAIN):
		return errBusy
	}
	return err
}

// monotonicNow is CLOCK_MONOTONIC in ns, the clock of ktime_get(), by a
// system call (read once per device: ktime then follows the device clock,
// Device.ktime).
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

var selfPID = os.Getpid()

// sliceAddr is the process address of b's first byte (overlap checks only).
func sliceAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
