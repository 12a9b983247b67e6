package hlsim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// sinkByte keeps touch's read from being dropped.
var sinkByte byte

// touch reads *p, reporting EFAULT where the read faults (as a read of an
// unmapped page faults with SIGSEGV in a real process).
func touch(p *byte) error {
	return faultSafe(func() { sinkByte = *p })
}

// TestRulesPartialMunmapFaults (B10): the pages a partial munmap removes
// from a CB mapping are gone from the process: a touch faults, as it does
// on hardware, while the pages left stay usable and the CB itself (the
// driver's memory, not the user's mapping) keeps its bytes for the next
// mmap. Once the whole mapping is unmapped, a touch of any of it faults.
func TestRulesPartialMunmapFaults(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2})
	h, m := r.mappedCB(t, 3)
	m[0], m[pageSize], m[2*pageSize] = 1, 2, 3
	require.NoError(t, r.b.Munmap(m[pageSize:2*pageSize]))
	require.Error(t, touch(&m[pageSize]), "the page unmapped")
	require.NoError(t, touch(&m[0]))
	require.NoError(t, touch(&m[2*pageSize]))
	m[2*pageSize+1] = 4

	require.NoError(t, r.b.Munmap(m[:pageSize]))
	require.NoError(t, r.b.Munmap(m[2*pageSize:]))
	for _, off := range []int{0, pageSize, 2 * pageSize} {
		require.Error(t, touch(&m[off]), "offset %d after the whole mapping went", off)
	}
	m, err := r.b.Mmap(int64(h), 3*pageSize)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3, 4}, []byte{m[0], m[pageSize], m[2*pageSize], m[2*pageSize+1]},
		"the CB kept its bytes")
	require.NoError(t, r.b.Munmap(m))
}
