package engine

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFutureSealed: *Future's method set is exactly the read-only one, so
// no caller can complete (or reconfigure) a future the engine owns. Before
// the fix engine.Future was an alias of cq.Future, whose method set also
// held Complete, CompleteAll and SetSpin: f.Complete(0, nil) on a copy in
// flight made it report done while the engine still used the buffer.
func TestFutureSealed(t *testing.T) {
	typ := reflect.TypeOf((*Future)(nil))
	var got []string
	for i := 0; i < typ.NumMethod(); i++ {
		got = append(got, typ.Method(i).Name)
	}
	sort.Strings(got)
	require.Equal(t, []string{"Done", "Err", "Errs", "IsDone", "Wait"}, got)
	require.Equal(t, "github.com/gxfer/gxfer/engine", typ.Elem().PkgPath(), "Future is gxfer's own type, not an alias")
}

func TestFutureCounted(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	tests := []struct {
		name    string
		n       int
		errs    []error
		wantErr error
	}{
		{"single ok", 1, []error{nil}, nil},
		{"three ok", 3, []error{nil, nil, nil}, nil},
		{"first error wins", 3, []error{nil, e1, e2}, e1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newBatchFuture(tc.n)
			require.ErrorIs(t, f.Err(), ErrNotDone)
			for i, err := range tc.errs {
				require.False(t, f.IsDone())
				f.complete(i, err)
			}
			<-f.Done()
			require.Equal(t, tc.wantErr, f.Err())
			require.Equal(t, tc.errs, f.Errs())
			f.complete(0, e2) // extra completions are ignored
			require.Equal(t, tc.wantErr, f.Err())
		})
	}
}

func TestFutureWait(t *testing.T) {
	f := newFuture(1)
	f.setSpin(10 * time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, f.Wait(ctx), context.DeadlineExceeded)
	require.False(t, f.IsDone(), "ending the wait does not end the operation")
	go f.complete(0, nil)
	require.NoError(t, f.Wait(context.Background()))
	require.NoError(t, resolved(nil).Wait(context.Background()))
	require.ErrorIs(t, resolved(ErrClosed).Wait(context.Background()), ErrClosed)
}

func TestFutureDoneClosedOnceUnderRace(t *testing.T) {
	for i := 0; i < 100; i++ {
		f := newFuture(8)
		var wg sync.WaitGroup
		chans := make(chan (<-chan struct{}), 8)
		for j := 0; j < 8; j++ {
			wg.Add(2)
			go func() { defer wg.Done(); chans <- f.Done() }()
			go func() { defer wg.Done(); f.complete(0, nil) }()
		}
		wg.Wait()
		close(chans)
		for c := range chans {
			<-c
		}
		f.completeAll(ErrClosed) // after resolution: no effect
		require.NoError(t, f.Err())
	}
}

func TestCtxErr(t *testing.T) {
	tests := []struct {
		in   error
		want []error
	}{
		{context.Canceled, []error{ErrCanceled, context.Canceled}},
		{context.DeadlineExceeded, []error{ErrTimeout, context.DeadlineExceeded}},
	}
	for _, tc := range tests {
		err := ctxErr("x", tc.in)
		for _, w := range tc.want {
			require.ErrorIs(t, err, w)
		}
	}
}

// TestFutureWaitNilCtx: the public Future.Wait refuses a nil context with
// ErrInvalid, as Copy, Recv and the other calls taking a ctx do (checkCtx),
// pending or resolved (internal/copier's TestFutureWaitNilCtx has the
// cases of the future underneath).
func TestFutureWaitNilCtx(t *testing.T) {
	var nilCtx context.Context // the input under test
	for _, f := range []*Future{newFuture(1), ResolvedFuture(nil)} {
		var err error
		require.NotPanics(t, func() { err = f.Wait(nilCtx) })
		require.ErrorIs(t, err, ErrInvalid)
		f.completeAll(nil)
	}
}

// TestFutureWaitSpinHonoursCtx: Wait's spin (Config.WaitSpin) ends when
// ctx does. It spun for the whole window whatever ctx said: with a long
// spin, a Wait whose ctx had already ended returned only when the copy
// finished, with the copy's result instead of ctx's error.
func TestFutureWaitSpinHonoursCtx(t *testing.T) {
	e := newEngine(t, Config{WaitSpin: time.Hour})
	h, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	e.cp.Devs[0].Sim.DelayNextCS(1, 300*time.Millisecond)
	f := e.Copy(context.Background(), d.Slice(0, 4096), h.Slice(0, 4096))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = f.Wait(ctx)
	require.NoError(t, f.Wait(context.Background()))
	require.ErrorIs(t, err, ErrCanceled)
	require.ErrorIs(t, err, context.Canceled)
}
