package engine

import (
	"bytes"
	"context"
	"sync/atomic"
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

// TestListLocalFreedInFlight: a local buffer freed while a PutList is in
// flight (after the list's checks, inside the close gate the data path
// enters on the caller's goroutine) fails at most its own element, with
// ErrFreed; the other elements move. Over "tcp" the lane's whole
// request failed, every element with the freed buffer's error. (The
// pipe holds each element's buffer before the list's call returns: no
// gate is entered in between.)
func TestListLocalFreedInFlight(t *testing.T) {
	for _, pm := range pairMakers[1:3] {
		t.Run(pm.name, func(t *testing.T) {
			p := pm.make(t)
			ctx := context.Background()
			a, err := p.a.Alloc(3*4096, Host)
			require.NoError(t, err)
			fill(a.Bytes(), 7)
			gone, err := p.a.Alloc(4096, Host)
			require.NoError(t, err)
			fill(gone.Bytes(), 8)
			want := bytes.Clone(gone.Bytes())
			rb, rk := exported(t, p.b, 4*4096, Host)
			var freed atomic.Int32
			free := func() {
				if freed.Add(1) == 1 {
					_ = gone.Free() // the list still holds it, or fails it
				}
			}
			p.a.gate.SetHook(&free)
			ls := []Slice{a.Slice(0, 4096), gone.All(), a.Slice(4096, 4096), a.Slice(8192, 4096)}
			ks := []RemoteKey{rk.Slice(0, 4096), rk.Slice(4096, 4096), rk.Slice(8192, 4096), rk.Slice(12288, 4096)}
			f := p.ab.PutList(ctx, ls, ks)
			_ = f.Wait(ctx)
			p.a.gate.SetHook(nil)
			require.Equal(t, int32(1), freed.Load(), "the buffer was freed inside the list's gate")
			errs := f.Errs()
			require.Len(t, errs, 4)
			got := hostCopyOf(t, p.b, rb.All())
			for i, off := range []int{0, 2, 3} {
				require.NoError(t, errs[off], "element %d does not use the freed buffer", off)
				require.Equal(t, a.Bytes()[i*4096:(i+1)*4096], got[off*4096:(off+1)*4096], "element %d", off)
			}
			if errs[1] != nil {
				require.ErrorIs(t, errs[1], ErrFreed)
			} else {
				require.Equal(t, want, got[4096:8192], "element 1 held its buffer and moved")
			}
			require.NoError(t, p.ab.Err())
		})
	}
}
