package gaudi3

// CH_A register offsets, from the start of a channel's CH_A block
// (specs_h9/gaudi3/asic_reg_structs/pdma_ch_a_regs.h struct block_pdma_ch_a,
// which begins with struct block_pqm_ch_a of pqm_ch_a_regs.h). Every
// register is 32 bits wide. The tests list each one's source.
const (
	// Submission-queue (MSQ) mode and the ring itself.
	RegDescSubmitFifoCfg = 0x1B4 // selects MSQ or pointer mode
	RegMSQBaseHi         = 0x1EC // ring device VA, bits 63..32
	RegMSQBaseLo         = 0x1F0 // ring device VA, bits 31..0
	RegMSQSize           = 0x1F4 // ring size in bytes minus 1
	RegMSQPI             = 0x1F8 // producer index: free-running byte count
	RegMSQCI             = 0x1FC // consumer index: free-running byte count
	RegCQReconfig        = 0x20C // stops the queue to change PI/CI/descriptors

	// Fence counters: four of each, 4 bytes apart.
	RegFenceInc0 = 0x1CC // write: add to fence counter i
	RegFenceCnt0 = 0x1DC // current value of fence counter i
	NumFences    = 4

	// The engine's context registers (struct block_pdma_ctx_a) start here;
	// LIN_PDMA loads them, software does not write them in MSQ mode.
	RegCtx = 0x300

	// Completion queue (ECMPLTN_Q): a counter in memory the engine
	// advances, and an optional LBW message (the user interrupt).
	RegECQChCfg      = 0x400 // enable, completion mode, LBW message enable
	RegECQBaseLo     = 0x404 // counter device VA, bits 31..0
	RegECQBaseHi     = 0x408 // counter device VA, bits 63..32
	RegECQBaseSize   = 0x40C // size of the queue memory in bytes
	RegECQBaseFreq   = 0x410 // "completion per num of descriptors"
	RegECQBasePI     = 0x414 // "incremented by HW after we write to the CQ"
	RegECQLBWAddrLo  = 0x418 // interrupt message address, bits 31..0
	RegECQLBWAddrHi  = 0x41C // interrupt message address, bits 63..32
	RegECQLBWPayload = 0x420 // interrupt message data (the interrupt id)

	// The block's protection registers (struct block_special_regs) start
	// here and run to the end of the 4 KiB block.
	RegSpecial = 0xE80
)

// CH_A register bit fields.
const (
	FifoCfgMode      Field = 0<<8 | 2 // DESC_SUBMIT_FIFO_CFG.mode
	FifoCfgWriteMode Field = 2<<8 | 1 // DESC_SUBMIT_FIFO_CFG.write_mode
	FenceIncVal      Field = 0<<8 | 4 // FENCE_INC.val
	FenceCntVal      Field = 0<<8 | 14
	MSQSizeVal       Field = 0<<8 | 30 // MSQ_SIZE.val
	CQReconfigEn     Field = 0<<8 | 1
	ECQEnable        Field = 0<<8 | 1 // ECMPLTN_Q_CH_CFG.enable
	ECQComplMode     Field = 1<<8 | 1 // ECMPLTN_Q_CH_CFG.compltn_mode
	ECQLBWWrEn       Field = 2<<8 | 1 // ECMPLTN_Q_CH_CFG.lbw_wr_en
)

// Register values the production stack writes (SCAL
// scal/src/platform/gaudi3/direct_mode_pdma_stream.cpp and
// scal_pdma_gaudi3.cpp).
const (
	// FifoCfgMSQ is what SCAL writes to DESC_SUBMIT_FIFO_CFG before
	// programming the ring (setBuffer); FifoCfgPointers is its pointer
	// mode (configurePdmaPtrsMode), which gxfer does not use.
	FifoCfgMSQ      = 1
	FifoCfgPointers = 4

	// ECQCounterSize is the ECMPLTN_Q_BASE_SIZE SCAL programs: one u64
	// counter (scal_base.h c_cq_size = 1 << 3).
	ECQCounterSize = 8

	// ECQModeUser is ECMPLTN_Q_CH_CFG.compltn_mode as SCAL sets it
	// ("Scheduler mode (AKA - user, not driver)").
	ECQModeUser = 1
)

// Ring limits.
const (
	// MSQMaxSize is what the 30-bit MSQ_SIZE field (size minus 1) can
	// describe; the ring must be a power of two.
	MSQMaxSize = 1 << 30

	// SCALMinRing and SCALMaxRing are SCAL's own bounds for a direct-mode
	// ring (scal_base.h c_core_counter_max_value, c_core_counter_max_ccb_size,
	// checked in DirectModePDMAStream::setBuffer). The comment there was
	// written for scheduler-mode rings; whether the PQM itself needs them
	// is open (docs/gaudi3.md).
	SCALMinRing = 1 << 16
	SCALMaxRing = 1 << 24

	// PIAlign is the alignment of every packet and of MSQ_PI (SCAL
	// reports command_alignment 8; all PQM packets are multiples of 8
	// bytes).
	PIAlign = 8
)

// CH_B offsets (specs_h9/gaudi3/asic_reg_structs/pdma_ch_b_regs.h struct
// block_pdma_ch_b), for MSG_LONG writes from a channel that may reach
// them; user space cannot map CH_B.
const (
	ChBHBWAxCache        = 0x304
	ChBProtSecure        = 0x310
	ChBErrStatus         = 0x324
	ChBChPriority        = 0x338
	ChBChLBW             = 0x33C
	ChBPriorityVal Field = 0<<8 | 3
)

// Sync-manager objects block (specs_h9/gaudi3/asic_reg_structs/
// sob_objs_regs.h struct block_sob_objs): 8192 sync objects of 4 bytes
// from offset 0; the first user-mappable part ends where sm_sec_0 starts.
const (
	SOBStride      = 4
	SOBsPerGroup   = 8192
	SMObjsUserSize = 0xF000 // offsetof(block_sob_objs, sm_sec_0)

	// Fields of a write to a sync object (reg_sob_obj_0).
	SOBVal     Field = 0<<8 | 15
	SOBLong    Field = 24<<8 | 1
	SOBZeroCnt Field = 28<<8 | 1
	SOBInc     Field = 31<<8 | 1
)
