package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTCPPutDeadlineWhileStagingBusy: a Put (or a PutList) from Gaudi memory whose
// deadline passes while it waits for a staging buffer (every one held by
// Puts whose device reads are slow) resolves with ErrTimeout then, not
// once a buffer frees: nothing of its memory is read yet. Before, the
// deadline did not wake the wait, only its ctx did. Ordered by events:
// it must resolve before any of the slow reads completes.
func TestTCPPutDeadlineWhileStagingBusy(t *testing.T) {
	for _, tc := range []struct {
		name string
		late func(ep *Endpoint, local Slice, remote RemoteKey) *Future
	}{
		{"Put", func(ep *Endpoint, l Slice, r RemoteKey) *Future {
			return ep.Put(context.Background(), l, r, Timeout(50*time.Millisecond))
		}},
		{"PutList", func(ep *Endpoint, l Slice, r RemoteKey) *Future {
			return ep.PutList(context.Background(), []Slice{l}, []RemoteKey{r}, Timeout(50*time.Millisecond))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { putDeadlineWhileStagingBusy(t, tc.late) })
	}
}

func putDeadlineWhileStagingBusy(t *testing.T, late func(*Endpoint, Slice, RemoteKey) *Future) {
	const size = 1 << 20
	user, owner, ep := tcpPair(t, 1)
	dst, err := owner.Alloc(8*size, Host)
	require.NoError(t, err)
	key, err := dst.Export()
	require.NoError(t, err)
	src, err := user.Alloc(8*size, Gaudi(0))
	require.NoError(t, err)
	sim := user.cp.Devs[0].Sim
	ctx := context.Background()
	const blockers = 3 // the connection's own staging buffer and the two it may borrow
	sim.DelayNextCS(blockers, 5*time.Second)
	st0 := sim.Stats()
	var held []*Future
	for i := range blockers {
		held = append(held, ep.Put(ctx, src.Slice(i*size, size), key.Slice(i*size, size)))
	}
	// Their reads executed, their ends delayed: each holds its buffer.
	waitFor(t, "the slow device reads to execute", func() bool { return sim.Stats().BytesMoved >= st0.BytesMoved+blockers*size })
	f := late(ep, src.Slice(4*size, size), key.Slice(4*size, size))
	select {
	case <-f.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the Put did not resolve at its deadline")
	}
	require.ErrorIs(t, f.Err(), ErrTimeout)
	require.Equal(t, st0.CSCompleted, sim.Stats().CSCompleted, "resolved only once a slow read completed (a staging buffer freed)")
	for _, h := range held {
		require.NoError(t, h.Wait(ctx))
	}
}
