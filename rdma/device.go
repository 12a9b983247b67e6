package rdma

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gxfer/gxfer/internal/verbs"
)

// Types shared with internal/verbs.
type (
	GID       = verbs.GID
	MTU       = verbs.MTU
	Access    = verbs.Access
	PortState = verbs.PortState
	LinkLayer = verbs.LinkLayer
	QPState   = verbs.QPState
	Status    = verbs.WCStatus
)

// Access flags for Register and QPConfig.Access.
const (
	AccessLocalWrite   = verbs.AccessLocalWrite
	AccessRemoteWrite  = verbs.AccessRemoteWrite
	AccessRemoteRead   = verbs.AccessRemoteRead
	AccessRemoteAtomic = verbs.AccessRemoteAtomic
	// AccessDefault is what Register and NewQP use for 0.
	AccessDefault = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
)

// MTUs.
const (
	MTU256  = verbs.MTU256
	MTU512  = verbs.MTU512
	MTU1024 = verbs.MTU1024
	MTU2048 = verbs.MTU2048
	MTU4096 = verbs.MTU4096
)

// Port states and link layers.
const (
	PortDown             = verbs.PortDown
	PortActive           = verbs.PortActive
	LinkLayerInfiniBand  = verbs.LinkLayerInfiniBand
	LinkLayerEthernet    = verbs.LinkLayerEthernet
	LinkLayerUnspecified = verbs.LinkLayerUnspecified
)

// QP states.
const (
	QPStateReset = verbs.QPSReset
	QPStateInit  = verbs.QPSInit
	QPStateRTR   = verbs.QPSRTR
	QPStateRTS   = verbs.QPSRTS
	QPStateError = verbs.QPSErr
)

// Completion statuses worth naming.
const (
	StatusSuccess      = verbs.WCSuccess
	StatusFlushed      = verbs.WCWRFlushErr
	StatusRemoteAccess = verbs.WCRemAccessErr
	StatusLocalProt    = verbs.WCLocProtErr
	StatusRetryExc     = verbs.WCRetryExcErr
	StatusRNRRetryExc  = verbs.WCRNRRetryExcErr
)

// Available returns nil if RDMA can be used: libibverbs loads and reports
// at least one device. Otherwise the error wraps ErrUnavailable and says
// why ("libibverbs not installed: dlopen libibverbs.so.1: ..." or, wrapping
// ErrNoDevice too, "libibverbs found, 0 devices").
func Available() error {
	_, err := verbs.DeviceNames()
	return err
}

// DeviceNames lists the RDMA devices.
func DeviceNames() ([]string, error) { return verbs.DeviceNames() }

// DeviceAttr describes a device.
type DeviceAttr = verbs.DeviceAttr

// PortInfo describes one port.
type PortInfo struct {
	Port        int
	State       PortState
	MaxMTU      MTU
	ActiveMTU   MTU
	LinkLayer   LinkLayer
	LID         uint16
	GIDTableLen int
	MaxMsgSize  uint32
	ActiveWidth uint8
	ActiveSpeed uint8
}

// GIDEntry is one non-zero entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    GID
	Type   string // from sysfs, e.g. "RoCE v2", "IB/RoCE v1" ("" if unknown)
	Netdev string // from sysfs, for RoCE ("" if unknown)
}

// Counts are a device's open objects.
type Counts struct {
	PDs, MRs, CQs, QPs int
}

// resource is an object a Device tracks for Close.
type resource interface {
	closeForDevice() error
}

// Device is an open RDMA device. It is safe for concurrent use.
type Device struct {
	ctx  *verbs.Context
	name string
	attr DeviceAttr

	mu     sync.Mutex
	closed bool
	objs   []resource // creation order
	counts Counts

	dmabufMu   sync.Mutex
	dmabufDone bool
	dmabufErr  error
}

// Open opens the named device, or the first one for "".
func Open(name string) (*Device, error) {
	ctx, err := verbs.Open(name)
	if err != nil {
		return nil, err
	}
	attr, err := ctx.QueryDevice()
	if err != nil {
		_ = ctx.Close()
		return nil, err
	}
	return &Device{ctx: ctx, name: ctx.Name(), attr: attr}, nil
}

// Name is the device name (e.g. "rxe0").
func (d *Device) Name() string { return d.name }

// Attr is the device's attributes (ibv_query_device).
func (d *Device) Attr() DeviceAttr { return d.attr }

// Ports is the number of physical ports (numbered from 1).
func (d *Device) Ports() int { return int(d.attr.PhysPortCnt) }

// Counts returns the device's open objects.
func (d *Device) Counts() Counts {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts
}

func (d *Device) checkPort(port int) error {
	if port < 1 || port > d.Ports() {
		return fmt.Errorf("%w: port %d (device %s has %d)", ErrInvalid, port, d.name, d.Ports())
	}
	return nil
}

// Port queries a port (ibv_query_port).
func (d *Device) Port(port int) (PortInfo, error) {
	if err := d.checkPort(port); err != nil {
		return PortInfo{}, err
	}
	if err := d.use(); err != nil {
		return PortInfo{}, err
	}
	a, err := d.ctx.QueryPort(uint8(port))
	if err != nil {
		return PortInfo{}, err
	}
	ll := a.LinkLayer
	if ll == LinkLayerUnspecified {
		ll = LinkLayerInfiniBand
	}
	return PortInfo{
		Port: port, State: a.State, MaxMTU: a.MaxMTU, ActiveMTU: a.ActiveMTU, LinkLayer: ll,
		LID: a.LID, GIDTableLen: a.GIDTableLen, MaxMsgSize: a.MaxMsgSize,
		ActiveWidth: a.ActiveWidth, ActiveSpeed: a.ActiveSpeed,
	}, nil
}

// GID returns one GID table entry (ibv_query_gid).
func (d *Device) GID(port, index int) (GID, error) {
	if err := d.checkPort(port); err != nil {
		return GID{}, err
	}
	if err := d.use(); err != nil {
		return GID{}, err
	}
	return d.ctx.QueryGID(uint8(port), index)
}

// GIDs returns the port's non-zero GID table entries, with their type and
// netdev from sysfs where available.
func (d *Device) GIDs(port int) ([]GIDEntry, error) {
	pi, err := d.Port(port)
	if err != nil {
		return nil, err
	}
	base := filepath.Join("/sys/class/infiniband", d.name, "ports", fmt.Sprint(port))
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	var out []GIDEntry
	for i := 0; i < pi.GIDTableLen; i++ {
		g, err := d.GID(port, i)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			continue // unset entries may fail on some providers
		}
		if g.IsZero() {
			continue
		}
		out = append(out, GIDEntry{
			Index:  i,
			GID:    g,
			Type:   read(filepath.Join(base, "gid_attrs", "types", fmt.Sprint(i))),
			Netdev: read(filepath.Join(base, "gid_attrs", "ndevs", fmt.Sprint(i))),
		})
	}
	return out, nil
}

// DMABufSupport reports whether this device can register DMA-BUF memory
// (ibv_reg_dmabuf_mr), with UCX's probe: the verb with fd -1, where EBADF
// means supported. nil: supported. An error wrapping ErrNotSupported (and
// the errno, EOPNOTSUPP on Soft-RoCE): not supported, use host staging.
// A conclusive answer is remembered; another error (could not tell) is not.
func (d *Device) DMABufSupport() error {
	d.dmabufMu.Lock()
	defer d.dmabufMu.Unlock()
	if d.dmabufDone {
		return d.dmabufErr
	}
	if err := d.use(); err != nil {
		return err
	}
	pd, err := d.ctx.AllocPD()
	if err != nil {
		return fmt.Errorf("rdma: DMA-BUF probe: %w", err)
	}
	defer pd.Close()
	err = pd.ProbeDmabufMR()
	if err == nil || errors.Is(err, ErrNotSupported) {
		if err != nil {
			err = fmt.Errorf("rdma: %s cannot register DMA-BUF memory: %w", d.name, err)
		}
		d.dmabufDone, d.dmabufErr = true, err
	}
	return err
}

// use fails if the device is closed. (Device.Close must not race with other
// calls on the device.)
func (d *Device) use() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	return nil
}

// add registers a new object (d.mu held).
func (d *Device) addLocked(r resource) { d.objs = append(d.objs, r) }

// remove forgets an object (d.mu held).
func (d *Device) removeLocked(r resource) {
	for i := len(d.objs) - 1; i >= 0; i-- {
		if d.objs[i] == r {
			d.objs = append(d.objs[:i], d.objs[i+1:]...)
			return
		}
	}
}

// Close closes every object created from the device, then the device: the
// QPs first (each flushes its outstanding work requests, so the NIC is
// done with their memory before any MR is deregistered: an MR registered
// after a QP, as a registration cache does, is still in use by it), then
// the rest, newest first. It returns the errors joined. A second Close
// returns nil.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	objs := append([]resource(nil), d.objs...)
	d.mu.Unlock()

	var errs []error
	for _, qps := range []bool{true, false} {
		for i := len(objs) - 1; i >= 0; i-- {
			if _, ok := objs[i].(*QP); ok != qps {
				continue
			}
			if err := objs[i].closeForDevice(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := d.ctx.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
