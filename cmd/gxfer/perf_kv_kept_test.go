package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHelloSlotsForgetOldestFailedFirst: the target keeps the runs whose
// welcome failed (not answered again) up to maxFailedKept of them; one
// more forgets the oldest, not all. Before the fix the list was cleared
// whole when full: the failure after maxFailedKept others made the
// target answer again every peer whose welcome had failed, the one that
// failed just before included.
func TestHelloSlotsForgetOldestFailedFirst(t *testing.T) {
	h := newHelloSlots()
	fail := func(i int) {
		name := fmt.Sprintf("p%d", i)
		require.NoError(t, h.take(name, uint64(i), "src"+fmt.Sprint(i)))
		h.done(helloResult{from: name, inc: uint64(i), source: "src" + fmt.Sprint(i), err: errors.New("cannot reach it")})
	}
	for i := range maxFailedKept + 1 {
		fail(i)
	}
	tests := []struct {
		i        int
		answered bool
	}{
		{0, true}, // the oldest, forgotten
		{1, false},
		{maxFailedKept / 2, false},
		{maxFailedKept - 1, false},
		{maxFailedKept, false}, // the newest
	}
	for _, tt := range tests {
		err := h.take(fmt.Sprintf("p%d", tt.i), uint64(tt.i), "other")
		if tt.answered {
			require.NoError(t, err, "p%d", tt.i)
			h.done(helloResult{from: fmt.Sprintf("p%d", tt.i), inc: uint64(tt.i), source: "other"})
			continue
		}
		require.ErrorContains(t, err, "its welcome failed", "p%d was answered again", tt.i)
	}
	require.Zero(t, h.n)
	require.Empty(t, h.bySource)
}

// TestIdleRunsForgetOldestFirst: the target keeps the runs it ended as
// idle (not welcomed again) in a keptRuns list. Before the fix that list
// was a map cleared whole at 1024 entries: the run ended as idle after
// 1024 others made the target welcome again every run it had ended as
// idle. Now only the oldest is forgotten.
func TestIdleRunsForgetOldestFirst(t *testing.T) {
	idled := newKeptRuns()
	for i := range maxFailedKept + 1 {
		idled.add(fmt.Sprintf("p%d", i), uint64(i)+1)
	}
	tests := []struct {
		i    int
		kept bool
	}{
		{0, false}, // the oldest, forgotten
		{1, true},
		{maxFailedKept / 2, true},
		{maxFailedKept, true}, // the newest
	}
	for _, tt := range tests {
		require.Equal(t, tt.kept, idled.has(fmt.Sprintf("p%d", tt.i), uint64(tt.i)+1), "p%d", tt.i)
		require.False(t, idled.has(fmt.Sprintf("p%d", tt.i), uint64(tt.i)+2), "p%d, another run", tt.i)
	}
	require.Len(t, idled.inc, maxFailedKept)
	require.Len(t, idled.order, maxFailedKept)
	idled.add("p1", 99) // a later run of a name kept: one entry still
	require.True(t, idled.has("p1", 99))
	require.False(t, idled.has("p1", 2))
	require.Len(t, idled.order, maxFailedKept)
}
