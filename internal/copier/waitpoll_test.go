package copier

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/memcache"
)

// TestWaitRetiresItsCS: a future's Wait polls the command submission of
// its copy and retires it on the waiting goroutine: the copy resolves,
// releasing its references, while the device's completion actor is held
// up elsewhere (here in another submission's OnDone).
func TestWaitRetiresItsCS(t *testing.T) {
	tests := []struct {
		name  string
		batch int
	}{
		{"copy", 0},
		{"batch of 3", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1)
			g := r.c.Devs[0]
			src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
			require.NoError(t, r.copy(context.Background(), d, src)) // CS 1, retired

			// Hold the actor in the OnDone of CS 1 (tracked again).
			stalled, release := make(chan struct{}), make(chan struct{})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			require.NoError(t, g.Actor.Track(context.Background(), cq.Submission{Seq: 1, OnDone: func(error) {
				close(stalled)
				<-release
			}}))
			<-stalled
			retired0 := g.Actor.Stats().WaiterRetired

			f := &Future{}
			n := max(tc.batch, 1)
			ops := make([]Op, n)
			for i := range ops {
				src.Refs.Add(1)
				d.Refs.Add(1)
				ops[i] = Op{Dst: Slice{M: d, Off: uint64(i), N: 1024}, Src: Slice{M: src, Off: uint64(i), N: 1024}, Idx: i}
			}
			if tc.batch == 0 {
				f.Init(1)
				require.NoError(t, r.c.Copy(context.Background(), f, ops[0].Dst, ops[0].Src, time.Time{}))
			} else {
				f.InitBatch(n)
				require.NoError(t, r.c.SubmitBatch(context.Background(), f, ops, time.Time{}))
			}
			// The spin outlasts any emulated copy; the ctx only keeps a
			// failing test from hanging.
			f.SetSpin(30 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, f.Wait(ctx))
			require.Zero(t, src.Refs.Load(), "references released by the waiter")
			require.Zero(t, d.Refs.Load())
			require.Equal(t, retired0+1, g.Actor.Stats().WaiterRetired)
			close(release)
		})
	}
}

// TestLoneCopyTakesOneQueue: a lone copy of one piece on an idle device
// is put on one queue; several copies, a copy of several pieces, or a
// device with CSs in flight spread over every queue.
func TestLoneCopyTakesOneQueue(t *testing.T) {
	r := newRig(t, 1)
	g := r.c.Devs[0]
	all := g.dirQs[dirH2D]
	require.Greater(t, len(all), 1, "the emulated Gaudi2 has several H2D queues")
	small := ref{o: &Op{Src: Slice{N: 4096}}}
	big := ref{o: &Op{Src: Slice{N: r.c.cfg.ChunkSize + 1}}}
	tests := []struct {
		name string
		refs []ref
		busy bool
		one  bool
	}{
		{"lone copy, idle device", []ref{small}, false, true},
		{"two copies", []ref{small, small}, false, false},
		{"copy of two pieces", []ref{big}, false, false},
		{"lone copy, device busy", []ref{small}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.busy {
				// A CS in flight: the emulator ends it only 200 ms after
				// its packets ran.
				g.Sim.DelayNextCS(1, 200*time.Millisecond)
				src, d := r.host(t, 4096), r.gaudi(t, 0, 4096)
				src.Refs.Add(1)
				d.Refs.Add(1)
				f := &Future{}
				f.Init(1)
				require.NoError(t, r.c.Copy(context.Background(), f, Slice{M: d, N: 4096}, Slice{M: src, N: 4096}, time.Time{}))
				require.Eventually(t, func() bool { return g.Actor.Outstanding() == 1 }, 10*time.Second, time.Millisecond)
				defer func() { require.NoError(t, f.Wait(context.Background())) }()
			}
			qs, one := g.streams(dirH2D, tc.refs)
			require.Equal(t, all, qs)
			require.Equal(t, tc.one, one)
		})
	}
}

// TestResolveAllocs: resolving a copy whose host buffer is mapped already
// allocates nothing (the mappings go to the CS's own list, which a batch
// grows once, not in a fresh slice per copy).
func TestResolveAllocs(t *testing.T) {
	r := newRig(t, 1)
	g := r.c.Devs[0]
	src, d := r.host(t, 8192), r.gaudi(t, 0, 8192)
	o := &Op{Dst: Slice{M: d, Off: 4096, N: 4096}, Src: Slice{M: src, Off: 4096, N: 4096}}
	regs := make([]*memcache.Region, 0, 4)
	var dst, srcAddr uint64
	var err error
	resolve := func() {
		regs = regs[:0]
		if dst, srcAddr, err = g.resolve(o, &regs); err == nil {
			g.HostMaps.Put(regs[0])
		}
	}
	resolve() // maps the host buffer
	require.NoError(t, err)
	require.Equal(t, d.Addr+4096, dst)
	require.NotZero(t, srcAddr)
	require.Len(t, regs, 1)
	require.Zero(t, testing.AllocsPerRun(100, resolve))
	require.NoError(t, err)
}

// TestBatchCSRecordsEachCopy: a CS ending many copies of one batch
// records and completes them together, and still counts every copy: the
// counters, the latency histogram (one entry per copy) and the future.
func TestBatchCSRecordsEachCopy(t *testing.T) {
	r := newRig(t, 1)
	src, d := r.host(t, 8*1024), r.gaudi(t, 0, 8*1024)
	const n = 8
	ops := make([]Op, n)
	for i := range ops {
		src.Refs.Add(1)
		d.Refs.Add(1)
		ops[i] = Op{Dst: Slice{M: d, Off: uint64(i) * 1024, N: 1024}, Src: Slice{M: src, Off: uint64(i) * 1024, N: 1024}, Idx: i}
	}
	_, lat0 := r.st.Lat.Quantile(0.5)
	sum0 := r.st.Lat.Sum()
	f := &Future{}
	f.InitBatch(n)
	require.NoError(t, r.c.SubmitBatch(context.Background(), f, ops, time.Time{}))
	require.NoError(t, f.Wait(context.Background()))
	require.Equal(t, make([]error, n), f.Errs())
	require.Equal(t, uint64(n), r.st.Completed.Load())
	require.Equal(t, uint64(n*1024), r.st.Bytes.Load())
	_, lat := r.st.Lat.Quantile(0.5)
	require.Equal(t, lat0+n, lat, "one latency per copy")
	require.Greater(t, r.st.Lat.Sum(), sum0)
	require.Zero(t, src.Refs.Load())
	require.Zero(t, d.Refs.Load())
}

func TestLatencyHistAddN(t *testing.T) {
	var a, b LatencyHist
	for range 5 {
		a.add(3 * time.Microsecond)
	}
	b.addN(3*time.Microsecond, 5)
	qa, na := a.Quantile(0.5)
	qb, nb := b.Quantile(0.5)
	require.Equal(t, []any{qa, na, a.Sum(), a.Max()}, []any{qb, nb, b.Sum(), b.Max()})
}

// neverEnds is a completion source whose CSs never end.
type neverEnds struct{}

func (neverEnds) WaitCS(_ uint64, timeout time.Duration) (bool, error) {
	time.Sleep(min(timeout, time.Millisecond))
	return false, nil
}

// TestFutureKicksActor: what needs a device's actor while it may sleep
// for waiters that watch its CSs (cq.Ticket.Watch) wakes it: a caller
// that waits on Done or looks with IsDone or Err, and a CS a future had
// no slot to attach. A future that takes the CS, or is already resolved,
// does not.
func TestFutureKicksActor(t *testing.T) {
	cases := []struct {
		name string
		run  func(f *Future, attach func() *cq.Ticket)
		kick bool
	}{
		{"Done", func(f *Future, attach func() *cq.Ticket) { attach(); f.Done() }, true},
		{"IsDone", func(f *Future, attach func() *cq.Ticket) { attach(); f.IsDone() }, true},
		{"Err", func(f *Future, attach func() *cq.Ticket) { attach(); _ = f.Err() }, true},
		{"attached", func(f *Future, attach func() *cq.Ticket) { attach() }, false},
		{"no slot left", func(f *Future, attach func() *cq.Ticket) {
			for range maxTickets + 1 {
				attach()
			}
		}, true},
		{"resolved", func(f *Future, attach func() *cq.Ticket) {
			attach()
			f.Complete(0, nil)
			f.Done()
			f.IsDone()
			_ = f.Err()
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := cq.NewDeviceActor("never", neverEnds{}, cq.ActorConfig{Spin: time.Microsecond})
			defer a.Close(0)
			f := NewFuture(1)
			seq := uint64(0)
			attach := func() *cq.Ticket {
				seq++
				tk, err := a.TrackTicket(context.Background(), cq.Submission{Seq: seq, OnDone: func(error) {}})
				require.NoError(t, err)
				r := &csRec{items: []csItem{{j: &Job{Fut: f}}}}
				r.attach(tk)
				return tk
			}
			tc.run(f, attach)
			require.Equal(t, tc.kick, a.Stats().Kicks > 0)
		})
	}
}

// doneSeqs is a completion source whose CSs end when the test says so.
type doneSeqs struct {
	mu   sync.Mutex
	done map[uint64]bool
}

func (d *doneSeqs) end(seq uint64) {
	d.mu.Lock()
	d.done[seq] = true
	d.mu.Unlock()
}

func (d *doneSeqs) WaitCS(seq uint64, timeout time.Duration) (bool, error) {
	d.mu.Lock()
	ok := d.done[seq]
	d.mu.Unlock()
	if !ok {
		time.Sleep(min(timeout, time.Millisecond))
	}
	return ok, nil
}

// TestBlockedWaiterKicksLateTicket: a caller blocks in Done before its
// copy's CS is submitted (a worker submits queued copies), so Done kicks
// nothing. The actor sleeps meanwhile, because another waiter watches
// every CS it tracks, for as long as BlockTimeout (an hour here). The
// CS's ticket, attached to the blocked future later, must wake it: else
// the ended CS stays unretired until the sleep ends.
func TestBlockedWaiterKicksLateTicket(t *testing.T) {
	src := &doneSeqs{done: map[uint64]bool{}}
	a := cq.NewDeviceActor("fake", src, cq.ActorConfig{Spin: time.Microsecond, BlockTimeout: time.Hour})
	defer a.Close(0)
	ctx := context.Background()
	watched, err := a.TrackTicket(ctx, cq.Submission{Seq: 1, OnDone: func(error) {}})
	require.NoError(t, err)
	watched.Watch()
	defer watched.Unwatch()
	for a.Stats().Sleeps == 0 {
		runtime.Gosched()
	}

	f := NewFuture(1)
	done := f.Done() // blocked: no ticket to kick yet
	late, err := a.TrackTicket(ctx, cq.Submission{Seq: 2, OnDone: func(err error) { f.Complete(0, err) }})
	require.NoError(t, err)
	(&csRec{items: []csItem{{j: &Job{Fut: f}}}}).attach(late)
	src.end(2)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("CS 2 ended and was not retired: the sleeping actor was not kicked (kicks %d)", a.Stats().Kicks)
	}
}
