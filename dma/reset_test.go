package dma

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// resetSim is an emulated device with a short CS timeout and a release
// watchdog far longer than the tests take, so that only a Device that
// releases its context in time avoids the kill.
func resetSim(t *testing.T, m hlsim.Model, kills *atomic.Int32) *hlsim.Device {
	return resetSimT(t, m, 50*time.Millisecond, 20*time.Second, kills)
}

// resetSimT is resetSim with the CS timeout and the release watchdog.
func resetSimT(t *testing.T, m hlsim.Model, csTimeout, watchdog time.Duration, kills *atomic.Int32) *hlsim.Device {
	t.Helper()
	sim, err := hlsim.New(hlsim.Config{Model: m, DRAMSize: 256 << 20, CSTimeout: csTimeout,
		ReleaseWatchdog: watchdog, Kill: func() { kills.Add(1) },
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// TestResetReleasesContext: a hung CS makes the driver reset the device
// (TDR); the Device sees DEVICE_RESET on its eventfd, releases its
// context within the watchdog (no kill), fails the hung CS and every
// later call with ErrDeviceReset, and reports the CS over only once the
// context is released (the hardware may run it until then). The device
// then opens again and moves bytes. The Gaudi3 row's reset is a fatal
// device error (Reset: hl_device_cond_reset without a timed-out CS).
func TestResetReleasesContext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model hlsim.Model
		fault func(*hlsim.Device)
	}{
		{"gaudi2 hung CS", hlsim.ModelGaudi2, func(s *hlsim.Device) { s.HangNextCS(1) }},
		{"gaudi2 device error", hlsim.ModelGaudi2, func(s *hlsim.Device) { s.HangNextCS(1); time.AfterFunc(5*time.Millisecond, s.Reset) }},
		{"gaudi3 device error", hlsim.ModelGaudi3, func(s *hlsim.Device) { s.HangNextCS(1); time.AfterFunc(5*time.Millisecond, s.Reset) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kills atomic.Int32
			sim := resetSim(t, tc.model, &kills)
			var resets atomic.Int32
			var hookErr atomic.Pointer[error]
			d, err := OpenBackend(sim.Name(), simOpen(sim), Options{OnReset: func(got *Device, err error) {
				resets.Add(1)
				hookErr.Store(&err)
			}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			cb := copyCB(t, d)

			tc.fault(sim)
			seq, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
			require.NoError(t, err)
			var done bool
			deadline := time.Now().Add(10 * time.Second)
			for !done && time.Now().Before(deadline) {
				done, err = d.WaitCS(seq, 10*time.Millisecond)
			}
			require.True(t, done, "the CS ends once the context is released")
			require.True(t, d.rw.released.Load(), "reported over before the context was released")
			require.ErrorIs(t, err, ErrDeviceReset)
			require.ErrorIs(t, d.ResetErr(), ErrDeviceReset)
			// OnReset runs on the watcher after the release, which may
			// be after the wait above returned.
			require.Eventually(t, func() bool { return resets.Load() == 1 }, 10*time.Second, time.Millisecond)
			require.ErrorIs(t, *hookErr.Load(), ErrDeviceReset)

			_, err = d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
			require.ErrorIs(t, err, ErrDeviceReset)
			_, err = d.AllocDevice(4096)
			require.ErrorIs(t, err, ErrDeviceReset)
			require.ErrorIs(t, cb.AddNOP(0), ErrDeviceReset)
			require.NoError(t, d.Close(), "Close after the release")

			// A new context moves bytes.
			d2, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d2.Close() })
			m, err := d2.AllocDevice(4096)
			require.NoError(t, err)
			src, err := AllocHostPages(4096)
			require.NoError(t, err)
			t.Cleanup(func() { _ = FreeHostPages(src) })
			dst, err := AllocHostPages(4096)
			require.NoError(t, err)
			t.Cleanup(func() { _ = FreeHostPages(dst) })
			for i := range src {
				src[i] = byte(i * 7)
			}
			hs, err := d2.MapHostBytes(src)
			require.NoError(t, err)
			hd, err := d2.MapHostBytes(dst)
			require.NoError(t, err)
			require.NoError(t, d2.CopySync(m.Addr(), hs.DeviceAddr(), 4096))
			require.NoError(t, d2.CopySync(hd.DeviceAddr(), m.Addr(), 4096))
			require.True(t, bytes.Equal(src, dst))
			require.Nil(t, d2.ResetErr())
			require.Zero(t, kills.Load(), "the driver would have killed the process")
		})
	}
}

// TestResetDuringClose: a reset racing the user's Close neither
// deadlocks nor leaks the watcher (goleak in TestMain).
func TestResetDuringClose(t *testing.T) {
	var kills atomic.Int32
	sim := resetSim(t, hlsim.ModelGaudi2, &kills)
	for range 20 {
		d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); sim.Reset() }()
		go func() { defer wg.Done(); _ = d.Close() }()
		wg.Wait()
		require.NoError(t, d.Close())
	}
	require.Zero(t, kills.Load())
}

// TestResetBlockedWait: a Wait blocked in the driver when the reset
// comes returns (force-completed, then refused) instead of holding the
// release past the watchdog, and reports ErrDeviceReset.
func TestResetBlockedWait(t *testing.T) {
	var kills atomic.Int32
	sim := resetSim(t, hlsim.ModelGaudi2, &kills)
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	cb := copyCB(t, d)
	sim.HangNextCS(1)
	seq, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
	require.NoError(t, err)
	start := time.Now()
	st, err := d.Wait(seq, time.Minute)
	require.ErrorIs(t, err, ErrDeviceReset, "status %v", st)
	require.Less(t, time.Since(start), 15*time.Second)
	require.Zero(t, kills.Load())
}

// TestResetG3WaitUnderClose: a Gaudi3 Wait sleeping on a hung submission
// when the driver resets the device, while a Close waits for that Wait
// (the gate's write lock is pending, so the watcher cannot enter to read
// the event). The Wait must see the release watchdog on its own and
// return ErrDeviceReset: sleeping on until its CS timeout holds the
// release past the watchdog, and the driver kills the process.
func TestResetG3WaitUnderClose(t *testing.T) {
	for _, polled := range []bool{false, true} { // interrupt waits, or counter polls
		t.Run(map[bool]string{false: "interrupt", true: "polled"}[polled], func(t *testing.T) {
			var kills atomic.Int32
			sim := resetSimT(t, hlsim.ModelGaudi3, 5*time.Second, 300*time.Millisecond, &kills)
			d, err := OpenBackend(sim.Name(), simOpen(sim), Options{CSTimeout: 5 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			d.g3.intrOff.Store(polled)
			cb := copyCB(t, d)
			sim.HangNextCS(1)
			seq, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
			require.NoError(t, err)
			waitErr := make(chan error, 1)
			go func() { _, err := d.Wait(seq, time.Minute); waitErr <- err }()
			time.Sleep(20 * time.Millisecond) // the Wait sleeps, holding the gate
			closed := make(chan struct{})
			go func() { _ = d.Close(); close(closed) }()
			time.Sleep(20 * time.Millisecond) // Close waits for the Wait
			sim.Reset()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			require.ErrorIs(t, <-waitErr, ErrDeviceReset)
			require.Zero(t, kills.Load(), "the context was not released within the driver's release watchdog")
		})
	}
}

// releaseCounter counts the MEMORY and CB ioctls (releases among them)
// made on a backend while counting is on.
type releaseCounter struct {
	hlsys.Backend
	on, n atomic.Int32
}

func (b *releaseCounter) Ioctl(req uintptr, arg unsafe.Pointer) error {
	if _, nr, ok := hlsys.Decode(req); ok && b.on.Load() != 0 && (nr == hlsys.IoctlMemory || nr == hlsys.IoctlCB) {
		b.n.Add(1)
	}
	return b.Backend.Ioctl(req, arg)
}

// TestResetCloseWins: the user's Close gets the gate before the watcher
// has read the reset event (the watcher is held at the gate). The
// hardware may still run every CS whose fence the driver forced, so
// Close must release the context as the watcher would (CloseRunning: the
// backend first, no unmap or free ioctl while the engines run), and the
// Device reports the reset.
func TestResetCloseWins(t *testing.T) {
	var kills atomic.Int32
	sim := resetSimT(t, hlsim.ModelGaudi2, 10*time.Second, 20*time.Second, &kills)
	var rc *releaseCounter
	d, err := OpenBackend(sim.Name(), func() (hlsys.Backend, error) {
		b, err := simOpen(sim)()
		if err != nil {
			return nil, err
		}
		rc = &releaseCounter{Backend: b}
		return rc, nil
	}, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	cb := copyCB(t, d)
	sim.HangNextCS(1)
	seq, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
	require.NoError(t, err)

	d.gate.RLock() // a call in progress
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	time.Sleep(20 * time.Millisecond) // Close waits for the gate
	sim.Reset()
	time.Sleep(20 * time.Millisecond) // the watcher waits behind Close
	rc.on.Store(1)
	d.gate.RUnlock()
	select {
	case err = <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	t.Logf("Close: %v", err)
	require.Zero(t, rc.n.Load(), "release ioctls while the device may still run the forced CSs")
	require.ErrorIs(t, d.ResetErr(), ErrDeviceReset)
	_, err = d.Wait(seq, 0)
	require.ErrorIs(t, err, ErrDeviceReset)
	require.Zero(t, kills.Load())
}

// TestResetSubmitRetrying: a Gaudi3 Submit waiting for a submission
// slot (every slot held by submissions queued behind a hung one) when the
// driver resets the device. The watcher's release waits for it (gate), so
// it must stop retrying once the Device is lost, not only at its last
// retry or the CS timeout: else the release comes after the watchdog.
func TestResetSubmitRetrying(t *testing.T) {
	var kills atomic.Int32
	sim := resetSimT(t, hlsim.ModelGaudi3, 5*time.Second, 300*time.Millisecond, &kills)
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{CSTimeout: 5 * time.Second, SubmitRetries: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	cb := copyCB(t, d)
	q := d.H2DQueues()[0]
	sim.HangNextCS(1)
	for range g3MaxPending {
		_, err := d.Submit([]Chunk{cb.Chunk(q)})
		require.NoError(t, err)
	}
	subErr := make(chan error, 1)
	go func() { _, err := d.Submit([]Chunk{cb.Chunk(q)}); subErr <- err }()
	time.Sleep(20 * time.Millisecond) // it waits for a slot, holding the gate
	sim.Reset()
	select {
	case err = <-subErr:
	case <-time.After(10 * time.Second):
		t.Fatal("Submit did not return")
	}
	require.ErrorIs(t, err, ErrDeviceReset)
	require.Eventually(t, func() bool { return d.rw.released.Load() }, 10*time.Second, time.Millisecond)
	require.Zero(t, kills.Load(), "the context was not released within the driver's release watchdog")
}
