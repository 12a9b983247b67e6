package hlsim

import (
	"runtime"
	"sync/atomic"
	"time"
)

// bell is how work reaches an emulated engine's goroutine: the submitter
// marks it rung, and sends on ch only while the goroutine sleeps there.
// A goroutine that spins for work (spin) looks at the mark with one
// atomic load: the submitter and the spinner take no channel lock, which
// they would contend for on every look with a select on ch.
//
// The mark is set before parked is read, and parked is set before the
// mark is read again (park): either the sleeper sees the mark or the
// submitter sees it parked and sends.
// This is emulator machinery; the driver has no counterpart (a queue
// manager polls its PI register in hardware).
type bell struct {
	rung   atomic.Bool
	parked atomic.Bool
	ch     chan struct{} // one token: a send never blocks
}

func newBell() bell { return bell{ch: make(chan struct{}, 1)} }

// ring marks work and wakes the goroutine if it sleeps; it reports
// whether it slept (the caller may then yield to it, see csIoctl).
func (b *bell) ring() bool {
	b.rung.Store(true)
	if !b.parked.Load() {
		return false
	}
	select {
	case b.ch <- struct{}{}:
	default:
	}
	return true
}

// take clears the mark and reports whether it was set: the goroutine
// takes it before it looks for work, so a ring after that look is seen.
func (b *bell) take() bool { return b.rung.Load() && b.rung.Swap(false) }

// park marks the goroutine asleep and reports whether it may sleep now:
// false when a ring came meanwhile (then it is not parked).
func (b *bell) park() bool {
	b.parked.Store(true)
	if b.take() {
		b.parked.Store(false)
		return false
	}
	return true
}

// unpark ends a sleep begun with park.
func (b *bell) unpark() { b.parked.Store(false) }

// spin polls the mark for up to d, yielding between looks, and reports
// whether it was rung (taking the mark); false when d passed or quit is
// closed (the caller's sleep sees quit).
func (b *bell) spin(quit <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return false
	}
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		if b.take() {
			return true
		}
		// A receive from one channel with a default takes no lock while
		// the channel is open and empty.
		select {
		case <-quit:
			return false
		default:
		}
		if i&15 == 15 && time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}
