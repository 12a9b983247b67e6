package gaudi3

// The transcription tables: every number gxfer uses from Intel's sources,
// written down by hand next to where it comes from. The checks in
// check_test.go compare them with the package's constants and with what
// the encoders produce; csource_test.go compares them with the C headers
// themselves when a copy of Intel's sources is available.
//
// Sources:
//   CHA  = Intel_Gaudi3_Software specs_h9/gaudi3/asic_reg_structs/pdma_ch_a_regs.h
//   PQMA = Intel_Gaudi3_Software specs_h9/gaudi3/asic_reg_structs/pqm_ch_a_regs.h
//   CHB  = Intel_Gaudi3_Software specs_h9/gaudi3/asic_reg_structs/pdma_ch_b_regs.h
//   SOB  = Intel_Gaudi3_Software specs_h9/gaudi3/asic_reg_structs/sob_objs_regs.h
//   PKT  = Intel_Gaudi3_Software specs_h9/gaudi3/gaudi3_pqm_packets.h
//   SYN  = Intel_Gaudi3_Software synapse/src/runtime/scal/gaudi3/direct_mode_packets/pqm_packets.cpp
//   SCAL = Intel_Gaudi3_Software scal/src/...
//   G3H  = Intel_Gaudi3_Software specs_h9/gaudi3/gaudi3.h
//   BLK  = drivers.accel.habanalabs.kernel drivers/accel/habanalabs/include/gaudi3/asic_reg/gaudi3_blocks_linux_driver.h
//   DRVP = drivers.accel.habanalabs.kernel drivers/accel/habanalabs/gaudi3/gaudi3P.h
//   UAPI = Intel_Gaudi3_Software habanalabs/include/uapi/drm/habanalabs_accel.h

// number is one transcribed offset, size or value.
type number struct {
	name string
	got  func() uint64 // gxfer's value
	want uint64        // transcribed
	src  string
	cxx  string // C++ expression for the same number in Intel's headers; "" if none
}

func c(v uint64) func() uint64 { return func() uint64 { return v } }

func chA(ch int) func() uint64 {
	return func() uint64 { v, _ := ChAOffset(ch); return v }
}

func numbers() []number {
	return []number{
		// CH_A block: offsetof(block_pdma_ch_a, ...).
		{"CH_A size", c(ChASize), 0x1000, "CHA sizeof(block_pdma_ch_a)", "sizeof(block_pdma_ch_a)"},
		{"DESC_SUBMIT_FIFO_CFG", c(RegDescSubmitFifoCfg), 0x1B4, "PQMA block_pqm_ch_a.desc_submit_fifo_cfg", "offsetof(block_pdma_ch_a, pqm_ch.desc_submit_fifo_cfg)"},
		{"FENCE_INC[0]", c(RegFenceInc0), 0x1CC, "PQMA block_pqm_ch_a.fence_inc[0]", "offsetof(block_pdma_ch_a, pqm_ch.fence_inc[0])"},
		{"FENCE_INC[1]", c(RegFenceInc0 + 4), 0x1D0, "PQMA block_pqm_ch_a.fence_inc[1]", "offsetof(block_pdma_ch_a, pqm_ch.fence_inc[1])"},
		{"FENCE_CNT[0]", c(RegFenceCnt0), 0x1DC, "PQMA block_pqm_ch_a.fence_cnt[0]", "offsetof(block_pdma_ch_a, pqm_ch.fence_cnt[0])"},
		{"fence count", c(NumFences), 4, "PQMA block_pqm_ch_a.fence_cnt[4]", "sizeof(((block_pdma_ch_a*)0)->pqm_ch.fence_cnt) / 4"},
		{"MSQ_BASE_H", c(RegMSQBaseHi), 0x1EC, "PQMA block_pqm_ch_a.msq_base_h", "offsetof(block_pdma_ch_a, pqm_ch.msq_base_h)"},
		{"MSQ_BASE_L", c(RegMSQBaseLo), 0x1F0, "PQMA block_pqm_ch_a.msq_base_l", "offsetof(block_pdma_ch_a, pqm_ch.msq_base_l)"},
		{"MSQ_SIZE", c(RegMSQSize), 0x1F4, "PQMA block_pqm_ch_a.msq_size", "offsetof(block_pdma_ch_a, pqm_ch.msq_size)"},
		{"MSQ_PI", c(RegMSQPI), 0x1F8, "PQMA block_pqm_ch_a.msq_pi", "offsetof(block_pdma_ch_a, pqm_ch.msq_pi)"},
		{"MSQ_CI", c(RegMSQCI), 0x1FC, "PQMA block_pqm_ch_a.msq_ci", "offsetof(block_pdma_ch_a, pqm_ch.msq_ci)"},
		{"CQ_RECONFIG", c(RegCQReconfig), 0x20C, "PQMA block_pqm_ch_a.cq_reconfig", "offsetof(block_pdma_ch_a, pqm_ch.cq_reconfig)"},
		{"CTX", c(RegCtx), 0x300, "CHA block_pdma_ch_a.ctx", "offsetof(block_pdma_ch_a, ctx)"},
		{"ECMPLTN_Q_CH_CFG", c(RegECQChCfg), 0x400, "CHA block_pdma_ch_a.ecmpltn_q_ch_cfg", "offsetof(block_pdma_ch_a, ecmpltn_q_ch_cfg)"},
		{"ECMPLTN_Q_BASE_LO", c(RegECQBaseLo), 0x404, "CHA block_pdma_ch_a.ecmpltn_q_base_lo", "offsetof(block_pdma_ch_a, ecmpltn_q_base_lo)"},
		{"ECMPLTN_Q_BASE_HI", c(RegECQBaseHi), 0x408, "CHA block_pdma_ch_a.ecmpltn_q_base_hi", "offsetof(block_pdma_ch_a, ecmpltn_q_base_hi)"},
		{"ECMPLTN_Q_BASE_SIZE", c(RegECQBaseSize), 0x40C, "CHA block_pdma_ch_a.ecmpltn_q_base_size", "offsetof(block_pdma_ch_a, ecmpltn_q_base_size)"},
		{"ECMPLTN_Q_BASE_FREQ", c(RegECQBaseFreq), 0x410, "CHA block_pdma_ch_a.ecmpltn_q_base_freq", "offsetof(block_pdma_ch_a, ecmpltn_q_base_freq)"},
		{"ECMPLTN_Q_BASE_PI", c(RegECQBasePI), 0x414, "CHA block_pdma_ch_a.ecmpltn_q_base_pi", "offsetof(block_pdma_ch_a, ecmpltn_q_base_pi)"},
		{"ECMPLTN_Q_LBW_ADDR_L", c(RegECQLBWAddrLo), 0x418, "CHA block_pdma_ch_a.ecmpltn_q_lbw_addr_l", "offsetof(block_pdma_ch_a, ecmpltn_q_lbw_addr_l)"},
		{"ECMPLTN_Q_LBW_ADDR_H", c(RegECQLBWAddrHi), 0x41C, "CHA block_pdma_ch_a.ecmpltn_q_lbw_addr_h", "offsetof(block_pdma_ch_a, ecmpltn_q_lbw_addr_h)"},
		{"ECMPLTN_Q_LBW_PAYLD", c(RegECQLBWPayload), 0x420, "CHA block_pdma_ch_a.ecmpltn_q_lbw_payld", "offsetof(block_pdma_ch_a, ecmpltn_q_lbw_payld)"},
		{"SPECIAL", c(RegSpecial), 0xE80, "CHA block_pdma_ch_a.special", "offsetof(block_pdma_ch_a, special)"},

		// CH_B block.
		{"CH_B hbw_axcache", c(ChBHBWAxCache), 0x304, "CHB block_pdma_ch_b.hbw_axcache", "offsetof(block_pdma_ch_b, hbw_axcache)"},
		{"CH_B prot_secure", c(ChBProtSecure), 0x310, "CHB block_pdma_ch_b.prot_secure", "offsetof(block_pdma_ch_b, prot_secure)"},
		{"CH_B err_status", c(ChBErrStatus), 0x324, "CHB block_pdma_ch_b.err_status", "offsetof(block_pdma_ch_b, err_status)"},
		{"CH_B ch_priority", c(ChBChPriority), 0x338, "CHB block_pdma_ch_b.ch_priority", "offsetof(block_pdma_ch_b, ch_priority)"},
		{"CH_B ch_lbw", c(ChBChLBW), 0x33C, "CHB block_pdma_ch_b.ch_lbw", "offsetof(block_pdma_ch_b, ch_lbw)"},

		// Sync-manager objects block.
		{"SOB stride", c(SOBStride), 4, "SOB sizeof(reg_sob_obj_0)", "sizeof(sob_objs::reg_sob_obj_0)"},
		{"SOBs per group", c(SOBsPerGroup), 8192, "SOB block_sob_objs.sob_obj_0[8192]", "sizeof(((block_sob_objs*)0)->sob_obj_0) / 4"},
		{"SM OBJS user part", c(SMObjsUserSize), 0xF000, "SOB offsetof(block_sob_objs, sm_sec_0)", "offsetof(block_sob_objs, sm_sec_0)"},

		// Packets: opcodes and sizes.
		{"opcode MSG_LONG", c(OpMsgLong), 0x3, "PKT enum pqm_packet_id PQM_PACKET_MSG_LONG", "PQM_PACKET_MSG_LONG"},
		{"opcode FENCE", c(OpFence), 0x8, "PKT enum pqm_packet_id PQM_PACKET_FENCE", "PQM_PACKET_FENCE"},
		{"opcode LIN_PDMA", c(OpLinPDMA), 0x9, "PKT enum pqm_packet_id PQM_PACKET_LIN_PDMA", "PQM_PACKET_LIN_PDMA"},
		{"opcode NOP", c(OpNOP), 0xA, "PKT enum pqm_packet_id PQM_PACKET_NOP", "PQM_PACKET_NOP"},
		{"opcode STOP", c(OpStop), 0xB, "PKT enum pqm_packet_id PQM_PACKET_STOP", "PQM_PACKET_STOP"},
		{"opcode WREG_32", c(OpWReg32), 0x1, "PKT enum pqm_packet_id PQM_PACKET_WREG_32", "PQM_PACKET_WREG_32"},
		{"opcode MSG_SHORT", c(OpMsgShort), 0x4, "PKT enum pqm_packet_id PQM_PACKET_MSG_SHORT", "PQM_PACKET_MSG_SHORT"},
		{"LIN_PDMA head size", c(LinPDMASize - 8), 16, "PKT sizeof(struct pqm_packet_lin_pdma) (src/dst_addr_hi follow: SYN g3_lin_pdma_data)", "sizeof(pqm_packet_lin_pdma)"},
		{"LIN_PDMA size", sizeOf(LinPDMA{}), 24, "SYN LinPdma::getSize(false): pqm_packet_lin_pdma + g3_lin_pdma_data", ""},
		{"LIN_PDMA wrcomp size", sizeOf(LinPDMA{WrComp: true}), 40, "SYN sizeof(lin_pdma_single_wr_comp_t)", ""},
		{"MSG_LONG size", sizeOf(MsgLong{}), 16, "PKT sizeof(struct pqm_packet_msg_long)", "sizeof(pqm_packet_msg_long)"},
		{"FENCE size", sizeOf(Fence{}), 8, "PKT sizeof(struct pqm_packet_fence)", "sizeof(pqm_packet_fence)"},
		{"NOP size", sizeOf(NOP{}), 8, "PKT sizeof(struct pqm_packet_nop)", "sizeof(pqm_packet_nop)"},
		{"MSG_LONG addr offset", c(MsgLongAddrOff), 8, "PKT pqm_packet_msg_long.addr", "offsetof(pqm_packet_msg_long, addr)"},

		// Register values and limits.
		{"MSQ mode value", c(FifoCfgMSQ), 1, "SCAL platform/gaudi3/direct_mode_pdma_stream.cpp DirectModePDMAStream::setBuffer", ""},
		{"pointer mode value", c(FifoCfgPointers), 4, "SCAL platform/gaudi3/scal_pdma_gaudi3.cpp configurePdmaPtrsMode", ""},
		{"CQ counter size", c(ECQCounterSize), 8, "SCAL common/scal_base.h c_cq_size = 1 << c_cq_size_log2 (3)", ""},
		{"SCAL min ring", c(SCALMinRing), 1 << 16, "SCAL common/scal_base.h c_core_counter_max_value", ""},
		{"SCAL max ring", c(SCALMaxRing), 1 << 24, "SCAL common/scal_base.h c_core_counter_max_ccb_size", ""},
		{"command alignment", c(PIAlign), 8, "SCAL direct_mode_pdma_stream.cpp getInfo command_alignment", ""},

		// Addresses and ids.
		{"CFG_BAR_BASE", c(CfgBarBase), 0x0300007FF0000000, "G3H CFG_BAR_BASE = TPC_DBG_BASE", "CFG_BAR_BASE"},
		{"KDMA channel", c(KDMAChannel), 23, "DRVP KDMA_CH_ID", ""},
		{"PDMA engine id of channel 0", c(PDMAEngineID0), 120, "UAPI enum gaudi3_engine_id GAUDI3_DIE0_ENGINE_ID_PDMA_0_CH_0", ""},
		{"PDMA engine id of channel 23", c(PDMAEngineID0 + 23), 143, "UAPI enum gaudi3_engine_id GAUDI3_DIE1_ENGINE_ID_PDMA_1_CH_5", ""},
		{"MSI-X doorbell", c(MSIXOffset), 0xC417000, "BLK mmD0_PCIE_MSIX_BASE", ""},
		{"D0 SPDMA0 CH0_B", chB(0), 0xC546000, "BLK mmD0_SPDMA0_CH0_B_BASE", ""},
		{"D0 SPDMA1 CH5_B", chB(11), 0xC56B000, "BLK mmD0_SPDMA1_CH5_B_BASE", ""},
		{"D1 SPDMA0 CH0_B", chB(12), 0xCD46000, "BLK mmD1_SPDMA0_CH0_B_BASE", ""},
		{"D0 SPDMA1 CMN_B", c(D0SPDMA1 + CmnBFromGroup), 0xC56C000, "BLK mmD0_SPDMA1_CMN_B_BASE", ""},
		{"D1 SPDMA0 CMN_B", c(D1SPDMA0 + CmnBFromGroup), 0xCD4C000, "BLK mmD1_SPDMA0_CMN_B_BASE", ""},
		{"MAP_BLOCK address of channel 0", mapAddr(0), 0x0300007FFC540000, "CFG_BAR_BASE + BLK mmD0_SPDMA0_CH0_A_BASE (derived)", ""},
		{"D0 SPDMA0 CH0_A", chA(0), 0xC540000, "BLK mmD0_SPDMA0_CH0_A_BASE", ""},
		{"D0 SPDMA0 CH1_A", chA(1), 0xC541000, "BLK mmD0_SPDMA0_CH1_A_BASE", ""},
		{"D0 SPDMA0 CH2_A", chA(2), 0xC542000, "BLK mmD0_SPDMA0_CH2_A_BASE", ""},
		{"D0 SPDMA0 CH3_A", chA(3), 0xC543000, "BLK mmD0_SPDMA0_CH3_A_BASE", ""},
		{"D0 SPDMA0 CH4_A", chA(4), 0xC544000, "BLK mmD0_SPDMA0_CH4_A_BASE", ""},
		{"D0 SPDMA0 CH5_A", chA(5), 0xC545000, "BLK mmD0_SPDMA0_CH5_A_BASE", ""},
		{"D0 SPDMA1 CH0_A", chA(6), 0xC560000, "BLK mmD0_SPDMA1_CH0_A_BASE", ""},
		{"D0 SPDMA1 CH1_A", chA(7), 0xC561000, "BLK mmD0_SPDMA1_CH1_A_BASE", ""},
		{"D0 SPDMA1 CH2_A", chA(8), 0xC562000, "BLK mmD0_SPDMA1_CH2_A_BASE", ""},
		{"D0 SPDMA1 CH3_A", chA(9), 0xC563000, "BLK mmD0_SPDMA1_CH3_A_BASE", ""},
		{"D0 SPDMA1 CH4_A", chA(10), 0xC564000, "BLK mmD0_SPDMA1_CH4_A_BASE", ""},
		{"D0 SPDMA1 CH5_A", chA(11), 0xC565000, "BLK mmD0_SPDMA1_CH5_A_BASE", ""},
		{"D1 SPDMA0 CH0_A", chA(12), 0xCD40000, "BLK mmD1_SPDMA0_CH0_A_BASE", ""},
		{"D1 SPDMA0 CH1_A", chA(13), 0xCD41000, "BLK mmD1_SPDMA0_CH1_A_BASE", ""},
		{"D1 SPDMA0 CH2_A", chA(14), 0xCD42000, "BLK mmD1_SPDMA0_CH2_A_BASE", ""},
		{"D1 SPDMA0 CH3_A", chA(15), 0xCD43000, "BLK mmD1_SPDMA0_CH3_A_BASE", ""},
		{"D1 SPDMA0 CH4_A", chA(16), 0xCD44000, "BLK mmD1_SPDMA0_CH4_A_BASE", ""},
		{"D1 SPDMA0 CH5_A", chA(17), 0xCD45000, "BLK mmD1_SPDMA0_CH5_A_BASE", ""},
		{"D1 SPDMA1 CH0_A", chA(18), 0xCD60000, "BLK mmD1_SPDMA1_CH0_A_BASE (CH3 read: 0xCD63000)", ""},
		{"D1 SPDMA1 CH1_A", chA(19), 0xCD61000, "BLK mmD1_SPDMA1_CH1_A_BASE (CH3 read: 0xCD63000)", ""},
		{"D1 SPDMA1 CH2_A", chA(20), 0xCD62000, "BLK mmD1_SPDMA1_CH2_A_BASE (CH3 read: 0xCD63000)", ""},
		{"D1 SPDMA1 CH3_A", chA(21), 0xCD63000, "BLK mmD1_SPDMA1_CH3_A_BASE", ""},
		{"D1 SPDMA1 CH4_A", chA(22), 0xCD64000, "BLK mmD1_SPDMA1_CH4_A_BASE", ""},
		{"D1 SPDMA1 CH5_A", chA(23), 0xCD65000, "BLK mmD1_SPDMA1_CH5_A_BASE", ""},
	}
}

func chB(ch int) func() uint64 {
	return func() uint64 { v, _ := ChBOffset(ch); return v }
}

func mapAddr(ch int) func() uint64 {
	return func() uint64 { v, _ := ChAMapAddr(ch); return v }
}

func sizeOf(p Packet) func() uint64 {
	return func() uint64 {
		b, err := p.Append(nil)
		if err != nil {
			return 0
		}
		return uint64(len(b))
	}
}

// bits is one transcribed bit field: its lowest bit and width.
type bits struct {
	name         string
	got          Field
	shift, width uint
	src          string
	cxx          string // C++ expression for the field's mask in Intel's headers
}

func regFields() []bits {
	return []bits{
		{"DESC_SUBMIT_FIFO_CFG.mode", FifoCfgMode, 0, 2, "PQMA reg_desc_submit_fifo_cfg.mode", "MASK(pqm_ch_a::reg_desc_submit_fifo_cfg, mode)"},
		{"DESC_SUBMIT_FIFO_CFG.write_mode", FifoCfgWriteMode, 2, 1, "PQMA reg_desc_submit_fifo_cfg.write_mode", "MASK(pqm_ch_a::reg_desc_submit_fifo_cfg, write_mode)"},
		{"FENCE_INC.val", FenceIncVal, 0, 4, "PQMA reg_fence_inc.val", "MASK(pqm_ch_a::reg_fence_inc, val)"},
		{"FENCE_CNT.val", FenceCntVal, 0, 14, "PQMA reg_fence_cnt.val", "MASK(pqm_ch_a::reg_fence_cnt, val)"},
		{"MSQ_SIZE.val", MSQSizeVal, 0, 30, "PQMA reg_msq_size.val", "MASK(pqm_ch_a::reg_msq_size, val)"},
		{"CQ_RECONFIG.en", CQReconfigEn, 0, 1, "PQMA reg_cq_reconfig.en", "MASK(pqm_ch_a::reg_cq_reconfig, en)"},
		{"ECMPLTN_Q_CH_CFG.enable", ECQEnable, 0, 1, "CHA reg_ecmpltn_q_ch_cfg.enable", "MASK(pdma_ch_a::reg_ecmpltn_q_ch_cfg, enable)"},
		{"ECMPLTN_Q_CH_CFG.compltn_mode", ECQComplMode, 1, 1, "CHA reg_ecmpltn_q_ch_cfg.compltn_mode", "MASK(pdma_ch_a::reg_ecmpltn_q_ch_cfg, compltn_mode)"},
		{"ECMPLTN_Q_CH_CFG.lbw_wr_en", ECQLBWWrEn, 2, 1, "CHA reg_ecmpltn_q_ch_cfg.lbw_wr_en", "MASK(pdma_ch_a::reg_ecmpltn_q_ch_cfg, lbw_wr_en)"},
		{"CH_PRIORITY.val", ChBPriorityVal, 0, 3, "CHB reg_ch_priority.val", "MASK(pdma_ch_b::reg_ch_priority, val)"},
		{"SOB_OBJ.val", SOBVal, 0, 15, "SOB reg_sob_obj_0.val", "MASK(sob_objs::reg_sob_obj_0, val)"},
		{"SOB_OBJ.long_sob", SOBLong, 24, 1, "SOB reg_sob_obj_0.long_sob", "MASK(sob_objs::reg_sob_obj_0, long_sob)"},
		{"SOB_OBJ.zero_sob_cnt", SOBZeroCnt, 28, 1, "SOB reg_sob_obj_0.zero_sob_cnt", "MASK(sob_objs::reg_sob_obj_0, zero_sob_cnt)"},
		{"SOB_OBJ.inc", SOBInc, 31, 1, "SOB reg_sob_obj_0.inc", "MASK(sob_objs::reg_sob_obj_0, inc)"},
		{"ctl opcode", CtlOpcode, 24, 5, "PKT pqm_packet_lin_pdma.opcode (same in every packet)", "PMASK(pqm_packet_lin_pdma, opcode, 4)"},
		{"ctl eng_barrier", CtlEngBarrier, 29, 1, "PKT pqm_packet_lin_pdma.eng_barrier", "PMASK(pqm_packet_lin_pdma, eng_barrier, 4)"},
		{"ctl pred", CtlPred, 0, 5, "PKT pqm_packet_msg_long.pred", "PMASK(pqm_packet_msg_long, pred, 4)"},
	}
}

// pktField is one transcribed packet field: the byte offset of its dword
// and its bits there. set builds the packet with the field at zero (false)
// and at its largest value (true); the check encodes both and locates the
// difference.
type pktField struct {
	name         string
	set          func(max bool) Packet
	dword        int
	shift, width uint
	src          string
	cxx          string // C++ expression for the field's mask in its dword
}

func lin(f func(p *LinPDMA)) func(bool) Packet {
	return func(max bool) Packet {
		p := LinPDMA{}
		if max {
			f(&p)
		}
		return p
	}
}

func linWC(f func(p *LinPDMA)) func(bool) Packet {
	return func(max bool) Packet {
		p := LinPDMA{WrComp: true, Fence: true}
		if max {
			f(&p)
		}
		return p
	}
}

func packetFields() []pktField {
	const m32, m64 = 0xFFFFFFFF, ^uint64(0)
	return []pktField{
		{"LIN_PDMA tsize", lin(func(p *LinPDMA) { p.Size = m32 }), 0, 0, 32, "PKT pqm_packet_lin_pdma.tsize", "PMASK(pqm_packet_lin_pdma, tsize, 0)"},
		{"LIN_PDMA wrcomp (one write)", func(max bool) Packet { return LinPDMA{WrComp: max} }, 4, 0, 1, "PKT pqm_packet_lin_pdma.wrcomp (2 bits; gxfer sets 1)", "PMASK(pqm_packet_lin_pdma, wrcomp, 4) & 1"},
		{"LIN_PDMA memset", lin(func(p *LinPDMA) { p.Memset = true }), 4, 4, 1, "PKT pqm_packet_lin_pdma.memset", "PMASK(pqm_packet_lin_pdma, memset, 4)"},
		{"LIN_PDMA fence_en", func(max bool) Packet { return LinPDMA{WrComp: true, Fence: max} }, 4, 5, 1, "PKT pqm_packet_lin_pdma.fence_en", "PMASK(pqm_packet_lin_pdma, fence_en, 4)"},
		{"LIN_PDMA inc_context_id", lin(func(p *LinPDMA) { p.IncContextID = true }), 4, 8, 1, "PKT pqm_packet_lin_pdma.inc_context_id", "PMASK(pqm_packet_lin_pdma, inc_context_id, 4)"},
		{"LIN_PDMA en_desc_commit", lin(func(p *LinPDMA) { p.DescCommit = true }), 4, 11, 1, "PKT pqm_packet_lin_pdma.en_desc_commit", "PMASK(pqm_packet_lin_pdma, en_desc_commit, 4)"},
		{"LIN_PDMA advcnt_hbw_complq", lin(func(p *LinPDMA) { p.AdvanceCQ = true }), 4, 12, 1, "PKT pqm_packet_lin_pdma.advcnt_hbw_complq", "PMASK(pqm_packet_lin_pdma, advcnt_hbw_complq, 4)"},
		{"LIN_PDMA direction", lin(func(p *LinPDMA) { p.Dir = DirHostToDevice }), 4, 13, 1, "PKT pqm_packet_lin_pdma.direction", "PMASK(pqm_packet_lin_pdma, direction, 4)"},
		{"LIN_PDMA eng_barrier", lin(func(p *LinPDMA) { p.EngBarrier = true }), 4, 29, 1, "PKT pqm_packet_lin_pdma.eng_barrier", "PMASK(pqm_packet_lin_pdma, eng_barrier, 4)"},
		{"LIN_PDMA src_addr_lo", lin(func(p *LinPDMA) { p.Src = m32 }), 8, 0, 32, "PKT pqm_packet_lin_pdma.src_addr_lo", "PMASK(pqm_packet_lin_pdma, src_addr_lo, 8)"},
		{"LIN_PDMA dst_addr_lo", lin(func(p *LinPDMA) { p.Dst = m32 }), 12, 0, 32, "PKT pqm_packet_lin_pdma.dst_addr_lo", "PMASK(pqm_packet_lin_pdma, dst_addr_lo, 12)"},
		{"LIN_PDMA src_addr_hi", lin(func(p *LinPDMA) { p.Src = m64 &^ m32 }), 16, 0, 32, "SYN g3_lin_pdma_data.src_addr_hi", ""},
		{"LIN_PDMA dst_addr_hi", lin(func(p *LinPDMA) { p.Dst = m64 &^ m32 }), 20, 0, 32, "SYN g3_lin_pdma_data.dst_addr_hi", ""},
		{"LIN_PDMA wr_comp_addr_lo", linWC(func(p *LinPDMA) { p.WrCompAddr = m32 }), 24, 0, 32, "SYN g3_lin_pdma_wr_comp_data_lo.wr_comp_addr_lo", ""},
		{"LIN_PDMA wr_comp_data", linWC(func(p *LinPDMA) { p.WrCompData = m32 }), 28, 0, 32, "SYN g3_lin_pdma_wr_comp_data_lo.wr_comp_data", ""},
		{"LIN_PDMA wr_comp_addr_hi", linWC(func(p *LinPDMA) { p.WrCompAddr = m64 &^ m32 }), 32, 0, 32, "SYN g3_lin_pdma_wr_comp_data_hi.wr_comp_addr_hi", ""},
		{"LIN_PDMA fence dec", linWC(func(p *LinPDMA) { p.FenceAt.Dec = 0xF }), 36, 0, 4, "SYN union FenceData.fenceDecVal", ""},
		{"LIN_PDMA fence target", linWC(func(p *LinPDMA) { p.FenceAt.Target = 0x3FFF }), 36, 16, 14, "SYN union FenceData.fenceTarget", ""},
		{"LIN_PDMA fence id", linWC(func(p *LinPDMA) { p.FenceAt.ID = 3 }), 36, 30, 2, "SYN union FenceData.fenceId", ""},
		{"MSG_LONG value", func(max bool) Packet { return MsgLong{Value: sel(max, m32)} }, 0, 0, 32, "PKT pqm_packet_msg_long.value", "PMASK(pqm_packet_msg_long, value, 0)"},
		{"MSG_LONG op (timestamp)", func(max bool) Packet { return MsgLong{Timestamp: max} }, 4, 20, 1, "PKT pqm_packet_msg_long.op (2 bits; 1 = timestamp)", "PMASK(pqm_packet_msg_long, op, 4) & (1u << 20)"},
		{"MSG_LONG eng_barrier", func(max bool) Packet { return MsgLong{EngBarrier: max} }, 4, 29, 1, "PKT pqm_packet_msg_long.eng_barrier", "PMASK(pqm_packet_msg_long, eng_barrier, 4)"},
		{"MSG_LONG addr lo", func(max bool) Packet { return MsgLong{Addr: uint64(sel(max, m32))} }, 8, 0, 32, "PKT pqm_packet_msg_long.addr (low dword)", "PMASK(pqm_packet_msg_long, addr, 8)"},
		{"MSG_LONG addr hi", func(max bool) Packet { return MsgLong{Addr: uint64(sel(max, m32)) << 32} }, 12, 0, 32, "PKT pqm_packet_msg_long.addr (high dword)", "PMASK(pqm_packet_msg_long, addr, 12)"},
		{"FENCE dec_val", func(max bool) Packet { return Fence{Wait: FenceData{Dec: uint8(sel(max, 0xF))}} }, 0, 0, 4, "PKT pqm_packet_fence.dec_val", "PMASK(pqm_packet_fence, dec_val, 0)"},
		{"FENCE ch_id", func(max bool) Packet { return Fence{ChID: uint8(sel(max, 0x1F))} }, 0, 4, 5, "PKT pqm_packet_fence.ch_id", "PMASK(pqm_packet_fence, ch_id, 0)"},
		{"FENCE target_val", func(max bool) Packet { return Fence{Wait: FenceData{Target: uint16(sel(max, 0x3FFF))}} }, 0, 16, 14, "PKT pqm_packet_fence.target_val", "PMASK(pqm_packet_fence, target_val, 0)"},
		{"FENCE id", func(max bool) Packet { return Fence{Wait: FenceData{ID: uint8(sel(max, 3))}} }, 0, 30, 2, "PKT pqm_packet_fence.id", "PMASK(pqm_packet_fence, id, 0)"},
		{"FENCE eng_barrier", func(max bool) Packet { return Fence{EngBarrier: max} }, 4, 29, 1, "PKT pqm_packet_fence.eng_barrier", "PMASK(pqm_packet_fence, eng_barrier, 4)"},
		{"NOP msg_barrier", func(max bool) Packet { return NOP{MsgBarrier: max} }, 0, 0, 1, "PKT pqm_packet_nop.msg_barrier", "PMASK(pqm_packet_nop, msg_barrier, 0)"},
		{"NOP eng_barrier", func(max bool) Packet { return NOP{EngBarrier: max} }, 4, 29, 1, "PKT pqm_packet_nop.eng_barrier", "PMASK(pqm_packet_nop, eng_barrier, 4)"},
	}
}

func sel(on bool, v uint32) uint32 {
	if on {
		return v
	}
	return 0
}
