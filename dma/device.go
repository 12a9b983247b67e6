package dma

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Defaults for Options.
const (
	DefaultOpenRetries   = 10
	DefaultOpenBackoff   = 10 * time.Millisecond
	MaxOpenBackoff       = time.Second
	DefaultSubmitRetries = 1000
	DefaultSubmitBackoff = 10 * time.Microsecond
	MaxSubmitBackoff     = 10 * time.Millisecond
)

// Export API names returned by Device.ExportAPI.
const (
	// ExportAPI61 is the kernel 6.1 EXPORT_DMABUF_FD form {handle, size}:
	// Gaudi2 exports a whole allocation by its ALLOC handle, Gaudi1 a
	// physical DRAM range.
	ExportAPI61 = "6.1 handle"
	// ExportAPIAddr is the 6.3+ form {addr, size, offset}: Gaudi2 passes the
	// exact device VA returned by MAP plus a page-aligned offset, Gaudi1 a
	// physical DRAM address with offset 0. Drivers before 6.7 ignore the
	// offset (see Device.ExportOffsetHonored).
	ExportAPIAddr = "addr+offset"
)

// Options configures Open and NewDevice. The zero value is usable.
type Options struct {
	// Logger receives warnings (open and submit retries) and debug
	// messages. The zero value logs nothing.
	Logger zerolog.Logger
	// OpenRetries bounds the retries of an open that fails with EAGAIN
	// (previous context still being released, reset, DRAM scrub).
	// 0 means DefaultOpenRetries; negative means no retry.
	OpenRetries int
	// OpenBackoff is the first retry delay; it doubles up to MaxOpenBackoff.
	// 0 means DefaultOpenBackoff.
	OpenBackoff time.Duration
	// SubmitRetries bounds the retries of a CS submission that fails with
	// EAGAIN (completion slot or queue full) or EINTR. 0 means
	// DefaultSubmitRetries; negative means no retry.
	SubmitRetries int
	// SubmitBackoff is the first submit retry delay; it doubles up to
	// MaxSubmitBackoff. 0 means DefaultSubmitBackoff.
	SubmitBackoff time.Duration
	// CSTimeout bounds a Gaudi3 direct-mode submission: unfinished after
	// it, it ends with ErrCSTimedOut and its PDMA channels are reset (the
	// driver's TDR does this on Gaudi1/2 and does not see direct-mode
	// work). 0 means the backend's CSTimeout() if it has one (the
	// emulator's Config.CSTimeout), else DefaultCSTimeout.
	CSTimeout time.Duration
	// OnReset, if set, is called (on the Device's watcher goroutine) once
	// the driver has reported a device reset and d has released its
	// context; err wraps ErrDeviceReset. See Device.ResetErr.
	OnReset func(d *Device, err error)
}

func (o Options) withDefaults() Options {
	if o.OpenRetries == 0 {
		o.OpenRetries = DefaultOpenRetries
	}
	if o.OpenRetries < 0 {
		o.OpenRetries = 0
	}
	if o.OpenBackoff <= 0 {
		o.OpenBackoff = DefaultOpenBackoff
	}
	if o.SubmitRetries == 0 {
		o.SubmitRetries = DefaultSubmitRetries
	}
	if o.SubmitRetries < 0 {
		o.SubmitRetries = 0
	}
	if o.SubmitBackoff <= 0 {
		o.SubmitBackoff = DefaultSubmitBackoff
	}
	return o
}

// Open opens the compute node of a discovered device (O_RDWR|O_CLOEXEC)
// and returns the Device built on it by NewDevice.
//
// The driver allows one compute context per device. EBUSY gives an error
// wrapping ErrDeviceBusy that names the node and says another process owns
// it. EAGAIN (the previous context is still being released, or a reset or
// DRAM scrub is running) is retried with exponential backoff (see Options),
// then reported as an error wrapping ErrDeviceBusy and unix.EAGAIN. EPERM
// means the driver marked the device as malfunctioning (ErrMalfunction).
func Open(node NodeInfo, opts Options) (*Device, error) {
	if node.Path == "" {
		return nil, newErr("open", ErrInvalid, "NodeInfo has no Path", nil)
	}
	return OpenBackend(node.Path, func() (Backend, error) {
		b, err := hlsys.OpenFD(node.Path)
		if err != nil {
			return nil, err
		}
		return b, nil
	}, opts)
}

// OpenBackend is Open for any backend: open is called (and retried on
// EAGAIN) to obtain the backend, and its errors are mapped as Open
// describes. name labels the device in errors. Use it with the emulator:
//
//	dev, err := dma.OpenBackend("hlsim0", sim.Open, dma.Options{})
func OpenBackend[B Backend](name string, open func() (B, error), opts Options) (*Device, error) {
	opts = opts.withDefaults()
	log := opts.Logger
	backoff := opts.OpenBackoff
	op := "open " + name
	for attempt := 0; ; attempt++ {
		ob, err := open()
		if err == nil {
			var b Backend = ob
			if b == nil {
				return nil, newErr(op, ErrInvalid, "open returned no backend", nil)
			}
			return NewDevice(b, opts)
		}
		switch {
		case errors.Is(err, unix.EBUSY):
			return nil, newErr(op, ErrDeviceBusy,
				"another process owns "+name+" (the driver allows one compute context per device)", err)
		case errors.Is(err, unix.EAGAIN):
			if attempt < opts.OpenRetries {
				log.Warn().Str("node", name).Int("attempt", attempt+1).Dur("backoff", backoff).
					Msg("device busy releasing the previous context or resetting; retrying open")
				time.Sleep(backoff)
				backoff = min(2*backoff, MaxOpenBackoff)
				continue
			}
			return nil, newErr(op, ErrDeviceBusy, fmt.Sprintf(
				"%s still releasing the previous context or resetting after %d retries", name, attempt), err)
		case errors.Is(err, unix.EPERM):
			return nil, newErr(op, ErrMalfunction, "the driver refuses to open "+name+" because the device is in malfunction", err)
		}
		return nil, newErr(op, errnoKind(err), "", err)
	}
}

// resource is something a Device created and releases in Close.
type resource interface {
	release() error
}

// Device is an open Gaudi compute context. It is safe for concurrent use:
// several goroutines may allocate, map, build command buffers, Submit and
// Wait at the same time. Close waits for calls in progress to return.
type Device struct {
	b         hlsys.Backend // pub, as the driver binding takes it
	pub       Backend
	opts      Options
	log       zerolog.Logger
	info      hlsys.HwIPInfo
	model     Model
	exportAPI string
	release   string // kernel release string, "" if unknown
	allocPage uint64 // Gaudi2/3: DRAM allocation granularity
	hostPage  uint64

	// gate is read-held by every call that uses the backend (including the
	// blocking Wait: readers do not block each other) and write-held by
	// Close, so Close never races an ioctl on a closed backend.
	gate   sync.RWMutex
	closed bool // guarded by gate
	// closing: Close has begun (it waits for the gate). The retry loops
	// of a submission that finds its queue full hold the gate for as long
	// as they retry (seconds): they give up on it.
	closing atomic.Bool
	// gone: CloseRunning closed the backend before releasing the
	// resources, which then skip the driver (set and read by Close's
	// goroutine, under gate).
	gone bool

	// mu guards the tracking state below and the state fields of every
	// resource (done flags, export counts). It is never held across an
	// ioctl.
	mu     sync.Mutex
	live   map[uint64]resource
	spans  []addrSpan // the live DeviceMems' and HostMappings', by address (AddrKind)
	nextID uint64
	cbPool []*CB

	dram  *rangeAlloc // Gaudi1 physical DRAM allocator
	slabs slabs       // Gaudi2/3 shared allocations (slab.go)
	g3    *g3Dev      // Gaudi3 direct PDMA mode, nil on Gaudi1/2
	rw    *resetWatch // the reset eventfd's watcher, nil without one

	// waitArgs holds *hlsys.WaitCSArgs for Wait's polls, csCalls
	// *csCall for Submit.
	waitArgs sync.Pool
	csCalls  sync.Pool

	rr            atomic.Uint32
	submitted     atomic.Uint64
	submitRetries atomic.Uint64
	waits         atomic.Uint64
}

// NewDevice builds a Device on an open backend and takes ownership of it:
// the backend is closed if NewDevice fails, and by Device.Close otherwise.
//
// It reads HW_IP_INFO (304-byte buffer), identifies the model from the PCI
// device id, requires DEVICE_STATUS to be OPERATIONAL and picks the DMA-BUF
// export API: accel (DRM) numbering means the {addr, size, offset} form;
// legacy numbering means that form on kernel releases >= 6.3 and the 6.1
// {handle, size} form before. The release comes from the backend's
// KernelRelease() method if it has one (the emulator), else from uname.
func NewDevice(b Backend, opts Options) (_ *Device, err error) {
	if b == nil {
		return nil, newErr("new device", ErrInvalid, "nil backend", nil)
	}
	defer func() {
		if err != nil {
			_ = b.Close()
		}
	}()
	hb := driverBackend(b)
	opts = opts.withDefaults()
	op := "open " + hb.Name()

	info, model, status, err := identify(hb, op)
	if err != nil {
		return nil, err
	}
	if status != hlsys.DeviceStatusOperational {
		var cause error
		if status == hlsys.DeviceStatusMalfunction || status == hlsys.DeviceStatusNeedsReset {
			cause = ErrMalfunction
		}
		return nil, newErr(op, ErrNotOperational, "device status "+statusName(status), cause)
	}

	d := &Device{
		b:        hb,
		pub:      b,
		opts:     opts,
		info:     info,
		model:    model,
		hostPage: uint64(os.Getpagesize()),
		live:     map[uint64]resource{},
	}
	d.log = opts.Logger.With().Str("device", hb.Name()).Str("model", model.String()).Logger()
	d.release = kernelRelease(b)
	d.exportAPI = chooseExportAPI(hb.Numbering(), d.release)
	if hb.Numbering() == hlsys.Legacy {
		if _, _, ok := parseRelease(d.release); !ok {
			d.log.Warn().Str("release", d.release).Msg("cannot parse the kernel release; assuming the 6.1 DMA-BUF export API")
		}
	}
	if model.hasDeviceMMU() {
		d.allocPage = info.DeviceMemAllocDefaultPageSize
		if d.allocPage == 0 {
			d.allocPage = info.DramPageSize
		}
		if d.allocPage == 0 {
			d.allocPage = d.hostPage
		}
	} else {
		d.dram = newRangeAlloc(info.DramBaseAddress, info.DramSize, gaudi1Align)
	}
	if model.direct() {
		d.g3 = newG3(d, info, b)
	}
	d.startResetWatch()
	d.log.Debug().Str("numbering", hb.Numbering().String()).Str("export", d.exportAPI).
		Uint64("dram_base", info.DramBaseAddress).Uint64("dram_size", info.DramSize).
		Uint64("page", d.allocPage).Bool("emulated", hb.Emulated()).Msg("device open")
	return d, nil
}

// identify reads what opening or attaching needs to know of a device: its
// HW_IP_INFO, the Model of its PCI id and its DEVICE_STATUS.
func identify(b hlsys.Backend, op string) (hlsys.HwIPInfo, Model, uint32, error) {
	info, err := hlsys.GetHwIPInfo(b)
	if err != nil {
		return info, 0, 0, wrapErr(op+": read HW_IP_INFO", err)
	}
	model, err := ModelFromDeviceID(info.DeviceID)
	if err != nil {
		return info, 0, 0, fmt.Errorf("dma: %s: %w", op, err)
	}
	status, err := hlsys.GetDeviceStatus(b)
	if err != nil {
		return info, 0, 0, wrapErr(op+": read DEVICE_STATUS", err)
	}
	return info, model, status, nil
}

// DeviceStatus is a device's state as DEVICE_STATUS reports it.
type DeviceStatus uint32

// Device states (enum hl_device_status; status_test.go checks them against
// the driver binding).
const (
	StatusOperational               DeviceStatus = 0
	StatusInReset                   DeviceStatus = 1
	StatusMalfunction               DeviceStatus = 2
	StatusNeedsReset                DeviceStatus = 3
	StatusInDeviceCreation          DeviceStatus = 4
	StatusInResetAfterDeviceRelease DeviceStatus = 5
)

// String returns the driver's name of the state, e.g. "OPERATIONAL", or
// the number for a state this package does not know.
func (s DeviceStatus) String() string { return statusName(uint32(s)) }

// Operational reports whether the driver takes work in this state
// (hl_device_operational: OPERATIONAL and IN_DEVICE_CREATION).
func (s DeviceStatus) Operational() bool {
	return s == StatusOperational || s == StatusInDeviceCreation
}

// Broken reports whether the state does not end by itself (MALFUNCTION,
// NEEDS_RESET): errors in it wrap ErrMalfunction.
func (s DeviceStatus) Broken() bool { return s == StatusMalfunction || s == StatusNeedsReset }

func statusName(s uint32) string {
	switch s {
	case hlsys.DeviceStatusOperational:
		return "OPERATIONAL"
	case hlsys.DeviceStatusInReset:
		return "IN_RESET"
	case hlsys.DeviceStatusMalfunction:
		return "MALFUNCTION"
	case hlsys.DeviceStatusNeedsReset:
		return "NEEDS_RESET"
	case hlsys.DeviceStatusInDeviceCreation:
		return "IN_DEVICE_CREATION"
	case hlsys.DeviceStatusInResetAfterDeviceRelease:
		return "IN_RESET_AFTER_DEVICE_RELEASE"
	}
	return strconv.FormatUint(uint64(s), 10)
}

// kernelRelease returns the release string of the kernel behind b.
func kernelRelease(b Backend) string {
	if kr, ok := b.(interface{ KernelRelease() string }); ok {
		return kr.KernelRelease()
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// parseRelease extracts major.minor from a release like "6.1.0-18-amd64".
func parseRelease(rel string) (major, minor int, ok bool) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, 0, false
	}
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i]
	}
	minor, err = strconv.Atoi(digits)
	if err != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// releaseAtLeast reports whether rel is at least major.minor (false if
// rel cannot be parsed).
func releaseAtLeast(rel string, major, minor int) bool {
	ma, mi, ok := parseRelease(rel)
	if !ok {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func chooseExportAPI(n hlsys.Numbering, release string) string {
	if n == hlsys.Accel || releaseAtLeast(release, 6, 3) {
		return ExportAPIAddr
	}
	return ExportAPI61
}

// Model returns the Gaudi generation.
func (d *Device) Model() Model { return d.model }

// Info returns the HW_IP_INFO read at open.
func (d *Device) Info() HwInfo { return hwInfo(d.info) }

// Name names the node, e.g. "/dev/accel/accel0" or "hlsim0 (emulated)".
func (d *Device) Name() string { return d.b.Name() }

// Emulated reports whether the device is the emulator.
func (d *Device) Emulated() bool { return d.b.Emulated() }

// Backend returns the backend the Device owns (the one given to
// NewDevice). Do not close it.
func (d *Device) Backend() Backend { return d.pub }

// Numbering returns the ioctl numbering of the node.
func (d *Device) Numbering() Numbering { return Numbering(d.b.Numbering()) }

// ExportAPI returns ExportAPI61 ("6.1 handle") or ExportAPIAddr
// ("addr+offset").
func (d *Device) ExportAPI() string { return d.exportAPI }

// KernelRelease returns the kernel release used to pick the export API.
func (d *Device) KernelRelease() string { return d.release }

// Stats are counters of a Device.
type Stats struct {
	Submitted     uint64 // CSs submitted successfully
	SubmitRetries uint64 // EAGAIN/EINTR retries of CS submissions
	Waits         uint64 // WAIT_CS calls
	Live          int    // resources (memory, mappings, CBs, DMA-BUFs) not yet released
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	live := len(d.live)
	d.mu.Unlock()
	return Stats{
		Submitted:     d.submitted.Load(),
		SubmitRetries: d.submitRetries.Load(),
		Waits:         d.waits.Load(),
		Live:          live,
	}
}

// Status reads DEVICE_STATUS.
func (d *Device) Status() (DeviceStatus, error) {
	if err := d.enter("device status"); err != nil {
		return 0, err
	}
	defer d.leave()
	s, err := hlsys.GetDeviceStatus(d.b)
	return DeviceStatus(s), wrapErr("device status", err)
}

// DramUsage returns DRAM_USAGE.
func (d *Device) DramUsage() (DramUsage, error) {
	if err := d.enter("DRAM usage"); err != nil {
		return DramUsage{}, err
	}
	defer d.leave()
	u, err := hlsys.GetDramUsage(d.b)
	return DramUsage{Free: u.DramFreeMem, Used: u.CtxDramMem}, wrapErr("DRAM usage", err)
}

// enter read-locks the gate for a call that uses the backend; it fails
// with ErrClosed once Close has started.
func (d *Device) enter(op string) error {
	d.gate.RLock()
	if d.closed {
		d.gate.RUnlock()
		return d.closedErr(op)
	}
	return nil
}

// enterFast is enter without the error: false if the Device is closed.
func (d *Device) enterFast() bool {
	d.gate.RLock()
	if d.closed {
		d.gate.RUnlock()
		return false
	}
	return true
}

func (d *Device) leave() { d.gate.RUnlock() }

// track registers a live resource and returns its id. Ids grow, so Close
// releases in reverse creation order (a DMA-BUF before its memory).
func (d *Device) track(r resource) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextID++
	d.live[d.nextID] = r
	switch v := r.(type) {
	case *DeviceMem:
		d.addSpanLocked(addrSpan{lo: v.addr, n: v.allocSize, kind: AddrDevice, id: d.nextID})
	case *HostMapping:
		d.addSpanLocked(addrSpan{lo: v.va, n: v.size, kind: AddrHost, id: d.nextID})
	}
	return d.nextID
}

// Close releases everything the Device created that is still live, in
// reverse order of creation (DMA-BUF exports, command buffers, host
// mappings, device memory: unmapped before freed), then closes the
// backend. It waits for calls in progress to return. Errors are joined; a
// second Close returns nil. Close expects no submission to be running:
// after giving up on one, use CloseRunning. (On Gaudi3, where the Device
// itself sees whether its submissions finished, Close closes as
// CloseRunning does when one has not.) A device in MALFUNCTION or
// NEEDS_RESET (DeviceStatus.Broken) is closed as CloseRunning does: its
// engines may still run the CSs that failed with ErrMalfunction.
func (d *Device) Close() error { return d.close(false, false) }

// broken reports whether DEVICE_STATUS says MALFUNCTION or NEEDS_RESET.
func (d *Device) broken() bool {
	raw, err := hlsys.GetDeviceStatus(d.b)
	return err == nil && DeviceStatus(raw).Broken()
}

// CloseRunning is Close for a device that may still be running
// submissions the caller gave up on (their memory must not be unmapped or
// freed under them). It closes the backend first: the driver hard-resets
// a device whose fd is released while CSs are still active
// (hl_device_release in drivers/accel/habanalabs/common/device.c), and
// its context teardown then unmaps and frees what the context held; the
// emulator aborts the CSs and stops its engines before it releases
// anything. The resources are then dropped without release calls; only
// their host side (CB mappings, DMA-BUF fds, host pages) is undone. On
// Gaudi3 the PDMA channels are stopped first, and their rings and
// completion counters go with the context.
func (d *Device) CloseRunning() error { return d.close(true, false) }

// close closes the Device once; the reset watcher calls it with
// fromWatcher (it must not wait for itself to return).
func (d *Device) close(running, fromWatcher bool) error {
	first, err := d.closeGated(running)
	if first {
		// After the gate: the watcher may be waiting for it.
		d.stopResetWatch(fromWatcher)
	}
	return err
}

func (d *Device) closeGated(running bool) (first bool, err error) {
	d.closing.Store(true)
	d.gate.Lock()
	defer d.gate.Unlock()
	if d.closed {
		return false, nil
	}
	d.closed = true
	if !running && d.resetBeforeClose() {
		// The driver reset the device: it may still run the CSs whose
		// fences it forced, so the context goes as the watcher would
		// release it (reset.go).
		running = true
	}
	if !running && d.g3.busy() {
		// A Gaudi3 submission nobody waited for is still running on its
		// PDMA channels: the driver knows nothing of it (no CS), so the
		// release calls below would unmap and free its rings, buffers
		// and host memory under it. Closed as CloseRunning closes.
		d.log.Warn().Msg("closed with a Gaudi3 submission still running: the context is released first")
		running = true
	}
	if !running && d.broken() {
		// In MALFUNCTION or NEEDS_RESET (reset_on_lockup=0 after a
		// lockup: hlsim RULES.md R10) the engines may still run the
		// CSs a wait gave up on (ErrMalfunction: CopySync's, a
		// tracker's), and the driver refuses UNMAP, FREE and CB
		// DESTROY anyway (EBUSY: hl_mem_ioctl, hl_cb_ioctl), so that
		// what they keep could never be freed here: the context goes
		// first (its release resets a device CSs still hold,
		// hl_device_release), then the host side is undone.
		running = true
	}

	type entry struct {
		id uint64
		r  resource
	}
	d.mu.Lock()
	live := make([]entry, 0, len(d.live))
	for id, r := range d.live {
		live = append(live, entry{id, r})
	}
	d.mu.Unlock()
	slices.SortFunc(live, func(a, b entry) int { return cmp.Compare(b.id, a.id) }) // newest first

	// Fills of the CBs in progress end first (a Gaudi3 fill reads the
	// direct-mode state g3.close clears); later ones fail.
	for _, e := range live {
		if cb, ok := e.r.(*CB); ok {
			cb.markReleased()
		}
	}
	// Its channels are stopped first; with running the rest goes with
	// the context (g3Dev.close, released): nothing may run into freed
	// memory.
	d.g3.close(running)
	var errs []error
	closeBackend := func() {
		if err := d.b.Close(); err != nil {
			errs = append(errs, wrapErr("close "+d.b.Name(), err))
		}
	}
	if running {
		// The device's context goes first; d.gone makes the releases
		// below skip the driver.
		closeBackend()
		d.gone = true
		d.g3.released()
	}
	for _, e := range live {
		if err := e.r.release(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, d.closeSlabs()...)
	if !running {
		closeBackend()
	}
	if d.rw != nil {
		d.rw.released.Store(true)
	}
	d.log.Debug().Int("released", len(live)).Bool("running", running).Msg("device closed")
	return true, errors.Join(errs...)
}
