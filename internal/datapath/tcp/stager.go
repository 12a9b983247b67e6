package tcp

import (
	"context"
	"sync"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/staging"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// borrowMax is how many of the transport's shared staging buffers one
// connection holds at once, in each direction.
const borrowMax = StageBuffers / 4

// stager hands one connection its staging buffers in one direction: a
// buffer of its own, made on first use and freed when the connection
// closes, and up to borrowMax more from the transport's shared pool.
//
// How long a buffer is held is the peer's to decide: the reader holds one
// from a Data frame's header to its last byte, a Get's sender while its
// frames wait for the peer to read them. With the shared pool alone,
// StageBuffers peers stalled mid-frame, or one peer not reading the
// replies to StageBuffers Gets, held every buffer, and every other
// connection's transfers to or from Gaudi memory waited for their
// timeouts. A connection's own buffer keeps it going whatever the others
// do; the borrowed ones keep its DMA and network overlapping.
type stager struct {
	t      *Transport
	shared *staging.Pool

	mu       sync.Mutex
	own      datapath.Buf      // made on first use
	ownFree  chan datapath.Buf // own, while nobody holds it
	borrowed int               // shared buffers held
	closed   bool
}

func newStager(t *Transport, shared *staging.Pool) *stager {
	return &stager{t: t, shared: shared, ownFree: make(chan datapath.Buf, 1)}
}

// Get returns a staging buffer, waiting for one until done is closed
// (gxerr.Closed) or ctx ends.
func (s *stager) Get(ctx context.Context, done <-chan struct{}) (datapath.Buf, error) {
	if b, err := s.tryGet(); b != nil || err != nil {
		return b, err
	}
	var shared <-chan datapath.Buf
	s.mu.Lock()
	if s.borrowed < borrowMax || s.own == nil {
		// (A connection whose own buffer could not be made waits for a
		// shared one whatever it holds: its own will not come.)
		shared = s.shared.Ready()
		s.borrowed++ // taken back if the wait ends otherwise
	}
	s.mu.Unlock()
	select {
	case b := <-s.ownFree:
		s.unborrow(shared)
		return b, nil
	case b := <-shared:
		return b, nil
	case <-done:
		s.unborrow(shared)
		return nil, gxerr.Closed
	case <-ctx.Done():
		s.unborrow(shared)
		return nil, gxerr.Ctx("waiting for a staging buffer", ctx.Err())
	}
}

func (s *stager) unborrow(shared <-chan datapath.Buf) {
	if shared != nil {
		s.mu.Lock()
		s.borrowed--
		s.mu.Unlock()
	}
}

// TryGet is Get without waiting (nil when none is free).
func (s *stager) TryGet() datapath.Buf {
	b, _ := s.tryGet()
	return b
}

// tryGet takes the connection's own buffer (making it the first time),
// else a shared one within borrowMax; (nil, nil) when none is free.
func (s *stager) tryGet() (datapath.Buf, error) {
	select {
	case b := <-s.ownFree:
		return b, nil
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, gxerr.Closed
	}
	if s.own == nil {
		b, err := s.t.env.AllocHost(Chunk)
		if err == nil {
			s.own = b
			return b, nil
		}
		// Without a buffer of its own the connection shares.
	}
	if s.borrowed >= borrowMax && s.own != nil {
		return nil, nil
	}
	if b := s.shared.TryGet(); b != nil {
		s.borrowed++
		return b, nil
	}
	return nil, nil
}

// Put gives a buffer back.
func (s *stager) Put(b datapath.Buf) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own == nil || b != s.own { // (buffers are pointers)
		s.borrowed--
		s.shared.Put(b)
		return
	}
	if s.closed {
		s.freeOwnLocked()
		return
	}
	s.ownFree <- b
}

// Close frees the connection's own buffer, now or when it comes back
// (the connection closed: a DMA may still use it). Idempotent.
func (s *stager) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	select {
	case <-s.ownFree:
		s.freeOwnLocked()
	default: // held: Put frees it, or it was never made
	}
}

func (s *stager) freeOwnLocked() {
	if s.own != nil {
		_ = s.t.env.FreeHost(s.own) // the engine may be closing: nothing to report to
		s.own = nil
	}
}
