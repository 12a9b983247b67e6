package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDMABufZeroValue: a declared DMABuf{} and a nil *DMABuf answer every
// method without a panic: Release does nothing (as a second Release
// does), the accessors give zero values. Release dereferenced the nil
// buffer; a nil *DMABuf panicked in every method.
func TestDMABufZeroValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *DMABuf
	}{
		{"zero", &DMABuf{}},
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotPanics(t, func() {
				require.Nil(t, tc.d.FD())
				require.Zero(t, tc.d.Offset())
				require.Zero(t, tc.d.Size())
				tc.d.Release()
				tc.d.Release()
			})
		})
	}
}
