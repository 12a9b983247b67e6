package cq

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostPostFromThenWhileClosing: a Then that Posts while Close waits
// to shut the actor, with another Post waiting for room in the full
// inbox, does not hang them. That waiting Post used to hold the actor's
// read lock: Close's write lock waited for it, the Then's Post (read
// lock) waited behind that writer, and the actor, stuck in the Then,
// never made the room the first Post waited for.
func TestHostPostFromThenWhileClosing(t *testing.T) {
	h := NewHostActor(1)
	entered, gate := make(chan struct{}), make(chan struct{})
	got := make(chan int, 4)
	rec := completerFunc(func(i int, _ error) { got <- i })
	h.Post(HostCompletion{F: rec, Idx: 1, Then: func() {
		close(entered)
		<-gate
		h.Post(HostCompletion{F: rec, Idx: 3})
	}})
	<-entered                              // the actor took record 1 and waits in its Then
	h.Post(HostCompletion{F: rec, Idx: 2}) // the inbox is full

	posted := make(chan struct{})
	go func() { h.Post(HostCompletion{F: rec, Idx: 4}); close(posted) }()
	// Until that Post waits for room. (With the read lock: a writer
	// cannot take it. Without: it waits in the send, unobservable; the
	// test then only loses its teeth.)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if !h.mu.TryLock() {
			break
		}
		h.mu.Unlock()
	}
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }()
	// Until Close is under way (a writer pending on the lock, or the
	// actor shut).
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); runtime.Gosched() {
		if !h.mu.TryRLock() {
			break
		}
		shut := h.shut
		h.mu.RUnlock()
		if shut {
			break
		}
	}
	close(gate)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung: a Then Posted while Close waited behind a Post blocked on the full inbox")
	}
	<-posted
	seen := map[int]bool{}
	for range 4 {
		seen[<-got] = true
	}
	require.Equal(t, map[int]bool{1: true, 2: true, 3: true, 4: true}, seen)
}
