package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// landWait is how a ping-pong side polls for bytes the peer puts into its
// memory. Over ipc the peer's process stores them itself: spinning on
// the memory is all it takes. Over tcp this process's engine lands them
// from its socket, on its reader goroutine, parked in the Go netpoller
// between frames: the poller parks for a microsecond between looks, so
// that the scheduler polls the network and the reader lands the bytes,
// which the poller then sees in memory. (Spinning instead would keep the
// reader from running on a process with one P, as runtime.Gosched does
// not poll the network, and with more Ps it takes the core the reader's
// thread needs: measured 2.4 to 5 ms per round on 2 CPUs against 0.1 ms
// parked.)
//
// While the engine's reader polls its socket (Config.TCPReadSpin after
// each frame, yielding between polls) this side yields between looks
// instead of parking, so the two take turns on the thread and neither
// sleeps; past that window it parks again (a yield alone would never let
// the scheduler poll the network for a parked reader).
//
// Over rdma the NIC writes the peer's bytes straight into the memory: no
// goroutine of this process lands them and no socket read is waited for,
// so this side spins on the memory as over ipc. The only goroutine it
// needs to let run is the engine's completion queue's, which completes
// this side's own Put: when that one polls (Config.RDMA.CQBusyPoll or
// CQSpin) it is runnable and a yield lets it run, every 64 looks when the
// process has a single P (each yield runs the scheduler, which reads the
// clock, slow under QEMU TCG; on rxe a yield every look measured the same
// within noise); when it sleeps in the netpoller (the default) an idle
// P's thread wakes it, or with a single P a short park lets the scheduler
// poll the network.
type landWait struct {
	// oneP: this process has a single P. Only then do the long polling
	// loops yield now and then (spinCheck), so that the engine's
	// goroutines can run: with more Ps they run on another, and a yield
	// would wake an idle P's thread for nothing (runtime.Gosched wakes
	// one), which takes a core from the peer or the NIC's software.
	oneP    bool
	park    bool
	yield   time.Duration // how long after the last progress to yield
	since   time.Time
	past    bool      // the round's yield window is over (park from then on)
	yielded time.Time // the last yield of round
	mask    int       // spinning: yield (or nap) when spins&mask == 0
	nap     bool      // spinning: park for a microsecond instead of yielding
}

func newLandWait(eng *engine.Engine, ep *engine.Endpoint) *landWait {
	l := &landWait{park: ep.Transport() == engine.TransportTCP, mask: 0xff, oneP: runtime.GOMAXPROCS(0) == 1}
	if l.park {
		l.yield = max(eng.Config().TCPReadSpin, 0)
	}
	if ep.Transport() == engine.TransportRDMA && runtime.GOMAXPROCS(0) == 1 {
		if c := eng.Config().RDMA; c.CQBusyPoll || c.CQSpin > 0 {
			l.mask = 0x3f
		} else {
			l.mask, l.nap = 0x3f, true
		}
	}
	return l
}

// round is called at each ping-pong round. A polling loop that never
// enters the scheduler is preempted by the runtime's monitor every 10 ms,
// and when that lands during a cgo call (an RDMA post) the monitor also
// takes the P away and then watches at its shortest period (20 µs) for a
// millisecond or more: about 3000 thread wake-ups a second measured in
// the rxe VM, CPU the peer and the NIC's software need. One yield every
// yieldEvery keeps that from happening, at the cost of one wake-up of an
// idle P's thread.
func (l *landWait) round(n uint64) {
	if n&63 != 0 {
		return
	}
	if now := time.Now(); now.Sub(l.yielded) >= yieldEvery {
		l.yielded = now
		runtime.Gosched()
	}
}

// yieldEvery is how often a ping-pong side yields (see landWait.round).
const yieldEvery = 2 * time.Millisecond

// idle is called after the spins-th poll that found nothing new.
func (l *landWait) idle(spins int) {
	switch {
	case l.park && l.yield > 0:
		if spins == 1 {
			l.since, l.past = time.Now(), false
		}
		// The clock is read every 8th spin only: a reading costs as much
		// as the rest of a spin in a VM (50-100 ns).
		if !l.past && (spins&7 != 0 || time.Since(l.since) < l.yield) {
			runtime.Gosched()
			return
		}
		l.past = true
		time.Sleep(time.Microsecond)
	case l.park:
		time.Sleep(time.Microsecond)
	case spins&l.mask == 0:
		if l.nap {
			time.Sleep(time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// waitFuture returns f's result, waiting only when it is not done yet.
func waitFuture(ctx context.Context, f *engine.Future) error {
	if !f.IsDone() {
		if err := f.Wait(ctx); err != nil && !f.IsDone() {
			<-f.Done() // the buffers are in use until it is done
			return err
		}
	}
	return f.Err()
}

// spinCheck runs every 4096 spins of a polling loop: it fails once the
// loop has waited pingTimeout, and, when the process has a single P
// (oneP), after the first 64K spins yields the P now and then, so that
// goroutines of this process (the engine's) can run. It reads the clock
// only every 64K spins (the wait starts counting there): a read can cost
// microseconds (3.6 us in a QEMU TCG guest), and most rounds end sooner.
func spinCheck(t0 *time.Time, spins int, oneP bool) error {
	if oneP && spins >= 1<<16 {
		runtime.Gosched()
	}
	if spins&clockSpins != 0 {
		return nil
	}
	if t0.IsZero() {
		*t0 = time.Now()
		return nil
	}
	if time.Since(*t0) > pingTimeout {
		return fmt.Errorf("nothing within %v", pingTimeout)
	}
	return nil
}
