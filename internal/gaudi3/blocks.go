package gaudi3

import "fmt"

// Configuration space. The driver's cfg_base_address is CFG_BAR_BASE
// (specs_h9/gaudi3/gaudi3.h: CFG_BAR_BASE = TPC_DBG_BASE =
// 0x0300007FF0000000); the driver's block offsets
// (gaudi3_blocks_linux_driver.h) are relative to it, and MAP_BLOCK takes
// the absolute address CfgBarBase + offset.
const CfgBarBase = 0x0300007FF0000000

// PDMA channels. Gaudi3 has two dies with two PDMA engines (SPDMA0,
// SPDMA1) each and six channels per engine: channel ch = group*6 + i, the
// groups being D0 SPDMA0, D0 SPDMA1, D1 SPDMA0, D1 SPDMA1. Each channel
// has a 4 KiB CH_A block (submission ring, fences, completion queue: the
// only block user space may map) and a CH_B block (priority, protection,
// errors: driver-only).
const (
	PDMAGroups           = 4
	PDMAChannelsPerGroup = 6
	PDMAChannels         = PDMAGroups * PDMAChannelsPerGroup

	// KDMAChannel is the channel the driver keeps for itself (gaudi3P.h
	// KDMA_CH_ID); hw_ip_info's user mask never has its bit.
	KDMAChannel = 23

	// PDMAEngineID0 is the engine id of channel 0
	// (habanalabs_accel.h GAUDI3_DIE0_ENGINE_ID_PDMA_0_CH_0); channel ch
	// is engine PDMAEngineID0+ch in the driver's error reports.
	PDMAEngineID0 = 120

	// ChStride is the distance between the CH_A blocks of neighbouring
	// channels of a group, and ChASize the size of a CH_A block (the
	// length MAP_BLOCK returns and mmap must use).
	ChStride = 0x1000
	ChASize  = 0x1000

	// ChBFromGroup and CmnBFromGroup place a group's CH_B blocks (one per
	// channel, ChStride apart) and its common CMN_B block.
	ChBFromGroup  = 0x6000
	CmnBFromGroup = 0xC000

	// MSIXOffset is the configuration offset of die 0's PCIe MSI-X
	// doorbell (mmD0_PCIE_MSIX_BASE): the completion queue's interrupt
	// message writes the interrupt id there.
	MSIXOffset = 0xC417000
)

// Group base offsets (gaudi3_blocks_linux_driver.h
// mm{D0,D1}_SPDMA{0,1}_CH0_A_BASE).
const (
	D0SPDMA0 = 0xC540000
	D0SPDMA1 = 0xC560000
	D1SPDMA0 = 0xCD40000
	D1SPDMA1 = 0xCD60000
)

// GroupBase returns the configuration offset of group g's channel-0 CH_A
// block.
func GroupBase(g int) (uint64, error) {
	switch g {
	case 0:
		return D0SPDMA0, nil
	case 1:
		return D0SPDMA1, nil
	case 2:
		return D1SPDMA0, nil
	case 3:
		return D1SPDMA1, nil
	}
	return 0, fmt.Errorf("gaudi3: PDMA group %d out of range 0..%d", g, PDMAGroups-1)
}

// ChAOffset returns the configuration offset of channel ch's CH_A block.
func ChAOffset(ch int) (uint64, error) {
	if ch < 0 || ch >= PDMAChannels {
		return 0, fmt.Errorf("gaudi3: PDMA channel %d out of range 0..%d", ch, PDMAChannels-1)
	}
	base, err := GroupBase(ch / PDMAChannelsPerGroup)
	return base + uint64(ch%PDMAChannelsPerGroup)*ChStride, err
}

// ChAMapAddr returns the address to pass to HL_MEM_OP_MAP_BLOCK for
// channel ch's CH_A block.
func ChAMapAddr(ch int) (uint64, error) {
	off, err := ChAOffset(ch)
	return CfgBarBase + off, err
}

// ChBOffset returns the configuration offset of channel ch's CH_B block.
// User space cannot map it; a PDMA channel can reach it with MSG_LONG
// (how SCAL sets priority and AXI cache attributes).
func ChBOffset(ch int) (uint64, error) {
	if ch < 0 || ch >= PDMAChannels {
		return 0, fmt.Errorf("gaudi3: PDMA channel %d out of range 0..%d", ch, PDMAChannels-1)
	}
	base, err := GroupBase(ch / PDMAChannelsPerGroup)
	return base + ChBFromGroup + uint64(ch%PDMAChannelsPerGroup)*ChStride, err
}

// UserChannels returns the channels whose bits are set in a hw_ip_info
// pdma_user_owned_ch_mask, in ascending order; bits beyond the last
// channel and the KDMA channel are ignored.
func UserChannels(mask uint64) []int {
	var chs []int
	for ch := 0; ch < PDMAChannels; ch++ {
		if ch != KDMAChannel && mask&(1<<ch) != 0 {
			chs = append(chs, ch)
		}
	}
	return chs
}
