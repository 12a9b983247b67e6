package uapicheck

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// Layout maps one hlsys struct type onto one C type of the header.
type Layout struct {
	Go reflect.Type
	C  string // e.g. "struct hl_mem_in"
	// Size is the C type's size in this generation when it is smaller than
	// the Go type (HwIPInfo against the 6.1 header: 256); 0 means the Go
	// type's size.
	Size uint64
	// Fields maps every Go field (blank fields excepted) to the C member
	// that holds the same bytes. A key "A+B" is a run of consecutive Go
	// fields that one C member covers; a value "" marks fields the
	// generation does not have, allowed only at or beyond Size.
	Fields map[string]string
}

func (l Layout) exprs() []string {
	e := []string{"sizeof(" + l.C + ")"}
	for _, m := range l.Fields {
		if m != "" {
			e = append(e, offExpr(l.C, m), sizeExpr(l.C, m))
		}
	}
	return e
}

func offExpr(typ, m string) string  { return "offsetof(" + typ + ", " + m + ")" }
func sizeExpr(typ, m string) string { return "FSIZE(" + typ + ", " + m + ")" }

// facts compares the type's size, every mapped field's offset and width,
// and checks that the mapped fields tile the struct: no Go field is left
// out and no byte is implicit padding, so no C member can go unchecked.
func (l Layout) facts(hdr map[string]uint64) []Fact {
	name := l.Go.String()
	size := uint64(l.Go.Size())
	if l.Size != 0 {
		size = l.Size
	}
	facts := []Fact{{Key: fmt.Sprintf("sizeof(%s) vs %s", l.C, name), Header: hdr["sizeof("+l.C+")"], Go: size}}

	type span struct{ off, size uint64 }
	fields := map[string]span{}
	for i := 0; i < l.Go.NumField(); i++ {
		f := l.Go.Field(i)
		if f.Name != "_" {
			fields[f.Name] = span{uint64(f.Offset), uint64(f.Type.Size())}
		}
	}
	covered := make([]bool, size)
	used := map[string]bool{}
	for goName, member := range l.Fields {
		var sp span
		first := true
		for _, part := range strings.Split(goName, "+") {
			p, ok := fields[part]
			if !ok || used[part] {
				facts = append(facts, Fact{Key: fmt.Sprintf("%s: mapping names unknown or repeated Go field %q", name, part), Go: 1})
				continue
			}
			used[part] = true
			if first {
				sp, first = p, false
			} else if p.off != sp.off+sp.size {
				facts = append(facts, Fact{Key: fmt.Sprintf("%s: %q is not a run of consecutive fields", name, goName), Go: 1})
			} else {
				sp.size += p.size
			}
		}
		if member == "" {
			if sp.off < size {
				facts = append(facts, Fact{Key: fmt.Sprintf("%s.%s is absent from %s but lies inside it", name, goName, l.C), Go: 1})
			}
			continue
		}
		facts = append(facts,
			Fact{Key: fmt.Sprintf("%s vs %s.%s offset", offExpr(l.C, member), name, goName), Header: hdr[offExpr(l.C, member)], Go: sp.off},
			Fact{Key: fmt.Sprintf("%s vs %s.%s width", sizeExpr(l.C, member), name, goName), Header: hdr[sizeExpr(l.C, member)], Go: sp.size})
		for b := sp.off; b < sp.off+sp.size && b < size; b++ {
			covered[b] = true
		}
	}
	var unmapped []string
	for f := range fields {
		if !used[f] {
			unmapped = append(unmapped, f)
		}
	}
	facts = append(facts, Fact{Key: fmt.Sprintf("%s: Go fields with no C member %v", name, unmapped), Go: uint64(len(unmapped))})
	var holes uint64
	for _, c := range covered {
		if !c {
			holes++
		}
	}
	facts = append(facts, Fact{Key: fmt.Sprintf("%s: bytes of %s no checked field covers", name, l.C), Go: holes})
	return facts
}

// Layouts is every hlsys struct type checked against generation g.
func Layouts(g Gen) []Layout {
	var (
		hwGen         map[string]string
		hwSize        uint64
		exportMembers map[string]string
	)
	if g.DRM {
		hwGen = map[string]string{
			"Reserved1": "reserved1", "Reserved2": "reserved2", "Reserved3": "reserved3",
			"Reserved4": "reserved4", "Reserved5": "reserved5", "Reserved6": "reserved6",
			"Reserved7": "reserved7", "RevisionID": "revision_id", "TpcInterruptID": "tpc_interrupt_id",
			"RotatorEnabledMask": "rotator_enabled_mask", "Reserved9": "reserved9",
			"EngineCoreInterruptRegAddr": "engine_core_interrupt_reg_addr",
			"ReservedDramSize":           "reserved_dram_size",
		}
		exportMembers = map[string]string{"U": "export_dmabuf_fd"}
	} else {
		hwSize = hlsys.HwIPInfoSize61
		hwGen = map[string]string{
			"Reserved1+Reserved2": "pad2", "Reserved3": "reserved4",
			// Not in the 6.1 struct: the driver fills only its 256 bytes.
			"Reserved4+Reserved5+Reserved6+Reserved7+RevisionID+TpcInterruptID+RotatorEnabledMask+Reserved9+EngineCoreInterruptRegAddr+ReservedDramSize": "",
		}
		exportMembers = map[string]string{"U": "map_host"} // 6.1 export is 16 bytes; map_host spans the union
	}
	hw := map[string]string{
		"SramBaseAddress": "sram_base_address", "DramBaseAddress": "dram_base_address",
		"DramSize": "dram_size", "SramSize": "sram_size", "NumOfEvents": "num_of_events",
		"DeviceID": "device_id", "ModuleID": "module_id", "DecoderEnabledMask": "decoder_enabled_mask",
		"FirstAvailableInterruptID": "first_available_interrupt_id", "ServerType": "server_type",
		"CpldVersion": "cpld_version", "PsocPciPllNr": "psoc_pci_pll_nr", "PsocPciPllNf": "psoc_pci_pll_nf",
		"PsocPciPllOd": "psoc_pci_pll_od", "PsocPciPllDivFactor": "psoc_pci_pll_div_factor",
		"TpcEnabledMask": "tpc_enabled_mask", "DramEnabled": "dram_enabled",
		"SecurityEnabled": "security_enabled", "MmeMasterSlaveMode": "mme_master_slave_mode",
		"CpucpVersion": "cpucp_version", "CardName": "card_name",
		"TpcEnabledMaskExt": "tpc_enabled_mask_ext", "DramPageSize": "dram_page_size",
		"EdmaEnabledMask": "edma_enabled_mask", "NumberOfUserInterrupts": "number_of_user_interrupts",
		"DeviceMemAllocDefaultPageSize": "device_mem_alloc_default_page_size",
	}
	for k, v := range hwGen {
		hw[k] = v
	}
	mem := map[string]string{"Op": "op", "Flags": "flags", "CtxID": "ctx_id", "NumOfElements": "num_of_elements"}
	for k, v := range exportMembers {
		mem[k] = v
	}
	return []Layout{
		{Go: reflect.TypeFor[hlsys.InfoArgs](), C: "struct hl_info_args", Fields: map[string]string{
			"ReturnPointer": "return_pointer", "ReturnSize": "return_size", "Op": "op", "Arg": "eventfd", "Pad": "pad",
		}},
		{Go: reflect.TypeFor[hlsys.HwIPInfo](), C: "struct hl_info_hw_ip_info", Size: hwSize, Fields: hw},
		{Go: reflect.TypeFor[hlsys.DramUsage](), C: "struct hl_info_dram_usage", Fields: map[string]string{
			"DramFreeMem": "dram_free_mem", "CtxDramMem": "ctx_dram_mem",
		}},
		{Go: reflect.TypeFor[hlsys.DeviceStatus](), C: "struct hl_info_device_status", Fields: map[string]string{
			"Status": "status", "Pad": "pad",
		}},
		{Go: reflect.TypeFor[hlsys.MemArgs](), C: "struct hl_mem_in", Fields: mem},
		{Go: reflect.TypeFor[hlsys.CBArgs](), C: "struct hl_cb_in", Fields: map[string]string{
			"Handle": "cb_handle", "Op": "op", "CBSize": "cb_size", "CtxID": "ctx_id", "Flags": "flags",
		}},
		{Go: reflect.TypeFor[hlsys.CSChunk](), C: "struct hl_cs_chunk", Fields: map[string]string{
			"CBHandle": "cb_handle", "QueueIndex": "queue_index", "CBSize": "cb_size",
			"Flags": "cs_chunk_flags", "CollectiveEngineID": "collective_engine_id", "Pad": "pad",
		}},
		{Go: reflect.TypeFor[hlsys.CSIn](), C: "struct hl_cs_in", Fields: map[string]string{
			"ChunksRestore": "chunks_restore", "ChunksExecute": "chunks_execute", "Seq": "seq",
			"NumChunksRestore": "num_chunks_restore", "NumChunksExecute": "num_chunks_execute",
			"Timeout": "timeout", "CSFlags": "cs_flags", "CtxID": "ctx_id", "Pad": "pad",
		}},
		{Go: reflect.TypeFor[hlsys.CSOut](), C: "struct hl_cs_out", Fields: map[string]string{
			"Seq": "seq", "Status": "status", "SobBaseAddrOffset": "sob_base_addr_offset",
			"SobCountBeforeSubmission": "sob_count_before_submission", "Pad": "pad",
		}},
		{Go: reflect.TypeFor[hlsys.CSArgs](), C: "union hl_cs_args", Fields: map[string]string{"In": "in"}},
		{Go: reflect.TypeFor[hlsys.WaitCSIn](), C: "struct hl_wait_cs_in", Fields: map[string]string{
			"Seq": "seq", "TimeoutUs": "timeout_us", "CtxID": "ctx_id", "Flags": "flags",
			"InterruptTimeoutUs": "interrupt_timeout_us", "CqCountersOffset": "cq_counters_offset",
			"TimestampHandle": "timestamp_handle", "TimestampOffset": "timestamp_offset",
		}},
		{Go: reflect.TypeFor[hlsys.WaitCSOut](), C: "struct hl_wait_cs_out", Fields: map[string]string{
			"Status": "status", "Flags": "flags", "TimestampNsec": "timestamp_nsec",
			"CsCompletionMap": "cs_completion_map", "Pad": "pad",
		}},
		{Go: reflect.TypeFor[hlsys.WaitCSArgs](), C: "union hl_wait_cs_args", Fields: map[string]string{"In": "in"}},
	}
}
