package probe

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestLimit(t *testing.T) {
	b := NewBuffers(1<<20, 2)
	all, best := b.Limit(2, 5*time.Millisecond)
	require.Len(t, all, 4)
	require.Greater(t, best.GBps, 0.0)
	for _, r := range all {
		require.LessOrEqual(t, r.GBps, best.GBps)
		require.NotEmpty(t, r.String())
	}
	require.Equal(t, b.src[0], b.dst[0], "the copy happened")
}
