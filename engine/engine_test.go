package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.Devices == DevicesAuto {
		cfg.Devices = DevicesEmulated
	}
	if cfg.Emulator.DRAMSize == 0 {
		cfg.Emulator.DRAMSize = 1 << 30
	}
	e, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// listenLocal starts e's listener on network ("unix": a socket in a
// temporary directory; "tcp": 127.0.0.1), closed when the test ends
// (before e).
func listenLocal(t testing.TB, e *Engine, network string) *Listener {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "o.sock")
	}
	l, err := e.Listen(network, addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

func TestCopyEveryPair(t *testing.T) {
	for _, model := range []string{"gaudi2", "gaudi1", "gaudi3"} {
		t.Run(model, func(t *testing.T) {
			e := newEngine(t, Config{EmulatedCount: 2, Emulator: EmulatorConfig{Model: model}})
			ctx := context.Background()
			locs := []Location{Host, Gaudi(0), Gaudi(1)}
			for _, size := range []int{1, 7, 4096, 65537, 1<<20 + 3, 9 << 20} {
				src, err := e.Alloc(size, Host)
				require.NoError(t, err)
				fill(src.Bytes(), uint64(size))
				for _, a := range locs {
					for _, b := range locs {
						ba, err := e.Alloc(size, a)
						require.NoError(t, err)
						bb, err := e.Alloc(size, b)
						require.NoError(t, err)
						out, err := e.Alloc(size, Host)
						require.NoError(t, err)
						require.NoError(t, e.CopySync(ctx, ba.All(), src.All()))
						require.NoError(t, e.CopySync(ctx, bb.All(), ba.All()), "%s -> %s, %d bytes", a, b, size)
						require.NoError(t, e.CopySync(ctx, out.All(), bb.All()))
						require.True(t, bytes.Equal(src.Bytes(), out.Bytes()), "%s -> %s, %d bytes: data differs", a, b, size)
						for _, x := range []*Buffer{ba, bb, out} {
							require.NoError(t, x.Free())
						}
					}
				}
				require.NoError(t, src.Free())
			}
			st := e.Stats()
			require.Zero(t, st.Failed)
			require.NotZero(t, st.CommandSubmissions)
		})
	}
}

// TestRandomCopies: 100,000 random copies (random memory-type pairs incl.
// two devices, sizes 1 B to 8 MiB, random offsets) from 64 goroutines,
// every destination verified byte for byte.
func TestRandomCopies(t *testing.T) {
	total := 100_000
	if testing.Short() {
		total = 5_000
	}
	const workers = 64
	const maxSize = 8 << 20
	const slack = 4096
	e := newEngine(t, Config{EmulatedCount: 2, Emulator: EmulatorConfig{DRAMSize: 2 << 30}})
	ctx := context.Background()
	locs := []Location{Host, Gaudi(0), Gaudi(1)}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errc <- randomWorker(ctx, e, w, total/workers, locs, maxSize, slack)
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	st := e.Stats()
	require.Zero(t, st.Failed)
	require.Zero(t, st.InFlight)
}

func randomWorker(ctx context.Context, e *Engine, w, n int, locs []Location, maxSize, slack int) error {
	r := rand.New(rand.NewPCG(uint64(w), 42))
	bufs := map[Location][2]*Buffer{}
	for _, l := range locs {
		var pair [2]*Buffer
		for i := range pair {
			b, err := e.Alloc(maxSize+slack, l)
			if err != nil {
				return err
			}
			defer b.Free()
			pair[i] = b
		}
		bufs[l] = pair
	}
	stage, err := e.Alloc(maxSize+slack, Host)
	if err != nil {
		return err
	}
	defer stage.Free()
	want := make([]byte, maxSize)
	for i := 0; i < n; i++ {
		// Sizes log-uniform from 1 B; a few go up to 8 MiB.
		var size int
		if r.IntN(100) == 0 {
			size = 1 + r.IntN(maxSize)
		} else {
			size = 1 << r.IntN(17)
			size += r.IntN(size)
		}
		sl, dl := locs[r.IntN(len(locs))], locs[r.IntN(len(locs))]
		so, do := r.IntN(slack), r.IntN(slack)
		src, dst := bufs[sl][0].Slice(so, size), bufs[dl][1].Slice(do, size)
		fill(want[:size], uint64(w)<<32|uint64(i))
		if sl.IsGaudi() {
			copy(stage.Bytes()[:size], want[:size])
			if err := e.CopySync(ctx, src, stage.Slice(0, size)); err != nil {
				return err
			}
		} else {
			copy(src.cs().HostBytes(), want[:size])
		}
		if err := e.Copy(ctx, dst, src).Wait(ctx); err != nil {
			return err
		}
		got := dst
		if dl.IsGaudi() {
			clear(stage.Bytes()[:size])
			if err := e.CopySync(ctx, stage.Slice(0, size), dst); err != nil {
				return err
			}
			got = stage.Slice(0, size)
		}
		if !bytes.Equal(got.cs().HostBytes(), want[:size]) {
			return errors.New("data mismatch " + sl.String() + " -> " + dl.String())
		}
	}
	return nil
}

func TestValidation(t *testing.T) {
	e := newEngine(t, Config{})
	other := newEngine(t, Config{Devices: DevicesNone})
	ctx := context.Background()
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	d, err := e.Alloc(4096, Gaudi(0))
	require.NoError(t, err)
	foreign, err := other.Alloc(4096, Host)
	require.NoError(t, err)
	freed, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	require.NoError(t, freed.Free(), "Free is idempotent")

	tests := []struct {
		name     string
		ctx      context.Context
		dst, src Slice
		want     error
	}{
		{"nil context", nil, h.Slice(0, 8), d.Slice(0, 8), ErrInvalid},
		{"zero size", ctx, h.Slice(0, 0), d.Slice(0, 0), ErrInvalid},
		{"negative size", ctx, h.Slice(0, -1), d.Slice(0, 8), ErrInvalid},
		{"negative offset", ctx, h.Slice(-1, 8), d.Slice(0, 8), ErrInvalid},
		{"out of bounds", ctx, h.Slice(4000, 100), d.Slice(0, 100), ErrInvalid},
		{"length mismatch", ctx, h.Slice(0, 8), d.Slice(0, 16), ErrInvalid},
		{"overlap in device buffer", ctx, d.Slice(0, 100), d.Slice(50, 100), ErrInvalid},
		{"freed buffer", ctx, freed.Slice(0, 8), h.Slice(0, 8), ErrFreed},
		{"foreign buffer", ctx, foreign.Slice(0, 8), h.Slice(0, 8), ErrForeign},
		{"nil buffer", ctx, (*Buffer)(nil).Slice(0, 8), h.Slice(0, 8), ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := e.Copy(tc.ctx, tc.dst, tc.src)
			require.True(t, f.IsDone(), "bad input is refused at submission")
			require.ErrorIs(t, f.Err(), tc.want)
			b := e.NewBatch()
			b.Copy(h.Slice(0, 8), h.Slice(8, 8))
			b.Copy(tc.dst, tc.src)
			if tc.ctx != nil {
				bf := b.Submit(tc.ctx)
				require.Error(t, bf.Err())
				require.ErrorIs(t, bf.Errs()[1], tc.want)
			}
		})
	}
	_, err = e.Alloc(0, Host)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = e.Alloc(8, Gaudi(7))
	require.ErrorIs(t, err, ErrNoDevice)
	_, err = e.Register(nil)
	require.ErrorIs(t, err, ErrInvalid)
	// A host-to-host overlap is a memmove.
	copy(h.Bytes(), "0123456789")
	require.NoError(t, e.CopySync(ctx, h.Slice(2, 8), h.Slice(0, 8)))
	require.Equal(t, "0101234567", string(h.Bytes()[:10]))
}

func TestRegisterAndLookup(t *testing.T) {
	e := newEngine(t, Config{})
	ctx := context.Background()
	mem := make([]byte, 10000)
	fill(mem, 1)
	reg, err := e.Register(mem[3:])
	require.NoError(t, err)
	_, err = e.Register(mem[100:200])
	require.ErrorIs(t, err, ErrInvalid, "overlapping registration refused")
	d, err := e.Alloc(len(mem), Gaudi(0))
	require.NoError(t, err)
	back, err := e.Alloc(len(mem), Host)
	require.NoError(t, err)
	require.NoError(t, e.CopySync(ctx, d.Slice(0, reg.Size()), reg.All()))
	require.NoError(t, e.CopySync(ctx, back.Slice(0, reg.Size()), d.Slice(0, reg.Size())))
	require.Equal(t, mem[3:], back.Bytes()[:reg.Size()])

	s, err := e.Lookup(reg.Addr()+10, 20)
	require.NoError(t, err)
	require.Equal(t, reg, s.Buffer())
	require.Equal(t, 10, s.Offset())
	ds, err := e.LookupDevice(0, d.Addr()+5, 5)
	require.NoError(t, err)
	require.Equal(t, d, ds.Buffer())
	require.NoError(t, reg.Deregister())
	_, err = e.Lookup(reg.Addr()+10, 20)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, uint64(1), e.Stats().Devices[0].RegCache.Deregistrations, "deregister unmapped the host range")
}

func TestFaults(t *testing.T) {
	// The CS timeout ends the hung CS below; well above what a loaded
	// machine makes of a 1 MiB copy (at 100 ms the driver's TDR reset the
	// device under a plain one in CI-like runs).
	e := newEngine(t, Config{Emulator: EmulatorConfig{CSTimeout: 2 * time.Second}})
	m, err := e.Emulator(0)
	require.NoError(t, err)
	sim := m.sim
	ctx := context.Background()
	h, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	ok := func() {
		fill(h.Bytes(), 7)
		require.NoError(t, e.CopySync(ctx, d.All(), h.All()), "engine keeps working")
	}

	sim.AbortNextCS(1)
	require.ErrorIs(t, e.CopySync(ctx, d.All(), h.All()), ErrAborted)
	ok()

	// A per-op deadline shorter than the device's delay: ErrTimeout at the
	// deadline; the CS still retires later.
	sim.DelayNextCS(1, 200*time.Millisecond)
	require.ErrorIs(t, e.CopySync(ctx, d.All(), h.All(), Timeout(20*time.Millisecond)), ErrTimeout)
	ok()

	// A hung CS: the driver's TDR resets the device, the copy fails with
	// ErrDeviceLost and so does the buffer; the engine opens the device
	// again, where a new buffer works.
	sim.HangNextCS(1)
	require.ErrorIs(t, e.CopySync(ctx, d.All(), h.All()), ErrDeviceLost)
	require.NoError(t, e.WaitDevice(ctx, 0))
	require.ErrorIs(t, e.CopySync(ctx, d.All(), h.All()), ErrDeviceLost)
	require.NoError(t, d.Free())
	d, err = e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	ok()

	// A reset while copies are in flight: the affected ones fail with
	// ErrDeviceLost.
	sim.DelayNextCS(1, 200*time.Millisecond)
	f := e.Copy(ctx, d.All(), h.All())
	time.Sleep(20 * time.Millisecond)
	sim.Reset()
	require.ErrorIs(t, f.Wait(ctx), ErrDeviceLost)
	require.NoError(t, e.WaitDevice(ctx, 0))
	d, err = e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	ok()
	require.Equal(t, 2, e.Devices()[0].Resets)
	require.Eventually(t, func() bool { return e.Stats().InFlight == 0 }, 5*time.Second, time.Millisecond)
}

func TestCloseWithOpsInFlight(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	require.NoError(t, err)
	ctx := context.Background()
	h, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	e.cp.Devs[0].Sim.DelayNextCS(2, 50*time.Millisecond)
	var futs []*Future
	for i := 0; i < 3000; i++ {
		off := (i * 64) % (1 << 20)
		switch i % 3 {
		case 0:
			futs = append(futs, e.Copy(ctx, d.Slice(off, 64), h.Slice(off, 64)))
		case 1:
			futs = append(futs, e.Copy(ctx, h.Slice(off, 64), d.Slice(off, 64)))
		default:
			futs = append(futs, e.Copy(ctx, h.Slice(0, 512<<10), h.Slice(512<<10, 512<<10)))
		}
	}
	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "Close is idempotent")
	for _, f := range futs {
		require.True(t, f.IsDone(), "every future is resolved after Close")
		if err := f.Err(); err != nil {
			require.ErrorIs(t, err, ErrClosed)
		}
	}
	require.ErrorIs(t, e.Copy(ctx, h.Slice(0, 8), h.Slice(8, 8)).Err(), ErrClosed)
	_, err = e.Alloc(8, Host)
	require.ErrorIs(t, err, ErrClosed)
}

// holdDrains makes the device workers wait in their hook until the
// returned release is called: copies then stay queued (a hook also keeps
// them from being submitted on the caller's goroutine), so that a queue
// of depth 1 is full from the second copy on.
func holdDrains(t *testing.T, e *Engine) (release func()) {
	hold := make(chan struct{})
	hook := func() { <-hold }
	e.cp.HookProcess.Store(&hook)
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return release
}

func TestQueueFull(t *testing.T) {
	t.Run("fail", func(t *testing.T) {
		e := newEngine(t, Config{QueueDepth: 1, QueueFull: FailWhenFull})
		h, _ := e.Alloc(1<<20, Host)
		d, _ := e.Alloc(1<<20, Gaudi(0))
		release := holdDrains(t, e)
		var full int
		var futs []*Future
		for i := 0; i < 200; i++ {
			f := e.Copy(context.Background(), d.Slice(i*8, 8), h.Slice(i*8, 8))
			if f.IsDone() && errors.Is(f.Err(), ErrQueueFull) {
				full++
			}
			futs = append(futs, f)
		}
		release()
		for _, f := range futs {
			<-f.Done()
		}
		require.Positive(t, full)
		require.Positive(t, e.Stats().QueueFull)
	})
	// A full queue waits until the context ends; the copy then fails with
	// the typed error of how it ended (wrapping the context's).
	for _, tc := range []struct {
		name     string
		ctx      func() (context.Context, context.CancelFunc)
		kind     error
		ctxError error
	}{
		{"wait/deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 30*time.Millisecond)
		}, ErrTimeout, context.DeadlineExceeded},
		{"wait/cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(30*time.Millisecond, cancel)
			return ctx, cancel
		}, ErrCanceled, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{QueueDepth: 1})
			h, _ := e.Alloc(1<<20, Host)
			d, _ := e.Alloc(1<<20, Gaudi(0))
			release := holdDrains(t, e)
			ctx, cancel := tc.ctx()
			defer cancel()
			var ended error
			var futs []*Future
			for i := 0; i < 200 && ended == nil; i++ {
				f := e.Copy(ctx, d.Slice(i*8, 8), h.Slice(i*8, 8))
				if f.IsDone() && f.Err() != nil {
					ended = f.Err()
				}
				futs = append(futs, f)
			}
			release()
			for _, f := range futs {
				<-f.Done()
			}
			require.Error(t, ended, "a full queue waits until the context ends")
			require.ErrorIs(t, ended, tc.kind)
			require.ErrorIs(t, ended, tc.ctxError)
		})
	}
}

func TestCancelWaitKeepsBuffer(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(1<<20, Host)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	fill(h.Bytes(), 3)
	// The completion is held long enough that the copy is surely still
	// in flight at the checks below, however slow the machine.
	e.cp.Devs[0].Sim.DelayNextCS(1, time.Second)
	f := e.Copy(context.Background(), d.All(), h.All())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, f.Wait(ctx), context.Canceled)
	require.False(t, f.IsDone(), "cancelling the wait does not end the copy")
	require.NoError(t, h.Free(), "Free with a copy in flight defers the release")
	require.NoError(t, f.Wait(context.Background()))
	out, _ := e.Alloc(1<<20, Host)
	require.NoError(t, e.CopySync(context.Background(), out.All(), d.All()))
	want := make([]byte, 1<<20)
	fill(want, 3)
	require.Equal(t, want, out.Bytes())
}

func TestWorkerPanicBecomesError(t *testing.T) {
	e := newEngine(t, Config{})
	h, _ := e.Alloc(4096, Host)
	d, _ := e.Alloc(4096, Gaudi(0))
	hook := func() { panic("injected") }
	e.cp.HookProcess.Store(&hook)
	err := e.CopySync(context.Background(), d.All(), h.All())
	require.ErrorIs(t, err, ErrPanic)
	e.cp.HookProcess.Store(nil)
	require.Eventually(t, func() bool { return e.Stats().Panics == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, e.CopySync(context.Background(), d.All(), h.All()))
}

func TestBatch(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 2})
	ctx := context.Background()
	h, _ := e.Alloc(1<<20, Host)
	out, _ := e.Alloc(1<<20, Host)
	d0, _ := e.Alloc(1<<20, Gaudi(0))
	d1, _ := e.Alloc(1<<20, Gaudi(1))
	fill(h.Bytes(), 9)
	b := e.NewBatch()
	for i := 0; i < 64; i++ {
		b.Copy(d0.Slice(i*4096, 4096), h.Slice(i*4096, 4096))
	}
	before := e.Stats().CommandSubmissions
	f := b.Submit(ctx)
	require.NoError(t, f.Wait(ctx))
	require.Len(t, f.Errs(), 64)
	assert.LessOrEqual(t, e.Stats().CommandSubmissions-before, uint64(2), "a batch is coalesced into few CSs")
	b.Copy(d1.Slice(0, 256<<10), d0.Slice(0, 256<<10))
	b.Copy(out.Slice(0, 256<<10), h.Slice(0, 256<<10))
	require.NoError(t, b.Submit(ctx).Wait(ctx))
	require.NoError(t, e.CopySync(ctx, out.Slice(256<<10, 256<<10), d1.Slice(0, 256<<10)))
	require.Equal(t, h.Bytes()[:256<<10], out.Bytes()[256<<10:512<<10])
	require.Equal(t, h.Bytes()[:256<<10], out.Bytes()[:256<<10])
}

func TestExportDMABufOncePerAllocation(t *testing.T) {
	e := newEngine(t, Config{})
	d, err := e.Alloc(3<<20, Gaudi(0))
	require.NoError(t, err)
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	_, err = h.ExportDMABuf()
	require.ErrorIs(t, err, ErrNotSupported)

	x1, err := d.ExportDMABuf()
	require.NoError(t, err)
	x2, err := d.ExportDMABuf()
	require.NoError(t, err)
	require.Equal(t, x1.FD().Int(), x2.FD().Int(), "one export, shared by every importer")
	require.GreaterOrEqual(t, x1.Size(), uint64(3<<20))
	st := e.Stats().Devices[0].ExportCache
	require.Equal(t, uint64(1), st.Registrations)

	require.NoError(t, d.Free(), "Free is deferred while exported")
	_, err = d.ExportDMABuf()
	require.ErrorIs(t, err, ErrFreed)
	x1.Release()
	x1.Release()
	require.Equal(t, uint64(0), e.Stats().Devices[0].ExportCache.Deregistrations)
	x2.Release()
	st = e.Stats().Devices[0].ExportCache
	require.Equal(t, uint64(1), st.Deregistrations, "the export is closed once the buffer is gone")
}

// TestRegistrationCacheRepeatedTransfers: the same 64 buffers copied host to
// Gaudi many times map each host buffer once with the cache, and once per
// copy without it.
func TestRegistrationCacheRepeatedTransfers(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("disabled=%v", disabled), func(t *testing.T) {
			e := newEngine(t, Config{RegCache: RegCacheConfig{Disabled: disabled}})
			const nbuf, rounds, size = 64, 50, 4096
			hs, d := repeatedSetup(t, e, nbuf, size)
			ctx := context.Background()
			for r := 0; r < rounds; r++ {
				require.NoError(t, repeatedRound(ctx, e, hs, d, size))
			}
			regs := e.Stats().Devices[0].HostMappings
			if disabled {
				require.Equal(t, uint64(nbuf*rounds), regs)
			} else {
				require.Equal(t, uint64(nbuf), regs, "one registration per distinct buffer")
			}
		})
	}
}

func repeatedSetup(t testing.TB, e *Engine, nbuf, size int) ([]*Buffer, *Buffer) {
	hs := make([]*Buffer, nbuf)
	for i := range hs {
		var err error
		hs[i], err = e.Alloc(size, Host)
		require.NoError(t, err)
	}
	d, err := e.Alloc(nbuf*size, Gaudi(0))
	require.NoError(t, err)
	return hs, d
}

func repeatedRound(ctx context.Context, e *Engine, hs []*Buffer, d *Buffer, size int) error {
	b := e.NewBatch()
	for i, h := range hs {
		b.Copy(d.Slice(i*size, size), h.All())
	}
	return b.Submit(ctx).Wait(ctx)
}
