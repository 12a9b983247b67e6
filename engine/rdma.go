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
	"github.com/gxfer/gxfer/wire"
)

// The engine's RDMA contexts: one per NIC it uses (the NICs closest to
// gaudi0 when the Gaudi has a PCI address, up to wire.MaxNICs of them tied
// for closest; else the first device by name with an active port; or the
// devices Config.RDMA names), each with its protection domain, a
// completion queue whose goroutine sleeps in the Go netpoller, and a
// registration cache of host memory regions. Every RDMA endpoint has an RC
// queue pair on each NIC both sides have (NIC i to the peer's NIC i);
// large transfers between host memory are sliced over them, and the
// chunks of a large transfer staged through host memory (Gaudi memory
// without a DMA-BUF region) take turns on them.

const (
	rdmaCQSize       = 16384   // completions in flight over every endpoint
	rdmaMaxSend      = 128     // work requests in flight per endpoint
	rdmaMaxWR        = 1 << 30 // bytes per work request
	rdmaMaxInline    = 64      // inline data of a write (QPConfig.MaxInline)
	rdmaChunk        = tcpChunk
	rdmaStageBuffers = 16
	// Transfers of at least rdmaSliceMin bytes are split over the NICs,
	// in slices aligned to rdmaSliceAlign (as Mooncake slices).
	rdmaSliceMin   = RDMASliceMin
	rdmaSliceAlign = 64 << 10
)

// RDMASliceMin is the size from which a transfer between host memory is
// split over every NIC the endpoint has (RDMAInfo.NICs), and from which
// the host chunks of a staged transfer of Gaudi memory take turns on them.
const RDMASliceMin = 1 << 20

// RDMAConfig configures the RDMA context New opens.
type RDMAConfig struct {
	// Disabled opens no RDMA device: Dial("tcp") then always uses TCP.
	Disabled bool
	// Device forces this RDMA device (e.g. "mlx5_0", "rxe0"). Default: the
	// NICs closest to gaudi0 on the PCI tree (rdma.ClosestNICs: the
	// closest and those tied with it, up to wire.MaxNICs) when the Gaudi
	// has a PCI address, else the first device by name with an active
	// port.
	Device string
	// Devices forces these devices, in this order (at most wire.MaxNICs;
	// exclusive with Device): transfers are sliced over them. A peer's
	// NIC i is reached through this side's NIC i, so both sides should
	// list NICs on the same networks in the same order; past a device
	// that does not open, the rest are not used (the first one that
	// opens is, alone, if the first does not).
	Devices []string
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
	Available bool   // an RDMA device is open and usable
	Reason    string // why RDMA is unavailable ("" when Available)
	Device    string // name of the first (closest) NIC in use, e.g. "mlx5_0"
	Port      int    // its port number
	GIDIndex  int    // the GID table index in use
	GID       string // that GID, as text
	LinkLayer string // "InfiniBand", "Ethernet (RoCE)" or "unspecified"
	MTU       int    // active MTU in bytes
	// DMABuf is "supported" when Gaudi memory is registered with
	// ibv_reg_dmabuf_mr (zero copy from device memory), else why not
	// (e.g. EOPNOTSUPP on Soft-RoCE): such memory is staged through
	// pinned host buffers by the Gaudi DMA engine.
	DMABuf         string
	DMABufAttempts uint64 // ibv_reg_dmabuf_mr calls on Gaudi buffers
	DMABufMRs      uint64 // of which succeeded
	CachedMRs      int    // host memory regions in the registration cache
	// NICs are every device the engine uses, Device first: endpoints have
	// a queue pair on each NIC both sides have, and large host-memory
	// transfers are sliced over them.
	NICs []string
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
	for _, n := range e.nics {
		info.NICs = append(info.NICs, n.dev.Name())
		if n != r {
			info.CachedMRs += n.mrs.Stats().Regions
		}
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
	cands, want := e.rdmaCandidates(names)
	for _, name := range cands {
		if len(e.nics) == want {
			break
		}
		r, err := openRDMACtx(name, e.cfg)
		if err != nil {
			why = append(why, name+": "+err.Error())
			// NIC i reaches the peer's NIC i: past a device that did not
			// open, the order no longer matches; keep what opened, or
			// look for one device.
			want = max(len(e.nics), 1)
			continue
		}
		e.nics = append(e.nics, r)
		e.log.Debug().Str("device", name).Int("port", r.port).Int("nic", len(e.nics)-1).Msg("RDMA context open")
	}
	if len(e.nics) == 0 {
		if len(why) == 0 {
			why = append(why, "no device")
		}
		e.rdmaWhy = "no usable RDMA device: " + strings.Join(why, "; ")
		return
	}
	if len(why) > 0 {
		e.log.Debug().Strs("skipped", why).Msg("RDMA devices not used")
	}
	e.rdma = e.nics[0]
	e.rdmaStage = newStagePool(e, rdmaStageBuffers)
	e.rdmaStageSem = make(chan struct{}, rdmaStageBuffers/2)
}

// rdmaCandidates orders the devices to try and says how many to keep:
// the forced ones (all of Devices, or Device); else the NICs closest to
// gaudi0 first, keeping as many as are tied for closest, then the others
// by name; without a Gaudi PCI address, every device by name, keeping one.
func (e *Engine) rdmaCandidates(names []string) ([]string, int) {
	switch c := e.cfg.RDMA; {
	case len(c.Devices) > 0:
		return c.Devices, len(c.Devices)
	case c.Device != "":
		return []string{c.Device}, 1
	}
	names = slices.Clone(names)
	slices.Sort(names)
	if len(e.devs) == 0 || e.devs[0].node.PCIAddr == "" {
		return names, 1
	}
	nics, err := rdma.ClosestNICs(e.cfg.SysRoot, e.devs[0].node.PCIAddr)
	if err != nil {
		e.log.Debug().Err(err).Msg("NIC placement unknown; devices tried by name")
		return names, 1
	}
	var out []string
	for _, n := range nics {
		if slices.Contains(names, n.Name) {
			out = append(out, n.Name)
		}
	}
	want := max(1, min(len(out), wire.MaxNICs))
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, want
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
// ibv_reg_dmabuf_mr at offset = the buffer's offset in the DMA-BUF (which
// package dma carries when the kernel cannot apply an export offset) and
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
	if b.att != nil {
		return r.attachedMR(b)
	}
	x, err := b.gd.exports.Get(b.dmem.Addr(), b.size, memcache.AccessRead|memcache.AccessWrite)
	if err != nil {
		b.gmrErr = fmt.Errorf("gxfer: export gaudi%d buffer %d: %w", b.gd.idx, b.id, err)
		return nil, b.gmrErr
	}
	db := x.Value().(*dma.DMABuf)
	off, err := dmabufOffset(b, db)
	if err != nil {
		b.gd.exports.Put(x)
		b.gmrErr = err
		return nil, err
	}
	r.dmabufAttempts.Add(1)
	mr, err := r.pd.RegisterDMABuf(db.FD().Int(), off, b.size, b.Addr(), rdma.AccessDefault)
	if err != nil {
		b.gd.exports.Put(x)
		b.gmrErr = fmt.Errorf("gxfer: ibv_reg_dmabuf_mr of gaudi%d buffer %d: %w", b.gd.idx, b.id, err)
		r.noteDMABufRefusal(b.gmrErr)
		return nil, b.gmrErr
	}
	r.dmabufMRs.Add(1)
	b.gmr = &gaudiRegion{mr: mr, x: x}
	return mr, nil
}

// exportRKeys sets k's rkeys for an exported buffer's memory regions on
// each NIC (0 where the buffer is reached through requests to this
// engine): host memory is registered through each NIC's cache, with
// remote read and write, and the references kept until the buffer is
// freed; Gaudi memory needs a DMA-BUF region (on the first NIC only).
func (e *Engine) exportRKeys(b *Buffer, k *wire.RemoteKey) {
	r := e.rdma
	if r == nil {
		return
	}
	if b.loc.gaudi {
		if mr, err := r.gaudiMR(b); err == nil {
			k.RKey = mr.RKey()
		}
		return
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	for i, n := range e.nics {
		if b.xref[i].IsZero() {
			ref, err := n.mrs.Get(b.Addr(), b.size, rdma.AccessDefault)
			if err != nil {
				e.log.Warn().Err(err).Uint64("buffer", b.id).Str("device", n.dev.Name()).Msg("exported without an RDMA key on this NIC: registration failed")
				continue
			}
			b.xref[i] = ref
		}
		if i == 0 {
			k.RKey = b.xref[0].RKey()
		} else {
			k.NICRKeys[i-1] = b.xref[i].RKey()
		}
	}
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
		if b.gmr.x != nil { // nil for runtime memory: the pool's export is the Attachment's
			b.gd.exports.Put(b.gmr.x)
		}
		b.gmr = nil
	}
	for i, n := range e.nics {
		if !b.xref[i].IsZero() {
			n.mrs.Put(b.xref[i])
			b.xref[i] = rdma.MRRef{}
		}
		if !b.loc.gaudi {
			n.mrs.Invalidate(b.Addr(), b.size)
		}
	}
	return err
}

// noteDMABufRefusal remembers the first registration the NIC refused as
// unsupported (the reason staged transfers report); other failures are
// the buffer's own.
func (r *rdmaCtx) noteDMABufRefusal(err error) {
	if !errors.Is(err, rdma.ErrNotSupported) {
		return
	}
	r.dmabufMu.Lock()
	if r.dmabufErr == nil {
		r.dmabufErr = err
	}
	r.dmabufMu.Unlock()
}
