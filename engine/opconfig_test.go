package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOpConfigAllocs: resolving the options of a copy allocates nothing
// when there are none (every Copy and Batch.Submit does it); with options
// they still apply.
func TestOpConfigAllocs(t *testing.T) {
	e := &Engine{}
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = e.opConfig(nil) }))
	d := time.Unix(1, 0)
	require.Equal(t, d, e.opConfig([]OpOption{Deadline(d)}).deadline)
}
