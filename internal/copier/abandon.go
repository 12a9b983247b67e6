package copier

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// A CS that Close gave up on (the actor ended it with cq.ErrClosed after
// CloseGrace, or a submitter's wait for it timed out) may still be running
// on the device: its command buffers, host mappings and buffers must stay
// until the device has stopped. Such records wait on the device's
// abandoned list; closeAbandoned closes the device the way that stops it
// (dma.Device.CloseRunning) and only then retires them, with ErrClosed.
type abandoned struct {
	mu     sync.Mutex
	recs   []*csRec
	closed bool  // closeAbandoned ran: later records retire at once
	err    error // closing the device that way failed (CloseDevices reports it)
}

// abandon keeps r until the device is closed. After closeAbandoned it
// closes the device itself (it may be running r) and retires r.
func (g *Device) abandon(r *csRec) {
	a := &g.aband
	a.mu.Lock()
	if !a.closed {
		a.recs = append(a.recs, r)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	g.stopRunning([]*csRec{r})
}

// closeAbandoned (Stop, once the actor has closed) closes the device if
// it may still run a CS given up on, then retires those CSs.
func (g *Device) closeAbandoned() {
	a := &g.aband
	a.mu.Lock()
	recs := a.recs
	a.recs, a.closed = nil, true
	a.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	g.stopRunning(recs)
}

// stopRunning closes the device the way that stops it (CloseRunning: a
// second close is a no-op), then retires recs, the CSs given up on.
func (g *Device) stopRunning(recs []*csRec) {
	err := g.Dev.CloseRunning()
	g.log.Warn().Int("cs", len(recs)).Err(err).Msg("closed the device: it was still running CSs Close gave up on")
	if err != nil {
		a := &g.aband
		a.mu.Lock()
		a.err = errors.Join(a.err, err)
		a.mu.Unlock()
	}
	for _, r := range recs {
		r.retire(g.givenUp())
	}
}

// closeErr is the error of closing the device by closeAbandoned or
// abandon, if any.
func (g *Device) closeErr() error {
	a := &g.aband
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (g *Device) givenUp() error {
	return gxerr.New(gxerr.Closed, fmt.Sprintf("gaudi%d: the engine closed before the device finished the copy; the device was stopped", g.Idx), nil)
}
