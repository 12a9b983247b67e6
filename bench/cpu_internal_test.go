package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCPUUse(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name     string
		from, to cpuTimes
		iters    int64
		wall     time.Duration
		want     *CPUUse
	}{
		{name: "one core busy, 1000 iterations", from: cpuTimes{user: 10 * ms, sys: 5 * ms}, to: cpuTimes{user: 70 * ms, sys: 45 * ms},
			iters: 1000, wall: 100 * ms, want: &CPUUse{UserUs: 60, SysUs: 40, Cores: 1}},
		{name: "two cores busy", to: cpuTimes{user: 150 * ms, sys: 50 * ms}, iters: 4, wall: 100 * ms,
			want: &CPUUse{UserUs: 37500, SysUs: 12500, Cores: 2}},
		{name: "idle", iters: 10, wall: ms, want: &CPUUse{}},
		{name: "no iterations", to: cpuTimes{user: ms}, wall: ms},
		{name: "no wall time", to: cpuTimes{user: ms}, iters: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := cpuUse(c.from, c.to, c.iters, c.wall)
			if c.want == nil {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.InDelta(t, c.want.UserUs, got.UserUs, 1e-9)
			assert.InDelta(t, c.want.SysUs, got.SysUs, 1e-9)
			assert.InDelta(t, c.want.Cores, got.Cores, 1e-9)
		})
	}
}

// TestProcessCPUMoves: the process's CPU time grows while it computes.
func TestProcessCPUMoves(t *testing.T) {
	a, ok := processCPU()
	require.True(t, ok)
	x := uint64(1)
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	b, ok := processCPU()
	require.True(t, ok)
	assert.Greater(t, (b.user+b.sys)-(a.user+a.sys), 10*time.Millisecond, "x=%d", x)
}
