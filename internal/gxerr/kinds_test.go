package gxerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKindOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, "other"},
		{"bare kind", Peer, "peer"},
		{"typed", New(Timeout, "x", nil), "timeout"},
		{"outermost wins", New(Peer, "peer died", New(Closed, "", nil)), "peer"},
		{"wrapped by fmt", fmt.Errorf("op: %w", New(Invalid, "len", nil)), "invalid"},
		{"joined", errors.Join(errors.New("x"), Device), "device"},
		{"ctx canceled", context.Canceled, "canceled"},
		{"ctx deadline", fmt.Errorf("w: %w", context.DeadlineExceeded), "timeout"},
		{"Ctx helper", Ctx("wait", context.DeadlineExceeded), "timeout"},
		{"foreign", errors.New("boom"), "other"},
		{"queue full", QueueFull, "queue_full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, KindName(KindOf(tt.err)))
		})
	}
}

func TestKindNamesCoverKinds(t *testing.T) {
	require.Len(t, kindNames, len(kinds))
	seen := map[string]bool{}
	for i := range NumKinds {
		n := KindName(i)
		require.False(t, seen[n], n)
		seen[n] = true
		if i < len(kinds) {
			require.Equal(t, i, KindOf(kinds[i]), n)
		}
	}
}

func TestKindCounters(t *testing.T) {
	var c KindCounters
	c.Add(nil)
	c.Add(New(Peer, "", nil))
	c.Add(Peer)
	c.Add(errors.New("x"))
	require.Equal(t, uint64(2), c.Load(KindOf(Peer)))
	require.Equal(t, uint64(1), c.Load(Other))
	require.Equal(t, uint64(0), c.Load(KindOf(Timeout)))
}
