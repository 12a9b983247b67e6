package copier

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFutureErrsIsACopy: Errs returns the caller's own slice. It returned
// the future's, so a caller that wrote to it (cleared an entry it had
// handled, say) changed what every later Errs returned, and raced with
// other goroutines reading them.
func TestFutureErrsIsACopy(t *testing.T) {
	boom := errors.New("boom")
	f := &Future{}
	f.InitBatch(3)
	f.Complete(0, nil)
	f.Complete(1, boom)
	f.Complete(2, nil)
	require.True(t, f.IsDone())
	first := f.Errs()
	require.Equal(t, []error{nil, boom, nil}, first)
	first[1] = nil
	require.Equal(t, []error{nil, boom, nil}, f.Errs(), "a caller's write changed the future's status")

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			es := f.Errs()
			es[0] = boom // each reader writes its own copy (-race)
		})
	}
	wg.Wait()
	require.Equal(t, []error{nil, boom, nil}, f.Errs())
}
