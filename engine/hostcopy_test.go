package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/memcopy"
)

// TestHostCopyPolicy: the engine's host copier follows Config (the
// non-temporal size and the workers), and its copies, engine copies and
// unix Binding puts and gets, are exact at the sizes around each switch
// (copy(), the temporal kernel, non-temporal, split across cores).
func TestHostCopyPolicy(t *testing.T) {
	p := startPeer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		cfg     Config
		ntFrom  int
		workers int
	}{
		{"default", Config{Devices: DevicesNone}, memcopy.NewPolicy(memcopy.Detect(), 0).NTFrom, 0},
		{"split-nt", Config{Devices: DevicesNone, CopyWorkers: 3, ParallelCopyMin: 256 << 10, CopyNTMin: 2 << 20}, 2 << 20, 3},
		{"never", Config{Devices: DevicesNone, CopyWorkers: 1, CopyNTMin: -1}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.cfg)
			require.Equal(t, tc.ntFrom, e.hostCopy.Policy().NTFrom)
			if m := e.hostCopy.Machine(); m.CPU.AVX2 && tc.ntFrom > 1<<20 {
				// the case: a 1 MiB put stays in cache (copy()
				// would store it non-temporally on AMD)
				require.NotEqual(t, memcopy.NonTemporal, e.hostCopy.Policy().Kernel(1<<20))
			}
			if tc.workers > 0 {
				w, _ := e.hostCopy.Workers()
				require.Equal(t, tc.workers, w)
			}
			ep, err := e.Dial(ctx, "unix", p.path)
			require.NoError(t, err)
			for _, n := range []int{8, 64<<10 + 3, 1<<20 - 1, 1 << 20, 2<<20 + 5, 12<<20 + 7, 40 << 20} {
				src, _ := e.Alloc(n+1, Host)
				dst, _ := e.Alloc(n+1, Host)
				fill(src.Bytes(), uint64(n))
				require.NoError(t, e.CopySync(ctx, dst.Slice(1, n), src.Slice(0, n)))
				require.Equal(t, src.Bytes()[:n], dst.Bytes()[1:], "copy of %d", n)

				put, err := ep.Bind(ctx, src.Slice(1, n), p.host.Slice(7, n))
				require.NoError(t, err)
				require.NoError(t, put.Put())
				require.NoError(t, put.Close())
				get, err := ep.Bind(ctx, dst.Slice(0, n), p.host.Slice(7, n))
				require.NoError(t, err)
				require.NoError(t, get.Get())
				require.NoError(t, get.Close())
				require.Equal(t, src.Bytes()[1:], dst.Bytes()[:n], fmt.Sprintf("binding round trip of %d", n))
				require.NoError(t, src.Free())
				require.NoError(t, dst.Free())
			}
			require.NoError(t, ep.Close())
		})
	}
}
