package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestLoopWindowFillHonoursDuration: a timed run (-time) stops submitting
// once its time is up, also while it fills the window. Before the fix the
// fill looked at the time of the last completion only, so the first fill
// always submitted -O x -b messages: with -O 65536 -b 65536 (each flag in
// range) a -time 200ms run submitted 2^32 copies before it first looked
// at the clock and ran for minutes. The count is the check (the time is
// not measured): a 1 ns run submits once, the submission itself taking
// longer than that.
func TestLoopWindowFillHonoursDuration(t *testing.T) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	ctx := context.Background()
	for name, clock := range map[string]ClockMode{"auto": ClockAuto, "monotonic": ClockMonotonic} {
		t.Run(name, func(t *testing.T) {
			w, err := newLocal(Host, Host)(ctx, &Env{Engine: eng}, 8)
			require.NoError(t, err)
			defer w.Close()
			p := Params{Window: 4096, Batch: 16, Clock: clock}
			m, err := loop(ctx, w, p, 0, time.Nanosecond, nil, nil)
			require.NoError(t, err)
			require.LessOrEqual(t, m.msgs, int64(2*p.Batch), "a 1 ns run filled its window of %d submissions", p.Window)
			require.NoError(t, w.Verify(ctx))
		})
	}
}
