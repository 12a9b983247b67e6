package gaudi3

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestField(t *testing.T) {
	f := F(16, 14)
	require.Equal(t, FenceTarget, f)
	require.Equal(t, uint(16), f.Shift())
	require.Equal(t, uint(14), f.Width())
	require.Equal(t, uint32(0x3FFF), f.Max())
	require.Equal(t, uint32(0x3FFF0000), f.Mask())
	w := f.Put(0xC000FFFF, 0x1234)
	require.Equal(t, uint32(0xD234FFFF), w)
	require.Equal(t, uint32(0x1234), f.Get(w))
	require.Equal(t, uint32(0xC000FFFF), f.Put(w, 0))
	require.Equal(t, uint32(0xC000FFFF)|f.Mask(), f.Put(0xC000FFFF, 0xFFFFFFFF), "excess bits dropped")
	require.True(t, f.Fits(0x3FFF))
	require.False(t, f.Fits(0x4000))
	require.Equal(t, "[29:16]", f.String())
	require.Equal(t, uint32(0xFFFFFFFF), F(0, 32).Mask())
	require.Panics(t, func() { F(0, 0) })
	require.Panics(t, func() { F(31, 2) })
}
