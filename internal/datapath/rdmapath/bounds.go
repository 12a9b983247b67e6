package rdmapath

import (
	"sync"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// bounds is an endpoint's bindings left open. When the endpoint ends
// (Path.Closed, its queue pairs flushed and destroyed), it closes them:
// each gives back its registered region and its local buffer, so that
// the NIC's registration cache, closed with the engine, finds no region
// still referenced, and a binding left open holds nothing past its
// endpoint. Its later calls fail with the endpoint's error.
type bounds struct {
	mu    sync.Mutex
	open  map[*Bound]struct{}
	ended error // closeAll ran: Binds fail with it
}

// add counts rb among the open bindings, or refuses it once the endpoint
// has ended.
func (s *bounds) add(rb *Bound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return s.ended
	}
	if s.open == nil {
		s.open = make(map[*Bound]struct{})
	}
	s.open[rb] = struct{}{}
	return nil
}

func (s *bounds) remove(rb *Bound) {
	s.mu.Lock()
	delete(s.open, rb)
	s.mu.Unlock()
}

// closeAll closes every open binding with err (the endpoint's end) and
// refuses later ones. A binding's call under way ends first (its work
// requests flushed with the queue pairs).
func (s *bounds) closeAll(err error) {
	if err == nil {
		err = gxerr.New(gxerr.Closed, "endpoint closed", nil)
	}
	s.mu.Lock()
	s.ended = err
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for rb := range open {
		rb.mu.Lock()
		if !rb.closed {
			rb.leftErr = rb.release(err) // for the binding's Close to report
		}
		rb.mu.Unlock()
	}
}
