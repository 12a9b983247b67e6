package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeRounds counts the rounds pingLoop runs.
type fakeRounds struct{ sent, n int }

func (f *fakeRounds) Send(context.Context) error {
	if f.sent != f.n {
		return errors.New("Send before the previous round's Await")
	}
	f.sent++
	return nil
}

func (f *fakeRounds) Await(context.Context) error {
	if f.sent != f.n+1 {
		return errors.New("Await without Send")
	}
	f.n++
	return nil
}

// TestPingLoopOneClockReadPerRound: pingLoop reads the clock once per
// round (after its Send), as ucx_perftest does, so that a round's sample
// runs from its Send to the next one's: the samples tile the
// measurement, their sum is exactly its elapsed time (with two reads per
// round, the time between a round's end and the next one's start would be
// in no sample).
func TestPingLoopOneClockReadPerRound(t *testing.T) {
	p := Params{Clock: ClockMonotonic}.withDefaults()
	for _, limit := range []int64{1, 10, 5000} {
		f := &fakeRounds{}
		rec := &recorder{kind: RoundTrip}
		m, err := pingLoop(context.Background(), f, p, limit, 0, rec, nil)
		require.NoError(t, err)
		require.Equal(t, limit, m.msgs)
		require.EqualValues(t, limit, f.n)
		require.Equal(t, limit, rec.lat.seen, "one sample per round")
		require.Equal(t, float64(m.elapsed), rec.lat.sum, "the samples cover the whole measurement")
	}
	// Timed: the same, over a duration.
	f := &fakeRounds{}
	rec := &recorder{kind: RoundTrip}
	m, err := pingLoop(context.Background(), f, p, 0, time.Millisecond, rec, nil)
	require.NoError(t, err)
	require.Positive(t, m.msgs)
	require.Equal(t, float64(m.elapsed), rec.lat.sum)
}
