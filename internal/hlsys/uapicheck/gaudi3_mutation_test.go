package uapicheck

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestGaudi3MutationsAreCaught is TestMutationsAreCaught for the Gaudi3
// additions (gaudi3.go): each case is a wrong hlsys function or constant as
// a careless edit would leave it, and the check against the real headers
// must report it.
func TestGaudi3MutationsAreCaught(t *testing.T) {
	hdrs := map[string]map[string]uint64{}
	for _, g := range gens(t) {
		hdr, err := Eval(g, DefaultSpec(g).Exprs(g))
		require.NoError(t, err)
		hdrs[g.Name] = hdr
	}
	status := func(out hlsys.WaitCSOut, err error) (map[string]uint64, error) {
		return map[string]uint64{"status": uint64(out.Status)}, err
	}
	for _, tc := range []struct {
		name   string
		gens   Gens
		mutate func(*Spec)
		want   string
	}{
		{"WAIT_CS interrupt mask", Both, func(s *Spec) { setConst(s, "HL_WAIT_CS_FLAGS_INTERRUPT_MASK", plus1) }, "HL_WAIT_CS_FLAGS_INTERRUPT_MASK"},
		{"WAIT_CS kernel CQ flag", Both, func(s *Spec) { setConst(s, "HL_WAIT_CS_FLAGS_INTERRUPT_KERNEL_CQ", plus1) }, "HL_WAIT_CS_FLAGS_INTERRUPT_KERNEL_CQ"},
		{"WAIT_CS register-interrupt flag", Both, func(s *Spec) { setConst(s, "HL_WAIT_CS_FLAGS_REGISTER_INTERRUPT", plus1) }, "HL_WAIT_CS_FLAGS_REGISTER_INTERRUPT"},
		{"MAP_BLOCK size read from the wrong half", Both, func(s *Spec) {
			setProbe(s, "MemMapBlock", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.MemArgs{U: [3]uint64{sA}, Op: hlsys.MemOpMapBlock}
				err := hlsys.Memory(b, a)
				return map[string]uint64{"handle": a.U[0], "size": a.U[1] >> 32}, err
			})
		}, `output "size"`},
		{"MAP_BLOCK with the MAP op", Both, func(s *Spec) {
			setProbe(s, "MemMapBlock", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.MemArgs{U: [3]uint64{sA}, Op: hlsys.MemOpMap}
				err := hlsys.Memory(b, a)
				h, size := a.BlockOut()
				return map[string]uint64{"handle": h, "size": uint64(size)}, err
			})
		}, "input in struct hl_mem_in.op"},
		{"PDMA mask read from the neighbouring u64", OnlyDRM, func(s *Spec) {
			setProbe(s, "PDMAUserOwnedChMask/reserved3", func(b hlsys.Backend) (map[string]uint64, error) {
				h, err := hlsys.GetHwIPInfo(b)
				return map[string]uint64{"mask": h.Reserved4}, err
			})
		}, `output "mask"`},
		{"interrupt id in the wrong bits", Both, func(s *Spec) {
			setProbe(s, "WaitForInterruptKernelCQ", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: sA, TimeoutUs: sC, CqCountersOffset: sB, InterruptTimeoutUs: sD,
					Flags: hlsys.WaitCSFlagsInterrupt | hlsys.WaitCSFlagsInterruptKernelCQ | testInterruptID<<16}}
				return status(*a.Out(), hlsys.WaitCS(b, a))
			})
		}, "input in struct hl_wait_cs_in.flags"},
		{"kernel CQ wait without KERNEL_CQ", Both, func(s *Spec) {
			setProbe(s, "WaitForInterruptKernelCQ", func(b hlsys.Backend) (map[string]uint64, error) {
				a := &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: sA, TimeoutUs: sC, CqCountersOffset: sB, InterruptTimeoutUs: sD,
					Flags: hlsys.WaitCSFlagsInterrupt | testInterruptID<<hlsys.WaitCSFlagsInterruptShift}}
				return status(*a.Out(), hlsys.WaitCS(b, a))
			})
		}, "input in struct hl_wait_cs_in.flags"},
		{"CQ index and target swapped", Both, func(s *Spec) {
			setProbe(s, "WaitForInterruptKernelCQ", func(b hlsys.Backend) (map[string]uint64, error) {
				return status(hlsys.WaitForInterruptKernelCQ(b, sA, sC, sB, testInterruptID, sD))
			})
		}, "input in struct hl_wait_cs_in.cq_counters_offset"},
		{"interrupt timeout in the CS timeout slot", Both, func(s *Spec) {
			setProbe(s, "WaitForInterruptUser", func(b hlsys.Backend) (map[string]uint64, error) {
				c := new(uint64)
				a := &hlsys.WaitCSArgs{In: hlsys.WaitCSIn{Seq: uint64(uintptr(unsafe.Pointer(c))), TimeoutUs: sD,
					Flags: hlsys.WaitCSFlagsInterrupt | testInterruptID<<hlsys.WaitCSFlagsInterruptShift}}
				m, err := status(*a.Out(), hlsys.WaitCS(b, a))
				m["addr"] = uint64(uintptr(unsafe.Pointer(c)))
				return m, err
			})
		}, "input in struct hl_wait_cs_in.interrupt_timeout_us"},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
				found := false
				for _, m := range Mismatches(facts) {
					if strings.Contains(m, tc.want) {
						found = true
						t.Logf("%s: caught: %s", g.Name, m)
					}
				}
				require.Truef(t, found, "%s: mutation not caught; mismatches: %q", g.Name, Mismatches(facts))
			}
			if !ran {
				t.Skipf("needs the 6.12 header: %s is unset", EnvNewHeader)
			}
		})
	}
}
