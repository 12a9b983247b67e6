package ipc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeVal is what the fake importer produces. holders is maintained by
// the tests around Get/Put; Release checks it.
type fakeVal struct {
	id       int
	key      Key
	holders  atomic.Int32
	released atomic.Bool
}

// fakeImporter counts live imports and records invariant violations
// instead of failing from other goroutines.
type fakeImporter struct {
	mu         sync.Mutex
	next       int
	imports    int
	releases   int
	live       map[*fakeVal]bool
	released   []int // ids, in order
	violations []string
	fail       func(Key) error
	gate       chan struct{} // if set, imports wait on it
}

func newFakeImporter() *fakeImporter { return &fakeImporter{live: map[*fakeVal]bool{}} }

func sizeOf(k Key) uint64 { return 100*k.AllocID + k.Generation }

func (f *fakeImporter) imp(k Key) (*fakeVal, uint64, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(k); err != nil {
			return nil, 0, err
		}
	}
	f.next++
	f.imports++
	v := &fakeVal{id: f.next, key: k}
	f.live[v] = true
	return v, sizeOf(k), nil
}

func (f *fakeImporter) release(v *fakeVal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v.released.Swap(true) {
		f.violations = append(f.violations, fmt.Sprintf("value %d released twice", v.id))
	}
	if n := v.holders.Load(); n != 0 {
		f.violations = append(f.violations, fmt.Sprintf("value %d released while held %d times", v.id, n))
	}
	delete(f.live, v)
	f.releases++
	f.released = append(f.released, v.id)
	return nil
}

func (f *fakeImporter) takeReleased() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.released
	f.released = nil
	slices.Sort(r)
	return r
}

func (f *fakeImporter) check(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.violations)
}

func newTestCache(f *fakeImporter, maxRegions int, maxBytes uint64) *HandleCache[*fakeVal] {
	return NewHandleCache(CacheConfig[*fakeVal]{MaxRegions: maxRegions, MaxBytes: maxBytes, Release: f.release})
}

// ---------------------------------------------------------------- model

// model is an obviously-correct reference of the cache's observable
// behaviour: which Gets hit, miss or fail, and which values are released
// at each step.
type model struct {
	maxRegions int
	maxBytes   uint64
	next       int // ids, in import order, as the fake importer assigns them
	idx        map[slot]*mEntry
	live       map[int]*mEntry // imported, not released
	tick       int
	closed     bool
	released   []int
	fail       func(Key) error
}

type mEntry struct {
	id      int
	key     Key
	refs    int
	indexed bool
	lastPut int
}

func newModel(maxRegions int, maxBytes uint64) *model {
	if maxRegions == 0 {
		maxRegions = DefaultMaxRegions
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	return &model{maxRegions: maxRegions, maxBytes: maxBytes, idx: map[slot]*mEntry{}, live: map[int]*mEntry{}}
}

// outcome of a Get.
const (
	hit       = "hit"
	miss      = "miss"
	stale     = "stale"
	importErr = "import error"
	closed    = "closed"
)

func (m *model) get(k Key) (string, *mEntry) {
	if m.closed {
		return closed, nil
	}
	s := slot{k.Peer, k.AllocID}
	if e := m.idx[s]; e != nil {
		switch {
		case e.key.Generation == k.Generation:
			e.refs++
			return hit, e
		case e.key.Generation > k.Generation:
			return stale, nil
		}
		m.remove(e)
	}
	if m.fail != nil && m.fail(k) != nil {
		return importErr, nil
	}
	m.next++
	e := &mEntry{id: m.next, key: k, refs: 1, indexed: true}
	m.idx[s] = e
	m.live[e.id] = e
	m.evict()
	return miss, e
}

func (m *model) put(e *mEntry) {
	e.refs--
	if e.refs > 0 {
		return
	}
	if !e.indexed {
		m.release(e)
		return
	}
	m.tick++
	e.lastPut = m.tick
	m.evict()
}

func (m *model) remove(e *mEntry) {
	delete(m.idx, slot{e.key.Peer, e.key.AllocID})
	e.indexed = false
	if e.refs == 0 {
		m.release(e)
	}
}

func (m *model) release(e *mEntry) {
	delete(m.live, e.id)
	m.released = append(m.released, e.id)
}

func (m *model) usage() (int, uint64) {
	var b uint64
	for _, e := range m.live {
		b += sizeOf(e.key)
	}
	return len(m.live), b
}

func (m *model) evict() {
	for {
		n, b := m.usage()
		if (m.maxRegions < 0 || n <= m.maxRegions) && b <= m.maxBytes {
			return
		}
		var victim *mEntry
		for _, e := range m.idx {
			if e.refs == 0 && (victim == nil || e.lastPut < victim.lastPut) {
				victim = e
			}
		}
		if victim == nil {
			return
		}
		m.remove(victim)
	}
}

func (m *model) invalidate(p PeerID, alloc, gen uint64) {
	if e := m.idx[slot{p, alloc}]; e != nil && e.key.Generation <= gen {
		m.remove(e)
	}
}

func (m *model) purge(p PeerID) {
	for s, e := range m.idx {
		if s.peer == p {
			m.remove(e)
		}
	}
}

func (m *model) close() {
	if m.closed {
		return
	}
	m.closed = true
	for _, e := range m.idx {
		m.remove(e)
	}
}

func (m *model) takeReleased() []int {
	r := m.released
	m.released = nil
	slices.Sort(r)
	return r
}

func (m *model) inUse() int {
	n := 0
	for _, e := range m.live {
		if e.refs > 0 {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------- harness

// op is one step of a scenario.
type op struct {
	kind  string // get, put, inv, purge, close
	key   Key    // get; inv (Peer, AllocID, Generation); purge (Peer)
	hold  int    // put: index of the held handle (in Get order)
	want  string // get: expected outcome ("" = don't care)
	freed []int  // expected released ids after the step (nil = don't care)
}

var (
	p1 = PeerID{PID: 100, PIDNS: 1}
	p2 = PeerID{PID: 200, PIDNS: 1}
)

func key(p PeerID, alloc, gen uint64) Key { return Key{Peer: p, AllocID: alloc, Generation: gen} }

// runScenario drives the cache and the model with the same ops and
// compares every observable outcome.
func runScenario(t *testing.T, maxRegions int, maxBytes uint64, fail func(Key) error, ops []op) {
	t.Helper()
	f := newFakeImporter()
	f.fail = fail
	c := newTestCache(f, maxRegions, maxBytes)
	m := newModel(maxRegions, maxBytes)
	m.fail = fail
	type held struct {
		h *Handle[*fakeVal]
		e *mEntry
	}
	var holds []held
	for i, o := range ops {
		desc := fmt.Sprintf("step %d %+v", i, o)
		switch o.kind {
		case "get":
			want, e := m.get(o.key)
			misses := c.Stats().Misses
			h, err := c.Get(o.key, f.imp)
			var got string
			switch {
			case errors.Is(err, ErrClosed):
				got = closed
			case errors.Is(err, ErrStale):
				got = stale
			case err != nil:
				var ie *ImportError
				require.True(t, errors.As(err, &ie), desc)
				got = importErr
			case c.Stats().Misses > misses:
				got = miss
			default:
				got = hit
			}
			require.Equal(t, want, got, desc)
			if o.want != "" {
				require.Equal(t, o.want, got, desc)
			}
			if err == nil {
				require.Equal(t, e.id, h.Value().id, desc)
				require.Equal(t, o.key, h.Key(), desc)
				require.Equal(t, sizeOf(o.key), h.Size(), desc)
				h.Value().holders.Add(1)
				holds = append(holds, held{h, e})
			} else {
				holds = append(holds, held{}) // keep indexes aligned with Gets
			}
		case "put":
			hd := holds[o.hold]
			require.NotNil(t, hd.h, desc)
			hd.h.Value().holders.Add(-1)
			c.Put(hd.h)
			m.put(hd.e)
		case "inv":
			c.Invalidate(o.key.Peer, o.key.AllocID, o.key.Generation)
			m.invalidate(o.key.Peer, o.key.AllocID, o.key.Generation)
		case "purge":
			c.PurgePeer(o.key.Peer)
			m.purge(o.key.Peer)
		case "close":
			require.NoError(t, c.Close(), desc)
			m.close()
		default:
			t.Fatalf("bad op %q", o.kind)
		}
		gotFreed, wantFreed := f.takeReleased(), m.takeReleased()
		require.Equal(t, wantFreed, gotFreed, "released values after %s", desc)
		if o.freed != nil {
			require.Equal(t, o.freed, append([]int{}, gotFreed...), desc)
		}
		st := c.Stats()
		n, b := m.usage()
		require.Equal(t, n, st.Regions, desc)
		require.Equal(t, b, st.Bytes, desc)
		require.Equal(t, m.inUse(), st.InUse, desc)
		f.check(t)
	}
}

func TestHandleCacheScenarios(t *testing.T) {
	k1, k2, k3 := key(p1, 1, 1), key(p1, 2, 1), key(p1, 3, 1)
	get := func(k Key, want string, freed ...int) op {
		return op{kind: "get", key: k, want: want, freed: nz(freed)}
	}
	put := func(i int, freed ...int) op { return op{kind: "put", hold: i, freed: nz(freed)} }
	inv := func(k Key, freed ...int) op { return op{kind: "inv", key: k, freed: nz(freed)} }
	purge := func(p PeerID, freed ...int) op { return op{kind: "purge", key: Key{Peer: p}, freed: nz(freed)} }
	closeOp := func(freed ...int) op { return op{kind: "close", freed: nz(freed)} }
	failGen9 := func(k Key) error {
		if k.Generation == 9 {
			return errors.New("peer refused the import")
		}
		return nil
	}

	for _, tc := range []struct {
		name       string
		maxRegions int
		maxBytes   uint64
		ops        []op
	}{
		{"hit after miss, kept after Put", 0, 0, []op{
			get(k1, miss), put(0), get(k1, hit), get(k1, hit), put(1), put(2), closeOp(1),
		}},
		{"generation change re-imports; old value lives until its Put", 0, 0, []op{
			get(k1, miss),               // [0] id 1, held
			get(key(p1, 1, 2), miss),    // [1] id 2 replaces it in the index
			get(key(p1, 1, 1), stale),   // [2] an older generation is refused
			put(0, 1),                   // id 1 released at its last Put
			put(1),                      // id 2 stays cached
			get(key(p1, 1, 2), hit),     // [3]
			put(3),                      //
			get(key(p1, 1, 3), miss, 2), // [4] the idle stale entry is released at once
			put(4), closeOp(3),
		}},
		{"invalidate in use, then Put releases", 0, 0, []op{
			get(k1, miss), inv(key(p1, 1, 1)), get(k1, miss), put(0, 1), put(1), closeOp(2),
		}},
		{"invalidate of an older generation keeps the entry", 0, 0, []op{
			get(key(p1, 1, 5), miss), put(0), inv(key(p1, 1, 4)), get(key(p1, 1, 5), hit), put(1),
			inv(key(p1, 1, 7), 1), closeOp(),
		}},
		{"purge peer: idle released, in-use at last Put, other peer kept", 0, 0, []op{
			get(k1, miss), get(k2, miss), put(1), get(key(p2, 1, 1), miss), put(2),
			purge(p1, 2), put(0, 1), get(key(p2, 1, 1), hit), put(3), get(k1, miss), put(4), closeOp(3, 4),
		}},
		{"LRU eviction by regions", 2, 0, []op{
			get(k1, miss), put(0), get(k2, miss), put(1), get(k1, hit), put(2), // k2 is now least recent
			get(k3, miss, 2), put(3), get(k2, miss, 1), put(4), closeOp(3, 4),
		}},
		{"in-use entries are never evicted; limits apply once Put", 1, 0, []op{
			get(k1, miss), get(k2, miss), get(k3, miss), // 3 regions > 1: nothing evictable
			put(1, 2), put(0, 1), put(2), closeOp(3),
		}},
		{"LRU eviction by bytes", 0, 250, []op{
			get(k1, miss), put(0), get(k2, miss), put(1), // 101 + 201 > 250: k1 evicted at k2's import
		}},
		{"import error is not cached", 0, 0, []op{
			get(key(p1, 1, 9), importErr), get(key(p1, 1, 9), importErr), get(k1, miss), put(2), closeOp(1),
		}},
		{"close with values in use", 0, 0, []op{
			get(k1, miss), get(k2, miss), put(1), closeOp(2), get(k3, closed), put(0, 1), closeOp(),
		}},
		{"unlimited", -1, math.MaxUint64, []op{
			get(k1, miss), put(0), get(k2, miss), put(1), get(k3, miss), put(2), closeOp(1, 2, 3),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runScenario(t, tc.maxRegions, tc.maxBytes, failGen9, tc.ops)
		})
	}
}

func nz(ids []int) []int {
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// TestHandleCacheModelRandom compares the cache with the model on random
// sequences.
func TestHandleCacheModelRandom(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			maxRegions := []int{0, 1, 3, 5, -1}[rng.IntN(5)]
			maxBytes := []uint64{0, 500, 1000, math.MaxUint64}[rng.IntN(4)]
			fail := func(k Key) error {
				if k.AllocID == 4 && k.Generation == 3 {
					return errors.New("no")
				}
				return nil
			}
			var ops []op
			gets, open := 0, []int{}
			for range 300 {
				switch r := rng.IntN(100); {
				case r < 45:
					p := []PeerID{p1, p2}[rng.IntN(2)]
					ops = append(ops, op{kind: "get", key: key(p, 1+rng.Uint64N(4), 1+rng.Uint64N(3))})
					open = append(open, gets)
					gets++
				case r < 85:
					if len(open) == 0 {
						continue
					}
					i := rng.IntN(len(open))
					ops = append(ops, op{kind: "put", hold: open[i]})
					open = slices.Delete(open, i, i+1)
				case r < 95:
					p := []PeerID{p1, p2}[rng.IntN(2)]
					ops = append(ops, op{kind: "inv", key: key(p, 1+rng.Uint64N(4), rng.Uint64N(4))})
				default:
					ops = append(ops, op{kind: "purge", key: Key{Peer: []PeerID{p1, p2}[rng.IntN(2)]}})
				}
			}
			ops = append(ops, op{kind: "close"})
			// Put everything still open (failed Gets have nothing to put).
			opsPut := ops
			for _, i := range open {
				opsPut = append(opsPut, op{kind: "put", hold: i})
			}
			runScenarioSkippingFailed(t, maxRegions, maxBytes, fail, opsPut)
		})
	}
}

// runScenarioSkippingFailed is runScenario for generated ops, where a Put
// may refer to a Get that failed: those Puts are dropped beforehand by
// replaying the model.
func runScenarioSkippingFailed(t *testing.T, maxRegions int, maxBytes uint64, fail func(Key) error, ops []op) {
	t.Helper()
	m := newModel(maxRegions, maxBytes)
	m.fail = fail
	var ok []bool
	var kept []op
	for _, o := range ops {
		switch o.kind {
		case "get":
			out, e := m.get(o.key)
			ok = append(ok, e != nil && out != stale)
		case "put":
			if !ok[o.hold] {
				continue
			}
		}
		kept = append(kept, o)
	}
	runScenario(t, maxRegions, maxBytes, fail, kept)
}

// TestHandleCacheSingleflight: concurrent Gets of one key import once and
// share the value.
func TestHandleCacheSingleflight(t *testing.T) {
	f := newFakeImporter()
	f.gate = make(chan struct{})
	c := newTestCache(f, 0, 0)
	const n = 16
	hs := make(chan *Handle[*fakeVal], n)
	errs := make(chan error, n)
	for range n {
		go func() {
			h, err := c.Get(key(p1, 1, 1), f.imp)
			if err != nil {
				errs <- err
				return
			}
			hs <- h
		}()
	}
	// Wait until one goroutine imports and the others wait on it.
	for c.Stats().Hits != n-1 {
		runtime.Gosched()
	}
	close(f.gate)
	var first *Handle[*fakeVal]
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case h := <-hs:
			if first == nil {
				first = h
			}
			require.Same(t, first, h)
		}
	}
	st := c.Stats()
	require.Equal(t, uint64(1), st.Misses)
	require.Equal(t, 1, f.imports)
	require.Equal(t, 1, st.InUse)
	for range n {
		c.Put(first)
	}
	require.Equal(t, 0, c.Stats().InUse)
	require.NoError(t, c.Close())
	require.Equal(t, 1, f.releases)
	f.check(t)
}

// TestHandleCacheGetCtxWaiterGivesUp: a Get waiting for another Get's
// import ends with its own ctx (the import goes on), drops its reference,
// and the importer's value is then held once and released once.
func TestHandleCacheGetCtxWaiterGivesUp(t *testing.T) {
	f := newFakeImporter()
	f.gate = make(chan struct{})
	c := newTestCache(f, 0, 0)
	first := make(chan *Handle[*fakeVal], 1)
	go func() {
		h, err := c.Get(key(p1, 1, 1), f.imp)
		if err != nil {
			h = nil
		}
		first <- h
	}()
	for c.Stats().Misses != 1 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	h, err := c.GetCtx(ctx, key(p1, 1, 1), f.imp)
	require.Nil(t, h)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(f.gate)
	h = <-first
	require.NotNil(t, h, "the importer's Get succeeds")
	require.Equal(t, 1, c.Stats().InUse)
	require.Same(t, h, c.TryGet(key(p1, 1, 1)), "a hit once ready")
	c.Put(h)
	c.Put(h)
	require.Zero(t, c.Stats().InUse, "the waiter that gave up holds nothing")
	require.Nil(t, c.TryGet(key(p1, 1, 2)), "another generation is a miss")
	require.NoError(t, c.Close())
	require.Equal(t, 1, f.releases)
	f.check(t)
}

// TestHandleCacheRemovedWhileImporting: an entry invalidated, purged,
// replaced or closed while its import runs fails that Get (and its
// waiters) and releases the imported value at once.
func TestHandleCacheRemovedWhileImporting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(c *HandleCache[*fakeVal], f *fakeImporter)
		want   error
	}{
		{"invalidate", func(c *HandleCache[*fakeVal], _ *fakeImporter) { c.Invalidate(p1, 1, 1) }, ErrStale},
		{"purge", func(c *HandleCache[*fakeVal], _ *fakeImporter) { c.PurgePeer(p1) }, ErrStale},
		{"close", func(c *HandleCache[*fakeVal], _ *fakeImporter) { _ = c.Close() }, ErrClosed},
		{"newer generation", func(c *HandleCache[*fakeVal], f *fakeImporter) {
			go func() {
				h, err := c.Get(key(p1, 1, 2), f.imp) // imports after the gate opens
				if err == nil {
					c.Put(h)
				}
			}()
			for c.Stats().Replaced == 0 {
				runtime.Gosched()
			}
		}, ErrStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeImporter()
			f.gate = make(chan struct{})
			c := newTestCache(f, 0, 0)
			errs := make(chan error, 2)
			for range 2 { // the importer and one waiter
				go func() {
					_, err := c.Get(key(p1, 1, 1), f.imp)
					errs <- err
				}()
			}
			for c.Stats().Hits != 1 {
				runtime.Gosched()
			}
			tc.remove(c, f)
			close(f.gate)
			require.ErrorIs(t, <-errs, tc.want)
			require.ErrorIs(t, <-errs, tc.want)
			require.NoError(t, c.Close())
			for c.Stats().InUse != 0 { // the "newer generation" Get may still be running
				runtime.Gosched()
			}
			f.mu.Lock()
			require.Equal(t, f.imports, f.releases)
			require.Empty(t, f.live)
			f.mu.Unlock()
			f.check(t)
			require.Equal(t, 0, c.Stats().Regions)
		})
	}
}

func TestHandleCacheImporterPanics(t *testing.T) {
	f := newFakeImporter()
	c := newTestCache(f, 0, 0)
	require.Panics(t, func() {
		_, _ = c.Get(key(p1, 1, 1), func(Key) (*fakeVal, uint64, error) { panic("boom") })
	})
	st := c.Stats()
	require.Equal(t, 0, st.InUse)
	require.Equal(t, 0, st.Cached)
	h, err := c.Get(key(p1, 1, 1), f.imp) // the slot is usable again
	require.NoError(t, err)
	c.Put(h)
	require.NoError(t, c.Close())
	f.check(t)
}

func TestHandleCacheMisuse(t *testing.T) {
	f := newFakeImporter()
	c := newTestCache(f, 0, 0)
	_, err := c.Get(key(p1, 1, 1), nil)
	require.ErrorIs(t, err, ErrInvalid)
	h, err := c.Get(key(p1, 1, 1), f.imp)
	require.NoError(t, err)
	c.Put(h)
	c.Put(h) // one Put too many: ignored and counted
	other := newTestCache(f, 0, 0)
	other.Put(h) // another cache's handle
	c.Put(nil)
	require.Equal(t, uint64(1), c.Stats().BadPuts)
	require.Equal(t, uint64(1), other.Stats().BadPuts)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	require.NoError(t, other.Close())
	require.Equal(t, 1, f.releases)
	f.check(t)

	// Release errors are counted and returned by Close.
	boom := errors.New("munmap failed")
	c2 := NewHandleCache(CacheConfig[*fakeVal]{Release: func(*fakeVal) error { return boom }})
	h, err = c2.Get(key(p1, 1, 1), f.imp)
	require.NoError(t, err)
	c2.Put(h)
	require.ErrorIs(t, c2.Close(), boom)
	require.Equal(t, uint64(1), c2.Stats().ReleaseErrors)

	// Without Release, nothing is called.
	c3 := NewHandleCache(CacheConfig[int]{})
	h3, err := c3.Get(key(p1, 1, 1), func(Key) (int, uint64, error) { return 5, 1, nil })
	require.NoError(t, err)
	require.Equal(t, 5, h3.Value())
	c3.Put(h3)
	require.NoError(t, c3.Close())
}
