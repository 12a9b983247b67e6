package gaudi3

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckRingSize(t *testing.T) {
	for _, s := range []uint64{8, 4096, SCALMinRing, SCALMaxRing, MSQMaxSize} {
		require.NoError(t, CheckRingSize(s), s)
		require.True(t, MSQSizeVal.Fits(s-1), s)
	}
	for _, s := range []uint64{0, 4, 12, 3 << 20, MSQMaxSize * 2} {
		require.Error(t, CheckRingSize(s), s)
	}
}

func TestRingArithmetic(t *testing.T) {
	for _, tc := range []struct {
		pi, ci, size, used, free uint32
	}{
		{0, 0, 4096, 0, 4096},
		{4096, 0, 4096, 4096, 0},
		{100, 60, 128, 40, 88},
		// PI wrapped around 2^32 before CI did.
		{8, 0xFFFFFFF8, 64, 16, 48},
	} {
		require.Equal(t, tc.used, RingUsed(tc.pi, tc.ci))
		require.Equal(t, tc.free, RingFree(tc.pi, tc.ci, tc.size))
	}
}

func TestPadBeforeWrap(t *testing.T) {
	for _, tc := range []struct {
		pi, size uint32
		n        int
		pad      uint32
	}{
		{0, 64, 40, 0},
		{24, 64, 40, 0},  // ends exactly at the ring end
		{32, 64, 40, 32}, // would cross: pad to the end
		{56, 64, 8, 0},
		{64 + 48, 64, 24, 16},
		{0xFFFFFFF0, 64, 40, 16},
	} {
		pad := PadBeforeWrap(tc.pi, tc.size, tc.n)
		require.Equal(t, tc.pad, pad, "%+v", tc)
		require.Zero(t, pad%NOPSize)
		off := (tc.pi + pad) & (tc.size - 1)
		require.LessOrEqual(t, int(off)+tc.n, int(tc.size))
	}
}
