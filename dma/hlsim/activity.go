package hlsim

import "time"

// The emulator's own accounting of busy time: Stats.DMAActive (engines
// executing) and Stats.EmuActive (engines executing or a CS ioctl
// running), the figures the engine's overhead benchmarks subtract.

// activity accumulates the union of possibly overlapping busy intervals:
// the wall time during which at least one was open.
type activity struct {
	open  int           // intervals open
	since time.Duration // when open last went from 0 to 1
	total time.Duration
}

func (a *activity) begin(now time.Duration) {
	if a.open == 0 {
		a.since = now
	}
	a.open++
}

func (a *activity) end(now time.Duration) {
	a.open--
	if a.open == 0 {
		a.total += now - a.since
	}
}

// read is the total including the interval still open (actMu held).
func (a *activity) read(now time.Duration) time.Duration {
	t := a.total
	if a.open > 0 {
		t += now - a.since
	}
	return t
}

// clock is the device's monotonic clock for the busy intervals: time
// since t0 (New), a monotonic reading only: half the cost of time.Now
// here, which also reads the wall clock, and it is read twice on every
// execution's path.
func (d *Device) clock() time.Duration { return time.Since(d.t0) }

// ktime is CLOCK_MONOTONIC in ns (the driver's ktime_get), from Go's
// monotonic clock (no system call: a CS's end reads it).
func (d *Device) ktime() int64 { return d.mono0 + int64(d.clock()) }

// dmaBegin marks an engine as executing and returns the start time.
func (d *Device) dmaBegin() time.Duration {
	d.actMu.Lock()
	now := d.clock()
	d.dmaT.begin(now)
	d.emuT.begin(now)
	d.actMu.Unlock()
	return now
}

// dmaEnd ends an engine's execution begun at start (dmaBegin) and
// returns its end.
func (d *Device) dmaEnd(start time.Duration) time.Duration {
	d.actMu.Lock()
	now := d.clock()
	d.dmaT.end(now)
	d.emuT.end(now)
	d.actMu.Unlock()
	d.st.busy.Add(int64(now - start))
	return now
}

// driverBegin and driverEnd bracket a CS ioctl (Stats.EmuActive).
func (d *Device) driverBegin() {
	d.actMu.Lock()
	d.emuT.begin(d.clock())
	d.actMu.Unlock()
}

func (d *Device) driverEnd() {
	d.actMu.Lock()
	d.emuT.end(d.clock())
	d.actMu.Unlock()
}

// active returns Stats.DMAActive and Stats.EmuActive, each including
// its current interval.
func (d *Device) active() (dma, emu time.Duration) {
	d.actMu.Lock()
	defer d.actMu.Unlock()
	now := d.clock()
	return d.dmaT.read(now), d.emuT.read(now)
}
