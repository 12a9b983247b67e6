package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/panjf2000/ants/v2"
	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/rdmapath"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/wire"
)

// Engine moves data between host memory and Gaudi devices. It owns its
// devices, worker pool, queues and completion actors; Close releases all of
// them. An Engine is safe for concurrent use.
type Engine struct {
	cfg Config
	log zerolog.Logger

	pool *ants.Pool // drain tasks: never wait on other tasks

	// Tasks that wait on other work (staging between devices, requests to
	// peers) run as goroutines bounded by semaphores taken inside them.
	async sync.WaitGroup
	// epLoops counts endpoint readers and writers, also of endpoints that
	// failed and left endpoints: Close waits for them before it releases
	// buffers (a reader may still be landing data).
	epLoops  sync.WaitGroup
	stageSem chan struct{}
	rmaSem   chan struct{}
	inStage  *stagePool // TCP: bytes landing in Gaudi memory
	outStage *stagePool // TCP: bytes leaving Gaudi memory
	host     *hostPath
	devs     []*gdev
	sims     []*hlsim.Device
	types    *memcache.TypeCache // host ranges -> *Buffer

	mu      sync.Mutex
	buffers map[uint64]*Buffer
	nextID  atomic.Uint64
	closed  atomic.Bool
	once    sync.Once
	closeEr error

	resolved *Future // shared already-successful future for inline ops
	st       stats

	hookProcess atomic.Pointer[func()] // tests: runs in workers before processing
	gate        datapath.Gate          // calls Close waits for before it unmaps (gate.go); its hook (tests) runs in an admitted call before its copy
	hookDrain   atomic.Pointer[func()] // tests: Close runs it when it waits for admitted calls

	ident        identity
	lastVerified atomic.Pointer[wire.RemoteKey] // see verifyKey
	epMu         sync.Mutex
	endpoints    map[*Endpoint]struct{}
	listeners    map[*Listener]struct{}

	rdma    *rdmapath.Transport // nil: no RDMA (rdmaWhy says why)
	rdmaWhy string

	attach attachState // devices the Habana runtime lends (attach.go)

	transports map[TransportKind]datapath.Transport // transports.go
	bufHooks   []datapath.BufferHooks
}

// New opens the devices Config asks for and starts the engine.
func New(cfg Config) (_ *Engine, err error) {
	cfg = cfg.withDefaults()
	if c := cfg.RDMA; len(c.Devices) > 0 && (c.Device != "" || len(c.Devices) > wire.MaxNICs) {
		return nil, newErr(ErrInvalid, fmt.Sprintf("Config.RDMA: Devices %q with Device %q (at most %d devices, and not both)", c.Devices, c.Device, wire.MaxNICs), nil)
	}
	e := &Engine{
		cfg:       cfg,
		log:       cfg.Logger.With().Str("component", "engine").Logger(),
		types:     memcache.NewTypeCache(),
		buffers:   map[uint64]*Buffer{},
		resolved:  resolved(nil),
		endpoints: map[*Endpoint]struct{}{},
		listeners: map[*Listener]struct{}{},
	}
	e.gate.Init(&e.closed)
	defer func() {
		if err != nil {
			_ = e.Close()
		}
	}()
	if e.ident, err = newIdentity(); err != nil {
		return nil, err
	}
	e.pool, err = ants.NewPool(cfg.Workers, ants.WithPanicHandler(e.onPanic), ants.WithLogger(antsLogger{e.log}))
	if err != nil {
		return nil, fmt.Errorf("gxfer: worker pool: %w", err)
	}
	e.stageSem = make(chan struct{}, 8)
	e.rmaSem = make(chan struct{}, 64)
	e.inStage, e.outStage = newStagePool(e, stageBuffers), newStagePool(e, stageBuffers)
	e.host = newHostPath(e)
	if err := e.openDevices(); err != nil {
		return nil, err
	}
	e.openTransports()
	// At most one drain per (device, direction) and one for host copies
	// run at a time: the pool must hold them all.
	e.pool.Tune(max(cfg.Workers, numDirs*len(e.devs)+1))
	return e, nil
}

type antsLogger struct{ l zerolog.Logger }

func (a antsLogger) Printf(format string, args ...any) { a.l.Debug().Msgf(format, args...) }

// onPanic logs and counts a worker panic. Workers recover their own panics
// (failing the operations they held); this is also the pool's handler.
func (e *Engine) onPanic(p any) {
	e.log.Error().Str("panic", fmt.Sprint(p)).Msg("worker panicked")
	e.st.panics.Add(1)
}

func (e *Engine) openDevices() error {
	opts := dma.Options{Logger: e.cfg.Logger}
	if e.cfg.Devices == DevicesAuto {
		nodes, err := dma.Discover(e.cfg.SysRoot)
		if err != nil {
			e.log.Warn().Err(err).Msg("device discovery failed")
		}
		for _, n := range nodes {
			d, err := dma.Open(n, opts)
			if err != nil {
				return fmt.Errorf("gxfer: open %s: %w", n.Path, err)
			}
			e.addDevice(d, nil)
			e.devs[len(e.devs)-1].node = n
		}
	}
	if e.cfg.Devices == DevicesNone || (e.cfg.Devices == DevicesAuto && len(e.devs) > 0) {
		return nil
	}
	model := hlsim.ModelGaudi2
	switch strings.ToLower(e.cfg.Emulator.Model) {
	case "gaudi2", "":
	case "gaudi1", "gaudi":
		model = hlsim.ModelGaudi1
	case "gaudi3":
		model = hlsim.ModelGaudi3
	default:
		return newErr(ErrInvalid, "unknown emulated model "+e.cfg.Emulator.Model, nil)
	}
	for i := 0; i < e.cfg.EmulatedCount; i++ {
		sim, err := hlsim.New(hlsim.Config{
			Model:     model,
			DRAMSize:  e.cfg.Emulator.DRAMSize,
			Index:     i,
			Kernel:    e.cfg.Emulator.Kernel,
			CSTimeout: e.cfg.Emulator.CSTimeout,
			Logger:    e.cfg.Logger,
		})
		if err != nil {
			return fmt.Errorf("gxfer: emulated device %d: %w", i, err)
		}
		e.sims = append(e.sims, sim)
		b, err := sim.Open()
		if err != nil {
			return fmt.Errorf("gxfer: open emulated device %d: %w", i, err)
		}
		d, err := dma.NewDevice(b, opts)
		if err != nil {
			return fmt.Errorf("gxfer: emulated device %d: %w", i, err)
		}
		e.addDevice(d, sim)
		e.devs[len(e.devs)-1].node = dma.NodeInfo{Index: i, Path: d.Name(), DeviceType: d.Model().String(), Driver: "hlsim", Emulated: true}
	}
	return nil
}

// Config returns the engine's configuration with every default applied.
func (e *Engine) Config() Config { return e.cfg }

// NumDevices is the number of Gaudi devices the engine drives.
func (e *Engine) NumDevices() int { return len(e.devs) }

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
}

// Devices describes the devices the engine drives.
func (e *Engine) Devices() []DeviceInfo {
	out := make([]DeviceInfo, 0, len(e.devs))
	for _, g := range e.devs {
		info := g.dev.Info()
		di := DeviceInfo{
			Index: g.idx, Name: g.dev.Name(), Model: g.dev.Model().String(), Emulated: g.dev.Emulated(),
			Numbering: g.dev.Numbering().String(), ExportAPI: g.dev.ExportAPI(),
			DRAMBase: info.DramBase, DRAMSize: info.DramSize, PageSize: info.DramPageSize, DeviceID: info.DeviceID,
			Node: g.node.Path, ControlNode: g.node.ControlPath, PCIAddr: g.node.PCIAddr, DeviceType: g.node.DeviceType,
			Driver: g.node.Driver, KernelRelease: g.dev.KernelRelease(),
			DMAPath: g.dev.DMAPath(), H2DQueues: g.dev.H2DQueues(), D2HQueues: g.dev.D2HQueues(), D2DQueues: g.dev.D2DQueues(),
		}
		if u, err := g.dev.DramUsage(); err == nil {
			di.DRAMFree = u.Free
		}
		out = append(out, di)
	}
	return append(out, e.attach.devices()...)
}

func (e *Engine) device(l Location) (*gdev, error) {
	if l.attached {
		return nil, newErr(ErrNoDevice, l.String()+" is runtime memory: gxfer drives no device there (see Attachment)", nil)
	}
	if l.dev < 0 || l.dev >= len(e.devs) {
		return nil, newErr(ErrNoDevice, fmt.Sprintf("gaudi%d (engine has %d)", l.dev, len(e.devs)), nil)
	}
	return e.devs[l.dev], nil
}

// Alloc allocates size bytes at loc: page-aligned host memory outside the
// Go heap (Host), or device memory (Gaudi(i)).
func (e *Engine) Alloc(size int, loc Location) (*Buffer, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if size <= 0 {
		return nil, newErr(ErrInvalid, fmt.Sprintf("size %d", size), nil)
	}
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: loc, size: uint64(size)}
	if loc.gaudi {
		g, err := e.device(loc)
		if err != nil {
			return nil, err
		}
		m, err := g.dev.AllocDevice(uint64(size))
		if err != nil {
			return nil, fmt.Errorf("gxfer: alloc %d bytes on gaudi%d: %w", size, loc.dev, err)
		}
		b.gd, b.dmem = g, m
		if err := g.types.Insert(m.Addr(), uint64(size), memcache.MemGaudi, g.idx, b); err != nil {
			_ = m.Free()
			return nil, err
		}
	} else {
		shm, err := ipc.NewShared(size, fmt.Sprintf("gxfer-%d", b.id))
		if err != nil {
			return nil, fmt.Errorf("gxfer: alloc %d host bytes: %w", size, err)
		}
		b.shm = shm
		b.pages = shm.Bytes()[:size:size]
		b.ptr = unsafe.Pointer(&b.pages[0])
		if err := e.types.Insert(b.Addr(), uint64(size), memcache.MemHost, -1, b); err != nil {
			_ = shm.Close()
			return nil, err
		}
	}
	e.track(b)
	return b, nil
}

// Register makes caller memory usable in transfers. The memory must stay
// alive and unchanged in address until Deregister (Go cannot tell the
// engine when memory is freed). Mappings into devices are made on first
// use through the registration cache.
func (e *Engine) Register(mem []byte) (*Buffer, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if len(mem) == 0 {
		return nil, newErr(ErrInvalid, "empty memory", nil)
	}
	b := &Buffer{eng: e, id: e.nextID.Add(1), loc: Host, size: uint64(len(mem)), user: mem, ptr: unsafe.Pointer(&mem[0])}
	if err := e.types.Insert(b.Addr(), b.size, memcache.MemHost, -1, b); err != nil {
		return nil, newErr(ErrInvalid, "memory overlaps a registered buffer", err)
	}
	e.track(b)
	return b, nil
}

func (e *Engine) track(b *Buffer) {
	e.mu.Lock()
	e.buffers[b.id] = b
	e.mu.Unlock()
}

// Lookup finds the host buffer holding [addr, addr+n) (the memory-type
// cache), and returns it as a Slice.
func (e *Engine) Lookup(addr uint64, n int) (Slice, error) {
	ent, ok := e.types.Lookup(addr, uint64(n))
	if !ok {
		return Slice{}, newErr(ErrInvalid, fmt.Sprintf("no buffer holds host range %#x+%d", addr, n), nil)
	}
	b := ent.Owner.(*Buffer)
	return b.Slice(int(addr-b.Addr()), n), nil
}

// LookupDevice finds the device buffer of Gaudi(dev) holding [addr, addr+n).
func (e *Engine) LookupDevice(dev int, addr uint64, n int) (Slice, error) {
	g, err := e.device(Gaudi(dev))
	if err != nil {
		return Slice{}, err
	}
	ent, ok := g.types.Lookup(addr, uint64(n))
	if !ok {
		return Slice{}, newErr(ErrInvalid, fmt.Sprintf("no buffer holds gaudi%d range %#x+%d", dev, addr, n), nil)
	}
	b := ent.Owner.(*Buffer)
	return b.Slice(int(addr-b.Addr()), n), nil
}

// hostPointer returns the pointer for host range [addr, addr+n) of a live
// buffer, derived from the buffer's own pointer.
func (e *Engine) hostPointer(addr, n uint64) (unsafe.Pointer, error) {
	ent, ok := e.types.Lookup(addr, n)
	if !ok {
		return nil, newErr(ErrInvalid, fmt.Sprintf("host range %#x+%d is not a buffer", addr, n), nil)
	}
	b := ent.Owner.(*Buffer)
	return unsafe.Add(b.ptr, addr-b.Addr()), nil
}

func (e *Engine) destroyBuffer(b *Buffer) error {
	e.mu.Lock()
	delete(e.buffers, b.id)
	e.mu.Unlock()
	var errs []error
	errs = append(errs, e.hooksFreeing(b))
	if b.att != nil {
		b.att.a.forget(b) // runtime memory: never freed by gxfer
	} else if b.loc.gaudi {
		b.gd.types.Remove(b.dmem.Addr(), b.size)
		b.gd.exports.Invalidate(b.dmem.Addr(), b.size)
		errs = append(errs, b.dmem.Free())
	} else {
		for _, g := range e.devs {
			g.hostMaps.Invalidate(b.Addr(), b.size)
		}
		e.types.Remove(b.Addr(), b.size)
		if b.shm != nil {
			errs = append(errs, b.shm.Close())
		}
		b.user = nil
	}
	if b.onDestroy != nil {
		errs = append(errs, b.onDestroy())
	}
	return errors.Join(errs...)
}

// Close ends every pending operation (queued ones with ErrClosed; those on
// a device get up to Config.CloseGrace to finish), stops every goroutine
// and releases every buffer, mapping, fd and device. Copies that run on
// the caller's goroutine (small host-to-host Copy, a Batch's host copies,
// Binding Put and Get over "unix") and host workers' copies finish before
// any memory is released; those that start once Close has begun fail with
// ErrClosed. Idempotent.
func (e *Engine) Close() error {
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
		for _, ep := range eps {
			_ = ep.Close()
		}
		errs = append(errs, e.closeTransports())
		// Stop intake and fail what is still queued.
		for _, g := range e.devs {
			g.closeQueues()
		}
		if e.host != nil {
			e.host.closeQueue()
		}
		if e.pool != nil {
			if err := e.pool.ReleaseTimeout(e.cfg.CloseGrace + time.Second); err != nil {
				e.log.Warn().Err(err).Msg("workers did not stop in time")
			}
		}
		for _, g := range e.devs {
			g.failQueued(ErrClosed)
			g.actor.Close(e.cfg.CloseGrace)
		}
		if e.host != nil {
			e.host.failQueued(ErrClosed)
			e.host.actor.Close()
		}
		// Staging and peer-request tasks end once their inner copies have.
		e.async.Wait()
		e.epLoops.Wait()
		// Stop the devices before anything they may still touch is freed.
		for _, g := range e.devs {
			errs = append(errs, g.closeDevice())
		}
		// No copy on a caller's goroutine may still touch a buffer.
		e.drainGate()
		e.attach.quiesce() // copies handed to attachments' copiers
		// Release buffers that are still alive.
		e.mu.Lock()
		live := make([]*Buffer, 0, len(e.buffers))
		for _, b := range e.buffers {
			live = append(live, b)
		}
		e.mu.Unlock()
		for _, b := range live {
			b.state.Store(freedBit)
			if err := b.destroy(); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, e.attach.detachAll()) // after the buffers' MRs
		for _, g := range e.devs {
			errs = append(errs, g.closeCaches())
		}
		errs = append(errs, e.finishTransports())
		for _, s := range e.sims {
			errs = append(errs, s.Close())
		}
		e.closeEr = errors.Join(errs...)
	})
	return e.closeEr
}
