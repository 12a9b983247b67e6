package uapicheck

import (
	"unsafe"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// The Gaudi3 additions of hlsys (hlsys/gaudi3.go): MAP_BLOCK, the
// user-interrupt WAIT_CS forms and the PDMA channel mask. DefaultSpec
// appends these to Consts and Probes.

// testInterruptID is the user interrupt id the probes pass: 12 bits, all
// distinct nibbles.
const testInterruptID = 0xABC

// flagsWithID is the header expression of a WAIT_CS flags word with
// testInterruptID in the interrupt field, the shift taken from the
// header's own mask.
func flagsWithID(flags string) string {
	return flags + " | (0xABCu << __builtin_ctz(HL_WAIT_CS_FLAGS_INTERRUPT_MASK))"
}

func gaudi3Consts() []Const {
	return []Const{
		k("HL_WAIT_CS_FLAGS_INTERRUPT_MASK", hlsys.WaitCSFlagsInterruptMask),
		k("__builtin_ctz(HL_WAIT_CS_FLAGS_INTERRUPT_MASK)", hlsys.WaitCSFlagsInterruptShift),
		k("HL_WAIT_CS_FLAGS_ANY_CQ_INTERRUPT", hlsys.WaitCSFlagsAnyCQInterrupt),
		k("HL_WAIT_CS_FLAGS_ANY_DEC_INTERRUPT", hlsys.WaitCSFlagsAnyDecInterrupt),
		k("HL_WAIT_CS_FLAGS_INTERRUPT_KERNEL_CQ", hlsys.WaitCSFlagsInterruptKernelCQ),
		k("HL_WAIT_CS_FLAGS_REGISTER_INTERRUPT", hlsys.WaitCSFlagsRegisterInterrupt),
		// MAP_BLOCK's output: handle in the first u64, size in the low
		// half of the second (hlsys.MemArgs.BlockOut).
		k("offsetof(struct hl_mem_out, block_handle)", 0),
		k("FSIZE(struct hl_mem_out, block_handle)", 8),
		k("offsetof(struct hl_mem_out, block_size)", u(unsafe.Offsetof(hlsys.MemArgs{}.U)+8)),
		k("FSIZE(struct hl_mem_out, block_size)", 4),
		// The u64 Intel's header calls pdma_user_owned_ch_mask.
		kDRM("offsetof(struct hl_info_hw_ip_info, reserved3)", u(unsafe.Offsetof(hlsys.HwIPInfo{}.Reserved3))),
		k61("offsetof(struct hl_info_hw_ip_info, reserved4)", u(unsafe.Offsetof(hlsys.HwIPInfo{}.Reserved3))),
	}
}

// pdmaMaskProbe checks that HwIPInfo.PDMAUserOwnedChMask reads the
// hw_ip_info member that generation's header has at that offset.
func pdmaMaskProbe(member string, gens Gens) Probe {
	hw := "struct hl_info_hw_ip_info"
	return Probe{Name: "PDMAUserOwnedChMask/" + member, Gens: gens, Ioctl: "INFO",
		Call: func(b hlsys.Backend) (map[string]uint64, error) {
			h, err := hlsys.GetHwIPInfo(b)
			return map[string]uint64{"mask": h.PDMAUserOwnedChMask()}, err
		},
		In:  []In{infoOp("HL_INFO_HW_IP_INFO"), infoSize(hw, true)},
		Out: []Out{{Type: hw, Member: member, Info: true, Val: sD, Result: "mask"}}}
}

func gaudi3Probes() []Probe {
	return []Probe{
		{Name: "MemMapBlock", Gens: Both, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				h, size, err := hlsys.MemMapBlock(b, sA)
				return map[string]uint64{"handle": h, "size": uint64(size)}, err
			},
			In: []In{memOp("HL_MEM_OP_MAP_BLOCK"), {Type: memIn, Member: "map_block.block_addr", Want: sA},
				{Type: memIn, Member: "flags", Want: 0}},
			Out: []Out{{Type: memOut, Member: "block_handle", Val: sB, Result: "handle"},
				{Type: memOut, Member: "block_size", Val: sW, Result: "size"}}},
		pdmaMaskProbe("reserved3", OnlyDRM),
		pdmaMaskProbe("reserved4", Only61),
		{Name: "WaitForInterruptKernelCQ", Gens: Both, Ioctl: "WAIT_CS",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				out, err := hlsys.WaitForInterruptKernelCQ(b, sA, sB, sC, testInterruptID, sD)
				return map[string]uint64{"status": uint64(out.Status)}, err
			},
			In: []In{{Type: waitIn, Member: "cq_counters_handle", Want: sA},
				{Type: waitIn, Member: "cq_counters_offset", Want: sB},
				{Type: waitIn, Member: "target", Want: sC},
				{Type: waitIn, Member: "interrupt_timeout_us", Want: sD},
				{Type: waitIn, Member: "flags", WantC: flagsWithID("HL_WAIT_CS_FLAGS_INTERRUPT | HL_WAIT_CS_FLAGS_INTERRUPT_KERNEL_CQ")}},
			Out: []Out{{Type: waitOut, Member: "status", Val: sW, Result: "status"}}},
		{Name: "WaitForInterruptUser", Gens: Both, Ioctl: "WAIT_CS",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				counter := new(uint64)
				out, err := hlsys.WaitForInterruptUser(b, counter, sC, testInterruptID, sD)
				return map[string]uint64{"status": uint64(out.Status), "addr": uint64(uintptr(unsafe.Pointer(counter)))}, err
			},
			In: []In{{Type: waitIn, Member: "addr", WantResult: "addr"},
				{Type: waitIn, Member: "target", Want: sC},
				{Type: waitIn, Member: "interrupt_timeout_us", Want: sD},
				{Type: waitIn, Member: "cq_counters_offset", Want: 0},
				{Type: waitIn, Member: "flags", WantC: flagsWithID("HL_WAIT_CS_FLAGS_INTERRUPT")}},
			Out: []Out{{Type: waitOut, Member: "status", Val: sW, Result: "status"}}},
	}
}
