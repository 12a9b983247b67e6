package agent

import (
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/engine"
)

// Errors. Besides these, failures match the engine's sentinels
// (engine.ErrInvalid, engine.ErrPeer, engine.ErrClosed, engine.ErrTimeout,
// engine.ErrCanceled...) and, for lookups, meta.ErrNotFound and
// meta.ErrUnavailable.
var (
	// ErrNoSection: the peer offers no section of that name (it may
	// have withdrawn it). Errors wrapping it also wrap meta.ErrNotFound.
	ErrNoSection = errors.New("agent: no such section")
	// ErrNotSubmitted: the descriptor was not submitted because another
	// descriptor of the same request was invalid.
	ErrNotSubmitted = errors.New("agent: not submitted (another descriptor of the request is invalid)")
)

// PeerError names the remote agent (and which incarnation of it) an
// operation failed with; Err is the cause. When the agent's cached record
// was dropped (the peer republished, withdrew a section, died, its
// record left the store, or the connection failed) Err matches
// engine.ErrPeer.
type PeerError struct {
	Name        string
	Incarnation uint64
	Err         error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("agent %q (incarnation %016x): %v", e.Name, e.Incarnation, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// DescError is the failure of one descriptor of a request.
type DescError struct {
	Index int
	Err   error
}

func (e *DescError) Error() string { return fmt.Sprintf("descriptor %d: %v", e.Index, e.Err) }

func (e *DescError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrInvalid, fmt.Sprintf(format, args...))
}
