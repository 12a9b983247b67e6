package memcache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConcurrent runs many goroutines doing Get/Put on overlapping ranges
// while another invalidates ranges and another reads stats. The fake
// registrar fails the test if a held registration is deregistered, or one is
// deregistered twice; at the end nothing may leak.
func TestConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"merge", Config{Merge: true, Align: 4096}},
		{"nomerge", Config{Align: 4096}},
		{"merge/limited", Config{Merge: true, Align: 4096, MaxRegions: 4}},
		{"nomerge/limited", Config{Align: 16, MaxRegions: 8, MaxBytes: 8 * 4096}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				workers = 8
				span    = 32 * 4096
			)
			iters := 3000
			if testing.Short() {
				iters = 500
			}
			f := newFakeReg()
			cfg := tc.cfg
			cfg.Registrar = f
			c, err := New(cfg)
			require.NoError(t, err)

			errs := make(chan error, workers+2)
			done := make(chan struct{})
			var bg, wg sync.WaitGroup
			bg.Add(2)
			go func() { // invalidator
				defer bg.Done()
				rng := rand.New(rand.NewPCG(99, 0))
				for {
					select {
					case <-done:
						return
					default:
					}
					c.Invalidate(modelBase+rng.Uint64N(span), 1+rng.Uint64N(3*4096))
				}
			}()
			go func() { // observer
				defer bg.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					if s := c.Stats(); s.Gets != s.HitsFast+s.HitsSlow+s.Misses+s.NegativeHits+s.Rejected {
						errs <- fmt.Errorf("inconsistent stats %+v", s)
						return
					}
				}
			}()
			accesses := []Access{AccessRead, AccessRead | AccessWrite, AccessRead | AccessRemoteRead, AccessRemoteWrite}
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					var held []*Region
					release := func() {
						r := held[len(held)-1]
						held = held[:len(held)-1]
						f.hold(r).Add(-1)
						c.Put(r)
					}
					defer func() {
						for len(held) > 0 {
							release()
						}
					}()
					for range iters {
						addr := modelBase + rng.Uint64N(span)
						length := 1 + rng.Uint64N(2*4096)
						acc := accesses[rng.IntN(len(accesses))]
						r, err := c.Get(addr, length, acc)
						if err != nil {
							errs <- fmt.Errorf("Get(%#x, %#x, %v): %w", addr, length, acc, err)
							return
						}
						if !r.Contains(addr, length) || r.Access()&acc != acc {
							errs <- fmt.Errorf("Get(%#x, %#x, %v) returned [%#x,%#x) %v", addr, length, acc, r.Addr(), r.End(), r.Access())
							return
						}
						f.hold(r).Add(1)
						held = append(held, r)
						for len(held) > rng.IntN(4) {
							release()
						}
					}
				}()
			}
			wg.Wait()
			close(done)
			bg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.NoError(t, f.check())
			require.NoError(t, checkCache(c, f))
			s := c.Stats()
			t.Logf("%+v", s)
			require.Equal(t, uint64(workers*iters), s.Gets)
			require.Zero(t, s.InUseRegions)
			require.Zero(t, s.Detached)
			require.NoError(t, c.Close())
			require.NoError(t, f.check())
			f.mu.Lock()
			defer f.mu.Unlock()
			require.Empty(t, f.live, "registrations leaked")
			require.Equal(t, f.regs, f.deregs)
		})
	}
}
