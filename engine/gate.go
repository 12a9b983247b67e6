package engine

// The close gate (datapath.Gate) counts the calls that may touch host
// memory outside the engine's queues: Copy and Batch.Submit (host-to-host
// copies run on the caller's goroutine), host workers' copies and the
// bindings' Puts and Gets over "unix", Alloc, Register and
// Attachment.Register (a buffer they add after Close collected the live
// ones would never be released), Buffer.Export (the transports register the buffer's memory: after
// Close freed it, that registration would outlive Close), and
// Buffer.ExportDMABuf (so that it fails with ErrClosed once Close began).
// Close sets Engine.closed, then waits for the count to reach zero before
// it unmaps any buffer, so that no copy ever touches memory Close has
// released: a call that got in finishes; one that comes after fails with
// ErrClosed.

// enter admits a call unless the engine is closed; an admitted call must
// call exit.
func (e *Engine) enter() bool { return e.gate.Enter() }

func (e *Engine) exit() { e.gate.Exit() }

// gateHook runs the test hook inside an admitted call, before it touches
// memory.
func (e *Engine) gateHook() { e.gate.Hook() }

// drainGate waits (Close, after closed is set) until every admitted call
// has left.
func (e *Engine) drainGate() { e.gate.Drain(e.onDrain) }

// onDrain runs the test hook when Close waits for a gate.
func (e *Engine) onDrain() {
	if h := e.hookDrain.Load(); h != nil {
		(*h)()
	}
}

// enterStart admits an Endpoint operation's start (the starts gate)
// unless the engine is closed; an admitted start must call exitStart
// once its data path's Start returned.
func (e *Engine) enterStart() bool {
	if !e.starts.Enter() {
		return false
	}
	e.starts.Hook()
	return true
}

func (e *Engine) exitStart() { e.starts.Exit() }
