package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/memcache"
	"github.com/gxfer/gxfer/rdma"
)

// The engine's RDMA context: one device (the NIC closest to gaudi0 when
// the Gaudi has a PCI address, else the first device by name with an
// active port), one protection domain, one completion queue whose
// goroutine sleeps in the Go netpoller, and a registration cache of host
// memory regions. Every RDMA endpoint has its own RC queue pair on it.

const (
	rdmaCQSize       = 16384   // completions in flight over every endpoint
	rdmaMaxSend      = 128     // work requests in flight per endpoint
	rdmaMaxWR        = 1 << 30 // bytes per work request
	rdmaMaxInline    = 64      // inline data of a write (QPConfig.MaxInline)
	rdmaChunk        = tcpChunk
	rdmaStageBuffers = 16
)

// RDMAConfig configures the RDMA context New opens.
type RDMAConfig struct {
	// Disabled opens no RDMA device: Dial("tcp") then always uses TCP.
	Disabled bool
	// Device forces this RDMA device (e.g. "mlx5_0", "rxe0"). Default: the
	// NIC closest to gaudi0 on the PCI tree (rdma.ClosestNICs) when the
	// Gaudi has a PCI address, else every device by name; the first with
	// an active port is used.
	Device string
	// Port forces this port (default: the device's first active port).
	Port int
	// GIDIndex is the source GID index of the queue pairs (default 0; on
	// RoCE v2 over an IPv4 address it may need to be another entry).
	GIDIndex int
	// CQSpin keeps the completion queue's goroutine polling this long
	// after the last completion before it sleeps in the netpoller (lower
	// latency for back-to-back operations, a core busy meanwhile).
	// Default 0: sleep at once.
	CQSpin time.Duration
	// CQBusyPoll never lets the completion queue's goroutine sleep: the
	// lowest latency, and one core kept busy while the engine is open.
	CQBusyPoll bool
}

type rdmaCtx struct {
	dev      *rdma.Device
	pd       *rdma.PD
	cq       *rdma.CQ
	mrs      *rdma.MRCache
	port     int
	gidIndex int
	gid      rdma.GID
	portInfo rdma.PortInfo
	probe    error // Device.DMABufSupport: nil when DMA-BUF regions can be registered
	qps      sync.WaitGroup

	// tryDMABuf (tests) attempts ibv_reg_dmabuf_mr on Gaudi buffers even
	// when the probe said it is not supported.
	tryDMABuf bool
	// dmabufErr is the first real registration failure that means "never
	// on this device" (ErrNotSupported); later buffers stage at once.
	dmabufMu       sync.Mutex
	dmabufErr      error
	dmabufAttempts atomic.Uint64
	dmabufMRs      atomic.Uint64
}

// RDMAInfo describes the engine's RDMA context (for `gxfer info`).
type RDMAInfo struct {
	Available bool
	Reason    string // why RDMA is unavailable ("" when Available)
	Device    string
	Port      int
	GIDIndex  int
	GID       string
	LinkLayer string
	MTU       int // active MTU in bytes
	// DMABuf is "supported" when Gaudi memory is registered with
	// ibv_reg_dmabuf_mr (zero copy from device memory), else why not
	// (e.g. EOPNOTSUPP on Soft-RoCE): such memory is staged through
	// pinned host buffers by the Gaudi DMA engine.
	DMABuf         string
	DMABufAttempts uint64 // ibv_reg_dmabuf_mr calls on Gaudi buffers
	DMABufMRs      uint64 // of which succeeded
	CachedMRs      int    // host memory regions in the registration cache
}

// RDMA describes the engine's RDMA context, or why there is none.
func (e *Engine) RDMA() RDMAInfo {
	r := e.rdma
	if r == nil {
		return RDMAInfo{Reason: e.rdmaWhy}
	}
	info := RDMAInfo{
		Available: true, Device: r.dev.Name(), Port: r.port, GIDIndex: r.gidIndex, GID: r.gid.String(),
		LinkLayer: linkLayerName(r.portInfo.LinkLayer), MTU: r.portInfo.ActiveMTU.Bytes(), DMABuf: "supported",
		DMABufAttempts: r.dmabufAttempts.Load(), DMABufMRs: r.dmabufMRs.Load(), CachedMRs: r.mrs.Stats().Regions,
	}
	if err := r.dmabufUnsupported(); err != nil {
		info.DMABuf = err.Error()
	}
	return info
}

func linkLayerName(l rdma.LinkLayer) string {
	switch l {
	case rdma.LinkLayerEthernet:
		return "Ethernet (RoCE)"
	case rdma.LinkLayerInfiniBand:
		return "InfiniBand"
	}
	return "unspecified"
}

// openRDMA opens the RDMA context, or records why there is none. RDMA is
// optional: a failure here never fails New.
func (e *Engine) openRDMA() {
	if e.cfg.RDMA.Disabled {
		e.rdmaWhy = "RDMA disabled (Config.RDMA.Disabled)"
		return
	}
	names, err := rdma.DeviceNames()
	if err != nil {
		e.rdmaWhy = err.Error()
		return
	}
	var why []string
	for _, name := range e.rdmaCandidates(names) {
		r, err := openRDMACtx(name, e.cfg)
		if err != nil {
			why = append(why, name+": "+err.Error())
			continue
		}
		e.rdma = r
		e.rdmaStage = newStagePool(e, rdmaStageBuffers)
		e.rdmaStageSem = make(chan struct{}, rdmaStageBuffers/2)
		e.log.Debug().Str("device", name).Int("port", r.port).Msg("RDMA context open")
		return
	}
	if len(why) == 0 {
		why = append(why, "no device")
	}
	e.rdmaWhy = "no usable RDMA device: " + strings.Join(why, "; ")
}

// rdmaCandidates orders the devices to try: the forced one; else the NICs
// closest to gaudi0 first, then the others by name.
func (e *Engine) rdmaCandidates(names []string) []string {
	if e.cfg.RDMA.Device != "" {
		return []string{e.cfg.RDMA.Device}
	}
	names = slices.Clone(names)
	slices.Sort(names)
	if len(e.devs) == 0 || e.devs[0].node.PCIAddr == "" {
		return names
	}
	nics, err := rdma.ClosestNICs(e.cfg.SysRoot, e.devs[0].node.PCIAddr)
	if err != nil {
		e.log.Debug().Err(err).Msg("NIC placement unknown; devices tried by name")
		return names
	}
	var out []string
	for _, n := range nics {
		if slices.Contains(names, n.Name) {
			out = append(out, n.Name)
		}
	}
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func openRDMACtx(name string, cfg Config) (_ *rdmaCtx, err error) {
	d, err := rdma.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	r := &rdmaCtx{dev: d, gidIndex: cfg.RDMA.GIDIndex}
	for p := 1; p <= d.Ports(); p++ {
		if cfg.RDMA.Port != 0 && p != cfg.RDMA.Port {
			continue
		}
		pi, err := d.Port(p)
		if err == nil && pi.State == rdma.PortActive {
			r.port, r.portInfo = p, pi
			break
		}
	}
	if r.port == 0 {
		return nil, errors.New("no active port")
	}
	if r.gid, err = d.GID(r.port, r.gidIndex); err != nil {
		return nil, fmt.Errorf("GID %d: %w", r.gidIndex, err)
	}
	if r.gid.IsZero() && r.portInfo.LinkLayer == rdma.LinkLayerEthernet {
		return nil, fmt.Errorf("GID %d of port %d is empty", r.gidIndex, r.port)
	}
	if r.pd, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if r.cq, err = d.NewCQ(rdma.CQConfig{Size: rdmaCQSize, Spin: cfg.RDMA.CQSpin, BusyPoll: cfg.RDMA.CQBusyPoll}); err != nil {
		return nil, err
	}
	if r.mrs, err = rdma.NewMRCache(r.pd, rdma.MRCacheConfig{Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	r.probe = d.DMABufSupport()
	return r, nil
}

// close releases the context once every endpoint's queue pair is closed
// and every buffer has dropped its regions.
func (r *rdmaCtx) close() error {
	r.qps.Wait()
	err := r.mrs.Close()
	return errors.Join(err, r.dev.Close())
}

// dmabufUnsupported is why Gaudi memory is not registered directly (nil:
// it is).
func (r *rdmaCtx) dmabufUnsupported() error {
	r.dmabufMu.Lock()
	defer r.dmabufMu.Unlock()
	if r.dmabufErr != nil {
		return r.dmabufErr
	}
	if r.probe != nil && !r.tryDMABuf {
		return r.probe
	}
	return nil
}

// gaudiRegion is a Gaudi buffer's DMA-BUF memory region.
type gaudiRegion struct {
	mr *rdma.MR
	x  *memcache.Region // the DMA-BUF export, held while registered
}

// gaudiMR returns the buffer's DMA-BUF memory region (remote read and
// write), registering it on first use: the allocation is exported as a
// DMA-BUF (once, through the device's export cache) and registered with
// ibv_reg_dmabuf_mr at offset = the buffer's offset in the DMA-BUF and
// iova = its device address, so remote keys and work requests use device
// addresses. An error means "stage through host memory": the probe said
// the device cannot (EOPNOTSUPP on Soft-RoCE), or the registration failed.
func (r *rdmaCtx) gaudiMR(b *Buffer) (*rdma.MR, error) {
	if err := r.dmabufUnsupported(); err != nil {
		return nil, err
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	if b.gmr != nil {
		return b.gmr.mr, nil
	}
	if b.gmrErr != nil {
		return nil, b.gmrErr
	}
	x, err := b.gd.exports.Get(b.dmem.Addr(), b.size, memcache.AccessRead|memcache.AccessWrite)
	if err != nil {
		b.gmrErr = fmt.Errorf("gxfer: export gaudi%d buffer %d: %w", b.gd.idx, b.id, err)
		return nil, b.gmrErr
	}
	db := x.Value().(*dma.DMABuf)
	r.dmabufAttempts.Add(1)
	mr, err := r.pd.RegisterDMABuf(db.FD().Int(), db.Offset(), b.size, b.Addr(), rdma.AccessDefault)
	if err != nil {
		b.gd.exports.Put(x)
		b.gmrErr = fmt.Errorf("gxfer: ibv_reg_dmabuf_mr of gaudi%d buffer %d: %w", b.gd.idx, b.id, err)
		if errors.Is(err, rdma.ErrNotSupported) {
			r.dmabufMu.Lock()
			if r.dmabufErr == nil {
				r.dmabufErr = b.gmrErr
			}
			r.dmabufMu.Unlock()
		}
		return nil, b.gmrErr
	}
	r.dmabufMRs.Add(1)
	b.gmr = &gaudiRegion{mr: mr, x: x}
	return mr, nil
}

// exportRKey is the rkey of an exported buffer's memory region (0 when
// the buffer is reached through requests to this engine): host memory is
// registered through the cache, with remote read and write, and the
// reference kept until the buffer is freed; Gaudi memory needs a DMA-BUF
// region.
func (e *Engine) exportRKey(b *Buffer) uint32 {
	r := e.rdma
	if r == nil {
		return 0
	}
	if b.loc.gaudi {
		mr, err := r.gaudiMR(b)
		if err != nil {
			return 0
		}
		return mr.RKey()
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	if b.xref.IsZero() {
		ref, err := r.mrs.Get(b.Addr(), b.size, rdma.AccessDefault)
		if err != nil {
			e.log.Warn().Err(err).Uint64("buffer", b.id).Msg("exported without an RDMA key: registration failed")
			return 0
		}
		b.xref = ref
	}
	return b.xref.RKey()
}

// releaseRDMA drops a buffer's memory regions before its memory goes.
func (e *Engine) releaseRDMA(b *Buffer) error {
	r := e.rdma
	if r == nil {
		return nil
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	var err error
	if b.gmr != nil {
		err = b.gmr.mr.Close()
		b.gd.exports.Put(b.gmr.x)
		b.gmr = nil
	}
	if !b.xref.IsZero() {
		r.mrs.Put(b.xref)
		b.xref = rdma.MRRef{}
	}
	if !b.loc.gaudi {
		r.mrs.Invalidate(b.Addr(), b.size)
	}
	return err
}
