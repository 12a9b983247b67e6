package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListLocalFreedRefused: a list naming a local buffer freed already
// is refused as a whole before anything moves, element i naming it (a
// freed buffer is a bad argument: nothing is submitted half-way). Over
// "unix" and the pipe the other elements moved; over "tcp" every element
// failed with the freed buffer's error, those that do not use it too.
func TestListLocalFreedRefused(t *testing.T) {
	for _, pm := range pairMakers[:3] {
		for _, put := range []bool{true, false} {
			for _, loc := range []Location{Host, Gaudi(0)} {
				name := pm.name + "/get/" + loc.String()
				if put {
					name = pm.name + "/put/" + loc.String()
				}
				t.Run(name, func(t *testing.T) {
					p := pm.make(t)
					ctx := context.Background()
					a, err := p.a.Alloc(4*4096, Host)
					require.NoError(t, err)
					fill(a.Bytes(), 5)
					gone, err := p.a.Alloc(4096, loc)
					require.NoError(t, err)
					require.NoError(t, gone.Free())
					rb, rk := exported(t, p.b, 4*4096, loc)
					ls := []Slice{a.Slice(0, 4096), gone.All(), a.Slice(4096, 4096), a.Slice(8192, 4096)}
					ks := []RemoteKey{rk.Slice(0, 4096), rk.Slice(4096, 4096), rk.Slice(8192, 4096), rk.Slice(12288, 4096)}
					f := p.ab.GetList(ctx, ls, ks)
					if put {
						f = p.ab.PutList(ctx, ls, ks)
					}
					require.True(t, f.IsDone(), "refused at once")
					require.ErrorIs(t, f.Err(), ErrFreed)
					errs := f.Errs()
					require.Len(t, errs, 4)
					require.ErrorIs(t, errs[1], ErrFreed)
					require.Contains(t, errs[1].Error(), "element 1")
					for i, e := range errs {
						require.Error(t, e, "element %d: nothing was started", i)
						require.Contains(t, e.Error(), "element 1", "element %d names the element that failed", i)
					}
					require.Equal(t, make([]byte, 4*4096), hostCopyOf(t, p.b, rb.All()), "a refused list moved bytes")
					require.Equal(t, uint64(0), p.ab.Stats().Ops.Completed+p.ab.Stats().Ops.Failed, "a refused list counted operations")
					require.NoError(t, p.ab.Err())
				})
			}
		}
	}
}
