package hlsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gaudi3"
)

// TestRulesGaudi3ReleaseBusyResets (G14): direct-mode work holds no CS,
// so a context's release does not wait for it; hpriv_release then finds
// the device not idle (gaudi3_is_pdma_group_idle reads every PDMA
// channel, the user-owned ones included) and resets it. A channel that
// finished its work, or whose queue software stopped, is idle: no reset.
func TestRulesGaudi3ReleaseBusyResets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *g3rig, pkt []byte)
		reset bool
	}{
		{"idle after its work", func(r *g3rig, pkt []byte) {
			r.post(pkt)
			_, err := r.wait(1)
			require.NoError(t, err)
		}, false},
		{"never used", func(*g3rig, []byte) {}, false},
		{"hung doorbell", func(r *g3rig, pkt []byte) {
			r.d.HangNextCS(1)
			r.post(pkt)
		}, true},
		{"completion held back", func(r *g3rig, pkt []byte) {
			r.d.DelayNextCS(1, time.Hour)
			r.post(pkt)
		}, true},
		{"hung, then stopped by software", func(r *g3rig, pkt []byte) {
			r.d.HangNextCS(1)
			r.post(pkt)
			r.w(gaudi3.RegCQReconfig, 1)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newG3Rig(t, Config{}, 2)
			_, dstVA := r.host(4096)
			_, srcVA := r.host(4096)
			tc.setup(r, r.lin(dstVA, srcVA, 4096, gaudi3.DirHostToDevice))
			require.Zero(t, r.d.Stats().Resets)
			require.NoError(t, r.b.Close())
			want := uint64(0)
			if tc.reset {
				want = 1
			}
			require.Equal(t, want, r.d.Stats().Resets, "RESET_COUNT after the release")
			// The device is usable again once the release returned.
			b, err := r.d.open()
			require.NoError(t, err)
			require.NoError(t, b.Close())
		})
	}
}
