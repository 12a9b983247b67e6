package dma

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Surviving a device reset.
//
// A CS that outlives its timeout makes the driver reset the device
// (cs_timedout in drivers/accel/habanalabs/common/command_submission.c
// calls hl_device_cond_reset in common/device.c; a fatal device error
// takes the same path). What happens next depends on the context:
//
//   - With no eventfd registered (INFO REGISTER_EVENTFD) the driver
//     hard-resets at once, and the hard reset kills every process that
//     still holds the device's fd open (device_kill_open_processes:
//     SIGKILL after about a second).
//   - With one, it signals the eventfd (GET_EVENTS reads DEVICE_RESET),
//     completes the fence of every CS in flight with -EIO
//     (hl_abort_waiting_for_completions, force_complete_cs) while the
//     engines go on running what they run, refuses every WAIT_CS with
//     EBUSY (hl_wait_ioctl tests reset_info.watchdog_active) and waits up
//     to 30 s (HL_DEVICE_RELEASE_WATCHDOG_TIMEOUT_SEC) for the fd to be
//     released. A release in time hard-resets the device without a kill
//     (hpriv_release: the file is already off the list
//     device_kill_open_processes walks), and the reset's teardown frees
//     the context's memory. After the 30 s the kill happens anyway.
//
// So a Device registers an eventfd when it is built and watches it on a
// goroutine of its own. When the driver reports DEVICE_RESET (or
// DEVICE_UNAVAILABLE) the Device is lost: it refuses new submissions, and
// releases its context at once, the way CloseRunning does (the backend
// first, no release ioctls: the reset frees everything, and nothing the
// device may still be running is unmapped before the fd is gone). Until
// then a CS whose fence the driver force-completed is not reported as
// over (WaitCS says it is still running): the hardware may still be
// writing its destination. Afterwards every call fails with an error
// wrapping ErrDeviceReset, and so does every CS that was in flight. The
// device itself can be opened again once the driver's reset is over: a
// new Device (Open retries the EAGAIN of a reset in progress).
//
// Closing the fd releases the context only once every reference on its
// DMA-BUF exports is gone too: the driver's export takes a reference on
// the fd's file (memory.c export_dmabuf: get_file, dropped by
// hl_release_dmabuf). The Device closes its own DMABufs with the context;
// a dup of one, an import in another process or an RDMA memory region
// registered on one (ibv_reg_dmabuf_mr holds the dma-buf until the region
// is deregistered) keeps the context, and if it outlives the watchdog the
// driver kills this process anyway (hlsim RULES.md R12 and "Holders of a
// lost device's DMA-BUFs").
//
// An attached device (Attach) belongs to the runtime that owns it, which
// registers its own eventfd; only a Device that owns its fd watches.

// resetEvents are the notifier events that mean the device was reset.
const resetEvents = hlsys.NotifierDeviceReset | hlsys.NotifierDeviceUnavailable

// resetErr is the Device's error after a reset the driver reported with
// events ev; when says how it was seen.
func (d *Device) resetErr(ev uint64, when string) *Error {
	return newErr("device "+d.Name(), ErrDeviceReset, fmt.Sprintf(
		"the driver reset the device (events %#x)%s; the context and everything it held are gone", ev, when), nil)
}

// pendingErr is the error of a wait for a submission of a Device whose
// reset the driver reported and whose context is not released yet.
func pendingErr(op string, cause error) error {
	return newErr(op, ErrDeviceReset, "the driver reset the device; the submission may run until the context is released", cause)
}

// resetWatch is a Device's eventfd and its watcher goroutine.
type resetWatch struct {
	efd    *os.File      // the registered eventfd, in Go's poller
	exited chan struct{} // closed when the watcher returns
	// err is the reset error once the driver reported a reset; released
	// is set once the context has been released after it.
	err      atomic.Pointer[Error]
	released atomic.Bool
}

// startResetWatch registers an eventfd with the driver and starts its
// watcher. A driver or backend that refuses the registration leaves the
// Device without one (logged): a reset then kills the process on a real
// device, as it did before.
func (d *Device) startResetWatch() {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		d.log.Warn().Err(err).Msg("eventfd: device resets will not be seen")
		return
	}
	if err := hlsys.RegisterEventFD(d.b, efd); err != nil {
		_ = unix.Close(efd)
		d.log.Warn().Err(err).Msg("the driver refused the reset eventfd: a device reset will end this process")
		return
	}
	w := &resetWatch{efd: os.NewFile(uintptr(efd), "gxfer-reset-eventfd"), exited: make(chan struct{})}
	d.rw = w
	go d.watchResets(w)
}

// watchResets reads the eventfd until the Device closes or the driver
// reports a reset.
func (d *Device) watchResets(w *resetWatch) {
	defer close(w.exited)
	var b [8]byte
	for {
		if _, err := w.efd.Read(b[:]); err != nil {
			return // closed by Device.close
		}
		if !d.enterFast() {
			return
		}
		ev, err := hlsys.GetEvents(d.b)
		d.leave()
		switch {
		case err != nil:
			d.log.Warn().Err(err).Msg("INFO GET_EVENTS after an eventfd signal")
			continue
		case ev&resetEvents != 0:
			d.lose(ev)
			return
		}
		d.log.Warn().Str("events", fmt.Sprintf("%#x", ev)).Msg("driver event (no reset)")
	}
}

// lose marks the Device lost and releases its context.
func (d *Device) lose(ev uint64) {
	e := d.resetErr(ev, "")
	d.rw.err.Store(e)
	start := time.Now()
	err := d.close(true, true) // sets released
	d.log.Warn().Str("events", fmt.Sprintf("%#x", ev)).Err(err).Dur("release", time.Since(start)).
		Msg("device reset: context released; every copy in flight on it failed")
	if d.opts.OnReset != nil {
		d.opts.OnReset(d, e)
	}
}

// resetBeforeClose tells Close (gate held for writing) whether the
// driver reset the device: the watcher saw it, or it has not read the
// event yet (it may be waiting for the gate Close holds, and then finds
// the Device closed). The event read here is the watcher's: the Device
// records the reset as lose does, without OnReset (the Device is being
// closed).
func (d *Device) resetBeforeClose() bool {
	if d.rw == nil {
		return false
	}
	if d.lost() {
		return true
	}
	ev, err := hlsys.GetEvents(d.b)
	if err != nil || ev&resetEvents == 0 {
		return false
	}
	d.rw.err.Store(d.resetErr(ev, " as it was closed"))
	d.log.Warn().Str("events", fmt.Sprintf("%#x", ev)).Msg("device reset seen by Close: the context is released at once")
	return true
}

// ResetErr returns the error the Device fails with since the driver
// reported a reset (it wraps ErrDeviceReset), or nil.
func (d *Device) ResetErr() error {
	if d.rw == nil {
		return nil
	}
	if e := d.rw.err.Load(); e != nil {
		return e
	}
	return nil
}

// lost is true once the driver reported a reset.
func (d *Device) lost() bool { return d.rw != nil && d.rw.err.Load() != nil }

// givingUp tells a submission retrying while its queue is full to stop:
// the Device is lost, or Close waits for the gate the retries hold. It
// then fails with closedErr.
func (d *Device) givingUp() bool { return d.lost() || d.closing.Load() }

// closedErr is the error of a call on a closed Device: ErrDeviceReset if
// a reset closed it, ErrClosed otherwise.
func (d *Device) closedErr(op string) error {
	if d.rw != nil {
		if e := d.rw.err.Load(); e != nil {
			return newErr(op, ErrDeviceReset, e.Detail, nil)
		}
	}
	return newErr(op, ErrClosed, "", nil)
}

// freedErr is the error of a use of freed memory: ErrDeviceReset if a
// reset released it with the context.
func (d *Device) freedErr(op string) error {
	if d.lost() {
		return d.closedErr(op)
	}
	return newErr(op, ErrClosed, "memory already freed", nil)
}

// resetPending tells whether a refused or force-completed wait belongs to
// a reset whose release has not happened yet: the watcher saw it, or the
// driver refuses a wait while the device reads OPERATIONAL, which it does
// only while its release watchdog runs (hl_wait_ioctl).
func (d *Device) resetPending(args *hlsys.WaitCSArgs, seq uint64) bool {
	if d.rw == nil {
		return false
	}
	if d.rw.err.Load() != nil {
		return true
	}
	_, err := hlsys.WaitForCSIn(d.b, args, seq, 0)
	if !errors.Is(err, unix.EBUSY) {
		return false
	}
	st, serr := hlsys.GetDeviceStatus(d.b)
	return serr == nil && DeviceStatus(st).Operational()
}

// g3ResetPending is resetPending for a direct-mode (Gaudi3) Wait that
// polls the completion counters: its submissions are not the driver's
// CSs, so the probe asks for CS 0 (hl_wait_ioctl tests the release
// watchdog before it looks at the sequence number; 0 is below every
// context's sequence, so the driver has nothing to log about it).
func (d *Device) g3ResetPending() bool {
	if d.rw == nil {
		return false
	}
	args, _ := d.waitArgs.Get().(*hlsys.WaitCSArgs)
	if args == nil {
		args = new(hlsys.WaitCSArgs)
	}
	defer d.waitArgs.Put(args)
	return d.resetPending(args, 0)
}

// stopResetWatch closes the eventfd (after the backend: the driver keeps
// its own reference until the context is released) and, unless called by
// the watcher itself, waits for the watcher to return.
func (d *Device) stopResetWatch(fromWatcher bool) {
	if d.rw == nil {
		return
	}
	_ = d.rw.efd.Close()
	if !fromWatcher {
		<-d.rw.exited
	}
}
