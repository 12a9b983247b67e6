package engine

// The engine's public handles are made by the engine (New, Dial, Accept,
// Listen, Bind, Attach). One declared (Engine{}, Endpoint{}, ...) or a
// nil pointer to one is none: its methods refuse it with ErrInvalid, and
// its getters give zero answers (see each type's doc).

var (
	errNoEngineMade = newErr(ErrInvalid, "engine not made by New", nil)
	errNoEndpoint   = newErr(ErrInvalid, "endpoint not made by Dial or Accept", nil)
	errNoListener   = newErr(ErrInvalid, "listener not made by Engine.Listen", nil)
	errNoBinding    = newErr(ErrInvalid, "binding not made by Endpoint.Bind", nil)
	errNoHeld       = newErr(ErrInvalid, "held binding not made by Binding.Hold", nil)
	errNoAttachment = newErr(ErrInvalid, "attachment not made by Engine.Attach", nil)
)

// endedChan is the Done channel of an endpoint not made by the engine:
// closed, as that of an endpoint that has ended.
var endedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// invalid reports an Engine not made by New (New sets resolved first).
func (e *Engine) invalid() bool { return e == nil || e.resolved == nil }

// invalid reports an Endpoint not made by the engine.
func (ep *Endpoint) invalid() bool { return ep == nil || ep.ch == nil }

// invalid reports a Listener not made by Engine.Listen.
func (l *Listener) invalid() bool { return l == nil || l.hs == nil }

// invalid reports a Binding not made by Endpoint.Bind.
func (b *Binding) invalid() bool { return b == nil || b.bd == nil }

// invalid reports an Attachment not made by Engine.Attach.
func (a *Attachment) invalid() bool { return a == nil || a.rt == nil }
