package uapicheck

import (
	"fmt"
	"os"
	"path/filepath"
)

// EnvIntelHeader names an optional directory that holds Intel's own
// drm/habanalabs_accel.h (HabanaAI/Intel_Gaudi3_Software,
// habanalabs/include/uapi/drm/habanalabs_accel.h) under drm/. Intel's
// header is the one that names the Gaudi3 fields upstream leaves reserved
// (pdma_user_owned_ch_mask among them). No package ships it, so CI does not
// set the variable and TestHeaderIntel skips; run it by hand after copying
// the header (see docs/gaudi3.md).
const EnvIntelHeader = "GXFER_UAPI_INTEL_HEADER_DIR"

// GenIntel is Intel's header in dir (dir/drm/habanalabs_accel.h), compiled
// with the <drm/drm.h> and <linux/...> headers of the 6.12 tree drm (a
// GenDRM generation). It has the DRM accel numbering.
func GenIntel(dir string, drm Gen) (Gen, error) {
	if _, err := os.Stat(filepath.Join(dir, "drm", "habanalabs_accel.h")); err != nil {
		return Gen{}, fmt.Errorf("uapicheck: no drm/habanalabs_accel.h under %s: %w", dir, err)
	}
	return Gen{Name: "Intel drm/habanalabs_accel.h", Include: "drm/habanalabs_accel.h",
		IDirs: append([]string{dir}, drm.IDirs...), DRM: true}, nil
}

// intelNames maps the hw_ip_info members the 6.12 header calls reserved to
// their names in Intel's header.
var intelNames = map[string]string{
	"reserved1": "interposer_version", "reserved2": "substrate_version",
	"reserved3": "pdma_user_owned_ch_mask", "reserved4": "nic_ports_mask",
	"reserved5": "nic_ports_external_mask", "reserved6": "mme_enabled_mask",
	"reserved7": "odp_supported", "reserved9": "sched_arc_enabled_mask",
}

// IntelSpec is the complete check of hlsys against Intel's header: the
// DRM generation's spec with the hw_ip_info members renamed as Intel names
// them, so the same offsets and widths are compared under Intel's names,
// and the end of the ioctl range moved past Intel's extra NIC ioctl.
func IntelSpec(g Gen) Spec {
	s := DefaultSpec(g)
	s.Layouts = append([]Layout(nil), s.Layouts...)
	for i, l := range s.Layouts {
		if l.C != "struct hl_info_hw_ip_info" {
			continue
		}
		f := make(map[string]string, len(l.Fields))
		for goName, member := range l.Fields {
			if n, ok := intelNames[member]; ok {
				member = n
			}
			f[goName] = member
		}
		l.Fields = f
		s.Layouts[i] = l
	}
	s.Consts = append([]Const(nil), s.Consts...)
	for i, c := range s.Consts {
		switch c.C {
		case "offsetof(struct hl_info_hw_ip_info, reserved3)":
			s.Consts[i].C = "offsetof(struct hl_info_hw_ip_info, pdma_user_owned_ch_mask)"
		case "HL_COMMAND_END":
			// Intel's header has a seventh ioctl, HL_IOCTL_NIC (0x06),
			// right after DEBUG; HL_COMMAND_END moves past it. The six
			// ioctls hlsys issues keep their numbers: DEBUG's successor
			// is NIC instead of the end.
			s.Consts[i].C = "DRM_COMMAND_BASE + HL_IOCTL_NIC"
		}
	}
	s.Probes = append([]Probe(nil), s.Probes...)
	for i, p := range s.Probes {
		if p.Name == "PDMAUserOwnedChMask/reserved3" {
			s.Probes[i] = pdmaMaskProbe("pdma_user_owned_ch_mask", OnlyDRM)
		}
	}
	return s
}
