package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTCPPutAllocations: objects allocated per PutSync over tcp, both
// engines in this process (the owner's serving included): 13 for a small
// Put and 14 for a 1 MiB one before, 4 now: the caller's operation and
// the path's request, the owner's decoded Put and its landing. What went:
// a map key copied onto the heap per request, the drain task's method
// value, the reply and landing callbacks' method values (a request is its
// own datapath.Replier, a landing's completion an interface), the served
// Put's request copied to the heap, the Completion decoded on the heap,
// the reply's payload copied for a callback that decodes it at once (a
// Replier that keeps it copies it), the frame copy the path was handed,
// the reply queue made again after each take, the length prefix of a
// frame sent with Send.
func TestTCPPutAllocations(t *testing.T) {
	user, owner, ep := tcpPair(t, 1)
	ctx := context.Background()
	for _, tc := range []struct {
		n                  int
		maxAllocs, maxRace float64
	}{{8, 5.5, 6.5}, {4 << 10, 5.5, 6.5}, {1 << 20, 5.5, 6.5}} {
		t.Run(fmt.Sprintf("size=%d", tc.n), func(t *testing.T) {
			dst, err := owner.Alloc(tc.n, Host)
			require.NoError(t, err)
			k, err := dst.Export()
			require.NoError(t, err)
			src, err := user.Alloc(tc.n, Host)
			require.NoError(t, err)
			var perr error
			put := func() {
				if err := ep.PutSync(ctx, src.All(), k); err != nil && perr == nil {
					perr = err
				}
			}
			put()
			allocs := testing.AllocsPerRun(300, put)
			require.NoError(t, perr)
			t.Logf("%.1f objects per %d-byte Put", allocs, tc.n)
			limit := tc.maxAllocs
			if raceEnabled {
				limit = tc.maxRace
			}
			require.Less(t, allocs, limit, "objects allocated per Put")
		})
	}
}
