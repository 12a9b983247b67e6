package uapicheck

import (
	"unsafe"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Distinct values the probes pass and plant, so that a value found in the
// wrong member cannot pass for the right one.
const (
	sA = 0x1111_2222_3333_4444
	sB = 0x5555_6666_7777_8888
	sC = 0x9999_aaaa_bbbb_cccc
	sD = 0x0d0d_1e1e_2f2f_3a3a
	sW = 0x1234_5678 // 32-bit members
	sX = 0x0bad_f00d
)

const (
	infoArgs = "struct hl_info_args"
	memIn    = "struct hl_mem_in"
	memOut   = "struct hl_mem_out"
	cbIn     = "struct hl_cb_in"
	cbOut    = "struct hl_cb_out"
	csIn     = "struct hl_cs_in"
	csOut    = "struct hl_cs_out"
	waitIn   = "struct hl_wait_cs_in"
	waitOut  = "struct hl_wait_cs_out"
)

func infoOp(op string) In { return In{Type: infoArgs, Member: "op", WantC: op} }
func infoSize(typ string, atLeast bool) In {
	return In{Type: infoArgs, Member: "return_size", WantC: "sizeof(" + typ + ")", AtLeast: atLeast}
}
func memOp(op string) In { return In{Type: memIn, Member: "op", WantC: op} }
func cbOp(op string) In  { return In{Type: cbIn, Member: "op", WantC: op} }

// Probes covers every typed hlsys function that issues an ioctl.
func Probes() []Probe {
	return []Probe{
		{Name: "GetHwIPInfo", Gens: Both, Ioctl: "INFO",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				hw, err := hlsys.GetHwIPInfo(b)
				return map[string]uint64{"device_id": uint64(hw.DeviceID), "dram_size": hw.DramSize,
					"page": hw.DeviceMemAllocDefaultPageSize}, err
			},
			In: []In{infoOp("HL_INFO_HW_IP_INFO"), infoSize("struct hl_info_hw_ip_info", true)},
			Out: []Out{
				{Type: "struct hl_info_hw_ip_info", Member: "device_id", Info: true, Val: sW, Result: "device_id"},
				{Type: "struct hl_info_hw_ip_info", Member: "dram_size", Info: true, Val: sA, Result: "dram_size"},
				{Type: "struct hl_info_hw_ip_info", Member: "device_mem_alloc_default_page_size", Info: true, Val: sB, Result: "page"},
			}},
		{Name: "GetDramUsage", Gens: Both, Ioctl: "INFO",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				u, err := hlsys.GetDramUsage(b)
				return map[string]uint64{"free": u.DramFreeMem, "ctx": u.CtxDramMem}, err
			},
			In: []In{infoOp("HL_INFO_DRAM_USAGE"), infoSize("struct hl_info_dram_usage", false)},
			Out: []Out{
				{Type: "struct hl_info_dram_usage", Member: "dram_free_mem", Info: true, Val: sA, Result: "free"},
				{Type: "struct hl_info_dram_usage", Member: "ctx_dram_mem", Info: true, Val: sB, Result: "ctx"},
			}},
		{Name: "GetDeviceStatus", Gens: Both, Ioctl: "INFO",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				st, err := hlsys.GetDeviceStatus(b)
				return map[string]uint64{"status": uint64(st)}, err
			},
			In:  []In{infoOp("HL_INFO_DEVICE_STATUS"), infoSize("struct hl_info_device_status", false)},
			Out: []Out{{Type: "struct hl_info_device_status", Member: "status", Info: true, Val: sW, Result: "status"}}},
		{Name: "GetEvents", Gens: Both, Ioctl: "INFO",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				ev, err := hlsys.GetEvents(b)
				return map[string]uint64{"events": ev}, err
			},
			In:  []In{infoOp("HL_INFO_GET_EVENTS"), infoSize("__u64", false)},
			Out: []Out{{Type: "__u64", Info: true, Val: sC, Result: "events"}}},
		{Name: "RegisterEventFD", Gens: Both, Ioctl: "INFO",
			Call: func(b hlsys.Backend) (map[string]uint64, error) { return nil, hlsys.RegisterEventFD(b, sW) },
			In:   []In{infoOp("HL_INFO_REGISTER_EVENTFD"), {Type: infoArgs, Member: "eventfd", Want: sW}}},
		{Name: "UnregisterEventFD", Gens: Both, Ioctl: "INFO",
			Call: func(b hlsys.Backend) (map[string]uint64, error) { return nil, hlsys.UnregisterEventFD(b) },
			In:   []In{infoOp("HL_INFO_UNREGISTER_EVENTFD")}},

		{Name: "MemAlloc", Gens: Both, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				h, err := hlsys.MemAlloc(b, sA, sB, hlsys.MemContiguous)
				return map[string]uint64{"handle": h}, err
			},
			In: []In{memOp("HL_MEM_OP_ALLOC"), {Type: memIn, Member: "alloc.mem_size", Want: sA},
				{Type: memIn, Member: "alloc.page_size", Want: sB},
				{Type: memIn, Member: "flags", MaskC: "HL_MEM_CONTIGUOUS", WantC: "HL_MEM_CONTIGUOUS"}},
			Out: []Out{{Type: memOut, Member: "handle", Val: sC, Result: "handle"}}},
		{Name: "MemFree", Gens: Both, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) { return nil, hlsys.MemFree(b, sA) },
			In:   []In{memOp("HL_MEM_OP_FREE"), {Type: memIn, Member: "free.handle", Want: sA}}},
		{Name: "MemMapDevice", Gens: Both, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				va, err := hlsys.MemMapDevice(b, sA, sB, hlsys.MemUserPtr)
				return map[string]uint64{"va": va}, err
			},
			In: []In{memOp("HL_MEM_OP_MAP"), {Type: memIn, Member: "map_device.handle", Want: sA},
				{Type: memIn, Member: "map_device.hint_addr", Want: sB},
				{Type: memIn, Member: "flags", MaskC: "HL_MEM_USERPTR", Want: 0}},
			Out: []Out{{Type: memOut, Member: "device_virt_addr", Val: sC, Result: "va"}}},
		{Name: "MemMapHost", Gens: Both, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				host := make([]byte, 64)
				va, err := hlsys.MemMapHost(b, unsafe.Pointer(&host[0]), sA, sB, 0)
				return map[string]uint64{"va": va, "host": uint64(uintptr(unsafe.Pointer(&host[0])))}, err
			},
			In: []In{memOp("HL_MEM_OP_MAP"), {Type: memIn, Member: "map_host.host_virt_addr", WantResult: "host"},
				{Type: memIn, Member: "map_host.mem_size", Want: sA},
				{Type: memIn, Member: "map_host.hint_addr", Want: sB},
				{Type: memIn, Member: "flags", MaskC: "HL_MEM_USERPTR", WantC: "HL_MEM_USERPTR"}},
			Out: []Out{{Type: memOut, Member: "device_virt_addr", Val: sC, Result: "va"}}},
		{Name: "MemUnmap", Gens: Both, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) { return nil, hlsys.MemUnmap(b, sA) },
			In:   []In{memOp("HL_MEM_OP_UNMAP"), {Type: memIn, Member: "unmap.device_virt_addr", Want: sA}}},
		{Name: "MemExportDMABuf61", Gens: Only61, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				f, err := hlsys.MemExportDMABuf61(b, sA, sB)
				return fdResult(f, err)
			},
			In: []In{memOp("HL_MEM_OP_EXPORT_DMABUF_FD"), {Type: memIn, Member: "export_dmabuf_fd.handle", Want: sA},
				{Type: memIn, Member: "export_dmabuf_fd.mem_size", Want: sB},
				{Type: memIn, Member: "flags", WantC: "O_RDWR | O_CLOEXEC"}},
			Out: []Out{{Type: memOut, Member: "fd", FD: true, Result: "fd"}}},
		{Name: "MemExportDMABuf", Gens: OnlyDRM, Ioctl: "MEMORY",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				f, err := hlsys.MemExportDMABuf(b, sA, sB, sD)
				return fdResult(f, err)
			},
			In: []In{memOp("HL_MEM_OP_EXPORT_DMABUF_FD"), {Type: memIn, Member: "export_dmabuf_fd.addr", Want: sA},
				{Type: memIn, Member: "export_dmabuf_fd.mem_size", Want: sB},
				{Type: memIn, Member: "export_dmabuf_fd.offset", Want: sD},
				{Type: memIn, Member: "flags", WantC: "O_RDWR | O_CLOEXEC"}},
			Out: []Out{{Type: memOut, Member: "fd", FD: true, Result: "fd"}}},

		{Name: "CBCreate", Gens: Both, Ioctl: "CB",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				h, err := hlsys.CBCreate(b, sW, hlsys.CBFlagsMap)
				return map[string]uint64{"handle": h}, err
			},
			In: []In{cbOp("HL_CB_OP_CREATE"), {Type: cbIn, Member: "cb_size", Want: sW},
				{Type: cbIn, Member: "flags", WantC: "HL_CB_FLAGS_MAP"}},
			Out: []Out{{Type: cbOut, Member: "cb_handle", Val: sA, Result: "handle"}}},
		{Name: "CBDestroy", Gens: Both, Ioctl: "CB",
			Call: func(b hlsys.Backend) (map[string]uint64, error) { return nil, hlsys.CBDestroy(b, sA) },
			In:   []In{cbOp("HL_CB_OP_DESTROY"), {Type: cbIn, Member: "cb_handle", Want: sA}}},
		{Name: "CBDeviceVA", Gens: Both, Ioctl: "CB",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				va, err := hlsys.CBDeviceVA(b, sA)
				return map[string]uint64{"va": va}, err
			},
			In: []In{cbOp("HL_CB_OP_INFO"), {Type: cbIn, Member: "cb_handle", Want: sA},
				{Type: cbIn, Member: "flags", WantC: "HL_CB_FLAGS_GET_DEVICE_VA"}},
			Out: []Out{{Type: cbOut, Member: "device_va", Val: sB, Result: "va"}}},

		{Name: "SubmitCS", Gens: Both, Ioctl: "CS",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				restore := make([]hlsys.CSChunk, 1)
				execute := make([]hlsys.CSChunk, 2)
				out, err := hlsys.SubmitCS(b, restore, execute, sX, sW)
				return map[string]uint64{"seq": out.Seq, "status": uint64(out.Status),
					"restore": uint64(uintptr(unsafe.Pointer(&restore[0]))),
					"execute": uint64(uintptr(unsafe.Pointer(&execute[0])))}, err
			},
			In: []In{{Type: csIn, Member: "chunks_restore", WantResult: "restore"},
				{Type: csIn, Member: "chunks_execute", WantResult: "execute"},
				{Type: csIn, Member: "num_chunks_restore", Want: 1},
				{Type: csIn, Member: "num_chunks_execute", Want: 2},
				{Type: csIn, Member: "cs_flags", Want: sX},
				{Type: csIn, Member: "timeout", Want: sW}},
			Out: []Out{{Type: csOut, Member: "seq", Val: sA, Result: "seq"},
				{Type: csOut, Member: "status", Val: sW, Result: "status"}}},
		{Name: "SubmitCSIn", Gens: Both, Ioctl: "CS",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				execute := make([]hlsys.CSChunk, 3)
				// A reused struct: what the last CS left must not reach this one.
				a := &hlsys.CSArgs{In: hlsys.CSIn{ChunksRestore: ^uint64(0), NumChunksRestore: 7, CSFlags: ^uint32(0)}}
				out, err := hlsys.SubmitCSIn(b, a, execute, sX, sW)
				return map[string]uint64{"seq": out.Seq, "status": uint64(out.Status),
					"execute": uint64(uintptr(unsafe.Pointer(&execute[0])))}, err
			},
			In: []In{{Type: csIn, Member: "chunks_restore", Want: 0},
				{Type: csIn, Member: "chunks_execute", WantResult: "execute"},
				{Type: csIn, Member: "num_chunks_restore", Want: 0},
				{Type: csIn, Member: "num_chunks_execute", Want: 3},
				{Type: csIn, Member: "cs_flags", Want: sX},
				{Type: csIn, Member: "timeout", Want: sW}},
			Out: []Out{{Type: csOut, Member: "seq", Val: sA, Result: "seq"},
				{Type: csOut, Member: "status", Val: sW, Result: "status"}}},
		{Name: "WaitForCSIn", Gens: Both, Ioctl: "WAIT_CS",
			Call: func(b hlsys.Backend) (map[string]uint64, error) {
				out, err := hlsys.WaitForCSIn(b, &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: ^uint64(sA), TimeoutUs: ^uint64(sB)}}, sA, sB)
				return map[string]uint64{"status": uint64(out.Status), "flags": uint64(out.Flags),
					"ts": uint64(out.TimestampNsec), "map": uint64(out.CsCompletionMap)}, err
			},
			In: []In{{Type: waitIn, Member: "seq", Want: sA}, {Type: waitIn, Member: "timeout_us", Want: sB}},
			Out: []Out{{Type: waitOut, Member: "status", Val: sW, Result: "status"},
				{Type: waitOut, Member: "flags", Val: sX, Result: "flags"},
				{Type: waitOut, Member: "timestamp_nsec", Val: sC, Result: "ts"},
				{Type: waitOut, Member: "cs_completion_map", Val: 0x5a5a5a5a, Result: "map"}}},
	}
}

type closer interface {
	Int() int
	Close() error
}

// fdResult reports the descriptor an export returned and closes it.
func fdResult[F closer](f F, err error) (map[string]uint64, error) {
	if err != nil {
		return nil, err
	}
	n := f.Int()
	if cerr := f.Close(); cerr != nil {
		return nil, cerr
	}
	return map[string]uint64{"fd": uint64(n)}, nil
}
