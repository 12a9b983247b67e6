package ctrlchan

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRingConcurrentRecvLostWakeup: two Recvs parked on a ring endpoint
// (WaitSpin 0) share the ring's one rxWait flag; the first message's bell
// clears it and wakes one of them. The second message, sent once the
// first was taken, must wake the other Recv.
func TestRingConcurrentRecvLostWakeup(t *testing.T) {
	a, b := ringPair(t, 16, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	type res struct {
		m   []byte
		err error
	}
	got := make(chan res, 2)
	for range 2 {
		go func() {
			m, err := b.RecvMsg(ctx)
			got <- res{m, err}
		}()
	}
	waitFor(t, "a receiver to park", func() bool { return parked(b) })
	time.Sleep(100 * time.Millisecond) // the other one parks too
	require.NoError(t, a.SendMsg(context.Background(), []byte("one"), nil))
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, []byte("one"), r.m)
	require.NoError(t, a.SendMsg(context.Background(), []byte("two"), nil))
	r = <-got
	require.NoError(t, r.err, "the second parked Recv was never woken for a message in the ring")
	require.Equal(t, []byte("two"), r.m)
}

// TestWaitRecvTakesRecvsWakeup: a WaitMsg (takes nothing) and a RecvMsg
// wait on one endpoint; the message's one wake-up goes to the WaitMsg,
// which returns leaving the message queued. The RecvMsg must still get it.
func TestWaitRecvTakesRecvsWakeup(t *testing.T) {
	a, b := msgPair(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- b.WaitMsg(ctx) }()
	time.Sleep(50 * time.Millisecond) // WaitMsg parks first
	type res struct {
		m   []byte
		err error
	}
	got := make(chan res, 1)
	go func() {
		m, err := b.RecvMsg(ctx)
		got <- res{m, err}
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, a.SendMsg(context.Background(), []byte("one"), nil))
	require.NoError(t, <-waited)
	r := <-got
	require.NoError(t, r.err, "Recv stayed parked with a message queued")
	require.Equal(t, []byte("one"), r.m)
}
