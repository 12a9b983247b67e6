package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInfoDriverGeneration: DRM accel nodes and ioctl numbers arrived in
// kernel 6.7 (not 6.6); a legacy-numbered {addr, size, offset} export is a
// 6.3-6.6 driver that ignores the offset.
func TestInfoDriverGeneration(t *testing.T) {
	for _, tc := range []struct{ kernel, gen, export string }{
		{"6.1", "legacy habanalabs char device (kernels up to 6.6): /dev/hlN", "{handle, size} (kernel 6.1 form)"},
		{"6.5", "legacy habanalabs char device (kernels up to 6.6): /dev/hlN", "{addr, size, offset} (kernels 6.3-6.6: the driver ignores the offset, so gxfer exports from the allocation start and carries it)"},
		{"6.8", "DRM accel (kernels 6.7 and later): /dev/accel/accelN", "{addr, size, offset} (kernel 6.7 and later)"},
	} {
		code, out, errs := gxfer(t, "info", "-json", "-kernel", tc.kernel)
		require.Equal(t, 0, code, errs)
		var doc infoDoc
		require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
		require.Len(t, doc.Devices, 1)
		require.Equal(t, tc.gen, doc.Devices[0].DriverGeneration, "kernel %s", tc.kernel)
		require.Equal(t, tc.export, doc.Devices[0].DMABufExportAPI, "kernel %s", tc.kernel)
	}
}

// TestKernelFlagOutOfRange: -kernel below 6.1, which the flag's help
// excludes, or with a number that does not fit an int is a usage error
// (exit status 2, one line), like any bad flag value.
func TestKernelFlagOutOfRange(t *testing.T) {
	checkUsageErrors(t, "gxfer", []usageCase{
		{[]string{"info", "-kernel", "5.4"}, "bad -kernel \"5.4\""},
		{[]string{"info", "-kernel", "6.0"}, "bad -kernel \"6.0\""},
		{[]string{"info", "-kernel", "99999999999999999999.1"}, "bad -kernel"},
		{[]string{"perf", "-kernel", "4.19", "-t", "h2h", "-s", "8", "-n", "1"}, "bad -kernel \"4.19\""},
	})
	for _, k := range []string{"6.1", "6.12.3", "7.0"} {
		code, _, errs := gxfer(t, "info", "-kernel", k)
		assert.Equal(t, 0, code, "-kernel %s: %s", k, errs)
	}
}
