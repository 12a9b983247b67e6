package uapicheck

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeaderIntel checks hlsys against Intel's own header when
// EnvIntelHeader names a directory with drm/habanalabs_accel.h in it: every
// layout, constant and probe of the 6.12 check, with hw_ip_info's reserved
// members under Intel's names (pdma_user_owned_ch_mask at the offset
// hlsys.HwIPInfo.PDMAUserOwnedChMask reads).
func TestHeaderIntel(t *testing.T) {
	dir := os.Getenv(EnvIntelHeader)
	if dir == "" {
		t.Skipf("%s is unset: Intel's drm/habanalabs_accel.h is not checked", EnvIntelHeader)
	}
	g, err := GenIntel(dir, drmGen(t))
	require.NoError(t, err)
	facts, err := Check(g, IntelSpec(g))
	require.NoError(t, err)
	require.Greater(t, len(facts), 300, "suspiciously few facts")
	for _, m := range Mismatches(facts) {
		t.Errorf("%s: %s", g.Name, m)
	}
	t.Logf("%s: %d facts checked", g.Name, len(facts))
}

// TestIntelSpecRenames pins that IntelSpec renames exactly the reserved
// members and leaves the DRM spec itself untouched.
func TestIntelSpecRenames(t *testing.T) {
	g := Gen{DRM: true}
	drm, intel := DefaultSpec(g), IntelSpec(g)
	find := func(s Spec) Layout {
		for _, l := range s.Layouts {
			if l.C == "struct hl_info_hw_ip_info" {
				return l
			}
		}
		t.Fatal("no hw_ip_info layout")
		return Layout{}
	}
	require.Equal(t, "reserved3", find(drm).Fields["Reserved3"])
	require.Equal(t, "pdma_user_owned_ch_mask", find(intel).Fields["Reserved3"])
	require.Equal(t, "device_mem_alloc_default_page_size", find(intel).Fields["DeviceMemAllocDefaultPageSize"])
	require.Len(t, intel.Probes, len(drm.Probes))
	require.Len(t, intel.Consts, len(drm.Consts))
}
