package hlsys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIsGaudi3(t *testing.T) {
	for _, tc := range []struct {
		id   uint32
		want bool
	}{
		{0x1060, true}, {0x1061, true}, {0x1062, true}, {0x1063, true},
		{DeviceIDGaudi2, false}, {DeviceIDGaudi, false}, {0x1064, false},
		{0xff0b, false}, // PCI_IDS_GAUDI3_SIMULATOR: not an ASIC
		{0xff0d, false}, // PCI_IDS_GAUDI3_FPGA
	} {
		require.Equalf(t, tc.want, IsGaudi3(tc.id), "%#x", tc.id)
	}
}

func TestBlockOut(t *testing.T) {
	a := MemArgs{U: [3]uint64{(7 | MmapTypeBlock) << 12, 0xdead_beef_0000_1000, 0}}
	h, size := a.BlockOut()
	require.Equal(t, uint64(0x2000000000007000), h)
	require.Equal(t, uint32(0x1000), size)
}
