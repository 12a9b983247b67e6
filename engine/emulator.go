package engine

import (
	"fmt"
	"time"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// Emulator injects faults into an emulated Gaudi device (Config.Devices
// DevicesEmulated, or DevicesAuto on a machine without Gaudi), so that a
// program can test its own error handling against the failures a real
// device reports. Get one with Engine.Emulator. Each fault applies to the
// next command submissions the engine sends to the device; one command
// submission carries one copy or several (a Batch's, or copies queued at
// the same time), and all of them share its fate. An Emulator is safe for
// concurrent use; after the engine is closed its methods do nothing.
//
// An Emulator not made by Engine.Emulator (a declared Emulator{}, or a
// nil *Emulator, as one whose error was ignored) does nothing either:
// like the zero value of every other type of this package it does not
// panic. A fault injected through it never happens, so a test that checks
// its copies' outcome sees them succeed. Its Device is -1.
type Emulator struct {
	dev int
	sim *hlsim.Device
}

// Emulator returns fault injection for device i, or an error: ErrNoDevice
// if there is no such device, ErrNotEmulated for real hardware (faults
// cannot be injected there), ErrClosed once the engine is closed.
func (e *Engine) Emulator(i int) (*Emulator, error) {
	if e.invalid() {
		return nil, errNoEngineMade
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	g, err := e.device(Gaudi(i))
	if err != nil {
		return nil, err
	}
	if g.Sim == nil {
		return nil, newErr(ErrNotEmulated, fmt.Sprintf("gaudi%d is %s", i, g.Dev.Name()), nil)
	}
	return &Emulator{dev: i, sim: g.Sim}, nil
}

// Device is the index of the emulated device (Gaudi(Device())).
func (m *Emulator) Device() int {
	if !m.usable() {
		return -1
	}
	return m.dev
}

// usable reports whether m was made by Engine.Emulator.
func (m *Emulator) usable() bool { return m != nil && m.sim != nil }

// HangNextCS makes the next n command submissions never complete: their
// copies end with ErrTimeout at their deadline (Timeout, Config.OpTimeout)
// or, at the latest, when the emulated TDR (EmulatorConfig.CSTimeout)
// times the submission out. On the gaudi2 model the TDR then resets the
// device, as the driver does on a lockup: its copies in flight and its
// buffers are lost (ErrDeviceLost) and the engine opens it again. On the
// gaudi3 model gxfer times its own submissions out (ErrTimeout) without a
// reset. It replaces an earlier HangNextCS; n <= 0 cancels it.
func (m *Emulator) HangNextCS(n int) {
	if m.usable() {
		m.sim.HangNextCS(n)
	}
}

// AbortNextCS makes the next n command submissions end aborted without
// moving any data: their copies end with ErrAborted. On the gaudi3 model
// the abort is a PDMA channel error, which resets the device (as Reset).
// It replaces an earlier AbortNextCS; n <= 0 cancels it.
func (m *Emulator) AbortNextCS(n int) {
	if m.usable() {
		m.sim.AbortNextCS(n)
	}
}

// DelayNextCS makes the next n command submissions complete only delay
// after their data has moved: their copies succeed late, or end with
// ErrTimeout if their deadline comes first (the buffers stay in use until
// the submission completes). The TDR still applies. It replaces an earlier
// DelayNextCS; n <= 0 cancels it.
func (m *Emulator) DelayNextCS(n int, delay time.Duration) {
	if m.usable() {
		m.sim.DelayNextCS(n, delay)
	}
}

// Reset stands for a fatal device error that makes the driver reset the
// device: the engine learns of it from the driver's event (shortly after
// Reset returns, not before: Devices()[i].Lost), releases the device at
// once, fails its copies in flight with ErrDeviceLost and opens it again;
// the buffers of the old context stay lost (see WaitDevice).
func (m *Emulator) Reset() {
	if m.usable() {
		m.sim.Reset()
	}
}
