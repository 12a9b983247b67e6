package ctrlchan

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/wire"
)

// TestInFlight: a channel has work in flight (a listener then never
// closes it to make room) while a request of the peer's is served, also
// one waiting in the backlog, and while a request of this side's awaits
// its reply; not before, nor once they ended.
func TestInFlight(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T, a *Chan) (end func())
	}{
		{"served", func(t *testing.T, a *Chan) func() {
			release := make(chan struct{})
			require.True(t, a.Serve(func() wire.Message { <-release; return nil }))
			return func() { close(release) }
		}},
		{"backlog", func(t *testing.T, a *Chan) func() {
			release := make(chan struct{})
			for range MaxServing + 1 {
				require.True(t, a.Serve(func() wire.Message { <-release; return nil }))
			}
			return func() { close(release) }
		}},
		{"awaiting a reply", func(t *testing.T, a *Chan) func() {
			id := a.NewID()
			require.NoError(t, a.ExpectRequest(context.Background(), id, datapath.ReplyFunc(func(wire.Frame, error) {})))
			return func() { a.Forget(id) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &dptest.Env{}
			a, _, _, _ := pair(t, env)
			require.False(t, a.InFlight())
			end := tt.start(t, a)
			require.True(t, a.InFlight())
			end()
			require.Eventually(t, func() bool { return !a.InFlight() }, 5*time.Second, time.Millisecond)
		})
	}
}
