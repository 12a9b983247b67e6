package hlsim

import (
	"time"
)

// A context held by its DMA-BUF exports (Config.HeldExports, RULES.md R12).
//
// The driver's export takes a reference on the compute fd's file
// (drivers/accel/habanalabs/common/memory.c export_dmabuf: get_file "to
// enforce release order", paired with fput in hl_release_dmabuf). Closing
// the fd therefore does not run hl_device_release while any export is
// still referenced (its fd, a dup, another process's import, an RDMA
// memory region registered on it): the context, its memory and its CSs
// live on, the file stays on the list device_kill_open_processes walks
// (hpriv_release takes it off, common/device.c), and its eventfd stays
// registered. A release watchdog armed by a conditional reset then expires
// (device_release_watchdog_func), the hard reset kills the process that
// opened the fd (hpriv->taskpid, whoever holds the export), and the reset
// waits for the file's release (the driver retries every 10 s, 60 times,
// then gives up and leaves the device unusable: not modeled, the emulator
// waits for the release).
//
// The emulator cannot see an fd close; it polls the export leases
// (exportsLive) every heldPoll until none is open, then releases the
// context as Close would have.

// heldPoll is how often a held context looks at its exports.
const heldPoll = 2 * time.Millisecond

// holdForExports is Close's check: with Config.HeldExports and an export
// still open, the context is marked closed (its fd is) but held, and a
// goroutine releases it once the exports are gone. It returns false when
// Close must release at once.
func (c *hctx) holdForExports() bool {
	d := c.d
	if !d.cfg.HeldExports || !d.leases || !c.anyExportLive() {
		return false
	}
	d.mu.Lock()
	if d.closed || d.ctx != c || !c.state.CompareAndSwap(ctxOpen, ctxClosed) {
		d.mu.Unlock()
		return false // device closing, or killed meanwhile: release now
	}
	c.held.Store(true)
	d.bg.Add(1)
	d.mu.Unlock()
	c.log.Warn().Msg("context closed with a DMA-BUF export still open: it lives on until the export is released")
	go c.releaseWhenUnexported()
	return true
}

// anyExportLive reports whether a DMA-BUF exported from one of the
// context's allocations may still be open.
func (c *hctx) anyExportLive() bool {
	c.memMu.Lock()
	defer c.memMu.Unlock()
	if c.memDead {
		return false
	}
	for _, al := range c.allocs {
		if c.exportsLive(al) {
			return true
		}
	}
	return false
}

// releaseWhenUnexported releases a held context once its exports are
// gone, or returns when the device closes (Device.Close releases it).
func (c *hctx) releaseWhenUnexported() {
	defer c.d.bg.Done()
	t := time.NewTicker(heldPoll)
	defer t.Stop()
	for c.anyExportLive() {
		select {
		case <-c.d.quit:
			return
		case <-c.released:
			return
		case <-t.C:
		}
	}
	c.log.Debug().Msg("the last DMA-BUF export of a closed context is gone: releasing it")
	c.teardown(false)
}

// holdsFile reports whether c's file is still open in the driver's eyes:
// the context is open, or closed but held by an export and not yet
// released (what device_kill_open_processes finds on its list).
func (c *hctx) holdsFile() bool {
	switch c.state.Load() {
	case ctxOpen:
		return true
	case ctxClosed:
		if !c.held.Load() {
			return false
		}
		select {
		case <-c.released:
			return false
		default:
			return true
		}
	}
	return false
}
