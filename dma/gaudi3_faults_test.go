package dma

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestGaudi3FailureSeenByEveryWait: a direct-mode submission that a
// reset aborted reads ABORTED to every Wait on it, concurrent or later,
// as a Gaudi2 CS's fence does. The first Wait to see it used to drop the
// failure, and the others were told it completed though its bytes never
// moved.
func TestGaudi3FailureSeenByEveryWait(t *testing.T) {
	d, sim := openG3(t, hlsim.Config{}, nil)
	cb := copyCB(t, d)
	sim.HangNextCS(1)
	seq, err := d.Submit([]Chunk{cb.Chunk(2)})
	require.NoError(t, err)
	before := sim.Stats().BytesMoved
	var wg sync.WaitGroup
	sts := make([]CSStatus, 2)
	errs := make([]error, 2)
	for i := range sts {
		wg.Go(func() { sts[i], errs[i] = d.Wait(seq, 5*time.Second) })
	}
	time.Sleep(50 * time.Millisecond)
	sim.Reset() // a fatal device error: the Device releases its context
	wg.Wait()
	require.Equal(t, before, sim.Stats().BytesMoved, "the submission moved nothing")
	for i := range sts {
		require.ErrorIs(t, errs[i], ErrDeviceReset, "waiter %d (status %v)", i, sts[i])
	}
	require.Eventually(t, func() bool {
		_, err := d.Wait(seq, 0)
		return errors.Is(err, ErrDeviceReset) && d.rw.released.Load()
	}, 5*time.Second, time.Millisecond, "a later Wait")
}

// TestGaudi3CloseWithSubmissionInFlight: Close stops the PDMA channels
// before it frees their rings. A submission nobody waited for used to run
// on into the freed ring: an MMU fault, a device reset, and a Close that
// failed with the user's memory still mapped.
func TestGaudi3CloseWithSubmissionInFlight(t *testing.T) {
	d, sim, _, _, _ := longCopy(t, hlsim.ModelGaudi3, 64<<20)
	time.Sleep(time.Millisecond)
	require.NoError(t, d.Close())
	require.Zero(t, sim.Stats().EngineFaults, "a channel ran into memory Close released")
	require.Zero(t, sim.Stats().Resets)
}

// TestGaudi3TDRWithoutWaiter: a hung submission times out by its
// CSTimeout whether or not anyone waits for it, as the driver's TDR does;
// a Submit that finds every slot taken ends the expired one. Submit used
// to retry until ErrBusy, the hung submission holding its slot for good.
func TestGaudi3TDRWithoutWaiter(t *testing.T) {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi3, DRAMSize: 64 << 20})
	require.NoError(t, err)
	defer sim.Close()
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{CSTimeout: 20 * time.Millisecond, SubmitRetries: 200})
	require.NoError(t, err)
	defer d.Close()
	cb := copyCB(t, d)
	sim.HangNextCS(1)
	first, err := d.Submit([]Chunk{cb.Chunk(2)})
	require.NoError(t, err)
	for range g3MaxPending - 1 {
		_, err := d.Submit([]Chunk{cb.Chunk(2)})
		require.NoError(t, err)
	}
	_, err = d.Submit([]Chunk{cb.Chunk(2)})
	require.NoError(t, err, "the hung submission's TDR (20 ms) expired")
	st, err := d.Wait(first, 0)
	require.Equal(t, CSTimedOut, st, "%v", err)
}

// noBell hides the backend's Doorbell hint: the emulator then learns of
// register stores by polling them, as hardware does.
type noBell struct{ hlsys.Backend }

// TestGaudi3ReprogramWithoutDoorbell: without the Doorbell hint, the
// emulated channel still sees gxfer stop and program it again (MSQ_PI
// brought back to 0 before g3PILimit, the TDR's reset of a hung
// channel), though the stop lasts microseconds and the worker polls the
// registers every few milliseconds. It used to keep its old consumer
// index: the next MSQ_PI "moved backwards" (a channel error and a device
// reset), or a hung channel stayed hung.
func TestGaudi3ReprogramWithoutDoorbell(t *testing.T) {
	t.Run("PI wrap", func(t *testing.T) {
		old := g3PILimit
		g3PILimit = 512
		defer func() { g3PILimit = old }()
		d, sim := openG3(t, hlsim.Config{Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)},
			func(b hlsys.Backend) hlsys.Backend { return noBell{b} })
		require.Nil(t, d.g3.bell)
		for range 40 {
			roundTrip(t, d, 4096+1)
		}
		require.Greater(t, d.g3.programs.Load(), uint64(3+2))
		require.Zero(t, sim.Stats().Resets, "no channel error")
	})
	t.Run("TDR", func(t *testing.T) {
		sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi3, DRAMSize: 64 << 20})
		require.NoError(t, err)
		defer sim.Close()
		d, err := OpenBackend(sim.Name(), func() (hlsys.Backend, error) {
			b, err := simOpen(sim)()
			if err != nil {
				return nil, err
			}
			return noBell{b}, nil
		}, Options{CSTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		defer d.Close()
		cb := copyCB(t, d)
		// One copy first: the model sees a stop it missed by MSQ_CI
		// differing from its own consumer index, which a channel that
		// hung at index 0 and was programmed back to 0 does not show.
		seq, err := d.Submit([]Chunk{cb.Chunk(2)})
		require.NoError(t, err)
		st, err := d.Wait(seq, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, CSCompleted, st)
		sim.HangNextCS(1)
		seq, err = d.Submit([]Chunk{cb.Chunk(2)})
		require.NoError(t, err)
		st, _ = d.Wait(seq, 5*time.Second)
		require.Equal(t, CSTimedOut.String(), st.String())
		seq, err = d.Submit([]Chunk{cb.Chunk(2)})
		require.NoError(t, err)
		st, err = d.Wait(seq, 5*time.Second)
		require.Equal(t, CSCompleted.String(), st.String(), "the channel was programmed again after the TDR (err %v)", err)
	})
}
