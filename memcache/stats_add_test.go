package memcache

import (
	"testing"

	"github.com/gxfer/gxfer/internal/testutil"
)

// TestStatsAddCounters: AddCounters adds every counter and no gauge, also
// those added to Stats later.
func TestStatsAddCounters(t *testing.T) {
	testutil.CheckAddCounters(t, (*Stats).AddCounters, "Regions", "RegisteredBytes", "Detached", "InUseRegions")
}
