package soak

import "github.com/gxfer/gxfer/engine"

// deviceFaults is what the soak uses of an emulated Gaudi's fault
// injection (engine.Emulator).
type deviceFaults interface {
	HangNextCS(n int)
	AbortNextCS(n int)
	Reset()
}

var _ deviceFaults = (*engine.Emulator)(nil)

// faultsOf returns the fault injection of the engine's emulated device
// dev, through the engine's public API, or false when there is none.
func faultsOf(e *engine.Engine, dev int) (deviceFaults, bool) {
	m, err := e.Emulator(dev)
	if err != nil {
		return nil, false
	}
	return m, true
}

// csFaultsWhyNot says why CS faults cannot be injected (empty when they
// can).
func csFaultsWhyNot(e *engine.Engine) string {
	if _, err := e.Emulator(0); err != nil {
		return "no fault injection on this engine's devices: " + err.Error()
	}
	return ""
}
