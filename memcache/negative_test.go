package memcache

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNegativeCacheOtherUsersRanges: one caller's failed registration of a
// large range (it spans a page that cannot be registered) must not make
// another caller's Get of a good part of that range fail: a failure says
// nothing about a smaller range. A request for the failed (aligned) range
// again, with at least its access, is still served from the negative cache.
func TestNegativeCacheOtherUsersRanges(t *testing.T) {
	const bad = 63 // page that fails the write registration
	for _, tc := range []struct {
		name       string
		cfg        Config
		addr, n    uint64
		acc        Access
		wantCached bool
	}{
		{"good page inside", Config{Align: pg}, pg, pg, AccessRead | AccessWrite, false},
		{"good page inside, merge", Config{Align: pg, Merge: true}, pg, pg, AccessRead | AccessWrite, false},
		{"good range inside, more access", Config{Align: pg}, 10 * pg, 20 * pg, AccessRead | AccessWrite | AccessRemoteWrite, false},
		{"bad page inside", Config{Align: pg}, bad * pg, 1, AccessRead | AccessWrite, false},
		{"same range", Config{Align: pg}, 0, 64 * pg, AccessRead | AccessWrite, true},
		{"same range unaligned", Config{Align: pg}, 5, 64*pg - 10, AccessRead | AccessWrite, true},
		{"larger range", Config{Align: pg}, 0, 100 * pg, AccessRead | AccessWrite | AccessRemoteRead, false},
		{"more access", Config{Align: pg}, 0, 64 * pg, AccessRead | AccessWrite | AccessRemoteRead, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f, _ := newTestCache(t, tc.cfg)
			f.readOnly[bad] = true
			_, err := c.Get(0, 64*pg, AccessRead|AccessWrite) // the hostile (or unlucky) caller
			require.ErrorIs(t, err, errReadOnly)
			fails := f.fails

			r, err := c.Get(tc.addr, tc.n, tc.acc)
			if tc.wantCached {
				require.ErrorIs(t, err, ErrRecentlyFailed)
				require.Equal(t, fails, f.fails, "registrar not called")
				return
			}
			require.NotErrorIs(t, err, ErrRecentlyFailed, "a range other than the failed one is tried")
			require.Greater(t, f.fails+f.regs, fails, "registrar called")
			if tc.addr/pg <= bad && bad <= (tc.addr+tc.n-1)/pg {
				require.ErrorIs(t, err, errReadOnly)
				return
			}
			require.NoError(t, err)
			require.True(t, r.Contains(tc.addr, tc.n))
			c.Put(r)
		})
	}
}
