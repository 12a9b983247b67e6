package dma

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

func pointerOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// H2DQueues returns the queues used for host-to-device copies: Gaudi1
// DMA_0_0..3 (ids 0-3, external PCI DMA, kernel CBs), Gaudi2 PDMA_0_0 and
// PDMA_0_1 (ids 0 and 1, user CBs), Gaudi3 two user-owned PDMA channels
// (direct mode; ids are channel numbers, by default 0 and 1).
// The per-model table and the driver rules behind it are in model.go
// (queueTable).
func (d *Device) H2DQueues() []uint32 { return slices.Clone(d.queues().h2d) }

// D2HQueues returns the queues used for device-to-host copies: Gaudi1
// DMA_1_0..3 (ids 4-7), Gaudi2 PDMA_1_0 (id 4: PDMA_1's only stream open to
// users), Gaudi3 one more PDMA channel (by default 2).
func (d *Device) D2HQueues() []uint32 { return slices.Clone(d.queues().d2h) }

// D2DQueues returns the queues used for device-to-device copies and device
// memsets: the H2D set (the PCI DMA engines reach DRAM as well). Gaudi2's
// EDMA queues would be faster for large DRAM-to-DRAM copies but need
// engine setup this package does not do.
func (d *Device) D2DQueues() []uint32 { return slices.Clone(d.queues().d2d) }

// csCall is the CS ioctl's argument struct and chunk array, reused from
// one Submit to the next (hlsys.SubmitCSIn): both on the heap, so the
// emulator, running on the caller's goroutine, reads them where the
// struct says even when the stack moves.
type csCall struct {
	args hlsys.CSArgs
	raw  []hlsys.CSChunk
}

// Submit submits one CS executing chunks and returns its sequence number.
// EAGAIN (completion slot or queue full) and EINTR are retried with
// exponential backoff (Options.SubmitRetries, SubmitBackoff); retries are
// counted in Stats and logged at Warn. A queue that stays full gives an
// error wrapping ErrBusy and unix.EAGAIN; a CS the driver rejects (bad
// queue, bad CB, Gaudi1 parser refusal) an error wrapping ErrInvalid; a CS
// refused because the device is not operational (resetting, in
// malfunction) an error wrapping ErrNotOperational (see csRefused for how
// EPERM and EBUSY are told apart); a context-switch phase that timed out
// in the driver (ETIMEDOUT) an error wrapping ErrBusy. On every error the
// CS was not submitted.
func (d *Device) Submit(chunks []Chunk) (seq uint64, err error) {
	return d.SubmitUntil(chunks, nil)
}

// SubmitUntil is Submit whose retries also end once stop (nil: never),
// called before each retry, returns an error. A CS that finds its queue or
// completion slot full waits in the retries until the CSs ahead of it end,
// which on a loaded or stalled device takes as long as they do (seconds
// with the default retries): a caller whose work has a deadline or a
// context must not wait past them for a CS that never reached the device.
// The error then wraps ErrBusy, unix.EAGAIN and stop's error: the device
// never saw the CS.
func (d *Device) SubmitUntil(chunks []Chunk, stop func() error) (seq uint64, err error) {
	// The op string is built only when needed (errors, Gaudi3): Submit is
	// on every copy's path.
	opName := func() string { return fmt.Sprintf("submit CS of %d chunk(s) on %s", len(chunks), d.Name()) }
	if len(chunks) == 0 || len(chunks) > MaxChunksPerCS {
		return 0, newErr(opName(), ErrInvalid, fmt.Sprintf("need 1 to %d chunks", MaxChunksPerCS), nil)
	}
	if !d.enterFast() {
		return 0, d.closedErr(opName())
	}
	defer d.leave()
	if d.lost() {
		// The driver would still take it, but the context is about to be
		// released: nothing new goes to the device.
		return 0, d.closedErr(opName())
	}
	if d.g3 != nil {
		return d.g3Submit(opName, chunks, stop)
	}
	call, _ := d.csCalls.Get().(*csCall)
	if call == nil {
		call = new(csCall)
	}
	defer d.csCalls.Put(call)
	call.raw = call.raw[:0]
	for _, c := range chunks {
		call.raw = append(call.raw, c.raw())
	}
	backoff := d.opts.SubmitBackoff
	for attempt := 0; ; attempt++ {
		// CS_FLAGS_TIMESTAMP: the driver keeps the CS's outcome once its
		// fence is gone (hl_push_cs_outcome), so that a CS that ended,
		// aborted say, and whose completion slot later CSs took is not
		// read as completed (Wait).
		out, err := hlsys.SubmitCSIn(d.b, &call.args, call.raw, hlsys.CSFlagsTimestamp, 0)
		if err == nil && out.Status != hlsys.CSStatusSuccess {
			err = newErr(opName(), ErrInvalid, fmt.Sprintf("CS status %d", out.Status), nil)
		}
		if err == nil {
			if attempt > 0 {
				d.log.Warn().Int("retries", attempt).Uint64("seq", out.Seq).Msg("CS submission retried (queue or completion slot full)")
			}
			d.submitted.Add(1)
			return out.Seq, nil
		}
		op := opName()
		retryable := errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)
		if retryable && d.givingUp() {
			// A queue behind a CS the reset left running stays full, and
			// the watcher's release waits for this call (reset.go); so
			// does Close, which gave up on the CSs ahead.
			return 0, d.closedErr(op)
		}
		if retryable {
			if serr := stopped(stop); serr != nil {
				return 0, stopErr(op, fmt.Sprintf("queue still full after %d retries", attempt), err, serr)
			}
		}
		if retryable && attempt < d.opts.SubmitRetries {
			d.submitRetries.Add(1)
			time.Sleep(backoff)
			backoff = min(2*backoff, MaxSubmitBackoff)
			continue
		}
		if attempt > 0 {
			d.log.Warn().Int("retries", attempt).Err(err).Msg("CS submission failed after retries")
		}
		switch {
		case retryable:
			return 0, newErr(op, ErrBusy, fmt.Sprintf("queue still full after %d retries", attempt), err)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EBUSY):
			return 0, d.csRefused(op, err)
		case errors.Is(err, unix.ETIMEDOUT):
			// hl_cs_ctx_switch (command_submission.c): the context
			// switch, or the wait for another thread's, timed out
			// ("context switch phase timeout") before hl_cs_ioctl
			// submitted the CS; the driver may soft-reset the device.
			return 0, newErr(op, ErrBusy, "the driver's context-switch phase timed out: the CS was not submitted", err)
		}
		return 0, wrapErr(op, err)
	}
}

// stopped is the error of a submission's stop function (SubmitUntil), or
// nil.
func stopped(stop func() error) error {
	if stop == nil {
		return nil
	}
	return stop()
}

// stopErr is the error of a submission whose queue stayed full until its
// stop function said to give up (SubmitUntil).
func stopErr(op, detail string, cause, serr error) error {
	return newErr(op, ErrBusy, detail, fmt.Errorf("%w: %w", serr, cause))
}

// csRefused maps EPERM and EBUSY from the CS ioctl by the device's state,
// read with INFO DEVICE_STATUS (which the driver answers in any state):
//
//   - The driver returns EBUSY when the device is not operational as the
//     CS arrives (hl_cs_sanity_checks, command_submission.c) and EPERM
//     when it stops being operational before the CS is scheduled
//     (hl_hw_queue_schedule_cs, hw_queue.c: "device is %s, CS rejected!").
//     Either way, with DEVICE_STATUS not operational (hl_device_operational:
//     anything but OPERATIONAL and IN_DEVICE_CREATION) the error wraps
//     ErrNotOperational (and ErrMalfunction for MALFUNCTION/NEEDS_RESET).
//   - EPERM on an operational device is the Gaudi1 CB parser refusing a
//     packet (gaudi_cs_parser): ErrInvalid. Gaudi2/3 have no packet parser
//     (gaudi2_cs_parser only checks the queue and the CB address, with
//     EINVAL/EFAULT), so there EPERM can only be the device state at
//     scheduling time, since recovered: ErrNotOperational.
//   - EBUSY on an operational device stays ErrBusy.
func (d *Device) csRefused(op string, err error) error {
	if e := d.notOperational(op, "the driver refused the CS", err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, unix.EBUSY):
		return newErr(op, ErrBusy, "", err)
	case d.model.parsesCB():
		return newErr(op, ErrInvalid, "packet rejected by the driver's CB parser", err)
	}
	return newErr(op, ErrNotOperational,
		"the driver refused to schedule the CS (EPERM): the device was not operational then (it reports OPERATIONAL now; "+
			d.model.String()+" has no packet parser)", err)
}

// notOperational reads DEVICE_STATUS after err and returns an error
// wrapping ErrNotOperational (and ErrMalfunction for MALFUNCTION and
// NEEDS_RESET) and err if the device is not operational in the driver's
// sense (hl_device_operational: OPERATIONAL and IN_DEVICE_CREATION are),
// or if the status cannot be read; nil if it is operational.
func (d *Device) notOperational(op, what string, err error) error {
	raw, serr := hlsys.GetDeviceStatus(d.b)
	st := DeviceStatus(raw)
	if serr == nil && st.Operational() {
		return nil
	}
	detail := what + " because the device is not operational"
	cause := err
	switch {
	case serr != nil:
		detail += " (DEVICE_STATUS unreadable: " + serr.Error() + ")"
	case st.Broken():
		cause = fmt.Errorf("%w: %w", ErrMalfunction, err)
		detail += " (status " + st.String() + ")"
	default:
		detail += " (status " + st.String() + ")"
	}
	return newErr(op, ErrNotOperational, detail, cause)
}

// CSStatus is the state of a CS as reported by Wait.
type CSStatus int

const (
	// CSUnknown is returned with errors that say nothing about the CS.
	CSUnknown CSStatus = iota
	// CSCompleted: the CS finished (also when its fence was long retired).
	CSCompleted
	// CSBusy: the CS is still running after the timeout.
	CSBusy
	// CSTimedOut: the device's CS timeout expired (error wraps ErrCSTimedOut).
	CSTimedOut
	// CSAborted: the CS was aborted (error wraps ErrCSAborted).
	CSAborted
)

func (s CSStatus) String() string {
	switch s {
	case CSCompleted:
		return "completed"
	case CSBusy:
		return "busy"
	case CSTimedOut:
		return "timed out"
	case CSAborted:
		return "aborted"
	}
	return "unknown"
}

// MaxWaitPerCall is the longest timeout passed to one WAIT_CS: the driver
// converts timeout_us through an unsigned int, so longer values would be
// truncated. Wait splits longer timeouts into several calls.
const MaxWaitPerCall = 4000 * time.Second

// Wait waits up to timeout for CS seq (0 polls). It returns (CSCompleted,
// nil) when the CS is done, (CSBusy, nil) when it is still running at the
// timeout, an error wrapping ErrCSTimedOut when the device's CS timeout
// fired (-ETIMEDOUT), ErrCSAborted when the CS was aborted (-EIO),
// ErrNotOperational when the driver refuses the wait because the device is
// not operational (EBUSY, and DEVICE_STATUS says so), ErrCSOutcomeLost when
// the CS's fence is gone and the driver's outcome store no longer holds it
// (the store keeps 256; an outcome is given to one wait only), and the
// wrapped errno otherwise (errors.Is(err, unix.EINVAL) for an unknown seq).
// Wait does not block other calls on the Device; Close waits for it.
func (d *Device) Wait(seq uint64, timeout time.Duration) (CSStatus, error) {
	// The op string is built only when needed (errors, Gaudi3): a
	// completion tracker polls Wait many times per CS.
	opName := func() string { return fmt.Sprintf("wait for CS %d on %s", seq, d.Name()) }
	if seq == 0 {
		return CSUnknown, newErr(opName(), ErrInvalid, "seq 0 is never valid", nil)
	}
	if !d.enterFast() {
		return CSUnknown, d.closedErr(opName())
	}
	defer d.leave()
	if d.g3 != nil {
		return d.g3Wait(opName, seq, timeout)
	}
	remaining := max(timeout, 0)
	args, _ := d.waitArgs.Get().(*hlsys.WaitCSArgs)
	if args == nil {
		args = new(hlsys.WaitCSArgs)
	}
	defer d.waitArgs.Put(args)
	for {
		chunk := min(remaining, MaxWaitPerCall)
		d.waits.Add(1)
		var start time.Time
		if chunk > 0 {
			start = time.Now()
		}
		out, err := hlsys.WaitForCSIn(d.b, args, seq, uint64(chunk/time.Microsecond))
		if chunk > 0 && errors.Is(err, unix.EINTR) {
			// A signal interrupted the wait: hl_cs_wait_ioctl
			// (command_submission.c) returns -EINTR, and the backends
			// hand it back (hlsys.Restartable). Wait again for the time
			// left only, so that signals arriving faster than the
			// timeout cannot keep the wait from ending; once it is used
			// up, one poll says where the CS is (a poll does not sleep
			// in the driver, _hl_cs_wait_ioctl: completion_done, so no
			// signal interrupts it).
			remaining -= min(time.Since(start), remaining)
			continue
		}
		if err == nil && (out.Status == hlsys.WaitCSStatusCompleted && out.Flags&hlsys.WaitCSStatusFlagGone == 0 ||
			out.Status == hlsys.WaitCSStatusBusy) {
			// The common outcomes, without an op string.
			st := CSCompleted
			if out.Status == hlsys.WaitCSStatusBusy {
				if remaining > chunk {
					remaining -= chunk
					continue
				}
				st = CSBusy
			}
			return st, nil
		}
		op := opName()
		st, err := waitResult(op, out, err)
		if st == CSAborted || st == CSUnknown && errors.Is(err, unix.EBUSY) {
			// A fence force-completed (-EIO) or a wait refused (EBUSY) at
			// a reset whose release has not happened: the device may still
			// run the CS (see reset.go).
			if d.resetPending(args, seq) {
				return CSUnknown, pendingErr(op, err)
			}
		}
		if st == CSUnknown && (errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EPERM)) {
			// hl_wait_ioctl refuses every wait while the device is not
			// operational (EBUSY; EPERM on older drivers).
			if e := d.notOperational(op, "the driver refused the wait", err); e != nil {
				return CSUnknown, e
			}
		}
		if st == CSBusy && remaining > chunk {
			remaining -= chunk
			continue
		}
		return st, err
	}
}

// resetPause is the longest WaitCS pauses when the driver refuses a wait
// because the device is resetting.
const resetPause = time.Millisecond

// WaitCS waits up to timeout (0 polls) for CS seq to retire, for a
// completion tracker that polls many CSs (it is a cq.CSWaiter): done is
// true once the CS is over, with err nil if it completed and its failure
// otherwise (ErrCSTimedOut, ErrCSAborted, ErrMalfunction, ErrClosed, ...);
// (false, nil) means it is still running.
//
// While the device resets, the driver refuses every wait (EBUSY,
// hl_wait_ioctl), but the CS's outcome outlives the reset: the driver
// aborts or times it out, and WAIT_CS reports that afterwards. So such a
// refusal (Wait's ErrNotOperational, or a bare ErrBusy when the status
// read found the device operational again: the reset ended in between)
// gives (false, nil) after a pause of at most min(timeout, 1ms), which
// keeps a polling caller from spinning on it. A device in malfunction
// does not come back: that ends the CS (ErrMalfunction), and so does a
// device removed under the fd (ENODEV). A CS ended with ErrMalfunction
// may still run on the hardware (with the driver's reset_on_lockup=0 a
// lockup leaves the device in NEEDS_RESET, not reset): keep what it uses
// until the Device is closed with CloseRunning.
func (d *Device) WaitCS(seq uint64, timeout time.Duration) (done bool, err error) {
	st, err := d.Wait(seq, timeout)
	if err != nil && errors.Is(err, ErrDeviceReset) && !d.rw.released.Load() {
		// The CS ends when the context is released (reset.go).
		time.Sleep(min(timeout, resetPause))
		return false, nil
	}
	if err != nil {
		// ENODEV is not a reset: the device was removed under the fd,
		// and every later ioctl on it fails so (hl_ioctl in
		// habanalabs_ioctl.c, "Sending ioctl after device was removed!
		// Please close FD", once device_disable_open_processes in
		// device.c hl_device_fini cleared the fd's device). Its CSs
		// are gone with it: waiting on would never end.
		// EINTR (a signal-interrupted WAIT_CS that Wait did not issue
		// again: hl_cs_wait_ioctl) says nothing of the CS either.
		transient := errors.Is(err, ErrBusy) || errors.Is(err, ErrNotOperational) || errors.Is(err, unix.EINTR)
		if transient && !errors.Is(err, ErrMalfunction) && !errors.Is(err, unix.ENODEV) {
			time.Sleep(min(timeout, resetPause))
			return false, nil
		}
		return true, err
	}
	return st == CSCompleted, nil
}

func waitResult(op string, out hlsys.WaitCSOut, err error) (CSStatus, error) {
	switch {
	case err == nil:
		switch out.Status {
		case hlsys.WaitCSStatusCompleted:
			// A gone fence whose outcome the store gave back has a
			// timestamp; one without was not found there (or was taken
			// by an earlier wait): COMPLETED then only means "old".
			if out.Flags&hlsys.WaitCSStatusFlagGone != 0 && out.Flags&hlsys.WaitCSStatusFlagTimestampVld == 0 {
				return CSUnknown, newErr(op, ErrCSOutcomeLost, "its fence is gone and the driver's outcome store no longer holds it", nil)
			}
			return CSCompleted, nil
		case hlsys.WaitCSStatusBusy:
			return CSBusy, nil
		case hlsys.WaitCSStatusTimedOut:
			return CSTimedOut, newErr(op, ErrCSTimedOut, "", nil)
		case hlsys.WaitCSStatusAborted:
			return CSAborted, newErr(op, ErrCSAborted, "", nil)
		}
		return CSUnknown, newErr(op, nil, fmt.Sprintf("unknown WAIT_CS status %d", out.Status), nil)
	case errors.Is(err, unix.ETIMEDOUT):
		return CSTimedOut, newErr(op, ErrCSTimedOut, "the device's CS timeout expired", err)
	case errors.Is(err, unix.EIO):
		return CSAborted, newErr(op, ErrCSAborted, "", err)
	}
	return CSUnknown, wrapErr(op, err)
}

// copyCBSize is the capacity of the pooled CBs used by CopySync: enough
// for 100 LIN_DMA packets (200 GiB) plus the trailing NOP.
const (
	copyCBSize = 4096
	cbPoolMax  = 4
)

func (d *Device) getCB(capacity int) (*CB, error) {
	d.mu.Lock()
	for i, cb := range d.cbPool {
		if cb.Cap() >= capacity {
			d.cbPool = append(d.cbPool[:i], d.cbPool[i+1:]...)
			d.mu.Unlock()
			cb.Reset()
			return cb, nil
		}
	}
	d.mu.Unlock()
	return d.NewCB(max(capacity, copyCBSize))
}

func (d *Device) putCB(cb *CB) {
	d.mu.Lock()
	if !cb.done && len(d.cbPool) < cbPoolMax {
		d.cbPool = append(d.cbPool, cb)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	_ = cb.Close()
}

// queueFor picks the queue set for a copy from the kinds of its addresses.
func (d *Device) queueFor(dst, src uint64) []uint32 {
	sk, dk := d.AddrKind(src), d.AddrKind(dst)
	switch {
	case sk == AddrHost:
		return d.H2DQueues()
	case dk == AddrHost:
		return d.D2HQueues()
	case sk == AddrDevice || dk == AddrDevice:
		return d.D2DQueues()
	}
	return d.H2DQueues()
}

// CopySync copies size bytes from src to dst (device-side addresses:
// DeviceMem.Addr() + offset, HostMapping.DeviceAddr() + offset) and waits
// until the copy is complete. The queue is chosen from the address kinds
// (AddrKind): H2D when src is mapped host memory, D2H when dst is, D2D
// otherwise. The CS is built by a CSBuilder (so on Gaudi2 a trailing NOP
// with EB|MB follows the LIN_DMAs) on one queue of the set. It
// waits as long as the CS runs; the device's CS timeout bounds that.
func (d *Device) CopySync(dst, src, size uint64) error {
	return d.runSync(fmt.Sprintf("copy %d bytes %#x -> %#x", size, src, dst), d.queueFor(dst, src), size, func(cs *CSBuilder) error {
		return cs.AddCopy(dst, src, size)
	})
}

// MemsetSync fills size bytes at dst with the 64-bit pattern value (see
// EncodeMemset) and waits for completion. Device memory is filled from the
// D2D queues, mapped host memory from the D2H queues.
func (d *Device) MemsetSync(dst, value, size uint64) error {
	qs := d.D2DQueues()
	if d.AddrKind(dst) == AddrHost {
		qs = d.D2HQueues()
	}
	return d.runSync(fmt.Sprintf("memset %d bytes at %#x", size, dst), qs, size, func(cs *CSBuilder) error {
		return cs.AddMemset(dst, value, size)
	})
}

func (d *Device) runSync(op string, queues []uint32, size uint64, fill func(*CSBuilder) error) error {
	op += " on " + d.Name()
	if size == 0 {
		return newErr(op, ErrInvalid, "size 0", nil)
	}
	if len(queues) == 0 {
		return newErr(op, ErrNotSupported, "no known DMA queues for "+d.model.String(), nil)
	}
	// One command buffer, on the next queue of the set, holds the whole
	// copy (PieceSize 0) and the seal.
	need := linDMACount(size)*uint64(d.model.copyPacketSize()) + NOPSize
	if need > MaxCBSize {
		return newErr(op, ErrInvalid, "size too large for one command buffer", nil)
	}
	cs, err := d.NewCSBuilder(CSOptions{Queues: queues, CBSize: int(need), NewCB: func() (*CB, error) { return d.getCB(int(need)) }})
	if err != nil {
		return err
	}
	if err := fill(cs); err != nil {
		cs.Release(d.putCB)
		return err
	}
	chunks, err := cs.Seal()
	if err != nil {
		cs.Release(d.putCB)
		return err
	}
	seq, err := d.Submit(chunks)
	if err != nil {
		cs.Release(d.putCB)
		return err
	}
	for {
		st, err := d.Wait(seq, 10*time.Second)
		if st == CSBusy {
			continue
		}
		if st == CSCompleted || errors.Is(err, ErrCSAborted) || errors.Is(err, ErrCSTimedOut) {
			cs.Release(d.putCB) // the CS is over; the CB may be reused
		}
		// Otherwise (e.g. the device closed under us) the CB's state is
		// unknown: leave it to Device.Close.
		return err
	}
}
