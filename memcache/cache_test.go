package memcache

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pg = 4096

// testClock is a manual clock for Config.Now.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time          { return c.t }
func (c *testClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTestCache returns a cache over a fresh fake registrar and a manual clock.
func newTestCache(t *testing.T, cfg Config) (*Cache, *fakeReg, *testClock) {
	t.Helper()
	f := newFakeReg()
	clk := &testClock{t: time.Unix(1000, 0)}
	cfg.Registrar = f
	cfg.Now = clk.now
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.check())
		require.NoError(t, checkCache(c, f))
	})
	return c, f, clk
}

func mustGet(t *testing.T, c *Cache, addr, length uint64, acc Access) *Region {
	t.Helper()
	r, err := c.Get(addr, length, acc)
	require.NoError(t, err)
	require.True(t, r.Contains(addr, length))
	return r
}

func TestNewErrors(t *testing.T) {
	f := newFakeReg()
	for name, cfg := range map[string]Config{
		"no registrar":    {},
		"align 3":         {Registrar: f, Align: 3},
		"align 4097":      {Registrar: f, Align: 4097},
		"negative limits": {Registrar: f, MaxRegions: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	c, err := New(Config{Registrar: f, Align: 1})
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func TestGetArguments(t *testing.T) {
	for _, tc := range []struct {
		name         string
		align        uint64
		addr, length uint64
		ok           bool
	}{
		{"zero length", 0, pg, 0, false},
		{"wraps", 0, math.MaxUint64, 2, false},
		{"ends at 2^64", 0, math.MaxUint64 - 9, 10, false},
		{"ends at MaxUint64", 0, math.MaxUint64 - 10, 10, true},
		{"aligned end would wrap", pg, math.MaxUint64 - 100, 50, false},
		{"aligned end fits", pg, math.MaxUint64 - 2*pg, 50, true},
		{"address zero", pg, 0, 1, true},
		{"one byte", 16, 12345, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f, _ := newTestCache(t, Config{Align: tc.align})
			r, err := c.Get(tc.addr, tc.length, AccessRead)
			if !tc.ok {
				require.ErrorIs(t, err, ErrInvalid)
				require.Nil(t, r)
				require.Equal(t, uint64(1), c.Stats().Rejected)
				require.Zero(t, f.regs)
				return
			}
			require.NoError(t, err)
			require.True(t, r.Contains(tc.addr, tc.length))
			a := max(tc.align, 1)
			require.Zero(t, r.Addr()%a)
			require.Zero(t, r.End()%a)
			c.Put(r)
		})
	}
}

func TestRegionAccessors(t *testing.T) {
	c, _, _ := newTestCache(t, Config{Align: pg})
	r := mustGet(t, c, 5*pg+10, 100, AccessRead|AccessRemoteRead)
	defer c.Put(r)
	assert.Equal(t, uint64(5*pg), r.Addr())
	assert.Equal(t, uint64(pg), r.Len())
	assert.Equal(t, uint64(6*pg), r.End())
	assert.Equal(t, AccessRead|AccessRemoteRead, r.Access())
	assert.Equal(t, 1, r.Value())
	for _, tc := range []struct {
		addr, length uint64
		want         bool
	}{
		{5 * pg, pg, true},
		{5 * pg, pg + 1, false},
		{5*pg - 1, 2, false},
		{6*pg - 1, 1, true},
		{6 * pg, 0, false},
		{5 * pg, 0, true},
		{math.MaxUint64, 2, false},
	} {
		assert.Equal(t, tc.want, r.Contains(tc.addr, tc.length), "Contains(%#x, %#x)", tc.addr, tc.length)
	}
	assert.Equal(t, "read|remote-read", r.Access().String())
	assert.Equal(t, "none", Access(0).String())
	assert.Equal(t, "write|remote-write|0x30", (AccessWrite | AccessRemoteWrite | 0x30).String())
}

func TestHitsAndAccess(t *testing.T) {
	c, f, _ := newTestCache(t, Config{Align: pg, Merge: true})
	a := mustGet(t, c, 0x10000, 3*pg, AccessRead)
	b := mustGet(t, c, 0x10000+pg, 10, AccessRead)
	require.Same(t, a, b, "a request inside a region hits it")
	z := mustGet(t, c, 0x10000, 1, 0)
	require.Same(t, a, z, "no access needed")
	s := c.Stats()
	require.Equal(t, Stats{Gets: 3, HitsFast: 2, Misses: 1, Registrations: 1, Regions: 1, RegisteredBytes: 3 * pg, InUseRegions: 1}, s)

	// More access than the region has: a new, merged registration.
	w := mustGet(t, c, 0x10000+pg, 10, AccessWrite)
	require.NotSame(t, a, w)
	require.Equal(t, AccessRead|AccessWrite, w.Access())
	require.True(t, w.Contains(a.Addr(), a.Len()))
	require.Equal(t, 2, len(f.live), "the old region stays registered while held")
	for _, r := range []*Region{a, b, z} {
		c.Put(r)
	}
	require.Equal(t, 1, len(f.live), "and goes at its last Put")
	c.Put(w)
	require.Equal(t, 1, len(f.live), "the indexed region stays cached")
	s = c.Stats()
	require.Equal(t, uint64(1), s.Merges)
	require.Equal(t, 0, s.InUseRegions)
	require.Equal(t, 0, s.Detached)
}

func TestMerge(t *testing.T) {
	t.Run("adjacent and overlapping", func(t *testing.T) {
		c, f, _ := newTestCache(t, Config{Align: pg, Merge: true})
		a := mustGet(t, c, 0, pg, AccessRead)
		b := mustGet(t, c, 2*pg, pg, AccessWrite)
		c.Put(b)
		m := mustGet(t, c, pg, 10, AccessRead) // touches both
		require.Equal(t, []uint64{0, 3 * pg}, []uint64{m.Addr(), m.End()})
		require.Equal(t, AccessRead|AccessWrite, m.Access())
		require.Equal(t, 2, len(f.live), "b was idle and is gone, a is held")
		require.Equal(t, uint64(2), c.Stats().Merges)
		c.Put(a)
		c.Put(m)
		require.Equal(t, 1, len(f.live))
	})
	t.Run("merged range fails", func(t *testing.T) {
		c, f, _ := newTestCache(t, Config{Align: pg, Merge: true})
		a := mustGet(t, c, 0, pg, AccessRead)
		c.Put(a)
		f.bad[0] = true // page 0 became unregistrable (e.g. unmapped without Invalidate)
		b := mustGet(t, c, pg, pg, AccessRead)
		require.Equal(t, []uint64{pg, 2 * pg}, []uint64{b.Addr(), b.End()}, "retried alone")
		s := c.Stats()
		require.Equal(t, uint64(1), s.FailedRegistrations)
		require.Equal(t, uint64(2), s.Registrations)
		require.Equal(t, 2, s.Regions, "the adjacent region is kept")
		c.Put(b)
	})
	t.Run("chain", func(t *testing.T) {
		c, _, _ := newTestCache(t, Config{Align: pg, Merge: true})
		// Non-adjacent regions, then one request that bridges two gaps.
		var rs []*Region
		for i := range uint64(4) {
			rs = append(rs, mustGet(t, c, 2*i*pg, pg, AccessRead))
		}
		m := mustGet(t, c, pg, 5*pg, AccessRead)
		require.Equal(t, []uint64{0, 7 * pg}, []uint64{m.Addr(), m.End()})
		rs = append(rs, m)
		for _, r := range rs {
			c.Put(r)
		}
		require.Equal(t, 1, c.Stats().Regions)
	})
}

func TestNoMergeReplaces(t *testing.T) {
	c, f, _ := newTestCache(t, Config{Align: pg})
	a := mustGet(t, c, 0, 2*pg, AccessRead)
	b := mustGet(t, c, pg, 2*pg, AccessWrite)
	require.Equal(t, []uint64{pg, 3 * pg}, []uint64{b.Addr(), b.End()}, "exactly the request")
	require.Equal(t, AccessRead|AccessWrite, b.Access(), "with the replaced region's access")
	d := mustGet(t, c, 3*pg, pg, AccessRead)
	require.Equal(t, []uint64{3 * pg, 4 * pg}, []uint64{d.Addr(), d.End()}, "adjacent regions are not merged")
	require.Equal(t, 3, len(f.live))
	c.Put(a)
	require.Equal(t, 2, len(f.live), "a was replaced and is released")

	// The wide access fails on read-only memory: the request is retried
	// with its own access.
	f.readOnly[5] = true
	e := mustGet(t, c, 5*pg, pg, AccessRead)
	c.Put(e)
	c.Invalidate(5*pg, pg)
	r := mustGet(t, c, 5*pg, pg, AccessRead)
	c.Put(r)
	f.readOnly[5] = false
	w := mustGet(t, c, 5*pg, 1, AccessWrite)
	require.Equal(t, AccessRead|AccessWrite, w.Access())
	c.Put(w)
	f.readOnly[5] = true
	c.Invalidate(5*pg, pg)
	x := mustGet(t, c, 5*pg, 1, AccessRead)
	c.Put(x)
	_, err := c.Get(5*pg, 1, AccessWrite)
	require.ErrorIs(t, err, errReadOnly)
	c.Put(b)
	c.Put(d)
}

func TestNegativeCache(t *testing.T) {
	c, f, clk := newTestCache(t, Config{Align: pg})
	f.bad[3] = true
	_, err := c.Get(3*pg+10, 10, AccessRead|AccessWrite)
	var re *RegisterError
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, errBadPage)
	require.NotErrorIs(t, err, ErrRecentlyFailed)
	require.False(t, re.Cached)
	require.Equal(t, []uint64{3 * pg, pg}, []uint64{re.Addr, re.Len})
	require.Equal(t, 1, f.fails)

	// The same aligned range, asking for at least the same access: cached.
	_, err = c.Get(3*pg+100, 1, AccessRead|AccessWrite|AccessRemoteRead)
	require.ErrorIs(t, err, ErrRecentlyFailed)
	require.ErrorIs(t, err, errBadPage, "wraps the original error")
	require.ErrorAs(t, err, &re)
	require.True(t, re.Cached)
	require.Equal(t, 1, f.fails, "registrar not called")
	require.Contains(t, err.Error(), "failed recently")

	// Less access, or another range: the registrar is asked again.
	_, err = c.Get(3*pg, 1, AccessRead)
	require.NotErrorIs(t, err, ErrRecentlyFailed)
	require.Equal(t, 2, f.fails)
	_, err = c.Get(3*pg, pg+1, AccessRead|AccessWrite)
	require.NotErrorIs(t, err, ErrRecentlyFailed)
	require.Equal(t, 3, f.fails)

	// Expiry.
	clk.advance(DefaultNegativeTTL - time.Nanosecond)
	_, err = c.Get(3*pg, 1, AccessRead|AccessWrite)
	require.ErrorIs(t, err, ErrRecentlyFailed)
	clk.advance(time.Nanosecond)
	f.bad[3] = false
	r, err := c.Get(3*pg, 1, AccessRead|AccessWrite)
	require.NoError(t, err)
	c.Put(r)

	// Invalidate forgets failures.
	c.Invalidate(0, 10*pg)
	f.bad[4] = true
	_, err = c.Get(4*pg, 1, AccessRead)
	require.ErrorIs(t, err, errBadPage)
	f.bad[4] = false
	c.Invalidate(4*pg, 1)
	r, err = c.Get(4*pg, 1, AccessRead)
	require.NoError(t, err)
	c.Put(r)

	s := c.Stats()
	require.Equal(t, uint64(2), s.NegativeHits)
	require.Equal(t, uint64(4), s.FailedRegistrations)

	t.Run("disabled", func(t *testing.T) {
		c, f, _ := newTestCache(t, Config{NegativeTTL: -1})
		f.bad[0] = true
		for range 3 {
			_, err := c.Get(0, 1, AccessRead)
			require.ErrorIs(t, err, errBadPage)
			require.NotErrorIs(t, err, ErrRecentlyFailed)
		}
		require.Equal(t, 3, f.fails)
	})
}

func TestInvalidate(t *testing.T) {
	c, f, _ := newTestCache(t, Config{Align: pg})
	held := mustGet(t, c, 0, pg, AccessRead)
	idle := mustGet(t, c, 2*pg, pg, AccessRead)
	c.Put(idle)
	other := mustGet(t, c, 8*pg, pg, AccessRead)
	c.Put(other)
	c.Invalidate(pg/2, 2*pg) // overlaps held and idle, not other
	require.Equal(t, 2, len(f.live), "idle deregistered now, held kept")
	s := c.Stats()
	require.Equal(t, uint64(2), s.Invalidations)
	require.Equal(t, 1, s.Detached)

	again := mustGet(t, c, 0, pg, AccessRead)
	require.NotSame(t, held, again, "an invalidated region is not handed out again")
	require.Equal(t, 3, len(f.live))
	c.Put(held)
	require.Equal(t, 2, len(f.live), "deregistered at its last Put")
	c.Put(again)
	c.Invalidate(0, 0)                // no-op
	c.Invalidate(math.MaxUint64-1, 5) // clipped, no-op
	require.Equal(t, 2, len(f.live))
}

func TestBadPut(t *testing.T) {
	c, f, _ := newTestCache(t, Config{})
	r := mustGet(t, c, 0, 10, AccessRead)
	c.Put(r)
	c.Put(r) // fully released: ignored
	c.Put(nil)
	c2, _, _ := newTestCache(t, Config{})
	r2 := mustGet(t, c2, 0, 10, AccessRead)
	c.Put(r2) // wrong cache: ignored
	c2.Put(r2)
	c.Invalidate(0, 10)
	require.Equal(t, 1, f.deregs)
	c.Put(r) // dead: ignored
	require.Equal(t, 1, f.deregs)
	require.Equal(t, uint64(3), c.Stats().BadPuts)
}

func TestClose(t *testing.T) {
	c, f, _ := newTestCache(t, Config{})
	held := mustGet(t, c, 0, 10, AccessRead)
	idle := mustGet(t, c, 100, 10, AccessRead)
	c.Put(idle)
	require.NoError(t, c.Close())
	require.Equal(t, 1, len(f.live), "held region survives Close")
	_, err := c.Get(0, 10, AccessRead)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, c.Close())
	c.Put(held)
	require.Empty(t, f.live)
	s := c.Stats()
	require.Equal(t, uint64(1), s.Rejected)
	require.Equal(t, uint64(2), s.Invalidations)
}

// failingDereg is a registrar whose Deregister always fails.
type failingDereg struct{ *fakeReg }

var errDereg = errors.New("dereg failed")

func (f failingDereg) Deregister(addr, length uint64, value any) error {
	_ = f.fakeReg.Deregister(addr, length, value)
	return errDereg
}

func TestCloseReportsDeregisterErrors(t *testing.T) {
	f := failingDereg{newFakeReg()}
	c, err := New(Config{Registrar: f})
	require.NoError(t, err)
	for _, a := range []uint64{0, 100} {
		r := mustGet(t, c, a, 10, AccessRead)
		c.Put(r)
	}
	err = c.Close()
	require.ErrorIs(t, err, errDereg)
	require.Equal(t, uint64(2), c.Stats().FailedDeregistrations)
	require.Empty(t, f.live, "a failed deregistration is not retried")
}

func TestLimits(t *testing.T) {
	t.Run("regions", func(t *testing.T) {
		c, f, _ := newTestCache(t, Config{Align: pg, MaxRegions: 2})
		for i := range uint64(5) {
			c.Put(mustGet(t, c, 2*i*pg, pg, AccessRead))
			require.LessOrEqual(t, len(f.live), 2)
		}
		require.Equal(t, uint64(3), c.Stats().Evictions)
	})
	t.Run("bytes", func(t *testing.T) {
		c, f, _ := newTestCache(t, Config{Align: pg, MaxBytes: 3 * pg})
		for i := range uint64(5) {
			c.Put(mustGet(t, c, 4*i*pg, 2*pg, AccessRead))
			require.LessOrEqual(t, len(f.live), 1)
		}
	})
	t.Run("recently used survive", func(t *testing.T) {
		c, _, _ := newTestCache(t, Config{Align: pg, MaxRegions: 3})
		a := mustGet(t, c, 0, pg, AccessRead)
		c.Put(a)
		for i := uint64(1); i < 10; i++ {
			// a is hit before every miss; the others are used once.
			c.Put(mustGet(t, c, 0, pg, AccessRead))
			c.Put(mustGet(t, c, 2*i*pg, pg, AccessRead))
		}
		b := mustGet(t, c, 0, pg, AccessRead)
		require.Same(t, a, b, "the hot region was never evicted")
		c.Put(b)
	})
	t.Run("soft when everything is in use", func(t *testing.T) {
		c, f, _ := newTestCache(t, Config{Align: pg, MaxRegions: 2})
		var held []*Region
		for i := range uint64(6) {
			held = append(held, mustGet(t, c, 2*i*pg, pg, AccessRead))
		}
		require.Equal(t, 6, len(f.live))
		require.Zero(t, c.Stats().Evictions)
		for _, r := range held {
			c.Put(r)
		}
		require.Equal(t, 6, len(f.live), "eviction happens at the next registration")
		c.Put(mustGet(t, c, 100*pg, pg, AccessRead))
		require.Equal(t, 2, len(f.live))
	})
}

func TestRegisterErrorMessage(t *testing.T) {
	err := &RegisterError{Addr: 0x1000, Len: 0x1000, Access: AccessRead, Err: errBadPage}
	require.Equal(t, "memcache: registering [0x1000, 0x2000) read failed: fake: bad page", err.Error())
	require.ErrorIs(t, ErrClosed, ErrClosed)
}

func TestHitCounterSaturation(t *testing.T) {
	c, _, _ := newTestCache(t, Config{})
	r := mustGet(t, c, 0, 10, AccessRead)
	c.Put(r)
	// Pretend the region has served the most fast hits the state word can
	// count: the next Get goes through the slow path, which moves the count
	// out of the state word, and the one after is fast again.
	r.state.Store(r.state.Load() | stateHits)
	saturated := stateHits / hitOne
	r2 := mustGet(t, c, 0, 10, AccessRead)
	r3 := mustGet(t, c, 0, 10, AccessRead)
	require.Same(t, r, r2)
	require.Same(t, r, r3)
	s := c.Stats()
	require.Equal(t, uint64(1), s.HitsSlow)
	require.Equal(t, saturated+1, s.HitsFast)
	require.Equal(t, uint64(2), r.state.Load()&stateRefs)
	c.Put(r2)
	c.Put(r3)
	c.Invalidate(0, 10)
	require.Equal(t, saturated+1, c.Stats().HitsFast, "kept after deregistration")
}
