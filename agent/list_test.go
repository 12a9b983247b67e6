package agent

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestListsShareTheWindow: transfers whose lists are larger than the
// peer's window (MaxInFlight 2), several at once, one over the 1024 runs
// of an engine list, into host and Gaudi sections: every byte lands, no
// transfer waits forever for window slots, and every slot is given back
// before the transfers are done.
func TestListsShareTheWindow(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx := testCtx(t)
			ea, eb := newEngine(t), newEngine(t)
			a := newAgent(t, ea, "a", agentOpts{inFlight: 2})
			b := newAgent(t, eb, "b", agentOpts{unix: network == "unix", tcp: network == "tcp"})
			const workers, n, bs = 4, 40, 4096
			host := alloc(t, eb, 2*workers*n*bs, engine.Host)
			hbm := alloc(t, eb, 2*workers*n*bs, engine.Gaudi(0))
			require.NoError(t, b.Publish("h", host.All()))
			require.NoError(t, b.Publish("g", hbm.All()))
			_, err := a.Connect(ctx, b.Metadata().Unix+b.Metadata().TCP)
			require.NoError(t, err)
			src := alloc(t, ea, workers*n*bs, engine.Host)
			back := alloc(t, ea, workers*n*bs, engine.Host)
			for i := range workers * n {
				copy(src.Bytes()[i*bs:], pattern(bs, uint64(i)))
			}
			errs := make([]error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					sec := "h"
					if w%2 == 1 {
						sec = "g"
					}
					var out, in []Desc
					for i := range n {
						k := w*n + i
						off := 2 * (w*n + (i*7)%n) * bs // scattered: nothing coalesces
						out = append(out, Desc{Local: src.Slice(k*bs, bs), Section: sec, Off: off})
						in = append(in, Desc{Local: back.Slice(k*bs, bs), Section: sec, Off: off})
					}
					for range 3 {
						if err := a.Write(ctx, "b", out).Wait(ctx); err != nil {
							errs[w] = err
							return
						}
						if err := a.Read(ctx, "b", in).Wait(ctx); err != nil {
							errs[w] = err
							return
						}
					}
				})
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			require.True(t, bytes.Equal(src.Bytes(), back.Bytes()))

			// More runs than one engine list holds.
			const many, small = 1500, 256
			var out, in []Desc
			for i := range many {
				off := 2 * ((i * 7) % many) * small
				out = append(out, Desc{Local: src.Slice(i*small, small), Section: "h", Off: off})
				in = append(in, Desc{Local: back.Slice(i*small, small), Section: "h", Off: off})
			}
			clear(back.Bytes())
			x := a.Write(ctx, "b", out, WithNotify([]byte("many")))
			require.NoError(t, x.Wait(ctx))
			require.Len(t, x.Status(), many)
			nt, err := b.Recv(ctx)
			require.NoError(t, err)
			require.Equal(t, "many", string(nt.Msg))
			require.NoError(t, a.Read(ctx, "b", in).Wait(ctx))
			require.True(t, bytes.Equal(src.Bytes()[:many*small], back.Bytes()[:many*small]))

			p, err := a.Peer(ctx, "b")
			require.NoError(t, err)
			require.True(t, p.window.TryAcquire(2), "window slots still held after the transfers completed")
			p.window.Release(2)
			require.Zero(t, a.Stats().InFlight, fmt.Sprint(a.Stats()))
		})
	}
}

// TestFirstRunsIssuedByCaller: a long transfer's first runs (here an
// eighth of its bytes: 12 runs) are issued by the caller before Write
// returns (the first byte moves without waiting for the Xfer's goroutine,
// which issues the rest meanwhile): over unix they are already in the
// peer's section; the rest follow.
func TestFirstRunsIssuedByCaller(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	const n, bs = 100, 4096
	dst := alloc(t, eb, 2*n*bs, engine.Host)
	require.NoError(t, b.Publish("s", dst.All()))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	ep, err := p.Endpoint(ctx)
	require.NoError(t, err)
	src := alloc(t, ea, n*bs, engine.Host)
	descs := make([]Desc, n)
	for i := range n {
		copy(src.Bytes()[i*bs:], pattern(bs, uint64(i)))
		descs[i] = Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: 2 * i * bs} // nothing coalesces
	}
	puts0 := ep.Stats().Puts
	const first = n * bs / 8 / bs

	x := p.Write(ctx, descs)
	puts := ep.Stats().Puts - puts0
	landed := 0
	for i := range first {
		if bytes.Equal(dst.Bytes()[2*i*bs:(2*i+1)*bs], pattern(bs, uint64(i))) {
			landed++
		}
	}

	require.GreaterOrEqual(t, puts, uint64(first), "the caller issued the first list")
	require.Equal(t, first, landed, "the first list's bytes are in place when Write returns")
	require.NoError(t, x.Wait(ctx))
	for i := range n {
		require.Equal(t, pattern(bs, uint64(i)), dst.Bytes()[2*i*bs:(2*i+1)*bs], "descriptor %d", i)
	}
}

// TestInFlightZeroAfterWait: a transfer counts as in flight until Done,
// not after: once Wait returns, Stats no longer counts it (the Xfer's
// goroutine finishes it; its decrement used to follow Done).
func TestInFlightZeroAfterWait(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	const n, bs = 16, 256 // more runs than the caller issues: the Xfer's goroutine finishes
	dst := alloc(t, eb, 2*n*bs, engine.Host)
	require.NoError(t, b.Publish("s", dst.All()))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	src := alloc(t, ea, n*bs, engine.Host)
	descs := make([]Desc, n)
	for i := range n {
		descs[i] = Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: 2 * i * bs}
	}
	for i := range 500 {
		require.NoError(t, a.Write(ctx, "b", descs).Wait(ctx))
		require.Zero(t, a.Stats().InFlight, "round %d", i)
	}
}

// TestWriteListAllocations: a 1000-descriptor Write allocates nothing
// per descriptor over unix, and little over TCP. Over unix, its runs, the
// engine's list requests and the copy job's slices are reused: it
// allocated about 1.2 MB and 1,030 objects per Write before (a key copied
// to the heap per descriptor, four slices of a thousand keys or
// requests), which cost a quarter of the list's bandwidth in allocation
// and GC. Over TCP, what a list request's sender and owner make for each
// entry (its entry, its segment and its status) is what is left: 248 KB
// per Write before the iovecs of readv, the sender's copies of the local
// memory, the owner's memory slice beside its segments and the sender's
// entries were kept or dropped, about 128 KB after. The byte bounds leave
// room for the pools' misses when the goroutine moves between Ps (a Write
// over unix then averages 19 KB, not 5). Under the race detector, which
// drops a quarter of sync.Pool's puts, the bounds are looser.
func TestWriteListAllocations(t *testing.T) {
	for _, tc := range []struct {
		network  string
		maxObjs  float64
		maxBytes uint64
	}{
		{"unix", 50, 100 << 10},
		{"tcp", 200, 170 << 10},
	} {
		t.Run(tc.network, func(t *testing.T) {
			ctx := testCtx(t)
			p, descs := smallScattered(t, tc.network)
			n := len(descs)
			write := func() {
				if err := p.Write(ctx, descs).Wait(ctx); err != nil {
					panic(err)
				}
			}
			write()
			const runs = 50
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			objs := testing.AllocsPerRun(runs, write)
			runtime.ReadMemStats(&after)
			perWrite := (after.TotalAlloc - before.TotalAlloc) / (runs + 1) // AllocsPerRun runs once more
			t.Logf("per Write of %d descriptors: %.0f objects, %d bytes", n, objs, perWrite)
			maxObjs, maxBytes := tc.maxObjs, tc.maxBytes
			if raceEnabled {
				maxObjs, maxBytes = 4*maxObjs, 6*maxBytes
			}
			require.Less(t, objs, maxObjs, "objects allocated per Write")
			require.Less(t, perWrite, maxBytes, "bytes allocated per Write")
		})
	}
}

// smallScattered is a peer over network and 1000 descriptors of 64 B
// scattered over its section "s" (every other 64 B slot, out of order):
// a list whose cost is its software, not its copy.
func smallScattered(tb testing.TB, network string) (*Peer, []Desc) {
	const n, bs = 1000, 64
	a, _, _, p := benchPair(tb, network, 16*n*bs, engine.Host)
	src := alloc(tb, a.eng, n*bs, engine.Host)
	descs := make([]Desc, n)
	for i := range n {
		descs[i] = Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: 2 * ((i * 7) % n) * bs}
	}
	return p, descs
}

// TestFirstRuns: the caller's first list is syncRuns runs, or more while
// they hold at most an eighth of the transfer's bytes and firstBytes, and
// never more than maxListRuns; firstRuns also returns their bytes.
func TestFirstRuns(t *testing.T) {
	runsOf := func(sizes ...[2]int) []run { // (count, bytes) pairs
		var rs []run
		for _, s := range sizes {
			for range s[0] {
				rs = append(rs, run{bytes: s[1]})
			}
		}
		return rs
	}
	tests := []struct {
		name string
		runs []run
		want int
	}{
		{"none", nil, 0},
		{"fewer than syncRuns", runsOf([2]int{5, 1 << 20}), 5},
		{"syncRuns", runsOf([2]int{syncRuns, 64}), syncRuns},
		{"an eighth", runsOf([2]int{100, 4096}), 12},
		{"an eighth of 1000 blocks", runsOf([2]int{1000, 64 << 10}), 125},
		{"capped at firstBytes", runsOf([2]int{2000, 64 << 10}), firstBytes / (64 << 10)},
		{"large runs: syncRuns", runsOf([2]int{10, 64 << 20}), syncRuns},
		{"small runs", runsOf([2]int{1000, 64}), 125},
		{"capped at maxListRuns", runsOf([2]int{10000, 1}), maxListRuns},
		{"a large run after small ones", runsOf([2]int{syncRuns, 64}, [2]int{1, 64 << 20}, [2]int{100, 64}), syncRuns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, bytes := firstRuns(tt.runs)
			require.Equal(t, tt.want, n)
			want := 0
			for _, r := range tt.runs[:n] {
				want += r.bytes
			}
			require.Equal(t, want, bytes)
		})
	}
}
