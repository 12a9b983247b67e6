package cq

import (
	"testing"

	"github.com/gxfer/gxfer/internal/testutil"
)

// TestActorStatsAddCounters: AddCounters adds every counter and no gauge,
// also those added to ActorStats later.
func TestActorStatsAddCounters(t *testing.T) {
	testutil.CheckAddCounters(t, (*ActorStats).AddCounters, "Outstanding")
}
