package hlsys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecode: every request number maps back to its numbering and index;
// a request of another type, index, direction or argument size does not
// decode.
func TestDecode(t *testing.T) {
	for _, n := range []Numbering{Legacy, Accel} {
		for i := range argSizes {
			got, nr, ok := Decode(n.Request(i))
			require.True(t, ok, "%v %d", n, i)
			require.Equal(t, n, got)
			require.Equal(t, i, nr)
		}
	}
	bad := []struct {
		name string
		req  uintptr
	}{
		{"zero", 0},
		{"another type", iowr('X', legacyNRBase+nrCS, SizeofCSArgs)},
		{"legacy index below 0", iowr(legacyType, legacyNRBase-1, SizeofInfoArgs)},
		{"legacy index past DEBUG", iowr(legacyType, legacyNRBase+nrDebug+1, SizeofDebugArgs)},
		{"accel index below 0", iowr(drmType, drmCommandBase-1, SizeofInfoArgs)},
		{"accel index past DEBUG", iowr(drmType, drmCommandBase+nrDebug+1, SizeofDebugArgs)},
		{"another size", iowr(legacyType, legacyNRBase+nrCS, SizeofCSArgs+8)},
		{"read only", LegacyCS &^ (1 << 30)},
		{"accel CS with the legacy size of WAIT_CS", iowr(drmType, drmCommandBase+nrCS, SizeofWaitCSArgs)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, _, ok := Decode(tc.req)
			require.False(t, ok)
		})
	}
}
