package staging

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
)

var errNoMemory = errors.New("no memory")

// scarceEnv makes ok host buffers, then fails every allocation.
type scarceEnv struct {
	*dptest.Env
	ok atomic.Int32
}

func (e *scarceEnv) AllocHost(n uint64) (datapath.Buf, error) {
	if e.ok.Add(-1) < 0 {
		return nil, errNoMemory
	}
	return e.Env.AllocHost(n)
}

// TestPoolGetAllocFails: when no buffer is free and making another fails,
// Get waits for one in use to come back (bounded by its ctx and done), as
// it does when the pool is at its limit; with no buffer made at all,
// nothing can come back and Get returns the allocation's error.
func TestPoolGetAllocFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ok      int32 // allocations that succeed
		held    int   // buffers taken before the Get under test
		putBack bool  // a held buffer is put back while it waits
		wantErr error
	}{
		{"none made: the allocation's error", 0, 0, false, errNoMemory},
		{"one in use: waits for it", 1, 1, true, nil},
		{"two in use: waits for one", 2, 2, true, nil},
		{"one in use, never back: ctx ends the wait", 1, 1, false, gxerr.Timeout},
		{"at the limit: waits", 4, 4, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &scarceEnv{Env: &dptest.Env{}}
			env.ok.Store(tc.ok)
			p := NewPool(env, 4, chunk)
			var held []datapath.Buf
			for range tc.held {
				b, err := p.Get(context.Background(), nil)
				require.NoError(t, err)
				held = append(held, b)
			}
			timeout := 20 * time.Second // a liveness bound
			if !tc.putBack {
				timeout = 20 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			type result struct {
				b   datapath.Buf
				err error
			}
			got := make(chan result, 1)
			go func() {
				b, err := p.Get(ctx, nil)
				got <- result{b, err}
			}()
			var r result
			if tc.putBack {
				select {
				case r = <-got: // returned before anything came back: an error
				case <-time.After(20 * time.Millisecond): // waiting, as it should: put one back
					p.Put(held[0])
					held = held[1:]
					r = <-got
				}
			} else {
				r = <-got
			}
			if tc.wantErr != nil {
				require.ErrorIs(t, r.err, tc.wantErr)
				require.Nil(t, r.b)
			} else {
				require.NoError(t, r.err, "Get failed instead of waiting for a buffer in use")
				held = append(held, r.b)
			}
			for _, b := range held {
				p.Put(b)
			}
			require.NoError(t, p.Close())
			require.Zero(t, env.Allocated())
		})
	}
}
