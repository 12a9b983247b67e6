package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/shm"
)

// The "lists" group of the endpoint suite: PutList and GetList over every
// transport.
var listSuite = []struct {
	name string
	run  func(t *testing.T, p epPair)
}{
	{"every memory pair in one list", suiteListEveryPair},
	{"refusals", suiteListRefusals},
	{"an element failing alone", suiteListStale},
	{"canceled before it starts", suiteListCanceled},
	{"canceled while it runs", suiteListCanceledRunning},
	{"stats", suiteListStats},
}

// listArenas: one buffer per location on each side, the same layout in
// each.
type listArenas struct {
	local, out map[Location]*Buffer
	keys       map[Location]RemoteKey
}

func newListArenas(t *testing.T, p epPair, size int) listArenas {
	ar := listArenas{local: map[Location]*Buffer{}, out: map[Location]*Buffer{}, keys: map[Location]RemoteKey{}}
	src, err := p.a.Alloc(size, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 21)
	for _, loc := range []Location{Host, Gaudi(0)} {
		lb, err := p.a.Alloc(size, loc)
		require.NoError(t, err)
		require.NoError(t, p.a.CopySync(context.Background(), lb.All(), src.All()))
		ar.local[loc] = lb
		ar.out[loc], err = p.a.Alloc(size, loc)
		require.NoError(t, err)
		_, ar.keys[loc] = exported(t, p.b, size, loc)
	}
	return ar
}

// suiteListEveryPair: one list mixing every pair of local and remote
// memory, sizes from 1 byte to over 1 MiB, remote places in reverse
// order, and keys granting part of an allocation only (parsed from their
// bytes: no key to map the whole allocation), put then got back.
func suiteListEveryPair(t *testing.T, p epPair) {
	ctx := context.Background()
	sizes := []int{1, 4097, 64 << 10, 300<<10 + 3, 1<<20 + 5, 8}
	const n = 24
	offs := make([]int, n)
	total := 0
	for k := range n {
		offs[k] = total
		total += sizes[k%len(sizes)] + 13
	}
	ar := newListArenas(t, p, total)
	locs := []Location{Host, Gaudi(0)}
	locals, outs, keys := make([]Slice, n), make([]Slice, n), make([]RemoteKey, n)
	for k := range n {
		sz := sizes[k%len(sizes)]
		lloc, rloc := locs[k%2], locs[(k/2)%2]
		roff := offs[n-1-k] // distinct places: every element fits the largest size
		if sz > sizes[(n-1-k)%len(sizes)]+13 {
			roff = offs[k]
		}
		locals[k] = ar.local[lloc].Slice(offs[k], sz)
		outs[k] = ar.out[lloc].Slice(offs[k], sz)
		keys[k] = ar.keys[rloc].Slice(roff, sz)
		if k%5 == 4 {
			var err error
			keys[k], err = ParseRemoteKey(keys[k].Bytes())
			require.NoError(t, err)
		}
	}
	// Distinct remote places, or the test is wrong.
	seen := map[[2]int]bool{}
	for k := range n {
		loc := 0
		if keys[k].Location() != Host {
			loc = 1
		}
		for o := range keys[k].Len() {
			at := [2]int{loc, int(keys[k].k.Offset) + o}
			require.False(t, seen[at], "element %d overlaps another", k)
			seen[at] = true
		}
	}
	f := p.ab.PutList(ctx, locals, keys)
	require.NoError(t, f.Wait(ctx))
	require.Len(t, f.Errs(), n)
	f = p.ab.GetList(ctx, outs, keys)
	require.NoError(t, f.Wait(ctx))
	for k := range n {
		require.True(t, bytes.Equal(hostCopyOf(t, p.a, locals[k]), hostCopyOf(t, p.a, outs[k])), "element %d: data differs", k)
	}
}

func suiteListRefusals(t *testing.T, p epPair) {
	ctx := context.Background()
	local, err := p.a.Alloc(8192, Host)
	require.NoError(t, err)
	fill(local.Bytes(), 4)
	rb, rk := exported(t, p.b, 8192, Host)
	other := newEngine(t, Config{})
	_, ok := exported(t, other, 8192, Host)
	good := func() ([]Slice, []RemoteKey) {
		var ls []Slice
		var ks []RemoteKey
		for i := range 8 {
			ls = append(ls, local.Slice(i*1024, 1024))
			ks = append(ks, rk.Slice(i*1024, 1024))
		}
		return ls, ks
	}
	for _, tc := range []struct {
		name string
		bad  func(ls []Slice, ks []RemoteKey)
	}{
		{"length mismatch", func(ls []Slice, ks []RemoteKey) { ks[3] = rk.Slice(3*1024, 1000) }},
		{"another engine's key", func(ls []Slice, ks []RemoteKey) { ks[3] = ok.Slice(0, 1024) }},
		{"range outside the key", func(ls []Slice, ks []RemoteKey) { ks[3] = rk.Slice(8000, 1024) }},
		{"bad local slice", func(ls []Slice, ks []RemoteKey) { ls[3] = local.Slice(8000, 1024) }},
		{"empty local slice", func(ls []Slice, ks []RemoteKey) { ls[3] = Slice{} }},
	} {
		for _, put := range []bool{true, false} {
			ls, ks := good()
			tc.bad(ls, ks)
			f := p.ab.PutList(ctx, ls, ks)
			if !put {
				f = p.ab.GetList(ctx, ls, ks)
			}
			require.True(t, f.IsDone(), tc.name)
			require.ErrorIs(t, f.Err(), ErrInvalid, tc.name)
			errs := f.Errs()
			require.Len(t, errs, 8)
			require.ErrorIs(t, errs[3], ErrInvalid, tc.name)
			require.Contains(t, errs[3].Error(), "element 3", tc.name)
			for i, e := range errs {
				require.Error(t, e, "%s: element %d: nothing was started", tc.name, i)
			}
		}
	}
	// Nothing was put.
	back := hostCopyOf(t, p.b, rb.All())
	require.Equal(t, make([]byte, 8192), back, "a refused list moved bytes")

	ls, ks := good()
	require.ErrorIs(t, p.ab.PutList(ctx, ls, ks[:7]).Err(), ErrInvalid, "lists of different lengths")
	require.NoError(t, p.ab.PutList(ctx, nil, nil).Err(), "empty list")
	var nilCtx context.Context
	require.ErrorIs(t, p.ab.PutList(nilCtx, ls, ks).Err(), ErrInvalid, "nil context")
	require.NoError(t, p.ab.Err(), "a refusal does not fail the endpoint")
	require.NoError(t, p.ab.PutList(ctx, ls, ks).Wait(ctx))
	require.Equal(t, local.Bytes(), hostCopyOf(t, p.b, rb.All()))
}

// suiteListStale: an element whose buffer its owner freed fails, alone;
// the others move.
func suiteListStale(t *testing.T, p epPair) {
	if p.ab.Transport() == TransportRDMA {
		t.Skip("RDMA: an access to a deregistered region fails the queue pair (TestRDMAQPError)")
	}
	ctx := context.Background()
	local, err := p.a.Alloc(4*4096, Host)
	require.NoError(t, err)
	fill(local.Bytes(), 6)
	live, lk := exported(t, p.b, 4*4096, Host)
	gone, gk := exported(t, p.b, 4096, Host)
	require.NoError(t, gone.Free())
	ls := []Slice{local.Slice(0, 4096), local.Slice(4096, 4096), local.Slice(8192, 4096), local.Slice(12288, 4096)}
	ks := []RemoteKey{lk.Slice(0, 4096), lk.Slice(4096, 4096), gk, lk.Slice(12288, 4096)}
	f := p.ab.PutList(ctx, ls, ks)
	require.ErrorIs(t, f.Wait(ctx), ErrInvalid)
	errs := f.Errs()
	require.ErrorIs(t, errs[2], ErrInvalid)
	for _, i := range []int{0, 1, 3} {
		require.NoError(t, errs[i], "element %d", i)
		require.Equal(t, local.Bytes()[i*4096:(i+1)*4096], hostCopyOf(t, p.b, live.Slice(i*4096, 4096)), "element %d", i)
	}
	require.NoError(t, p.ab.Err())
}

func suiteListCanceled(t *testing.T, p epPair) {
	local, err := p.a.Alloc(1<<20, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, 1<<20, Host)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := p.ab.PutList(ctx, []Slice{local.Slice(0, 4096), local.Slice(8192, 4096)}, []RemoteKey{rk.Slice(0, 4096), rk.Slice(8192, 4096)})
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrCanceled)
	require.ErrorIs(t, f.Err(), context.Canceled)
	require.Zero(t, p.a.Stats().InFlight)
}

// suiteListCanceledRunning: ctx ends while a list into Gaudi memory (what
// the peer performs) runs: each element either completed or ended with
// ErrCanceled, the future resolves, nothing stays in flight.
func suiteListCanceledRunning(t *testing.T, p epPair) {
	const n, bs = 64, 64 << 10
	local, err := p.a.Alloc(n*bs, Host)
	require.NoError(t, err)
	_, gk := exported(t, p.b, n*bs, Gaudi(0))
	var ls []Slice
	var ks []RemoteKey
	for i := range n {
		ls = append(ls, local.Slice(i*bs, bs))
		ks = append(ks, gk.Slice((n-1-i)*bs, bs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := p.ab.PutList(ctx, ls, ks)
	cancel()
	<-f.Done()
	errs := f.Errs()
	require.Len(t, errs, n)
	for i, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, ErrCanceled, "element %d", i)
		}
	}
	require.Eventually(t, func() bool { return p.a.Stats().InFlight == 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, p.ab.Err())
	// The endpoint still works.
	require.NoError(t, p.ab.PutList(context.Background(), ls[:2], ks[:2]).Wait(context.Background()))
}

func suiteListStats(t *testing.T, p epPair) {
	local, err := p.a.Alloc(5*4096, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, 5*4096, Host)
	ctx := context.Background()
	var ls []Slice
	var ks []RemoteKey
	for i := range 5 {
		ls = append(ls, local.Slice(i*4096, 4096))
		ks = append(ks, rk.Slice((4-i)*4096, 4096))
	}
	require.NoError(t, p.ab.PutList(ctx, ls, ks).Wait(ctx))
	require.NoError(t, p.ab.GetList(ctx, ls[:2], ks[:2]).Wait(ctx))
	st := p.ab.Stats()
	require.Equal(t, uint64(5), st.Puts)
	require.Equal(t, uint64(2), st.Gets)
	require.Equal(t, uint64(7), st.Ops.Completed)
	require.Equal(t, uint64(7*4096), st.Ops.Bytes)
	var tr *TransportStats
	for _, x := range p.a.Stats().Transports {
		if x.Transport == p.ab.Transport() {
			tr = &x
		}
	}
	require.NotNil(t, tr)
	require.Equal(t, uint64(7), tr.Ops.Completed)
	require.Equal(t, uint64(7), tr.Ops.Latency.Count)
}

// TestPutListOneCopyJob: over "unix", the host-to-host elements of a list
// are one copy job (shm's StartList), the Gaudi ones go as Puts do; without
// the list form each element was a copy of its own.
func TestPutListOneCopyJob(t *testing.T) {
	ctx := context.Background()
	pr := listenDialPair(t, "unix", filepath.Join(t.TempDir(), "s.sock"))
	var jobs, pieces atomic.Int64
	var bytesCopied atomic.Uint64
	pr.a.shm().SetHooks(shm.Hooks{ListCopied: func(n int, b uint64) {
		jobs.Add(1)
		pieces.Add(int64(n))
		bytesCopied.Add(b)
	}})
	const n, bs = 200, 4096
	local, err := pr.a.Alloc(n*bs, Host)
	require.NoError(t, err)
	fill(local.Bytes(), 8)
	rb, rk := exported(t, pr.b, 2*n*bs, Host)
	rg, gk := exported(t, pr.b, 2*bs, Gaudi(0))
	var ls []Slice
	var ks []RemoteKey
	for i := range n {
		ls = append(ls, local.Slice(i*bs, bs))
		ks = append(ks, rk.Slice(2*((i*7)%n)*bs, bs))
	}
	ls = append(ls, local.Slice(0, bs), local.Slice(bs, bs))
	ks = append(ks, gk.Slice(0, bs), gk.Slice(bs, bs))
	require.NoError(t, pr.ab.PutList(ctx, ls, ks).Wait(ctx))
	require.Equal(t, int64(1), jobs.Load(), "one copy job")
	require.Equal(t, int64(n), pieces.Load())
	require.Equal(t, uint64(n*bs), bytesCopied.Load())
	remote := hostCopyOf(t, pr.b, rb.All())
	for i := range n {
		o := 2 * ((i * 7) % n) * bs
		require.True(t, bytes.Equal(local.Bytes()[i*bs:(i+1)*bs], remote[o:o+bs]), "element %d", i)
	}
	require.Equal(t, local.Bytes()[:2*bs], hostCopyOf(t, pr.b, rg.All()))
	// GetList back, one more job.
	out, err := pr.a.Alloc(n*bs, Host)
	require.NoError(t, err)
	var outs []Slice
	for i := range n {
		outs = append(outs, out.Slice(i*bs, bs))
	}
	require.NoError(t, pr.ab.GetList(ctx, outs, ks[:n]).Wait(ctx))
	require.Equal(t, int64(2), jobs.Load())
	require.Equal(t, local.Bytes(), out.Bytes())
	require.True(t, strings.Contains(pr.ab.Peer(), "pid"))
}

// TestRemoteKeyView: a view of a root key (and of a sliced one) names
// part of the buffer without a narrower grant; Puts and Gets through it
// land there, over every transport, and a view cannot leave its key's.
func TestRemoteKeyView(t *testing.T) {
	for _, pm := range pairMakers[:3] {
		t.Run(pm.name, func(t *testing.T) {
			ctx := context.Background()
			p := pm.make(t)
			rb, rk := exported(t, p.b, 64<<10, Host)
			local, err := p.a.Alloc(4096, Host)
			require.NoError(t, err)
			fill(local.Bytes(), 12)
			v := rk.View(8192, 4096)
			require.NoError(t, v.Err())
			require.Equal(t, rk.k.GrantLen, v.k.GrantLen, "the grant is kept")
			require.Equal(t, rk.k.MAC, v.k.MAC, "no signature derived")
			require.NoError(t, p.ab.PutSync(ctx, local.All(), v))
			require.Equal(t, local.Bytes(), hostCopyOf(t, p.b, rb.Slice(8192, 4096)))
			s := rk.Slice(16384, 8192).View(4096, 4096) // within a narrower grant
			require.NoError(t, s.Err())
			require.NoError(t, p.ab.PutSync(ctx, local.All(), s))
			require.Equal(t, local.Bytes(), hostCopyOf(t, p.b, rb.Slice(20480, 4096)))
			back, err := p.a.Alloc(4096, Host)
			require.NoError(t, err)
			require.NoError(t, p.ab.GetSync(ctx, back.All(), s))
			require.Equal(t, local.Bytes(), back.Bytes())
			for _, bad := range []RemoteKey{rk.View(64<<10-100, 4096), rk.View(-1, 10), rk.Slice(0, 4096).View(100, 4096)} {
				require.ErrorIs(t, bad.Err(), ErrInvalid)
				require.ErrorIs(t, p.ab.PutSync(ctx, local.All(), bad), ErrInvalid)
			}
		})
	}
}
