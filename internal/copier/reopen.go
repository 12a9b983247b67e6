package copier

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// A device the driver reset.
//
// dma.Device watches the driver's reset event and releases its context at
// once (dma's reset.go says why: the driver kills a process that keeps the
// fd of a reset device past its release watchdog). The copier then
// retires that Device: its queues close, the jobs still queued and every
// later job on it fail with an error of kind DeviceLost, its completion
// actor ends once the CSs that were in flight have (they fail the same
// way), and its caches close. Then it opens the device again, a new
// context at the same index: buffers allocated from then on live there,
// while those of the lost context stay lost (their copies fail, their
// Free succeeds). A device that cannot be opened again is retried with a
// backoff until it can or the copier stops.

// Opener opens a device's context again after a reset, with opts (which
// carry the copier's reset hook).
type Opener func(opts dma.Options) (*dma.Device, error)

// reopens tracks the reopening goroutines, which Stop ends.
type reopens struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
	stop    chan struct{} // closed by Stop
	count   int           // devices opened again
}

// Reopen backoff bounds.
const (
	reopenBackoff    = 10 * time.Millisecond
	maxReopenBackoff = 5 * time.Second
	// retireWait bounds the wait for a lost device's drains to end.
	retireWait = 10 * time.Second
)

// devOptions are the dma.Options of the devices the copier opens.
func (c *Copier) devOptions() dma.Options {
	return dma.Options{Logger: c.cfg.BaseLogger, OnReset: c.onReset}
}

// onReset is dma.Options.OnReset of every device the copier opens.
func (c *Copier) onReset(d *dma.Device, err error) {
	c.devMu.RLock()
	var lost *Device
	for _, g := range c.Devs {
		if g.Dev == d {
			lost = g
		}
	}
	c.devMu.RUnlock()
	if lost != nil {
		c.lostDevice(lost, err)
	}
	// Else the device is being added: AddDevice sees its ResetErr.
}

// lostDevice starts retiring and reopening g (once).
func (c *Copier) lostDevice(g *Device, err error) {
	g.lostOnce.Do(func() {
		g.log.Warn().Err(err).Msg("device reset: retiring its context and opening the device again")
		c.re.mu.Lock()
		defer c.re.mu.Unlock()
		if c.re.closing {
			return // Stop fails and closes everything
		}
		c.re.wg.Add(1)
		go func() {
			defer c.re.wg.Done()
			c.reopen(g, err)
		}()
	})
}

// Reopened is how many times a device was opened again after a reset.
func (c *Copier) Reopened() int {
	c.re.mu.Lock()
	defer c.re.mu.Unlock()
	return c.re.count
}

// reopen retires g and puts a new context of its device in its place.
func (c *Copier) reopen(g *Device, err error) {
	g.retire(err)
	if g.open == nil {
		g.log.Warn().Msg("device lost for good: the engine cannot open it again (added without an opener)")
		return
	}
	backoff := reopenBackoff
	for {
		d, oerr := g.open(c.devOptions())
		if oerr == nil {
			if c.replace(g, d) {
				return
			}
			_ = d.Close() // Stop began: nothing may use it
			return
		}
		g.log.Warn().Err(oerr).Dur("retry_in", backoff).Msg("opening the device again after its reset failed")
		select {
		case <-c.re.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxReopenBackoff)
	}
}

// replace puts a Device on d in g's place, unless Stop began.
func (c *Copier) replace(g *Device, d *dma.Device) bool {
	c.re.mu.Lock()
	if c.re.closing {
		c.re.mu.Unlock()
		return false
	}
	c.re.count++
	c.re.mu.Unlock()
	c.devMu.Lock()
	ng := c.newDevice(d, g.Sim, g.Idx)
	ng.Node, ng.open, ng.Gen = g.Node, g.open, g.Gen+1
	ng.prior = g.Counts() // g is retired: its counts are final
	c.Devs[g.Idx] = ng
	c.devMu.Unlock()
	ng.log.Info().Msg("device opened again after its reset")
	if err := d.ResetErr(); err != nil {
		c.lostDevice(ng, err) // reset again meanwhile
	}
	return true
}

// retire stops a lost device's machinery; its context is already
// released, so nothing it held can be touched by the hardware any more.
func (g *Device) retire(err error) {
	c := g.c
	lost := DeviceErr(fmt.Sprintf("gaudi%d", g.Idx), err)
	for _, q := range g.queues {
		q.Close()
	}
	// The drains and inline runs of g end (their submissions fail at
	// once); none starts on a closed queue.
	deadline := time.Now().Add(retireWait)
	for dir := range g.sched {
		for g.sched[dir].Load() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, q := range g.queues {
		c.failQueued(q, lost)
	}
	g.Actor.Close(c.cfg.CloseGrace)
	g.closeAbandoned()
	if cerr := errors.Join(g.HostMaps.Close(), g.Exports.Close(), g.cbs.Close()); cerr != nil {
		g.log.Debug().Err(cerr).Msg("closing a lost device's caches")
	}
}

// closedErr is the error of a job for g once its queues are closed: of
// kind DeviceLost if a reset closed them.
func (g *Device) closedErr() error {
	if err := g.Dev.ResetErr(); err != nil {
		return DeviceErr(fmt.Sprintf("gaudi%d", g.Idx), err)
	}
	return gxerr.Closed
}

// stopReopens (Stop, first) ends the reopening of devices and waits for
// it.
func (c *Copier) stopReopens() {
	c.re.mu.Lock()
	if !c.re.closing {
		c.re.closing = true
		close(c.re.stop)
	}
	c.re.mu.Unlock()
	c.re.wg.Wait()
}

// DevList is a snapshot of Devs, for readers that may run while a device
// is reopened.
func (c *Copier) DevList() []*Device {
	c.devMu.RLock()
	defer c.devMu.RUnlock()
	return append([]*Device(nil), c.Devs...)
}

// emulatorOpener reopens an emulated device.
func emulatorOpener(sim *hlsim.Device) Opener {
	return func(opts dma.Options) (*dma.Device, error) {
		return dma.OpenBackend(sim.Name(), sim.Open, opts)
	}
}

// nodeOpener reopens a discovered device.
func nodeOpener(n dma.NodeInfo) Opener {
	return func(opts dma.Options) (*dma.Device, error) { return dma.Open(n, opts) }
}
