// Package rdmapath is gxfer's RDMA data path: the engine-wide RDMA
// contexts (one per NIC), the queue pairs of each endpoint and the
// transfers over them.
//
// The engine's RDMA contexts: one per NIC it uses (the NICs closest to
// gaudi0 when the Gaudi has a PCI address, up to wire.MaxNICs of them tied
// for closest; else the first device by name with an active port; or the
// devices Config.Devices names), each with its protection domain, a
// completion queue whose goroutine sleeps in the Go netpoller, and a
// registration cache of host memory regions. Every RDMA endpoint has an RC
// queue pair on each NIC both sides have (NIC i to the peer's NIC i);
// large transfers between host memory are sliced over them, and the
// chunks of a large transfer staged through host memory (Gaudi memory
// without a DMA-BUF region) take turns on them.
//
// The control channel stays the endpoint's TCP connection (requests,
// completions, heartbeats); after the Hello exchange each side creates an
// RC queue pair per NIC and the two swap their endpoints in RDMAConnect
// messages (the dialer first): see Transport.Connect.
//
// A Put into (Get from) a peer buffer whose key carries an rkey is one
// RDMA write (read) from (into) local memory, completed by the CQ: the
// peer's CPU takes no part. Local host memory is registered through the
// NIC's MR cache; local Gaudi memory through its DMA-BUF where the NIC
// can (ibv_reg_dmabuf_mr), else it is staged through pinned host buffers
// by the Gaudi DMA engine, pipelined (staging.Pipeline: the DMA of chunk
// k+1 overlaps the RDMA of chunk k). A peer buffer without an rkey (its
// Gaudi memory, when its NIC cannot register DMA-BUFs) is reached by a
// request on the control channel naming a registered host region of the
// requester (wire.LocalRDMA): the owner validates it like every request
// and moves the data with RDMA reads or writes against that region
// through its own staging, then answers (delegate.go).
package rdmapath

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/staging"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

const (
	cqSize       = 16384   // completions in flight over every endpoint (nic.slots)
	maxSend      = 128     // work requests in flight per endpoint
	maxWR        = 1 << 30 // bytes per work request
	MaxInline    = 64      // inline data of a write (QPConfig.MaxInline)
	Chunk        = 1 << 20 // staging chunk (the TCP data path's too)
	stageBuffers = 16
	// SliceMin is the size from which a transfer between host memory is
	// split over the NICs (engine.RDMASliceMin), in slices aligned to
	// sliceAlign (as Mooncake slices).
	SliceMin   = 1 << 20
	sliceAlign = 64 << 10
)

// DeviceConfig is engine.RDMAConfig (same fields: the engine converts).
type DeviceConfig struct {
	Disabled   bool
	Device     string
	Devices    []string
	Port       int
	GIDIndex   int
	CQSpin     time.Duration
	CQBusyPoll bool
}

// Config configures Open.
type Config struct {
	DeviceConfig
	Logger zerolog.Logger
	// SysRoot is where sysfs is found ("" for /): NIC placement.
	SysRoot string
	// GaudiPCI is gaudi0's PCI address ("" when it has none, e.g.
	// emulated): the NICs closest to it are used.
	GaudiPCI string

	cqSize int // tests: the CQs' entries (0: cqSize)
}

// Info is engine.RDMAInfo (same fields: the engine converts).
type Info struct {
	Available      bool
	Reason         string
	Device         string
	Port           int
	GIDIndex       int
	GID            string
	LinkLayer      string
	MTU            int
	DMABuf         string
	DMABufAttempts uint64
	DMABufMRs      uint64
	CachedMRs      int
	NICs           []string
}

// nic is the RDMA context of one NIC.
type nic struct {
	dev      *rdma.Device
	pd       *rdma.PD
	cq       *rdma.CQ
	mrs      *rdma.MRCache
	port     int
	gidIndex int
	gid      rdma.GID
	gids     []rdma.GID // the port's GIDs (any of them reaches it)
	portInfo rdma.PortInfo
	qps      sync.WaitGroup
	// own are the queue pairs open on the NIC (conns), by number: what
	// a peer's endpoint may name of them is limited (checkPeer).
	ownMu sync.Mutex
	own   map[uint32]*rdma.QP
	// slots are the CQ's entries, shared by every endpoint's queue pair:
	// a post takes one for each work request besides its queue pair's
	// send credit, waiting while the CQ is full (rdma.QP.Post would fail
	// with ErrQueueFull), and its completion gives both back (conn.put).
	slots sendCredits
}

// Transport is the RDMA data path, engine-wide: its NICs (the first is
// the one Gaudi memory is registered on), the staging buffers of Gaudi
// memory, and the regions of the engine's buffers (datapath.BufferHooks).
type Transport struct {
	env  datapath.Env
	log  zerolog.Logger
	nics []*nic

	probe error // Device.DMABufSupport of the first NIC: nil when DMA-BUF regions can be registered
	// tryDMABuf (tests) attempts ibv_reg_dmabuf_mr on Gaudi buffers even
	// when the probe said it is not supported.
	tryDMABuf atomic.Bool
	// dmabufErr is the first real registration failure that means "never
	// on this device" (ErrNotSupported); later buffers stage at once.
	dmabufMu       sync.Mutex
	dmabufErr      error
	dmabufAttempts atomic.Uint64
	dmabufMRs      atomic.Uint64

	stage       *staging.Pool
	stageSem    chan struct{} // each staged transfer takes two buffers: at most half as many transfers
	stageClosed atomic.Bool

	// bufs are the buffers holding regions (released at Close at the latest).
	bufMu  sync.Mutex
	bufs   map[datapath.Buf]struct{}
	closed bool

	serveHook atomic.Pointer[func()] // tests: runs before each delegated request served
	// registerHook (tests) replaces the first NIC's PD.Register for the
	// regions delegated requests name (delegateRegion).
	registerHook func(b []byte, access rdma.Access) (*rdma.MR, error)

	// scratch is where fences read into (fence.go), made on first use.
	scratchMu     sync.Mutex
	scratch       datapath.Buf
	scratchClosed bool
}

var (
	_ datapath.Transport   = (*Transport)(nil)
	_ datapath.BufferHooks = (*Transport)(nil)
	_ datapath.Finisher    = (*Transport)(nil)
)

// Open opens the RDMA contexts, or says why there are none (the error's
// text is engine.RDMAInfo.Reason). RDMA is optional: the engine goes on
// without it.
func Open(env datapath.Env, cfg Config) (*Transport, error) {
	if cfg.Disabled {
		return nil, errors.New("RDMA disabled (Config.RDMA.Disabled)")
	}
	names, err := rdma.DeviceNames()
	if err != nil {
		return nil, err
	}
	t := &Transport{env: env, log: cfg.Logger, bufs: map[datapath.Buf]struct{}{}}
	var why []string
	cands, want := candidates(cfg, names)
	for _, name := range cands {
		if len(t.nics) == want {
			break
		}
		n, err := openNIC(name, cfg)
		if err != nil {
			why = append(why, name+": "+err.Error())
			// NIC i reaches the peer's NIC i: past a device that did not
			// open, the order no longer matches; keep what opened, or
			// look for one device.
			want = max(len(t.nics), 1)
			continue
		}
		t.nics = append(t.nics, n)
		t.log.Debug().Str("device", name).Int("port", n.port).Int("nic", len(t.nics)-1).Msg("RDMA context open")
	}
	if len(t.nics) == 0 {
		if len(why) == 0 {
			why = append(why, "no device")
		}
		return nil, errors.New("no usable RDMA device: " + strings.Join(why, "; "))
	}
	if len(why) > 0 {
		t.log.Debug().Strs("skipped", why).Msg("RDMA devices not used")
	}
	t.probe = t.nics[0].dev.DMABufSupport()
	t.stage = staging.NewPool(env, stageBuffers, Chunk)
	t.stageSem = make(chan struct{}, stageBuffers/2)
	return t, nil
}

// candidates orders the devices to try and says how many to keep: the
// forced ones (all of Devices, or Device); else the NICs closest to
// gaudi0 first, keeping as many as are tied for closest, then the others
// by name; without a Gaudi PCI address, every device by name, keeping one.
func candidates(cfg Config, names []string) ([]string, int) {
	switch c := cfg.DeviceConfig; {
	case len(c.Devices) > 0:
		return c.Devices, len(c.Devices)
	case c.Device != "":
		return []string{c.Device}, 1
	}
	names = slices.Clone(names)
	slices.Sort(names)
	if cfg.GaudiPCI == "" {
		return names, 1
	}
	nics, err := rdma.ClosestNICs(cfg.SysRoot, cfg.GaudiPCI)
	if err != nil {
		cfg.Logger.Debug().Err(err).Msg("NIC placement unknown; devices tried by name")
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

func openNIC(name string, cfg Config) (_ *nic, err error) {
	d, err := rdma.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	r := &nic{dev: d, gidIndex: cfg.GIDIndex, own: map[uint32]*rdma.QP{}}
	for p := 1; p <= d.Ports(); p++ {
		if cfg.Port != 0 && p != cfg.Port {
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
	r.gids = []rdma.GID{r.gid}
	if gids, err := d.GIDs(r.port); err == nil {
		for _, g := range gids {
			r.gids = append(r.gids, g.GID)
		}
	}
	if r.pd, err = d.AllocPD(); err != nil {
		return nil, err
	}
	size := cqSize
	if cfg.cqSize > 0 {
		size = cfg.cqSize
	}
	if r.cq, err = d.NewCQ(rdma.CQConfig{Size: size, Spin: cfg.CQSpin, BusyPoll: cfg.CQBusyPoll}); err != nil {
		return nil, err
	}
	r.slots = newSendCredits(size)
	if r.mrs, err = rdma.NewMRCache(r.pd, rdma.MRCacheConfig{Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	return r, nil
}

// close releases the context once every endpoint's queue pair is closed
// and every buffer has dropped its regions.
func (r *nic) close() error {
	r.qps.Wait()
	err := r.mrs.Close()
	return errors.Join(err, r.dev.Close())
}

// Kind is datapath.KindRDMA.
func (t *Transport) Kind() datapath.Kind { return datapath.KindRDMA }

// Close frees the staging buffers. The engine calls it once every
// endpoint is closed, before it frees the buffers still alive.
func (t *Transport) Close() error {
	if t.stageClosed.Swap(true) {
		return nil
	}
	return errors.Join(t.freeScratch(), t.stage.Close())
}

// Finish releases the regions buffers still hold (none once each was
// freed: Freeing) and the NICs, once every endpoint's queue pair is
// closed. The engine calls it last, after every buffer is gone.
func (t *Transport) Finish() error {
	t.bufMu.Lock()
	if t.closed {
		t.bufMu.Unlock()
		return nil
	}
	bufs := make([]datapath.Buf, 0, len(t.bufs))
	for b := range t.bufs {
		bufs = append(bufs, b)
	}
	t.bufMu.Unlock()
	var errs []error
	for _, b := range bufs {
		errs = append(errs, t.release(b))
	}
	t.bufMu.Lock()
	t.closed = true
	t.bufMu.Unlock()
	for _, n := range t.nics {
		errs = append(errs, n.close())
	}
	return errors.Join(errs...)
}

// Info describes the RDMA contexts (for `gxfer info`).
func (t *Transport) Info() Info {
	r := t.nics[0]
	info := Info{
		Available: true, Device: r.dev.Name(), Port: r.port, GIDIndex: r.gidIndex, GID: r.gid.String(),
		LinkLayer: linkLayerName(r.portInfo.LinkLayer), MTU: r.portInfo.ActiveMTU.Bytes(), DMABuf: "supported",
		DMABufAttempts: t.dmabufAttempts.Load(), DMABufMRs: t.dmabufMRs.Load(),
	}
	if err := t.dmabufUnsupported(); err != nil {
		info.DMABuf = err.Error()
	}
	for _, n := range t.nics {
		info.NICs = append(info.NICs, n.dev.Name())
		info.CachedMRs += n.mrs.Stats().Regions
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
