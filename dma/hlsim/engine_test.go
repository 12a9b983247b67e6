package hlsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// An idle engine polls its queue for Config.EngineSpin before it parks:
// a CS submitted within the window needs no wake-up. With no spin the
// engine parks as soon as its queue is empty.
func TestEngineSpinsBeforeParking(t *testing.T) {
	tests := []struct {
		name      string
		spin      time.Duration
		wantParks bool
	}{
		{"spin window", 2 * time.Second, false},
		{"no spin", -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{EngineSpin: tc.spin})
			src, sva := r.host(4096)
			copy(src, pattern(4096, 3))
			dram := r.dram(4096)
			parks := r.d.Stats().EngineParks
			r.mustRun(linDMA(r.g1, dram, sva, 4096))
			if tc.wantParks {
				// With no spin the engine parks once its queue is empty
				// (when it gets the CPU: wait for it, do not time it).
				require.Eventually(t, func() bool { return r.d.Stats().EngineParks > parks }, 10*time.Second, time.Millisecond)
				return
			}
			time.Sleep(10 * time.Millisecond) // idle, well within the window
			r.mustRun(linDMA(r.g1, dram, sva, 4096))
			got := r.d.Stats().EngineParks - parks
			require.Zero(t, got, "parks between the CSs")
		})
	}
}

// DMAActive is the union of the engines' busy intervals: at most the
// elapsed time and at most DMABusy (their sum), even when two queues
// run at once.
func TestDMAActiveIsUnionOfBusy(t *testing.T) {
	r := newRig(t, Config{})
	const n = 4 << 20
	var chunks []hlsys.CSChunk
	for q := uint32(0); q < 2; q++ {
		src, sva := r.host(n)
		copy(src, pattern(n, byte(q)))
		chunks = append(chunks, r.chunk(q, linDMA(r.g1, r.dram(n), sva, n)))
	}
	st0 := r.d.Stats()
	start := time.Now()
	for range 3 {
		seq, err := r.submit(0, 0, chunks...)
		require.NoError(t, err)
		out, err := hlsys.WaitForCS(r.b, seq, uint64(safety/time.Microsecond))
		require.NoError(t, err)
		require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
	}
	elapsed := time.Since(start)
	st := r.d.Stats()
	active, busy, emu := st.DMAActive-st0.DMAActive, st.DMABusy-st0.DMABusy, st.EmuActive-st0.EmuActive
	t.Logf("elapsed %v, DMAActive %v, EmuActive %v, DMABusy %v", elapsed, active, emu, busy)
	require.LessOrEqual(t, active, emu)
	require.LessOrEqual(t, emu, elapsed)
	require.Positive(t, active)
	require.LessOrEqual(t, active, elapsed)
	require.LessOrEqual(t, active, busy)
}

// The union of intervals by hand: overlapping executions count once.
func TestDMAActiveOverlap(t *testing.T) {
	d := &Device{t0: time.Now()}
	a := d.dmaBegin()
	time.Sleep(2 * time.Millisecond)
	b := d.dmaBegin()
	time.Sleep(2 * time.Millisecond)
	d.dmaEnd(a)
	time.Sleep(2 * time.Millisecond)
	d.dmaEnd(b)
	total := d.clock() - a
	active, emu := d.active()
	busy := time.Duration(d.st.busy.Load())
	require.Equal(t, active, emu)
	require.LessOrEqual(t, active, total)
	require.Greater(t, busy, active, "overlap counted once in DMAActive, twice in DMABusy")
	require.GreaterOrEqual(t, active, 6*time.Millisecond)
}
