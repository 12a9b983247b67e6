package uapicheck

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// retype returns a copy of struct type t with one field's type replaced: a
// Go-side layout as a careless edit of hlsys would leave it. The blank
// structs.HostLayout marker is dropped (it has no size).
func retype(t reflect.Type, field string, nt reflect.Type) reflect.Type {
	var fs []reflect.StructField
	found := false
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name == "_" {
			continue
		}
		if f.Name == field {
			f.Type, found = nt, true
		}
		f.Offset, f.Index = 0, nil
		fs = append(fs, f)
	}
	if !found {
		panic("retype: no field " + field)
	}
	return reflect.StructOf(fs)
}

func setLayout(s *Spec, c string, fn func(*Layout)) {
	for i := range s.Layouts {
		if s.Layouts[i].C == c {
			l := s.Layouts[i]
			f := make(map[string]string, len(l.Fields))
			for k, v := range l.Fields {
				f[k] = v
			}
			l.Fields = f
			fn(&l)
			s.Layouts[i] = l
			return
		}
	}
	panic("no layout " + c)
}

func setConst(s *Spec, c string, fn func(uint64) uint64) {
	s.Consts = append([]Const(nil), s.Consts...)
	found := false
	for i := range s.Consts {
		if s.Consts[i].C == c {
			s.Consts[i].Val = fn(s.Consts[i].Val)
			found = true
		}
	}
	if !found {
		panic("no const " + c)
	}
}

func setProbe(s *Spec, name string, call func(hlsys.Backend) (map[string]uint64, error)) {
	s.Probes = append([]Probe(nil), s.Probes...)
	for i := range s.Probes {
		if s.Probes[i].Name == name {
			s.Probes[i].Call = call
			return
		}
	}
	panic("no probe " + name)
}

func plus1(v uint64) uint64 { return v + 1 }

// other is the numbering a generation does not use.
func other(b hlsys.Backend) hlsys.Numbering {
	if b.Numbering() == hlsys.Accel {
		return hlsys.Legacy
	}
	return hlsys.Accel
}

var (
	u16 = reflect.TypeFor[uint16]()
	u32 = reflect.TypeFor[uint32]()
	u64 = reflect.TypeFor[uint64]()
)

// TestMutationsAreCaught alters one thing on the Go side per category, as
// a wrong edit of hlsys would, and requires the check against the real
// header to report exactly that entry. Together with TestHeader61/DRM
// passing on the unaltered spec, this shows every category is compared.
func TestMutationsAreCaught(t *testing.T) {
	hdrs := map[string]map[string]uint64{}
	for _, g := range gens(t) {
		hdr, err := Eval(g, DefaultSpec(g).Exprs(g))
		require.NoError(t, err)
		hdrs[g.Name] = hdr
	}
	for _, tc := range []struct {
		name   string
		gens   Gens
		mutate func(*Spec)
		want   string // a substring of the reported mismatch
	}{
		// Layouts.
		{"last field width (hw_ip_info.reserved_dram_size u64->u32)", OnlyDRM, func(s *Spec) {
			setLayout(s, "struct hl_info_hw_ip_info", func(l *Layout) { l.Go = retype(l.Go, "ReservedDramSize", u32) })
		}, "FSIZE(struct hl_info_hw_ip_info, reserved_dram_size)"},
		{"last 6.1 field width (device_mem_alloc_default_page_size u64->u32)", Only61, func(s *Spec) {
			setLayout(s, "struct hl_info_hw_ip_info", func(l *Layout) {
				l.Go = retype(l.Go, "DeviceMemAllocDefaultPageSize", u32)
			})
		}, "FSIZE(struct hl_info_hw_ip_info, device_mem_alloc_default_page_size)"},
		{"last field width, size unchanged (device_status.pad u32->u16)", Both, func(s *Spec) {
			setLayout(s, "struct hl_info_device_status", func(l *Layout) { l.Go = retype(l.Go, "Pad", u16) })
		}, "FSIZE(struct hl_info_device_status, pad)"},
		{"field offset (info_args.return_size u32->u64 shifts op)", Both, func(s *Spec) {
			setLayout(s, "struct hl_info_args", func(l *Layout) { l.Go = retype(l.Go, "ReturnSize", u64) })
		}, "offsetof(struct hl_info_args, op)"},
		{"struct size (dram_usage.ctx_dram_mem [2]u64)", Both, func(s *Spec) {
			setLayout(s, "struct hl_info_dram_usage", func(l *Layout) {
				l.Go = retype(l.Go, "CtxDramMem", reflect.ArrayOf(2, u64))
			})
		}, "sizeof(struct hl_info_dram_usage)"},
		{"unchecked field (cs_in.Pad unmapped)", Both, func(s *Spec) {
			setLayout(s, "struct hl_cs_in", func(l *Layout) { delete(l.Fields, "Pad") })
		}, "hlsys.CSIn: Go fields with no C member [Pad]"},
		{"wrong member (cs_chunk.CBSize mapped to queue_index)", Both, func(s *Spec) {
			setLayout(s, "struct hl_cs_chunk", func(l *Layout) { l.Fields["CBSize"] = "queue_index" })
		}, "offsetof(struct hl_cs_chunk, queue_index) vs hlsys.CSChunk.CBSize"},

		// Constants, one per category.
		{"INFO op number", Both, func(s *Spec) { setConst(s, "HL_INFO_DEVICE_STATUS", plus1) }, "HL_INFO_DEVICE_STATUS"},
		{"device status value", Both, func(s *Spec) { setConst(s, "HL_DEVICE_STATUS_NEEDS_RESET", plus1) }, "HL_DEVICE_STATUS_NEEDS_RESET"},
		{"notifier event bit", Both, func(s *Spec) { setConst(s, "HL_NOTIFIER_EVENT_DEVICE_RESET", plus1) }, "HL_NOTIFIER_EVENT_DEVICE_RESET"},
		{"MEM op number", Both, func(s *Spec) { setConst(s, "HL_MEM_OP_EXPORT_DMABUF_FD", plus1) }, "HL_MEM_OP_EXPORT_DMABUF_FD"},
		{"MEM flag", Both, func(s *Spec) { setConst(s, "HL_MEM_USERPTR", plus1) }, "HL_MEM_USERPTR"},
		{"CB op", Both, func(s *Spec) { setConst(s, "HL_CB_OP_INFO", plus1) }, "HL_CB_OP_INFO"},
		{"CB flag", Both, func(s *Spec) { setConst(s, "HL_CB_FLAGS_GET_DEVICE_VA", plus1) }, "HL_CB_FLAGS_GET_DEVICE_VA"},
		{"CS flag", Both, func(s *Spec) { setConst(s, "HL_CS_FLAGS_CUSTOM_TIMEOUT", plus1) }, "HL_CS_FLAGS_CUSTOM_TIMEOUT"},
		{"CS chunk flag", Both, func(s *Spec) { setConst(s, "HL_CS_CHUNK_FLAGS_USER_ALLOC_CB", plus1) }, "HL_CS_CHUNK_FLAGS_USER_ALLOC_CB"},
		{"WAIT status", Both, func(s *Spec) { setConst(s, "HL_WAIT_CS_STATUS_ABORTED", plus1) }, "HL_WAIT_CS_STATUS_ABORTED"},
		{"WAIT status flag", Both, func(s *Spec) { setConst(s, "HL_WAIT_CS_STATUS_FLAG_GONE", plus1) }, "HL_WAIT_CS_STATUS_FLAG_GONE"},
		{"WAIT flag", Both, func(s *Spec) { setConst(s, "HL_WAIT_CS_FLAGS_MULTI_CS", plus1) }, "HL_WAIT_CS_FLAGS_MULTI_CS"},
		{"queue id", Both, func(s *Spec) { setConst(s, "GAUDI2_QUEUE_ID_PDMA_1_0", plus1) }, "GAUDI2_QUEUE_ID_PDMA_1_0"},
		{"DMA-BUF export flags", Both, func(s *Spec) { setConst(s, "O_RDWR | O_CLOEXEC", plus1) }, "O_RDWR | O_CLOEXEC"},
		{"hw_ip_info size of the generation", Both, func(s *Spec) {
			setConst(s, "sizeof(struct hl_info_hw_ip_info)", plus1)
		}, "sizeof(struct hl_info_hw_ip_info): header"},
		{"legacy ioctl number", Only61, func(s *Spec) { setConst(s, "HL_IOCTL_MEMORY", plus1) }, "HL_IOCTL_MEMORY"},
		{"DRM ioctl number", OnlyDRM, func(s *Spec) { setConst(s, "DRM_IOCTL_HL_WAIT_CS", plus1) }, "DRM_IOCTL_HL_WAIT_CS"},
		{"DRM ioctl index", OnlyDRM, func(s *Spec) { setConst(s, "HL_IOCTL_CS", plus1) }, "HL_IOCTL_CS"},

		// Probes: calls as a wrong hlsys function would make them.
		{"MAP device slots swapped (handle in U[0], hint in U[1])", Both, func(s *Spec) {
			setProbe(s, "MemMapDevice", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.MemArgs{U: [3]uint64{sA, sB}, Op: hlsys.MemOpMap}
				err := hlsys.Memory(b, a)
				return map[string]uint64{"va": a.Out()}, err
			})
		}, "input in struct hl_mem_in.map_device.handle"},
		{"MAP host without USERPTR", Both, func(s *Spec) {
			setProbe(s, "MemMapHost", func(b hlsys.Backend) (map[string]uint64, error) {
				host := make([]byte, 64)
				p := uint64(uintptr(unsafe.Pointer(&host[0])))
				a := &hlsys.MemArgs{U: [3]uint64{p, sB, sA}, Op: hlsys.MemOpMap}
				err := hlsys.Memory(b, a)
				return map[string]uint64{"va": a.Out(), "host": p}, err
			})
		}, "input in struct hl_mem_in.flags"},
		{"UNMAP with the FREE op", Both, func(s *Spec) {
			setProbe(s, "MemUnmap", func(b hlsys.Backend) (map[string]uint64, error) {
				return nil, hlsys.Memory(b, &hlsys.MemArgs{U: [3]uint64{sA}, Op: hlsys.MemOpFree})
			})
		}, "input in struct hl_mem_in.op"},
		{"ALLOC handle read from U[1]", Both, func(s *Spec) {
			setProbe(s, "MemAlloc", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.MemArgs{U: [3]uint64{sA, sB}, Op: hlsys.MemOpAlloc, Flags: hlsys.MemContiguous}
				err := hlsys.Memory(b, a)
				return map[string]uint64{"handle": a.U[1]}, err
			})
		}, `output "handle"`},
		{"export fd read as 64 bits", Both, func(s *Spec) {
			for _, name := range []string{"MemExportDMABuf61", "MemExportDMABuf"} {
				setProbe(s, name, func(b hlsys.Backend) (map[string]uint64, error) {
					a := &hlsys.MemArgs{U: [3]uint64{sA, sB, sD}, Op: hlsys.MemOpExportDMABuf, Flags: hlsys.DMABufFlags}
					err := hlsys.Memory(b, a)
					return map[string]uint64{"fd": a.U[0]}, err
				})
			}
		}, `output "fd"`},
		{"6.1 export form {handle, size} on the 6.12 header (offset dropped)", OnlyDRM, func(s *Spec) {
			setProbe(s, "MemExportDMABuf", func(b hlsys.Backend) (map[string]uint64, error) {
				f, err := hlsys.MemExportDMABuf61(b, sA, sB)
				return fdResult(f, err)
			})
		}, "input in struct hl_mem_in.export_dmabuf_fd.offset"},
		{"6.1 export with handle and size swapped", Only61, func(s *Spec) {
			setProbe(s, "MemExportDMABuf61", func(b hlsys.Backend) (map[string]uint64, error) {
				f, err := hlsys.MemExportDMABuf61(b, sB, sA)
				return fdResult(f, err)
			})
		}, "input in struct hl_mem_in.export_dmabuf_fd.handle"},
		{"CB INFO without GET_DEVICE_VA", Both, func(s *Spec) {
			setProbe(s, "CBDeviceVA", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.CBArgs{Handle: sA, Op: hlsys.CBOpInfo}
				err := hlsys.CommandBuffer(b, a)
				return map[string]uint64{"va": a.Handle}, err
			})
		}, "input in struct hl_cb_in.flags"},
		{"INFO return_size too small", Both, func(s *Spec) {
			setProbe(s, "GetDeviceStatus", func(b hlsys.Backend) (map[string]uint64, error) {
				var st hlsys.DeviceStatus
				a := &hlsys.InfoArgs{ReturnPointer: uint64(uintptr(unsafe.Pointer(&st))), ReturnSize: 4, Op: hlsys.InfoDeviceStatus}
				err := hlsys.Info(b, a)
				return map[string]uint64{"status": uint64(st.Status)}, err
			})
		}, "input in struct hl_info_args.return_size"},
		{"request in the other numbering", Both, func(s *Spec) {
			setProbe(s, "MemFree", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.MemArgs{U: [3]uint64{sA}, Op: hlsys.MemOpFree}
				return nil, b.Ioctl(other(b).Request(hlsys.IoctlMemory), unsafe.Pointer(a))
			})
		}, "probe MemFree: request"},
		{"WAIT_CS timeout in the seq slot", Both, func(s *Spec) {
			setProbe(s, "WaitForCSIn", func(b hlsys.Backend) (map[string]uint64, error) {
				out, err := hlsys.WaitForCSIn(b, new(hlsys.WaitCSArgs), sB, sA)
				return map[string]uint64{"status": uint64(out.Status), "flags": uint64(out.Flags),
					"ts": uint64(out.TimestampNsec), "map": uint64(out.CsCompletionMap)}, err
			})
		}, "input in struct hl_wait_cs_in.seq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ran := false
			for _, g := range gens(t) {
				if !tc.gens.has(g) {
					continue
				}
				ran = true
				spec := DefaultSpec(g)
				tc.mutate(&spec)
				facts, err := Compare(g, spec, hdrs[g.Name])
				require.NoError(t, err)
				bad := Mismatches(facts)
				found := false
				for _, m := range bad {
					if strings.Contains(m, tc.want) {
						found = true
						t.Logf("%s: caught: %s", g.Name, m)
					}
				}
				require.Truef(t, found, "%s: mutation not caught; mismatches: %q", g.Name, bad)
			}
			if !ran {
				t.Skipf("needs the 6.12 header: %s is unset", EnvNewHeader)
			}
		})
	}
}
