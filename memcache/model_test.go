package memcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// byteSource decodes a model run from fuzz bytes; it yields zeros once
// exhausted.
type byteSource struct {
	data []byte
	i    int
}

func (b *byteSource) more() bool { return b.i < len(b.data) }

func (b *byteSource) byte() byte {
	if b.i >= len(b.data) {
		return 0
	}
	b.i++
	return b.data[b.i-1]
}

func (b *byteSource) u16() uint64 { return uint64(b.byte()) | uint64(b.byte())<<8 }

// modelNeg is the model's copy of a remembered failure.
type modelNeg struct {
	start, end uint64
	access     Access
	expires    time.Time
}

const (
	modelBase   = 1 << 20 // start of the address window the model uses
	modelPages  = 64      // its size in fake pages
	modelMaxOps = 250     // ops per run (keeps failures below maxNegEntries)
	modelSpan   = modelPages * 4096
)

// runModel drives a cache with the op sequence decoded from data and checks
// it against a brute-force model after every step. See TestModel.
func runModel(t *testing.T, data []byte) {
	src := &byteSource{data: data}
	f := newFakeReg()
	now := time.Unix(1000, 0)
	cb, lb := src.byte(), src.byte()
	cfg := Config{Registrar: f, Merge: cb&1 != 0, Now: func() time.Time { return now }}
	cfg.Align = [...]uint64{0, 16, 4096, 4096}[cb>>1&3]
	cfg.NegativeTTL = [...]time.Duration{0, -1, 10 * time.Millisecond, time.Second}[cb>>3&3]
	if lb&1 != 0 {
		cfg.MaxRegions = 1 + int(lb>>1&7)
	}
	if lb&0x10 != 0 {
		cfg.MaxBytes = 4096 * (1 + uint64(lb>>5))
	}
	ttl := cfg.NegativeTTL
	if ttl == 0 {
		ttl = DefaultNegativeTTL
	}
	align := max(cfg.Align, 1)
	c, err := New(cfg)
	require.NoError(t, err)

	var (
		held    []*Region // one entry per reference the model holds
		seen    []*Region // every region ever returned
		negs    []modelNeg
		gets    uint64
		badPuts uint64
		closed  bool
	)
	holds := func(r *Region) int64 { return f.hold(r).Load() }
	put := func(i int) {
		r := held[i]
		held = slices.Delete(held, i, i+1)
		f.hold(r).Add(-1) // before Put, which may deregister it
		c.Put(r)
	}
	negMatch := func(start, end uint64, acc Access) *modelNeg { // the aligned request
		for i := range negs {
			n := &negs[i]
			if now.Before(n.expires) && start == n.start && end == n.end && acc&n.access == n.access {
				return n
			}
		}
		return nil
	}
	forget := func(start, end uint64) {
		negs = slices.DeleteFunc(negs, func(n modelNeg) bool { return n.start < end && n.end > start })
	}
	check := func(step int, what string) {
		t.Helper()
		require.NoError(t, f.check(), "step %d: %s", step, what)
		require.NoError(t, checkCache(c, f), "step %d: %s", step, what)
		s := c.Stats()
		f.mu.Lock()
		regs, fails, deregs, live := f.regs, f.fails, f.deregs, len(f.live)
		var liveBytes uint64
		for _, rec := range f.live {
			liveBytes += rec.length
		}
		f.mu.Unlock()
		require.Equal(t, gets, s.Gets, "step %d: %s: Gets", step, what)
		require.Equal(t, s.Gets, s.HitsFast+s.HitsSlow+s.Misses+s.NegativeHits+s.Rejected, "step %d", step)
		require.Zero(t, s.HitsSlow, "step %d: no slow hits without concurrency", step)
		require.Equal(t, badPuts, s.BadPuts, "step %d: %s: BadPuts", step, what)
		require.Equal(t, uint64(regs), s.Registrations, "step %d: %s", step, what)
		require.Equal(t, uint64(fails), s.FailedRegistrations, "step %d: %s", step, what)
		require.Equal(t, uint64(deregs), s.Deregistrations, "step %d: %s", step, what)
		require.Equal(t, live, s.Regions, "step %d: %s", step, what)
		require.Equal(t, liveBytes, s.RegisteredBytes, "step %d: %s", step, what)
		require.Equal(t, s.Registrations-s.Deregistrations, uint64(s.Regions), "step %d", step)
		// Every region's reference count is exactly what the model holds.
		inUse := map[*Region]bool{}
		for _, r := range seen {
			require.Equal(t, uint64(holds(r)), r.state.Load()&stateRefs, "step %d: refs of [%#x,%#x)", step, r.start, r.end)
			if holds(r) > 0 {
				inUse[r] = true
			}
		}
		require.Equal(t, len(inUse), s.InUseRegions, "step %d: %s", step, what)
	}

	for step := 0; src.more() && step < modelMaxOps; step++ {
		var what string
		switch op := src.byte() % 10; op {
		case 0, 1, 2, 3: // Get
			addr := modelBase + src.u16()%modelSpan
			length := 1 + src.u16()%(3*4096)
			if op < 2 { // small requests in a hot window
				addr, length = modelBase+src.u16()%(8*4096), 1+uint64(src.byte())
			}
			acc := Access(src.byte() % 16)
			what = fmt.Sprintf("Get(%#x, %#x, %v)", addr, length, acc)
			end := addr + length
			ws, we := addr&^(align-1), (end+align-1)&^(align-1)
			f.mu.Lock()
			armed, why := f.failNext > 0, f.wouldFailLocked(ws, we-ws, acc)
			f.mu.Unlock()
			pre := c.Stats()
			neg := negMatch(ws, we, acc)
			var near []*Region // what a miss must absorb (Merge) or replace
			c.overlapping(ws, we, cfg.Merge, func(x *Region) { near = append(near, x) })
			r, err := c.Get(addr, length, acc)
			gets++
			post := c.Stats()
			if closed {
				require.ErrorIs(t, err, ErrClosed, what)
				break
			}
			if err == nil {
				require.True(t, r.Contains(addr, length), "%s returned [%#x,%#x)", what, r.Addr(), r.End())
				require.Equal(t, acc, r.Access()&acc, "%s returned access %v", what, r.Access())
				f.hold(r).Add(1)
				held = append(held, r)
				if !slices.Contains(seen, r) {
					seen = append(seen, r)
				}
				if neg != nil {
					require.Equal(t, pre.Misses, post.Misses, "%s: registered a remembered failure", what)
				}
				if post.Misses == pre.Misses {
					require.Equal(t, pre.Registrations, post.Registrations, "%s: hit registered", what)
					require.Equal(t, pre.HitsFast+1, post.HitsFast, what)
				} else if post.FailedRegistrations == pre.FailedRegistrations {
					// A miss whose first attempt worked: with Merge it
					// absorbed its neighbours, without it the range is
					// exactly the request's, with the replaced access.
					for _, x := range near {
						if cfg.Merge {
							require.True(t, r.Contains(x.start, x.Len()), "%s: [%#x,%#x) not absorbed", what, x.start, x.end)
						}
						require.Equal(t, x.access, r.Access()&x.access, what)
					}
					if !cfg.Merge {
						require.Equal(t, []uint64{ws, we}, []uint64{r.Addr(), r.End()}, what)
					}
				}
				if post.Misses > pre.Misses && (cfg.MaxRegions > 0 && post.Regions > cfg.MaxRegions || cfg.MaxBytes > 0 && post.RegisteredBytes > cfg.MaxBytes) {
					// Over the limit only if nothing indexed is evictable.
					c.root.Load().ascend(0, func(_ uint64, x *Region) bool {
						require.NotZero(t, x.state.Load()&stateRefs, "%s: over limit with [%#x,%#x) idle", what, x.start, x.end)
						return true
					})
				}
				break
			}
			var re *RegisterError
			require.ErrorAs(t, err, &re, what)
			if re.Cached {
				require.ErrorIs(t, err, ErrRecentlyFailed)
				require.NotNil(t, neg, "%s: unexpected cached failure %v", what, err)
				require.Equal(t, pre.NegativeHits+1, post.NegativeHits, what)
				require.Equal(t, pre.FailedRegistrations, post.FailedRegistrations, "%s: called the registrar", what)
				require.True(t, re.Addr == ws && we == re.Addr+re.Len && acc&re.Access == re.Access, what)
				break
			}
			require.Nil(t, neg, "%s: registrar called for a remembered failure", what)
			require.False(t, errors.Is(err, ErrRecentlyFailed), what)
			require.True(t, why != nil || armed, "%s failed for no reason: %v", what, err)
			require.True(t, errors.Is(err, errBadPage) || errors.Is(err, errReadOnly) || errors.Is(err, errTransient), what)
			require.Equal(t, []uint64{ws, we - ws}, []uint64{re.Addr, re.Len}, what)
			require.Equal(t, acc, re.Access, what)
			if ttl > 0 {
				negs = append(negs, modelNeg{ws, we, acc, now.Add(ttl)})
			}
		case 4: // Put
			if len(held) > 0 {
				i := int(src.byte()) % len(held)
				what = fmt.Sprintf("Put([%#x,%#x))", held[i].start, held[i].end)
				put(i)
			}
		case 5: // Invalidate
			addr := modelBase + src.u16()%modelSpan
			length := src.u16() % (4 * 4096)
			what = fmt.Sprintf("Invalidate(%#x, %#x)", addr, length)
			c.Invalidate(addr, length)
			if length > 0 {
				forget(addr, addr+length)
				c.overlapping(addr, addr+length, false, func(r *Region) {
					require.Fail(t, "still indexed after Invalidate", "%s: [%#x,%#x)", what, r.start, r.end)
				})
			}
		case 6: // Put of a fully released region: ignored
			var idle []*Region
			for _, r := range seen {
				if holds(r) == 0 {
					idle = append(idle, r)
				}
			}
			if len(idle) > 0 {
				r := idle[int(src.byte())%len(idle)]
				what = fmt.Sprintf("double Put([%#x,%#x))", r.start, r.end)
				pre := c.Stats()
				c.Put(r)
				badPuts++
				require.Equal(t, pre.Deregistrations, c.Stats().Deregistrations, what)
			}
		case 7: // time passes
			now = now.Add(time.Duration(src.byte()) * time.Millisecond)
		case 8: // fault injection
			b := src.byte()
			p := modelBase/4096 + uint64(b&63)
			f.mu.Lock()
			switch b >> 6 {
			case 0:
				f.bad[p] = !f.bad[p]
			case 1:
				f.readOnly[p] = !f.readOnly[p]
			default:
				f.failNext = int(b>>6) - 1
			}
			f.mu.Unlock()
		case 9:
			switch b := src.byte(); {
			case b < 8:
				what = "Close"
				require.NoError(t, c.Close())
				closed = true
				negs = nil
			case b < 64:
				what = "Put all"
				for len(held) > 0 {
					put(len(held) - 1)
				}
			}
		}
		check(step, what)
	}

	// Release everything and close: every registration must be gone.
	for len(held) > 0 {
		put(len(held) - 1)
	}
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	_, err = c.Get(modelBase, 1, AccessRead)
	require.ErrorIs(t, err, ErrClosed)
	gets++
	check(-1, "final")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.live, "registrations leaked")
	require.Equal(t, f.regs, f.deregs)
	if modelTotals != nil {
		s := c.Stats()
		modelTotals.HitsFast += s.HitsFast
		modelTotals.Misses += s.Misses
		modelTotals.NegativeHits += s.NegativeHits
		modelTotals.Merges += s.Merges
		modelTotals.Evictions += s.Evictions
		modelTotals.Invalidations += s.Invalidations
		modelTotals.FailedRegistrations += s.FailedRegistrations
		modelTotals.BadPuts += s.BadPuts
	}
}

// modelTotals, when set, accumulates the counters of model runs so TestModel
// can check that the runs exercised every mechanism.
var modelTotals *Stats

// TestModel runs random op sequences against the model (see runModel): Get,
// Put, Invalidate, double Put, time passing, registrar faults, limit-driven
// eviction, Close.
func TestModel(t *testing.T) {
	runs := 400
	if testing.Short() {
		runs = 50
	}
	rng := rand.New(rand.NewPCG(20260, 1))
	modelTotals = &Stats{}
	defer func() { modelTotals = nil }()
	for i := range runs {
		data := make([]byte, 2+rng.IntN(modelMaxOps*4))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if !t.Run(fmt.Sprint(i), func(t *testing.T) { runModel(t, data) }) {
			t.Logf("failing input: %x", data)
			return
		}
	}
	s := *modelTotals
	t.Logf("totals: %+v", s)
	for name, v := range map[string]uint64{
		"HitsFast": s.HitsFast, "Misses": s.Misses, "NegativeHits": s.NegativeHits,
		"Merges": s.Merges, "Evictions": s.Evictions, "Invalidations": s.Invalidations,
		"FailedRegistrations": s.FailedRegistrations, "BadPuts": s.BadPuts,
	} {
		require.NotZero(t, v, "no run exercised %s", name)
	}
}

// FuzzCache is TestModel's model driven by fuzz input:
//
//	go test -run '^$' -fuzz FuzzCache -fuzztime 30s ./memcache/
func FuzzCache(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 8 {
		data := make([]byte, 256)
		for j := 0; j < len(data); j += 8 {
			binary.LittleEndian.PutUint64(data[j:], rng.Uint64())
		}
		f.Add(data)
	}
	f.Add([]byte{1, 0x13, 0, 0, 0, 0x10, 3, 4, 0, 0, 0, 0x20, 0x10, 1})
	f.Fuzz(runModel)
}
