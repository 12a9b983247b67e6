package handshake

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEvictOffNewcomersPath: the endpoint closed to make room for a
// newcomer (Config.MaxPeers) is evicted off the newcomer's handshake:
// its Evict (ctrlchan's waits for the Bye, then for the victim to hang
// up) does not delay the newcomer, whose Dial completes while the
// victim's Evict is still held. The listener's Close waits for that
// Evict: when Close returns, the victim has been failed.
func TestEvictOffNewcomersPath(t *testing.T) {
	h := holdEvictions(t)
	defer h.release() // before the listener's Close (a Cleanup), which waits for the eviction
	ls, ds, l, entered, release := h.ls, h.ds, h.l, h.entered, h.release
	// The newcomer's Dial (bounded by 5 s, a hang guard) completes with
	// the victim's Evict held.
	_, err := ds.dial(l, "unix", 0, false)
	require.NoError(t, err, "the newcomer waited for the victim's Evict")
	<-entered
	require.Eventually(t, func() bool { return len(ls.all()) == 2 }, 5*time.Second, time.Millisecond)
	all := ls.all()
	victim, newcomer := all[0], all[1]
	require.NoError(t, victim.Err(), "its Evict is held")
	p, err := l.Accept(t.Context())
	require.NoError(t, err)
	require.Same(t, newcomer, p, "Accept skips the endpoint being evicted")

	closed := make(chan error, 1)
	go func() {
		_ = l.Close()
		closed <- victim.Err() // as Close returns
	}()
	<-l.done // Close is past the handshakes: only the eviction may hold it now
	release()
	require.Error(t, <-closed, "Close returned before the eviction in progress ended")
}

// evictionsDone waits for the evictions admit started (each off its
// newcomer's handshake) to end: the endpoints closed to make room for a
// newcomer admitted before are failed then. (mu orders the Wait after
// the Add of an admission made before, which admit makes under mu: the
// race detector does not see the order a socket's messages give.)
func (l *Listener[P]) evictionsDone() {
	l.mu.Lock()
	l.mu.Unlock() //nolint:staticcheck // an empty critical section: see above
	l.evictions.Wait()
}

// evictionsHeld is a unix listener with room for one endpoint, whose
// evictions wait in Evict until release, and ds's first endpoint on it
// (idle: the one a newcomer's admission closes to make room). entered
// closes as the first Evict begins. release is idempotent; callers defer
// it before the listener's Close (a Cleanup, which waits for evictions).
type evictionsHeld struct {
	ls, ds  *side
	l       *Listener[*peer]
	entered chan struct{}
	release func()
}

func holdEvictions(t *testing.T) *evictionsHeld {
	h := &evictionsHeld{ls: newSide(t, nil, false), ds: newSide(t, nil, false), entered: make(chan struct{})}
	hold := make(chan struct{})
	var enter, unhold sync.Once
	h.release = func() { unhold.Do(func() { close(hold) }) }
	h.ls.onEvict = func() { enter.Do(func() { close(h.entered) }); <-hold }
	h.l = h.ls.listen(t, "unix", 1, false)
	_, err := h.ds.dial(h.l, "unix", 0, false)
	require.NoError(t, err)
	return h
}
