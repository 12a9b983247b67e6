package engine

import (
	"context"
	"fmt"
	"time"
)

// Device resets.
//
// When the driver resets a Gaudi (a command submission hung past the CS
// timeout, or a fatal device error), it kills the process that holds the
// device open unless that process releases it within its release
// watchdog (30 s). The engine therefore releases the device's context as
// soon as the driver reports the reset (package dma's reset.go has the
// driver's rules): copies in flight on it fail with ErrDeviceLost, and
// so does every later copy with one of its buffers (their Free still
// succeeds). The engine then opens the device again on its own; buffers
// allocated from then on live in the new context. Host memory and the
// other devices are not affected.
//
// A DMA-BUF export keeps the device's context alive in the driver while
// anything references it. The engine closes its own export fds with the
// context, but it cannot close what others hold: a dup of a DMABuf's fd,
// the fd sent to another process, an import made from it (an RDMA memory
// region, another device's attachment). Release those within the release
// watchdog of a reset (30 s), for instance from the copy errors of kind
// ErrDeviceLost; otherwise the driver kills this process, and an import
// still held by another process leaves the device unusable. Gaudi buffers
// exported over RDMA keep their memory region until they are freed: Free
// them after a reset too.

// WaitDevice waits until Gaudi(i) is usable: it returns nil at once for a
// device that is not lost, and after a reset once the engine has opened
// the device again. It fails with ErrNoDevice for an index the engine
// does not drive, and with ctx's error (ErrTimeout, ErrCanceled) or
// ErrClosed when those end the wait first.
func (e *Engine) WaitDevice(ctx context.Context, i int) error {
	if e.invalid() {
		return errNoEngineMade
	}
	if ctx == nil {
		return newErr(ErrInvalid, "nil context", nil)
	}
	const poll = time.Millisecond
	var t *time.Timer
	for {
		if !e.enter() {
			return ErrClosed
		}
		g, err := e.cp.Device(i)
		e.exit()
		if err != nil {
			return err
		}
		if g.Dev.ResetErr() == nil {
			return nil
		}
		if t == nil {
			t = time.NewTimer(poll)
			defer t.Stop()
		} else {
			t.Reset(poll)
		}
		select {
		case <-ctx.Done():
			return ctxErr(fmt.Sprintf("waiting for gaudi%d to be opened again after its reset", i), ctx.Err())
		case <-t.C:
		}
	}
}
