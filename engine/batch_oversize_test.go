package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchOversizedCopyRunsNothing: a batch holding a copy too large for
// one command submission (more DMA packets than Config.CBSize and
// Config.ChunkSize allow; for a copy between devices, more than a staging
// chunk's) is refused as a whole, at once, with ErrInvalid naming that
// copy, as Submit promises of invalid copies: its other copies do not
// run. Before, the size was found only when a worker built the batch's
// command submissions: the batch's valid copies ran (their destination
// written) and the oversized one failed later.
func TestBatchOversizedCopyRunsNothing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         Config
		src, dst    Location
		bigN, bufSz int
	}{
		{"h2d", Config{ChunkSize: 4096}, Host, Gaudi(0), 64 << 20, 64 << 20},
		{"d2h", Config{ChunkSize: 4096}, Gaudi(0), Host, 64 << 20, 64 << 20},
		{"d2d", Config{ChunkSize: 4096}, Gaudi(0), Gaudi(0), 32 << 20, 64 << 20},
		{"cross-device", Config{ChunkSize: 4096, CBSize: 4096, EmulatedCount: 2}, Gaudi(0), Gaudi(1), 8 << 20, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.cfg)
			bg := context.Background()
			h, err := e.Alloc(4096, Host)
			require.NoError(t, err)
			fill(h.Bytes(), 5)
			g, err := e.Alloc(4096, Gaudi(0))
			require.NoError(t, err)
			src, err := e.Alloc(tc.bufSz, tc.src)
			require.NoError(t, err)
			dst := src
			if tc.dst != tc.src {
				dst, err = e.Alloc(tc.bufSz, tc.dst)
				require.NoError(t, err)
			}
			dstOff := 0
			if dst == src {
				dstOff = tc.bufSz - tc.bigN
			}
			b := e.NewBatch()
			b.Copy(g.All(), h.All()) // valid
			big := b.Copy(dst.Slice(dstOff, tc.bigN), src.Slice(0, tc.bigN))
			f := b.Submit(bg)
			err = f.Wait(bg)
			require.ErrorIs(t, err, ErrInvalid)
			errs := f.Errs()
			require.Len(t, errs, 2)
			require.ErrorIs(t, errs[big], ErrInvalid)
			out, err := e.Alloc(4096, Host)
			require.NoError(t, err)
			require.NoError(t, e.CopySync(bg, out.All(), g.All()))
			require.Equal(t, make([]byte, 4096), out.Bytes(), "the batch's valid copy ran")
			require.Zero(t, e.Stats().InFlight)
		})
	}
}
