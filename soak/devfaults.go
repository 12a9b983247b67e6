package soak

import "github.com/gxfer/gxfer/engine"

// deviceFaults is what the soak needs of an emulated Gaudi's fault
// injection (package dma/hlsim's HangNextCS, AbortNextCS and Reset).
type deviceFaults interface {
	HangNextCS(n int)
	AbortNextCS(n int)
	Reset()
}

// faultsOf returns the fault injection of the engine's emulated device
// dev, through the engine's public API, or false when there is none.
func faultsOf(e *engine.Engine, dev int) (deviceFaults, bool) {
	_, _ = e, dev
	return nil, false
}

// csFaultsWhyNot says why CS faults cannot be injected (empty when they
// can).
func csFaultsWhyNot(e *engine.Engine) string {
	if _, ok := faultsOf(e, 0); ok {
		return ""
	}
	return "the engine has no public fault injection for its emulated devices (issue 16 item 8)"
}
