package gaudi3

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChannelAddresses(t *testing.T) {
	for ch := range PDMAChannels {
		a, err := ChAOffset(ch)
		require.NoError(t, err)
		b, err := ChBOffset(ch)
		require.NoError(t, err)
		m, err := ChAMapAddr(ch)
		require.NoError(t, err)
		require.Equal(t, CfgBarBase+a, m)
		// CH_B of a channel sits 0x6000 above its CH_A in the group.
		require.Equal(t, a+ChBFromGroup, b)
	}
	for _, ch := range []int{-1, PDMAChannels} {
		_, err := ChAOffset(ch)
		require.Error(t, err)
		_, err = ChBOffset(ch)
		require.Error(t, err)
		_, err = ChAMapAddr(ch)
		require.Error(t, err)
	}
	_, err := GroupBase(PDMAGroups)
	require.Error(t, err)
}

func TestUserChannels(t *testing.T) {
	require.Empty(t, UserChannels(0))
	// The driver's mask leaves out the KDMA channel; a mask that has it
	// anyway does not hand it out.
	all := UserChannels(1<<PDMAChannels - 1)
	require.Len(t, all, PDMAChannels-1)
	require.NotContains(t, all, KDMAChannel)
	require.Equal(t, []int{0, 6, 22}, UserChannels(1|1<<6|1<<22|1<<23|1<<40))
}
