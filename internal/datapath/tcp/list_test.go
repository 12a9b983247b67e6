package tcp

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// listCompletion records every entry's result of a list.
type listCompletion struct {
	mu    sync.Mutex
	errs  []error
	seen  []bool
	left  int
	twice int // entries completed more than once
	done  chan struct{}
}

func newListCompletion(n int) *listCompletion {
	c := &listCompletion{errs: make([]error, n), seen: make([]bool, n), left: n, done: make(chan struct{})}
	if n == 0 {
		close(c.done)
	}
	return c
}

func (c *listCompletion) Complete(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[i] {
		c.twice++
		return
	}
	c.seen[i], c.errs[i] = true, err
	if c.left--; c.left == 0 {
		close(c.done)
	}
}

func (c *listCompletion) CompleteAll(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.seen {
		if !c.seen[i] {
			c.seen[i], c.errs[i] = true, err
		}
	}
	if c.left > 0 {
		c.left = 0
		close(c.done)
	}
}

// manyCompletion is a listCompletion that also takes successful entries
// together (datapath.ManyCompleter, as the engine's lists), counting the
// calls that did.
type manyCompletion struct {
	*listCompletion
	bulk atomic.Int32
}

func (c *manyCompletion) CompleteOK(idx []int) {
	c.bulk.Add(1)
	for _, i := range idx {
		c.Complete(i, nil)
	}
}

// wait returns every entry's result once all completed.
func (c *listCompletion) wait(t *testing.T) []error {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the list never completed")
	}
	time.Sleep(time.Millisecond) // a second Complete would come now
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Zero(t, c.twice, "entries completed twice")
	return c.errs
}

// viewKey is a key to n bytes at off of the fake owner's memory (an
// allocation of size bytes, granted whole).
func viewKey(size, off, n uint64) wire.RemoteKey {
	return wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, AllocID: 1,
		Length: size, GrantLen: size, Offset: off, Len: n}
}

// grantKey is a key granting only [off, +n) (a slice of a root key).
func grantKey(size, off, n uint64) wire.RemoteKey {
	k := viewKey(size, off, n)
	k.GrantOffset, k.GrantLen = off, n
	return k
}

// scattered is a list of count entries of the given sizes, at shuffled
// places of a local buffer and of the owner's memory (remote), which
// must hold them all.
type scattered struct {
	local  *hostBuf
	reqs   []datapath.Req
	remote []uint64 // each entry's offset in the owner's memory
}

func scatter(t testing.TB, sizes []uint64, remoteSize uint64, put bool, rng *rand.Rand, key func(size, off, n uint64) wire.RemoteKey) scattered {
	t.Helper()
	var total uint64
	for _, n := range sizes {
		total += n
	}
	require.LessOrEqual(t, total, remoteSize)
	s := scattered{local: &hostBuf{mem: make([]byte, total)}, reqs: make([]datapath.Req, len(sizes)), remote: make([]uint64, len(sizes))}
	fillBytes(s.local.mem, byte(rng.IntN(200)))
	lo, ro := rng.Perm(len(sizes)), rng.Perm(len(sizes))
	at := func(perm []int) []uint64 { // the offsets of the entries laid out in perm's order
		offs := make([]uint64, len(sizes))
		var o uint64
		for _, i := range perm {
			offs[i] = o
			o += sizes[i]
		}
		return offs
	}
	loff, roff := at(lo), at(ro)
	for i, n := range sizes {
		s.remote[i] = roff[i]
		s.reqs[i] = datapath.Req{Put: put, Local: datapath.Mem{B: s.local, Off: loff[i], Len: n}, Key: key(remoteSize, roff[i], max(n, 1))}
	}
	return s
}

// lanePaths makes n pairs over loopback whose owners share one memory,
// and makes the dialer of the first use the others as its lanes.
func lanePaths(t testing.TB, size int, caps wire.Caps, n int) (a, b *fakeCtrl) {
	a, b = pair(t, size, caps)
	var lanes []*path
	for range n - 1 {
		la, lb := pair(t, 0, caps)
		lb.env.mem = b.env.mem
		lanes = append(lanes, la.path)
	}
	if len(lanes) > 0 {
		a.path.laneSnap.Store(&lanes)
	}
	return a, b
}

// TestListPutGet: lists of many shapes, scattered on both sides, land
// byte for byte, whole and element by element (a peer without CapList),
// over one connection or several.
func TestListPutGet(t *testing.T) {
	rep := func(n int, size uint64) []uint64 {
		s := make([]uint64, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	mixed := []uint64{1, 0, 4096, Chunk + 3, 7, 0, 3 * Chunk, 65536, 1}
	for _, tc := range []struct {
		name  string
		sizes []uint64
		caps  wire.Caps
		lanes int
		key   func(size, off, n uint64) wire.RemoteKey
	}{
		{"one byte", []uint64{1}, listCaps, 1, viewKey},
		{"3 pages", rep(3, 4096), listCaps, 1, viewKey},
		{"mixed sizes and empty entries", mixed, listCaps, 1, viewKey},
		{"all empty", rep(3, 0), listCaps, 1, viewKey},
		{"1000 x 64 KiB over 3 lanes", rep(1000, 64<<10), listCaps, 3, viewKey},
		{"2500 small: several requests", rep(2500, 100), listCaps, 1, viewKey},
		{"600 keys: several requests", rep(600, 512), listCaps, 2, grantKey},
		{"mixed over 4 lanes", append(append(rep(50, 64<<10), mixed...), rep(3, 2*Chunk)...), listCaps, 4, grantKey},
		{"old peer", mixed, wire.CapCancel, 1, viewKey},
		{"old peer, lanes", rep(100, 64<<10), 0, 2, viewKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var total uint64
			for _, n := range tc.sizes {
				total += n
			}
			remote := total + 4096
			a, b := lanePaths(t, int(remote), tc.caps, tc.lanes)
			rng := rand.New(rand.NewPCG(uint64(len(tc.sizes)), 9))
			s := scatter(t, tc.sizes, remote, true, rng, tc.key)
			c := newListCompletion(len(s.reqs))
			a.path.StartList(context.Background(), s.reqs, c)
			for i, err := range c.wait(t) {
				require.NoError(t, err, "Put entry %d", i)
			}
			for i, r := range s.reqs {
				require.Equal(t, r.Local.Host(), b.env.mem.mem[s.remote[i]:s.remote[i]+r.Local.Len], "Put entry %d", i)
			}

			back := make([]datapath.Req, len(s.reqs))
			dst := &hostBuf{mem: make([]byte, len(s.local.mem))}
			for i, r := range s.reqs {
				r.Put, r.Local.B = false, dst
				back[i] = r
			}
			// The Gets' completer takes entries together: a list request
			// whose entries all succeeded completes them so.
			mc := &manyCompletion{listCompletion: newListCompletion(len(back))}
			a.path.StartList(context.Background(), back, mc)
			for i, err := range mc.wait(t) {
				require.NoError(t, err, "Get entry %d", i)
			}
			if tc.caps&listCaps == listCaps && total > 0 {
				require.NotZero(t, mc.bulk.Load(), "entries completed together")
			}
			require.Equal(t, s.local.mem, dst.mem)
			require.NoError(t, a.Err())
			require.NoError(t, b.Err())
		})
	}
}

// TestListBadEntries: entries the owner refuses fail with their status,
// the others land, and the connection stays up.
func TestListBadEntries(t *testing.T) {
	const n, size = 40, 8192
	for _, put := range []bool{true, false} {
		t.Run(fmt.Sprintf("put=%v", put), func(t *testing.T) {
			a, b := pair(t, n*size, listCaps)
			if !put { // (a Put's owner memory is left alone: its reader writes it)
				fillBytes(b.env.mem.mem, 5)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			sizes := make([]uint64, n)
			for i := range sizes {
				sizes[i] = size
			}
			s := scatter(t, sizes, n*size, put, rng, viewKey)
			want := make([]wire.Status, n)
			for i := range s.reqs {
				switch i % 7 {
				case 3:
					s.reqs[i].Key.AllocID = badAlloc
					want[i] = wire.StatusBadKey
				case 5:
					s.reqs[i].Key.Length, s.reqs[i].Key.GrantLen = 4*n*size, 4*n*size
					s.reqs[i].Key.Offset = 2 * n * size // beyond the owner's memory
					want[i] = wire.StatusOutOfRange
				}
			}
			before := append([]byte(nil), s.local.mem...)
			// A completer taking entries together still gets each
			// failure of its own.
			c := &manyCompletion{listCompletion: newListCompletion(n)}
			a.path.StartList(context.Background(), s.reqs, c)
			for i, err := range c.wait(t) {
				if want[i] != wire.StatusOK {
					var we *wire.Error
					require.ErrorAs(t, err, &we, "entry %d", i)
					require.Equal(t, want[i], we.Code, "entry %d", i)
					continue
				}
				require.NoError(t, err, "entry %d", i)
				r := s.reqs[i]
				theirs := b.env.mem.mem[s.remote[i] : s.remote[i]+size]
				if put {
					require.Equal(t, before[r.Local.Off:r.Local.Off+size], theirs, "entry %d", i)
				} else {
					require.Equal(t, theirs, r.Local.Host(), "entry %d", i)
				}
			}
			require.NoError(t, a.Err())
			require.NoError(t, b.Err())
		})
	}
}

// TestListCanceled: a list whose ctx ends (or deadline passes) mid-way
// resolves every entry (done, or with the typed error); the owner is left
// with nothing in progress and the connection in step.
func TestListCanceled(t *testing.T) {
	const n, size = 1000, 64 << 10
	for _, put := range []bool{true, false} {
		for _, when := range []time.Duration{0, 200 * time.Microsecond, 2 * time.Millisecond} {
			t.Run(fmt.Sprintf("put=%v/after=%v", put, when), func(t *testing.T) {
				a, b := lanePaths(t, n*size+64, listCaps, 2)
				sizes := make([]uint64, n)
				for i := range sizes {
					sizes[i] = size
				}
				s := scatter(t, sizes, n*size, put, rand.New(rand.NewPCG(3, 4)), viewKey)
				ctx, cancel := context.WithCancel(context.Background())
				if when == 0 {
					cancel()
				} else {
					time.AfterFunc(when, cancel)
				}
				c := newListCompletion(n)
				a.path.StartList(ctx, s.reqs, c)
				for i, err := range c.wait(t) {
					if err != nil {
						require.ErrorIs(t, err, gxerr.Canceled, "entry %d", i)
					}
				}
				cancel()
				require.Eventually(t, func() bool {
					b.path.mu.Lock()
					defer b.path.mu.Unlock()
					return len(b.path.inbound) == 0 && len(b.path.serving) == 0
				}, 10*time.Second, time.Millisecond, "the owner still has the list in progress")

				// In step: a small list goes through (to memory of its
				// own: the canceled list's bytes may still land on the
				// other lane).
				src := &hostBuf{mem: []byte("in step")}
				small := []datapath.Req{
					{Put: true, Local: datapath.Mem{B: src, Len: 3}, Key: viewKey(n*size+64, n*size+10, 3)},
					{Put: true, Local: datapath.Mem{B: src, Off: 3, Len: 4}, Key: viewKey(n*size+64, n*size, 4)},
				}
				c = newListCompletion(2)
				a.path.StartList(context.Background(), small, c)
				for _, err := range c.wait(t) {
					require.NoError(t, err)
				}
				require.Equal(t, []byte("in"), b.env.mem.mem[n*size+10:n*size+12])
				require.NoError(t, a.Err())
				require.NoError(t, b.Err())
			})
		}
	}
	t.Run("deadline", func(t *testing.T) {
		a, _ := pair(t, n*size, listCaps)
		sizes := make([]uint64, n)
		for i := range sizes {
			sizes[i] = size
		}
		s := scatter(t, sizes, n*size, false, rand.New(rand.NewPCG(7, 8)), viewKey)
		for i := range s.reqs {
			s.reqs[i].Deadline = time.Now().Add(time.Millisecond)
		}
		c := newListCompletion(n)
		a.path.StartList(context.Background(), s.reqs, c)
		for i, err := range c.wait(t) {
			if err != nil {
				require.ErrorIs(t, err, gxerr.Timeout, "entry %d", i)
			}
		}
		require.NoError(t, a.Err())
	})
}

// TestListPeerCloses: the owner going away mid-list fails every entry
// not done (none hangs), whichever side streams.
func TestListPeerCloses(t *testing.T) {
	const n, size = 1000, 64 << 10
	for _, put := range []bool{true, false} {
		t.Run(fmt.Sprintf("put=%v", put), func(t *testing.T) {
			a, b := lanePaths(t, n*size, listCaps, 2)
			sizes := make([]uint64, n)
			for i := range sizes {
				sizes[i] = size
			}
			s := scatter(t, sizes, n*size, put, rand.New(rand.NewPCG(9, 10)), viewKey)
			c := newListCompletion(n)
			time.AfterFunc(time.Millisecond, b.close)
			a.path.StartList(context.Background(), s.reqs, c)
			failed := 0
			for _, err := range c.wait(t) {
				if err != nil {
					failed++
				}
			}
			t.Logf("%d of %d entries failed", failed, n)
		})
	}
}

func TestSplitList(t *testing.T) {
	reqs := func(sizes ...uint64) []datapath.Req {
		r := make([]datapath.Req, len(sizes))
		for i, n := range sizes {
			r[i].Local.Len = n
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		reqs  []datapath.Req
		parts int
		want  [][2]int
	}{
		{"one part", reqs(1, 2, 3), 1, [][2]int{{0, 3}}},
		{"even", reqs(4, 4, 4, 4), 2, [][2]int{{0, 2}, {2, 4}}},
		{"fewer entries than parts", reqs(4, 4), 4, [][2]int{{0, 1}, {1, 2}}},
		{"one big entry", reqs(100, 1, 1, 1), 2, [][2]int{{0, 1}, {1, 4}}},
		{"empty entries", reqs(0, 0, 0), 3, [][2]int{{0, 3}}},
		{"by bytes", reqs(1, 1, 1, 1, 4, 4), 3, [][2]int{{0, 4}, {4, 5}, {5, 6}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var total uint64
			for _, r := range tc.reqs {
				total += r.Local.Len
			}
			require.Equal(t, tc.want, splitList(tc.reqs, total, tc.parts))
		})
	}
}

// TestListGaudi: entries of device memory, on either side, mixed with
// host memory, go through staging and land byte for byte.
func TestListGaudi(t *testing.T) {
	const n, size = 24, 300 << 10
	a, b := pair(t, n*size, listCaps)
	b.env.dev = &devBuf{hostBuf{mem: make([]byte, n*size)}}
	local := &hostBuf{mem: make([]byte, n*size)}
	dev := &devBuf{hostBuf{mem: make([]byte, n*size)}}
	fillBytes(local.mem, 7)
	fillBytes(dev.mem, 9)
	reqs := make([]datapath.Req, n)
	remote := func(i int) []byte { // entry i's bytes at the owner
		if i%3 == 0 {
			return b.env.dev.mem[i*size : (i+1)*size]
		}
		return b.env.mem.mem[i*size : (i+1)*size]
	}
	for i := range reqs {
		var buf datapath.Buf = local
		if i%2 == 0 {
			buf = dev
		}
		k := viewKey(n*size, uint64(i*size), size)
		if i%3 == 0 {
			k.MemType, k.Device = wire.MemGaudi, 0
		}
		reqs[i] = datapath.Req{Put: true, Local: datapath.Mem{B: buf, Off: uint64((n - 1 - i) * size), Len: size}, Key: k}
	}
	want := func(i int) []byte { return bytesOf(reqs[i].Local.B)[reqs[i].Local.Off:][:size] }
	c := newListCompletion(n)
	a.path.StartList(context.Background(), reqs, c)
	for i, err := range c.wait(t) {
		require.NoError(t, err, "Put entry %d", i)
		require.Equal(t, want(i), remote(i), "Put entry %d", i)
	}
	clear(local.mem)
	clear(dev.mem)
	for i := range reqs {
		reqs[i].Put = false
	}
	c = newListCompletion(n)
	a.path.StartList(context.Background(), reqs, c)
	for i, err := range c.wait(t) {
		require.NoError(t, err, "Get entry %d", i)
		require.Equal(t, remote(i), want(i), "Get entry %d", i)
	}
}

// TestListOpsKeys: listOps names every entry's key by its index in its
// request's key table, whether the key is the entry before's, one seen
// earlier in the request or a new one, and starts a new request at
// MaxListEntries entries or MaxListKeys keys.
func TestListOpsKeys(t *testing.T) {
	key := func(i int) wire.RemoteKey { return grantKey(1<<20, uint64(i)<<12, 64) }
	for _, tc := range []struct {
		name string
		keys []int // each entry's key
	}{
		{"one key", []int{0, 0, 0, 0}},
		{"runs", []int{0, 0, 1, 1, 1, 0, 2, 2}},
		{"alternating", []int{0, 1, 0, 1, 2, 0}},
		{"over MaxListEntries", make([]int, wire.MaxListEntries+3)},
		{"over MaxListKeys", func() []int {
			k := make([]int, wire.MaxListKeys+5)
			for i := range k {
				k[i] = i
			}
			return append(k, 0, wire.MaxListKeys+4, wire.MaxListKeys+4)
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := path{t: &Transport{}}
			reqs := make([]datapath.Req, len(tc.keys))
			for i, k := range tc.keys {
				reqs[i] = datapath.Req{Put: true, Local: datapath.Mem{Len: 8}, Key: key(k)}
			}
			ops := p.listOps(reqs, 0, nil)
			n := 0
			for _, o := range ops {
				require.LessOrEqual(t, len(o.msg.Entries), wire.MaxListEntries)
				require.LessOrEqual(t, len(o.msg.Keys), wire.MaxListKeys)
				for _, e := range o.msg.Entries {
					want := key(tc.keys[n])
					want.Offset, want.Len = want.GrantOffset, want.GrantLen
					require.Equal(t, want, o.msg.Keys[e.Key], "entry %d", n)
					n++
				}
			}
			require.Equal(t, len(tc.keys), n)
		})
	}
}

// TestListLookupsPerKey: the owner of a list request looks up an
// entry's key only when it differs from the entry before's (or that one
// was refused), checking only the range of the others; every entry still
// lands where its own offset says, and a refused key fails its entries
// alone.
func TestListLookupsPerKey(t *testing.T) {
	const n, size = 300, 64
	const mem = 40 << 10                             // (>= 2*n*size, whole 4 KiB grants)
	other := func(_, off, n uint64) wire.RemoteKey { // a key per 4 KiB
		k := grantKey(mem, off&^4095, 4096)
		k.Offset, k.Len = off, n
		return k
	}
	for _, tc := range []struct {
		name    string
		key     func(i int) func(size, off, n uint64) wire.RemoteKey
		bad     []int // entries of a refused key
		lookups int64
	}{
		{"one key", func(int) func(size, off, n uint64) wire.RemoteKey { return viewKey }, nil, 1},
		{"two keys in turn", func(i int) func(size, off, n uint64) wire.RemoteKey {
			if i%2 == 1 {
				return other
			}
			return viewKey
		}, nil, n},
		// Entries 0, 10, 11 (a refusal is not remembered), 12, 200, 201.
		{"a refused key among one key's", func(int) func(size, off, n uint64) wire.RemoteKey { return viewKey }, []int{10, 11, 200}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, mem, listCaps)
			reqs := make([]datapath.Req, n)
			local := &hostBuf{mem: make([]byte, n*size)}
			fillBytes(local.mem, 3)
			remote := make([]uint64, n)
			for i, j := range rand.New(rand.NewPCG(4, 4)).Perm(n) {
				remote[i] = uint64(2 * j * size) // every other slot, shuffled
				reqs[i] = datapath.Req{Put: true, Local: datapath.Mem{B: local, Off: uint64(i * size), Len: size}, Key: tc.key(i)(mem, remote[i], size)}
			}
			for _, i := range tc.bad {
				reqs[i].Key.AllocID = badAlloc
			}
			c := newListCompletion(n)
			a.path.StartList(context.Background(), reqs, c)
			errs := c.wait(t)
			for i := range n {
				if slices.Contains(tc.bad, i) {
					var we *wire.Error
					require.ErrorAs(t, errs[i], &we, "entry %d", i)
					require.Equal(t, wire.StatusBadKey, we.Code, "entry %d", i)
					continue
				}
				require.NoError(t, errs[i], "entry %d", i)
				require.Equal(t, local.mem[i*size:(i+1)*size], b.env.mem.mem[remote[i]:remote[i]+size], "entry %d", i)
			}
			require.Equal(t, tc.lookups, b.env.lookups.Load(), "lookups")
		})
	}
}

// TestListHolds: a list holds each buffer once per run of its entries in
// that buffer, on both sides, and lets go of every hold once it
// completed; the entries of a local buffer that cannot be held (freed
// after the engine checked the list) fail alone with its error, moving
// nothing, and the others move (a Put's and a Get's).
func TestListHolds(t *testing.T) {
	const size = 512
	for _, tc := range []struct {
		name  string
		bufs  string // each entry's local buffer
		runs  map[byte]int64
		freed byte // a buffer that refuses holds
	}{
		{"one buffer", "AAAAAAAA", map[byte]int64{'A': 1}, 0},
		{"runs", "AAABBACCA", map[byte]int64{'A': 3, 'B': 1, 'C': 1}, 0},
		{"every entry its own run", "ABABAB", map[byte]int64{'A': 3, 'B': 3}, 0},
		{"a freed buffer", "AABAC", map[byte]int64{'A': 2, 'C': 1}, 'B'},
		{"a freed buffer, twice", "BABBAB", map[byte]int64{'A': 2}, 'B'},
		{"only a freed buffer", "BBB", map[byte]int64{}, 'B'},
	} {
		for _, put := range []bool{true, false} {
			name := tc.name + "/get"
			if put {
				name = tc.name + "/put"
			}
			t.Run(name, func(t *testing.T) {
				n := len(tc.bufs)
				// The owner's memory is zeros (written by nothing but the
				// list), the local buffers' never.
				a, b := pair(t, n*size, listCaps)
				bufs, was := map[byte]*hostBuf{}, map[byte][]byte{}
				reqs := make([]datapath.Req, n)
				for i := range n {
					name := tc.bufs[i]
					if bufs[name] == nil {
						bufs[name] = &hostBuf{mem: make([]byte, n*size), freed: name == tc.freed}
						fillBytes(bufs[name].mem, name)
						was[name] = bytes.Clone(bufs[name].mem)
					}
					reqs[i] = datapath.Req{Put: put, Local: datapath.Mem{B: bufs[name], Off: uint64(i * size), Len: size}, Key: viewKey(uint64(n*size), uint64(i*size), size)}
				}
				c := newListCompletion(n)
				a.path.StartList(context.Background(), reqs, c)
				for i, err := range c.wait(t) {
					mine, theirs := bufs[tc.bufs[i]].mem[i*size:(i+1)*size], b.env.mem.mem[i*size:(i+1)*size]
					if tc.bufs[i] == tc.freed {
						require.ErrorIs(t, err, gxerr.Freed, "entry %d", i)
						require.Equal(t, make([]byte, size), theirs, "entry %d: the owner's memory", i)
						require.Equal(t, was[tc.bufs[i]][i*size:(i+1)*size], mine, "entry %d: the local memory", i)
						continue
					}
					require.NoError(t, err, "entry %d", i)
					require.Equal(t, mine, theirs, "entry %d", i)
				}
				for name, buf := range bufs {
					require.Equal(t, tc.runs[name], buf.acquires.Load(), "holds of %c", name)
					require.Equal(t, buf.acquires.Load(), buf.releases.Load(), "%c let go", name)
				}
				// The owner's memory, one buffer: held once, let go before
				// the reply (not at all when no request was sent).
				sent := int64(min(len(tc.runs), 1))
				require.Equal(t, sent, b.env.mem.acquires.Load())
				require.Equal(t, sent, b.env.mem.releases.Load())
				require.NoError(t, a.Err())
				require.NoError(t, b.Err())
			})
		}
	}
}

// TestListGetRefusedLarge: a GetList whose refused entries exceed
// maxRefusedZeros fails as a whole (every entry with the refusal's
// status), without zeros streamed for them, and the connection stays up.
func TestListGetRefusedLarge(t *testing.T) {
	const size = 4 << 20
	a, b := pair(t, size, listCaps)
	rng := rand.New(rand.NewPCG(3, 4))
	s := scatter(t, []uint64{4096, 2 << 20}, size, false, rng, viewKey)
	s.reqs[1].Key.AllocID = badAlloc
	c := newListCompletion(2)
	a.path.StartList(context.Background(), s.reqs, c)
	for i, err := range c.wait(t) {
		var we *wire.Error
		require.ErrorAs(t, err, &we, "entry %d", i)
		require.Equal(t, wire.StatusBadKey, we.Code, "entry %d", i)
	}
	require.NoError(t, a.Err())
	require.NoError(t, b.Err())
	// The connection is in step: a valid list still works.
	s = scatter(t, []uint64{4096}, size, false, rng, viewKey)
	c = newListCompletion(1)
	a.path.StartList(context.Background(), s.reqs, c)
	for _, err := range c.wait(t) {
		require.NoError(t, err)
	}
}
