package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInfoModeOwnedOrAttached(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantName  string
		wantMode  string
		wantText  []string
		wantMemDo string
	}{
		{"owned (embedded default)", nil, "gaudi0", "owned",
			[]string{"mode                owned: gxfer opened the device"}, "gaudi0"},
		{"attached to an emulated runtime", []string{"-attach", "emulated"}, "attached0", "attached",
			[]string{"attached0: EMULATED", "attached: lent by hlsim runtime; pool 0x", "submits no CS", "-devices attached (emulated)"}, "attached0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gxfer(t, append([]string{"info", "-json"}, tc.args...)...)
			require.Equal(t, 0, code, errs)
			var doc infoDoc
			require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
			require.Len(t, doc.Devices, 1, "attach mode opens no device of its own")
			d := doc.Devices[0]
			assert.Equal(t, tc.wantName, d.Name)
			assert.Equal(t, tc.wantMode, d.Mode)
			if tc.wantMode == "attached" {
				assert.Equal(t, "hlsim runtime", d.LentBy)
				assert.NotEmpty(t, d.PoolStart)
				assert.EqualValues(t, 256<<20, d.PoolLen)
			} else {
				assert.Empty(t, d.LentBy)
			}
			require.Len(t, doc.MemoryDomains, 2)
			assert.Equal(t, tc.wantMemDo, doc.MemoryDomains[1].Name)

			code, out, errs = gxfer(t, append([]string{"info"}, tc.args...)...)
			require.Equal(t, 0, code, errs)
			for _, w := range tc.wantText {
				assert.Contains(t, out, w)
			}
		})
	}
}

func TestInfoAttachRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no runtime in this process", []string{"-attach", "runtime"}, "libSynapse.so is not loaded in this process"},
		{"6.1 kernel exports by handle only", []string{"-attach", "emulated", "-kernel", "6.1"}, "attach needs kernel 6.3 or later"},
		{"bad mode", []string{"-attach", "nope"}, "want emulated or runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := gxfer(t, append([]string{"info"}, tc.args...)...)
			require.NotEqual(t, 0, code)
			assert.Contains(t, errs, tc.want)
		})
	}
}

// TestInfoAttachEmulatedModel: -attach emulated lends a device of the
// model -model asks for, as the owned mode opens one.
func TestInfoAttachEmulatedModel(t *testing.T) {
	for _, tc := range []struct {
		model, want string
	}{
		{"gaudi1", "Gaudi"},
		{"gaudi2", "Gaudi2"},
		{"gaudi3", "Gaudi3"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			code, out, errs := gxfer(t, "info", "-json", "-attach", "emulated", "-model", tc.model)
			require.Equal(t, 0, code, errs)
			var doc infoDoc
			require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
			require.Len(t, doc.Devices, 1)
			assert.Equal(t, "attached", doc.Devices[0].Mode)
			assert.Equal(t, tc.want, doc.Devices[0].Model)
			assert.True(t, doc.Devices[0].Emulated)
		})
	}
}

// TestInfoAttachFlagConflicts: with -attach the runtime lends one device,
// so the flags that choose the devices gxfer opens itself are usage
// errors, not silently ignored; -attach runtime emulates nothing.
func TestInfoAttachFlagConflicts(t *testing.T) {
	checkUsageErrors(t, "gxfer info", []usageCase{
		{[]string{"info", "-attach", "emulated", "-emulated", "3"}, "-emulated has no meaning with -attach"},
		{[]string{"info", "-attach", "emulated", "-devices", "emulated"}, "-devices has no meaning with -attach"},
		{[]string{"info", "-attach", "runtime", "-model", "gaudi3"}, "-model has no meaning with -attach runtime"},
		{[]string{"info", "-attach", "runtime", "-kernel", "6.5"}, "-kernel has no meaning with -attach runtime"},
		// An empty value (say an unset shell variable) is not "no attach":
		// it ran owned mode and said nothing.
		{[]string{"info", "-attach", ""}, "want emulated or runtime"},
	})
}
