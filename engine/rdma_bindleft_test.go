package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRDMABindingLeftOpen: a Binding left open over its endpoint's end
// no longer holds its registered region: the engine's Close returns nil
// (it said ErrBusy, "cached MRs still referenced", its NIC's
// registration cache still referenced by the binding), and the binding's
// calls fail with the endpoint's end (ErrClosed, or ErrPeer when the
// peer went); its Close returns nil.
func TestRDMABindingLeftOpen(t *testing.T) {
	needRDMA(t)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, owner, req *Engine, ep *Endpoint)
		want error
	}{
		{"engine closed", func(t *testing.T, _, req *Engine, _ *Endpoint) {
			require.NoError(t, req.Close())
		}, ErrClosed},
		{"peer closed", func(t *testing.T, owner, req *Engine, ep *Endpoint) {
			require.NoError(t, owner.Close())
			select {
			case <-ep.Done():
			case <-time.After(time.Minute):
				t.Fatal("the endpoint did not see its peer go")
			}
			require.NoError(t, req.Close())
		}, ErrPeer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner, req, ep, l := rdmaPair(t)
			ctx := context.Background()
			theirs, err := owner.Alloc(1<<20, Host)
			require.NoError(t, err)
			tk, err := theirs.Export()
			require.NoError(t, err)
			mine, err := req.Alloc(1<<20, Host)
			require.NoError(t, err)
			b, err := ep.Bind(ctx, mine.All(), tk)
			require.NoError(t, err)
			require.NoError(t, b.Put())
			require.NoError(t, b.PutN(100))
			require.NoError(t, b.Flush()) // nothing left in flight: Close has no error to report
			require.NoError(t, l.Close())
			tc.end(t, owner, req, ep)
			require.ErrorIs(t, b.Put(), tc.want)
			require.ErrorIs(t, b.Flush(), tc.want)
			require.NoError(t, b.Close())
			require.NoError(t, b.Close(), "a second Close")
		})
	}
}
