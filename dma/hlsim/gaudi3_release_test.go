package hlsim

import (
	"os"
	"sync/atomic"
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

// TestRulesMappingsOutliveDeviceClose (D12): a user mapping holds its
// own reference in the driver (hl_mem_mgr_mmap on the CB until
// hl_mmap_mem_buf_vm_close; hl_hw_block_mmap's hl_ctx_get until
// hw_block_vm_close), so the device closed (removed) under an open
// context leaves the CB page and the CH_A block mapped and usable until
// the user unmaps them, or the context's Close undoes them as it does any
// mapping (hlsys.Backend). The emulator unmapped them under the user: a
// read after Device.Close faulted.
func TestRulesMappingsOutliveDeviceClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		undo  func(r *g3rig)
		first bool // the context is closed before the device
	}{
		{"Munmap", func(r *g3rig) {
			require.NoError(t, r.b.Munmap(r.cqMem))
			require.Equal(t, int64(1), r.d.Stats().UserMappings)
			require.NoError(t, r.b.Munmap(r.regs))
			require.NoError(t, r.b.Close())
		}, false},
		{"context Close", func(r *g3rig) { require.NoError(t, r.b.Close()) }, false},
		{"context closed first", func(r *g3rig) { require.NoError(t, r.b.Close()) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newG3Rig(t, Config{}, 2)
			r.cqMem[8] = 0x5a
			require.Equal(t, int64(2), r.d.Stats().UserMappings)
			if tc.first {
				tc.undo(r)
				require.Zero(t, r.d.Stats().UserMappings, "Close undoes the mappings")
				require.NoError(t, r.d.Close())
				return
			}
			require.NoError(t, r.d.Close())
			require.Equal(t, int64(2), r.d.Stats().UserMappings, "the mappings outlive the device")
			require.Equal(t, byte(0x5a), r.cqMem[8], "the CB page keeps its bytes")
			r.cqMem[9] = 1
			require.Equal(t, uint32(g3TestRing-1), r.rd(gaudi3.RegMSQSize), "the block is still readable")
			r.w(gaudi3.RegMSQPI, 8)
			tc.undo(r)
			require.Zero(t, r.d.Stats().UserMappings, "nothing leaked")
		})
	}
}

// TestGaudi3DoorbellRacingCloseIsHarmless (D12): a store to a mapped
// CH_A block, and so the Doorbell hint after it, is harmless whenever it
// comes: the driver never unmaps the block under the user (the mapping
// holds the context: hl_hw_block_mmap's hl_ctx_get, put in
// hw_block_vm_close). Doorbell finds its channel without memMu; one
// inside it when the context's Close unmapped the register file
// (g3Release) read the unmapped file and faulted (SIGSEGV). "paused": a
// Doorbell held between its look-up and its mark while Close runs;
// "concurrent": doorbells rung in a loop while another goroutine closes.
func TestGaudi3DoorbellRacingCloseIsHarmless(t *testing.T) {
	t.Run("paused", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			r := newG3Rig(t, Config{}, 2)
			var once atomic.Bool
			r.channel().markHook = func() {
				if once.CompareAndSwap(false, true) {
					_ = r.b.Close() // before the doorbell's mark
				}
			}
			r.b.(*hctx).Doorbell(r.regs)
			require.True(t, once.Load())
			require.ErrorIs(t, r.b.(*hctx).usable(), os.ErrClosed)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		for i := 0; i < 50; i++ {
			r := newG3Rig(t, Config{}, 2)
			c, regs := r.b.(*hctx), r.regs
			started, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				close(started)
				for j := 0; j < 100_000 && c.usable() == nil; j++ {
					c.Doorbell(regs)
				}
				for j := 0; j < 100; j++ {
					c.Doorbell(regs) // after the Close too
				}
			}()
			<-started
			require.NoError(t, r.b.Close())
			<-done
		}
	})
}

// TestGaudi3ResetRacingCloseIsHarmless: a hard reset run in the
// background (Device.Reset with no eventfd: hl_device_cond_reset, the
// reset work) clears the channels' registers (g3Reset) while the
// context's Close may release them; the reset cleared a register file
// that g3Release had just unmapped (SIGSEGV, found by FuzzGaudi3Regs).
// The reset is held after it read the channels while Close runs.
func TestGaudi3ResetRacingCloseIsHarmless(t *testing.T) {
	r := newG3Rig(t, Config{}, 2)
	c := r.b.(*hctx)
	var once atomic.Bool
	paused, resume := make(chan struct{}), make(chan struct{})
	c.eachHook = func() {
		if once.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	go r.d.Reset() // the hard reset's g3Reset reads the channels first
	<-paused
	require.NoError(t, r.b.Close())
	close(resume) // the reset clears the released channels
	require.NoError(t, r.d.Close())
	require.Equal(t, uint64(1), r.d.Stats().Resets)
}
