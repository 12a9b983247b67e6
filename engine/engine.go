package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/rdmapath"
	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/wire"
)

// Engine moves data between host memory and Gaudi devices. It owns its
// devices, worker pool, queues and completion actors; Close releases all of
// them. An Engine is safe for concurrent use.
//
// An Engine is made by New. One not made so (a declared Engine{}, or a nil
// *Engine) refuses every operation, Close too, with ErrInvalid (NewBatch's
// batch is refused by Submit); its getters give zero values.
type Engine struct {
	cfg Config
	log zerolog.Logger

	// cp runs the copies: devices, queues, workers, completion actors,
	// staging between devices (internal/copier).
	cp *copier.Copier
	// hostCopy copies host memory (kernel by size and machine, large
	// copies split across cores): the copier's host copies and the unix
	// transport's.
	hostCopy *memcopy.Copier
	// reqPool holds *[]datapath.Req: the requests of lists that ended.
	reqPool sync.Pool

	// Tasks that wait on other work (requests to peers) run as goroutines
	// bounded by semaphores taken inside them.
	async   sync.WaitGroup
	workers workers // the goroutines of env.Go (workers.go)
	// epLoops counts endpoint readers and writers, also of endpoints that
	// failed and left endpoints: Close waits for them before it releases
	// buffers (a reader may still be landing data).
	epLoops sync.WaitGroup
	rmaSem  chan struct{}

	mu      sync.Mutex
	buffers map[uint64]*Buffer
	nextID  atomic.Uint64
	closed  atomic.Bool
	once    sync.Once
	closeEr error

	resolved *Future // shared already-successful future for inline ops
	st       copier.Counters

	gate datapath.Gate // calls Close waits for before it unmaps (gate.go); its hook (tests) runs in an admitted call before its copy
	// starts counts Endpoint operations being started (Put, Get and the
	// lists, up to their data path's Start returning; Bind): Close waits for
	// them before it waits for e.async, so that no operation begun before
	// Close starts a task after that wait (on memory Close then frees).
	// Its hook (tests) runs in an admitted start before the data path's.
	starts    datapath.Gate
	hookDrain atomic.Pointer[func()] // tests: Close runs it when it waits for admitted calls, starts or buffer releases
	hookAlloc atomic.Pointer[func()] // tests: Alloc and Register run it once admitted
	// tests: destroyBuffer runs it before (booked) and after it takes the
	// buffer out of the engine's books, before it releases the memory.
	hookDestroy atomic.Pointer[func(b *Buffer, booked bool)]
	// destroys counts the buffer releases under way (Buffer.destroy):
	// Close waits for them (waitDestroys) before it closes what they use.
	destroyMu   sync.Mutex
	destroyIdle sync.Cond // destroys reached 0
	destroys    int

	// tests: newEndpoint runs it once Connect made the data path.
	hookPath atomic.Pointer[func(datapath.Path)]

	ident        identity
	lastVerified atomic.Pointer[wire.RemoteKey] // see verifyKey
	epMu         sync.Mutex
	endpoints    map[*Endpoint]struct{}
	listeners    map[*Listener]struct{}
	// dials counts the Dials in flight (startDial); Close cancels
	// closing, which ends their handshakes, and waits for them.
	dials       sync.WaitGroup
	closing     context.Context
	stopDialing context.CancelFunc

	rdma    *rdmapath.Transport // nil: no RDMA (rdmaWhy says why)
	rdmaWhy string

	attach attachState // devices the Habana runtime lends (attach.go)

	transports datapath.Set // transports.go

	epOps [numTransportKinds]transportCounters // endpoints' Puts and Gets by transport (opstats.go)
	// closedEps sums the counters of the closed endpoints by transport,
	// under epMu (opstats.go).
	closedEps [numTransportKinds]closedEndpoints
}

// New opens the devices Config asks for and starts the engine.
func New(cfg Config) (_ *Engine, err error) {
	cfg = cfg.withDefaults()
	cfg.ClusterSecret = bytes.Clone(cfg.ClusterSecret) // the caller may clear (or reuse) its own
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if c := cfg.RDMA; len(c.Devices) > 0 && (c.Device != "" || len(c.Devices) > wire.MaxNICs) {
		return nil, newErr(ErrInvalid, fmt.Sprintf("Config.RDMA: Devices %q with Device %q (at most %d devices, and not both)", c.Devices, c.Device, wire.MaxNICs), nil)
	}
	if n := cfg.IPCCache.MaxRegions; n < 0 {
		return nil, newErr(ErrInvalid, fmt.Sprintf("Config.IPCCache.MaxRegions %d is negative", n), nil)
	}
	if cfg.IPCCache.Disabled {
		// The IPC handle cache has no uncached mode: ignored, the field
		// would leave peers' buffers mapped for a caller who turned it off.
		return nil, newErr(ErrInvalid, "Config.IPCCache.Disabled: the IPC handle cache cannot be disabled (bound it with MaxRegions and MaxBytes)", nil)
	}
	e := &Engine{
		cfg:       cfg,
		log:       cfg.Logger.With().Str("component", "engine").Logger(),
		buffers:   map[uint64]*Buffer{},
		resolved:  resolved(nil),
		endpoints: map[*Endpoint]struct{}{},
		listeners: map[*Listener]struct{}{},
	}
	e.gate.Init(&e.closed)
	e.destroyIdle.L = &e.destroyMu
	e.starts.Init(&e.closed)
	e.workers.init()
	e.closing, e.stopDialing = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			_ = e.Close()
		}
	}()
	if e.ident, err = newIdentity(); err != nil {
		return nil, err
	}
	e.rmaSem = make(chan struct{}, 64)
	if err := e.openCopier(); err != nil {
		return nil, err
	}
	e.openTransports()
	return e, nil
}

// openCopier starts the copy machinery and opens the devices Config asks
// for.
func (e *Engine) openCopier() (err error) {
	c := e.cfg
	e.hostCopy = memcopy.New(memcopy.Config{NTFrom: c.CopyNTMin, Workers: c.CopyWorkers, ParallelMin: c.ParallelCopyMin})
	e.log.Debug().Str("host_copy", e.hostCopy.String()).Msg("host copy policy")
	e.cp, err = copier.New(copier.Config{
		Logger: e.log, BaseLogger: c.Logger, Workers: c.Workers, QueueDepth: c.QueueDepth, FailWhenFull: c.QueueFull == FailWhenFull,
		CBSize: c.CBSize, MaxOpsPerCS: c.MaxOpsPerCS, ChunkSize: c.ChunkSize, ParallelCopyMin: c.ParallelCopyMin, InlineHostMax: c.InlineHostMax, HostCopy: e.hostCopy,
		PollSpin: c.PollSpin, CloseGrace: c.CloseGrace,
		RegMaxRegions: c.RegCache.MaxRegions, RegMaxBytes: c.RegCache.MaxBytes, RegCacheOff: c.RegCache.Disabled,
		Gate: &e.gate, Stats: &e.st,
		AllocHost: func(n int) (*copier.Mem, error) {
			b, err := e.alloc(n, Host, true) // staging's bounce buffers
			if err != nil {
				return nil, err
			}
			return &b.m, nil
		},
		FreeHost: func(m *copier.Mem) error { return m.Owner.(*Buffer).Free() },
		Destroy:  func(m *copier.Mem) { _ = m.Owner.(*Buffer).destroy() },
	})
	if err != nil || c.Devices == DevicesNone {
		return err
	}
	if err := e.cp.OpenDevices(copier.Devices{
		Discover: c.Devices == DevicesAuto, SysRoot: c.SysRoot, Emulated: c.EmulatedCount, Model: c.Emulator.Model,
		DRAMSize: c.Emulator.DRAMSize, Kernel: c.Emulator.Kernel, CSTimeout: c.Emulator.CSTimeout,
	}); err != nil {
		return err
	}
	return checkCBSize(c.CBSize, e.cp.DevList())
}

// Config returns the engine's configuration with every default applied.
func (e *Engine) Config() Config {
	if e.invalid() {
		return Config{}
	}
	return e.cfg
}

// NumDevices is the number of Gaudi devices the engine drives.
func (e *Engine) NumDevices() int {
	if e.invalid() {
		return 0
	}
	return len(e.cp.Devs)
}

// DeviceInfo describes one device the engine drives.
type DeviceInfo struct {
	Index     int    // Gaudi(Index) is its memory; when Attached, the attachment's index (Attachment.Location)
	Name      string // device node, or "hlsimN (emulated)"
	Model     string // the ASIC model, e.g. "gaudi2"
	Emulated  bool   // the device is the emulator (dma/hlsim), not hardware
	Numbering string // the ioctl numbering of its node: legacy /dev/hlN or DRM accel
	ExportAPI string // the DMA-BUF export form in use (dma.ExportAPI61 or dma.ExportAPIAddr)
	DRAMBase  uint64 // device DRAM base address (HW_IP_INFO)
	DRAMSize  uint64 // device DRAM size in bytes (HW_IP_INFO)
	DRAMFree  uint64 // free device DRAM in bytes when Devices was called (0 if unknown)
	PageSize  uint64 // device DRAM page size in bytes (HW_IP_INFO)
	DeviceID  uint32 // PCI device id (HW_IP_INFO)
	// The DMA engines copies use: how (dma.Device.DMAPath) and the queues
	// per direction (Gaudi3: PDMA channel numbers).
	DMAPath                         string
	H2DQueues, D2HQueues, D2DQueues []uint32
	// From discovery (empty for emulated devices where not applicable).
	Node          string // device node path, or the emulator's name
	ControlNode   string // the control node (INFO ioctls only), "" if none
	PCIAddr       string // PCI address, e.g. "0000:19:00.0"
	DeviceType    string // sysfs device_type
	Driver        string // "habanalabs", or "hlsim" for the emulator
	KernelRelease string // the uAPI generation the driver layer assumed
	// Attached: the Habana runtime owns the device and lent it (Attach);
	// else gxfer opened and owns it.
	Attached  bool
	LentBy    string // who lent it ("fd", "synapse (libSynapse.so)", "hlsim runtime")
	PoolStart uint64 // the runtime's pool, attached devices only
	PoolLen   uint64 // the runtime pool's length in bytes, attached devices only
	// Lost is non-nil (it wraps ErrDeviceLost) once the driver reset the
	// device: the engine released its context, and its buffers are gone,
	// until the engine has opened the device again (WaitDevice).
	Lost error
	// Resets is how many times the engine opened the device again after
	// the driver reset it.
	Resets int
}

// Devices describes the devices the engine drives.
func (e *Engine) Devices() []DeviceInfo {
	if e.invalid() {
		return nil
	}
	devs := e.cp.DevList()
	out := make([]DeviceInfo, 0, len(devs))
	for _, g := range devs {
		di, n := describe(g.Idx, g.Dev), g.Node
		di.Node, di.ControlNode, di.PCIAddr, di.DeviceType, di.Driver = n.Path, n.ControlPath, n.PCIAddr, n.DeviceType, n.Driver
		di.DMAPath, di.H2DQueues, di.D2HQueues, di.D2DQueues = g.Dev.DMAPath(), g.Dev.H2DQueues(), g.Dev.D2HQueues(), g.Dev.D2DQueues()
		if err := g.Dev.ResetErr(); err != nil {
			di.Lost = newErr(ErrDeviceLost, fmt.Sprintf("gaudi%d", g.Idx), err)
		}
		di.Resets = g.Gen
		out = append(out, di)
	}
	return append(out, e.attach.devices()...)
}

// describer is what Devices reads of a device gxfer opened (dma.Device)
// or one the runtime lent (dma.Attached).
type describer interface {
	Info() dma.HwInfo
	Name() string
	Model() dma.Model
	Emulated() bool
	Numbering() dma.Numbering
	ExportAPI() string
	KernelRelease() string
	DramUsage() (dma.DramUsage, error)
}

func describe(idx int, d describer) DeviceInfo {
	info := d.Info()
	di := DeviceInfo{
		Index: idx, Name: d.Name(), Model: d.Model().String(), Emulated: d.Emulated(),
		Numbering: d.Numbering().String(), ExportAPI: d.ExportAPI(), KernelRelease: d.KernelRelease(),
		DRAMBase: info.DramBase, DRAMSize: info.DramSize, PageSize: info.DramPageSize, DeviceID: info.DeviceID,
	}
	if u, err := d.DramUsage(); err == nil {
		di.DRAMFree = u.Free
	}
	return di
}

func (e *Engine) device(l Location) (*copier.Device, error) {
	if l.attached {
		return nil, newErr(ErrNoDevice, l.String()+" is runtime memory: gxfer drives no device there (see Attachment)", nil)
	}
	return e.cp.Device(l.dev)
}

// Alloc allocates size bytes at loc: page-aligned host memory outside the
// Go heap (Host), or device memory (Gaudi(i)). Without room it fails with
// ErrNoMemory; a device that refuses otherwise gives ErrDevice (or
// ErrDeviceLost after a reset).
func (e *Engine) Alloc(size int, loc Location) (*Buffer, error) {
	if e.invalid() {
		return nil, errNoEngineMade
	}
	return e.alloc(size, loc, false)
}

// alloc is Alloc; internal marks a buffer of the engine's own (bounce
// buffers of the data paths and of staging), which Lookup does not find.
func (e *Engine) alloc(size int, loc Location, internal bool) (*Buffer, error) {
	if !e.admitAlloc() {
		return nil, ErrClosed
	}
	defer e.exit()
	if size <= 0 {
		return nil, newErr(ErrInvalid, fmt.Sprintf("size %d", size), nil)
	}
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: loc, size: uint64(size), internal: internal}
	if loc.gaudi {
		g, err := e.device(loc)
		if err != nil {
			return nil, err
		}
		m, err := g.Dev.AllocDevice(uint64(size))
		if err != nil {
			return nil, newErr(dmaErrKind(err), fmt.Sprintf("alloc %d bytes on gaudi%d", size, loc.dev), err)
		}
		b.gd, b.dmem = g, m
		b.initMem()
		if err := g.Types.Insert(m.Addr(), uint64(size), memcache.MemGaudi, g.Idx, &b.m); err != nil {
			_ = m.Free()
			return nil, err
		}
	} else {
		shm, err := ipc.NewShared(size, fmt.Sprintf("gxfer-%d", b.id))
		// ipc refuses a size whose page rounding overflows (size > 0
		// here) as invalid: the host cannot map it either.
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, ipc.ErrInvalid) {
			return nil, newErr(ErrNoMemory, fmt.Sprintf("alloc %d host bytes", size), err)
		}
		if err != nil {
			return nil, fmt.Errorf("gxfer: alloc %d host bytes: %w", size, err)
		}
		b.shm = shm
		b.pages = shm.Bytes()[:size:size]
		b.ptr = unsafe.Pointer(&b.pages[0])
		b.initMem()
		if err := e.cp.AddHost(&b.m); err != nil {
			_ = shm.Close()
			return nil, err
		}
	}
	e.track(b)
	return b, nil
}

// Register makes caller memory usable in transfers. The memory must stay
// alive and unchanged in address until Deregister and the end of what
// still holds it (operations in flight, Bindings: see Deregister); Go
// cannot tell the engine when memory is freed. Mappings into devices are made on first
// use through the registration cache.
func (e *Engine) Register(mem []byte) (*Buffer, error) {
	if e.invalid() {
		return nil, errNoEngineMade
	}
	if !e.admitAlloc() {
		return nil, ErrClosed
	}
	defer e.exit()
	if len(mem) == 0 {
		return nil, newErr(ErrInvalid, "empty memory", nil)
	}
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: Host, size: uint64(len(mem)), user: mem, ptr: unsafe.Pointer(&mem[0])}
	b.initMem()
	if err := e.cp.AddHost(&b.m); err != nil {
		return nil, newErr(ErrInvalid, "memory overlaps a registered buffer", err)
	}
	e.track(b)
	return b, nil
}

// admitAlloc admits Alloc or Register through the close gate: Close
// collects the buffers to release only once no call that may still add
// one is in. An admitted call must call exit.
func (e *Engine) admitAlloc() bool {
	if !e.enter() {
		return false
	}
	if h := e.hookAlloc.Load(); h != nil {
		(*h)()
	}
	return true
}

func (e *Engine) track(b *Buffer) {
	e.mu.Lock()
	e.buffers[b.id] = b
	e.mu.Unlock()
}

// Lookup finds the host buffer holding [addr, addr+n) (the memory-type
// cache), and returns it as a Slice. Only buffers made by Alloc and
// Register are found, not the engine's own (a peer's memory it mapped,
// bounce buffers).
func (e *Engine) Lookup(addr uint64, n int) (Slice, error) {
	if e.invalid() {
		return Slice{}, errNoEngineMade
	}
	ent, ok := e.cp.Types.Lookup(addr, uint64(n))
	if ok {
		if b := ent.Owner.(*copier.Mem).Owner.(*Buffer); !b.internal {
			return b.Slice(int(addr-b.Addr()), n), nil
		}
	}
	return Slice{}, newErr(ErrInvalid, fmt.Sprintf("no buffer holds host range %#x+%d", addr, n), nil)
}

// LookupDevice finds the device buffer of Gaudi(dev) holding [addr, addr+n).
func (e *Engine) LookupDevice(dev int, addr uint64, n int) (Slice, error) {
	if e.invalid() {
		return Slice{}, errNoEngineMade
	}
	g, err := e.device(Gaudi(dev))
	if err != nil {
		return Slice{}, err
	}
	ent, ok := g.Types.Lookup(addr, uint64(n))
	if !ok {
		return Slice{}, newErr(ErrInvalid, fmt.Sprintf("no buffer holds gaudi%d range %#x+%d", dev, addr, n), nil)
	}
	b := ent.Owner.(*copier.Mem).Owner.(*Buffer)
	return b.Slice(int(addr-b.Addr()), n), nil
}

func (e *Engine) destroyBuffer(b *Buffer) error {
	if h := e.hookDestroy.Load(); h != nil {
		(*h)(b, true)
	}
	e.mu.Lock()
	delete(e.buffers, b.id)
	e.mu.Unlock()
	if h := e.hookDestroy.Load(); h != nil {
		(*h)(b, false)
	}
	var errs []error
	errs = append(errs, e.hooksFreeing(b))
	switch {
	case b.att != nil:
		b.att.a.rt.Forget(&b.m) // runtime memory: never freed by gxfer
	case b.loc.gaudi:
		e.cp.Forget(&b.m)
		errs = append(errs, b.dmem.Free())
	default:
		e.cp.Forget(&b.m)
		if b.shm != nil {
			errs = append(errs, b.shm.Close())
		}
		// b.user is left as it is: Bytes may be reading it (it
		// answers nil for a freed buffer), and b.ptr holds the
		// memory as long as b anyway.
	}
	if b.onDestroy != nil {
		errs = append(errs, b.onDestroy())
	}
	return errors.Join(errs...)
}

// Close ends every pending operation (queued ones with ErrClosed; those on
// a device get up to Config.CloseGrace to finish: a device still running
// one after that is closed first, which stops it, and only then are its
// copies failed with ErrClosed and their memory released), stops every
// goroutine and releases every buffer, mapping, fd and device. Copies
// that run on the caller's goroutine (small host-to-host Copy, a Batch's
// host copies, Binding Put and Get over "unix") and host workers' copies
// finish before any memory is released; those that start once Close has
// begun fail with ErrClosed. A buffer release under way when Close
// begins (a Free, the last operation out of a freed buffer) ends before
// Close returns. Idempotent.
func (e *Engine) Close() error {
	if e.invalid() {
		return errNoEngineMade
	}
	e.once.Do(func() {
		e.epMu.Lock()
		e.closed.Store(true)
		var ls []*Listener
		for l := range e.listeners {
			ls = append(ls, l)
		}
		var eps []*Endpoint
		for ep := range e.endpoints {
			eps = append(eps, ep)
		}
		e.epMu.Unlock()
		var errs []error
		for _, l := range ls {
			errs = append(errs, l.Close())
		}
		// No Dial starts now (closed is set); those in flight end.
		e.stopDialing()
		e.dials.Wait()
		// At once, not one after the other: each waits up to 200ms for
		// its Bye to a peer that does not read.
		var epWG sync.WaitGroup
		for _, ep := range eps {
			epWG.Go(func() { _ = ep.Close() })
		}
		epWG.Wait()
		errs = append(errs, e.transports.Close())
		// Stop intake, fail what is still queued, give the devices
		// CloseGrace, wait for staging.
		e.cp.Stop()
		// No operation begun before closed was set is still starting (on
		// closed endpoints they end at once), so every task is counted.
		e.starts.Drain(e.onDrain)
		// Peer-request tasks end once their inner copies have.
		e.stopWorkers()
		e.async.Wait()
		e.workers.live.Wait()
		e.epLoops.Wait()
		// Stop the devices before anything they may still touch is freed.
		errs = append(errs, e.cp.CloseDevices())
		// No copy on a caller's goroutine may still touch a buffer.
		e.drainGate()
		e.cp.WaitRuntime() // copies handed to attachments' copiers
		// Release buffers that are still alive.
		e.mu.Lock()
		live := make([]*Buffer, 0, len(e.buffers))
		for _, b := range e.buffers {
			live = append(live, b)
		}
		e.mu.Unlock()
		for _, b := range live {
			b.state.Or(freedBit) // operations still counted release into a freed buffer
			if err := b.destroy(); err != nil {
				errs = append(errs, err)
			}
		}
		// Releases begun elsewhere (Free, the last operation out of a
		// freed buffer) end before what they use is closed.
		e.waitDestroys()
		errs = append(errs, e.attach.detachAll()) // after the buffers' MRs
		errs = append(errs, e.cp.CloseCaches())
		errs = append(errs, e.transports.Finish())
		errs = append(errs, e.cp.CloseSims())
		e.closeEr = errors.Join(errs...)
	})
	return e.closeEr
}
