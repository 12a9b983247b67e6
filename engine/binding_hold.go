package engine

import (
	"errors"

	"github.com/gxfer/gxfer/internal/datapath/shm"
)

// Held is a Binding held by one goroutine for a run of Puts or Gets (the
// loop of a ping-pong, or of a message-rate test): the binding's lock and
// the engine's close gate are taken once, at Hold, instead of at every
// call. On a "unix" endpoint each Put is then the binding's checks
// (plain loads) and one copy into the peer's mapped memory, with no
// atomic read-modify-write, lock or indirect call; it returns with the
// bytes in the peer's memory, where the peer's loads see them. On other
// endpoints a Held runs Put and Get as the Binding does.
//
// While a Held is not released, the Binding's Close waits for it, and so
// does the engine's Close once it has closed the endpoints: a Put or Get
// of a Held fails with ErrClosed once the engine is closing and releases
// the Held itself, but a holder that stops calling must Release. A Held is
// for one goroutine; the Binding's own Put and Get may run on others
// meanwhile (not on the holder's while Close waits: it would deadlock).
//
// A Held not made by Binding.Hold (a declared Held{}, or a nil *Held)
// refuses Put and Get with ErrInvalid; its Release does nothing.
type Held struct {
	b    *Binding
	sh   *shm.Held // a "unix" binding's fast path; nil: through b.bd
	ops  uint64    // added to the binding's count at Release
	done bool
}

// Hold holds the binding for a run of operations on the calling goroutine
// until Release (see Held).
func (b *Binding) Hold() (*Held, error) {
	if b.invalid() {
		return nil, errNoBinding
	}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return nil, errBindingClosed()
	}
	h := &Held{b: b}
	if s, ok := b.bd.(interface{ Hold() (*shm.Held, error) }); ok {
		sh, err := s.Hold()
		if err != nil {
			b.mu.RUnlock()
			return nil, err
		}
		h.sh = sh
	}
	return h, nil
}

// Put copies the local slice into the peer's, like Binding.Put.
func (h *Held) Put() error { return h.move(true) }

// Get copies the peer's slice into the local one, like Binding.Get.
func (h *Held) Get() error { return h.move(false) }

// move is a Put or Get: on the held direct path when there is one.
func (h *Held) move(put bool) error {
	if h == nil {
		return errNoHeld
	}
	if h.sh == nil || h.done {
		return h.do(put)
	}
	h.b.ep.ch.MarkUsed() // in use (see Endpoint.start): a load once marked
	if err := h.sh.Do(put); err != nil {
		return h.failed(err)
	}
	h.ops++
	return nil
}

// do is an operation of a released Held, or through the binding's data
// path.
func (h *Held) do(put bool) error {
	if h.done {
		return errBindingClosed()
	}
	if h.b == nil {
		return errNoHeld
	}
	h.ops++
	h.b.ep.ch.MarkUsed() // in use (see Endpoint.start)
	return h.b.bd.Do(put, 1, true)
}

// failed handles the error of an operation on the direct path: counted
// as the binding counts its failed ones, and, when the engine is closing,
// the Held released (the engine's Close waits for it).
func (h *Held) failed(err error) error {
	if errors.Is(err, ErrClosed) {
		h.Release()
		return err
	}
	h.ops++
	return err
}

// Release ends the hold: the binding's Close and the engine's may proceed.
// Idempotent.
func (h *Held) Release() {
	if h == nil || h.b == nil || h.done {
		return
	}
	h.done = true
	if h.sh != nil {
		h.sh.Release()
	}
	h.b.ops.Add(h.ops)
	h.b.mu.RUnlock()
}
