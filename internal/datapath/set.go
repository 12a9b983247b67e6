package datapath

import (
	"errors"

	"github.com/gxfer/gxfer/wire"
)

// Set is the transports an engine registered (one per Kind), and the
// fan-out of its buffers' events to those that keep per-buffer state: a
// Set is itself BufferHooks and Finisher. The zero Set is empty.
type Set struct {
	ts    []Transport
	hooks []BufferHooks
}

var (
	_ BufferHooks = (*Set)(nil)
	_ Finisher    = (*Set)(nil)
)

// Register adds t (replacing a transport of its kind, hooks included:
// the replaced one gets no more buffer events) and its hooks.
func (s *Set) Register(t Transport) {
	replaced := false
	for i, o := range s.ts {
		if o.Kind() == t.Kind() {
			s.ts[i], replaced = t, true
			break
		}
	}
	if !replaced {
		s.ts = append(s.ts, t)
	}
	s.hooks = s.hooks[:0]
	for _, o := range s.ts {
		if h, ok := o.(BufferHooks); ok {
			s.hooks = append(s.hooks, h)
		}
	}
}

// Get is the transport of kind k (nil: none).
func (s *Set) Get(k Kind) Transport {
	for _, t := range s.ts {
		if t.Kind() == k {
			return t
		}
	}
	return nil
}

// Close closes every transport (once every endpoint is closed, before
// the buffers still alive are freed).
func (s *Set) Close() error {
	var errs []error
	for _, t := range s.ts {
		errs = append(errs, t.Close())
	}
	return errors.Join(errs...)
}

// Finish finishes the transports that are Finishers (last, once every
// buffer is gone).
func (s *Set) Finish() error {
	var errs []error
	for _, t := range s.ts {
		if f, ok := t.(Finisher); ok {
			errs = append(errs, f.Finish())
		}
	}
	return errors.Join(errs...)
}

// Export lets the transports add to a key being exported (rkeys).
func (s *Set) Export(b Buf, k *wire.RemoteKey) {
	for _, h := range s.hooks {
		h.Export(b, k)
	}
}

// Revoke tells the transports that b is being freed (Free called; the
// memory lives until the operations in flight end).
func (s *Set) Revoke(b Buf) {
	for _, h := range s.hooks {
		h.Revoke(b)
	}
}

// Freeing tells the transports that b's memory goes now.
func (s *Set) Freeing(b Buf) error {
	var errs []error
	for _, h := range s.hooks {
		errs = append(errs, h.Freeing(b))
	}
	return errors.Join(errs...)
}
