package dma

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestGaudi3EmulatorClosedFirst: the emulated device closed (hlsim's
// Device.Close, a device removal) while a Device still has direct mode
// set up. The driver's user mappings hold their own references (the CB's
// in hl_mem_mgr_mmap until hl_mmap_mem_buf_vm_close, the context's in
// hl_hw_block_mmap until hw_block_vm_close), so the counters page and the
// channel blocks stay valid until the user unmaps them. The emulator
// unmapped them under the Device, and Progress and Wait then read
// unmapped memory (a fault that kills the process). The Device's Close
// then unmaps them (Stats.UserMappings back to 0).
func TestGaudi3EmulatorClosedFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running bool // a submission is still running (hung) at the close
	}{
		{"idle", false},
		{"running", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, sim := openG3(t, hlsim.Config{}, nil)
			cb := copyCB(t, d)
			seq, err := d.Submit([]Chunk{cb.Chunk(2)})
			require.NoError(t, err)
			st, err := d.Wait(seq, 10*time.Second)
			require.NoError(t, err)
			require.Equal(t, CSCompleted, st)
			if tc.running {
				sim.HangNextCS(1)
				seq, err = d.Submit([]Chunk{cb.Chunk(2)})
				require.NoError(t, err)
			}
			last, ok := d.Progress()
			require.True(t, ok)
			require.NotZero(t, last)

			// A poller in another goroutine reads the counters while the
			// device goes.
			stop := make(chan struct{})
			polled := make(chan int)
			go func() {
				n := 0
				for {
					select {
					case <-stop:
						polled <- n
						return
					default:
					}
					if _, ok := d.Progress(); ok {
						n++
					}
				}
			}()
			require.NoError(t, sim.Close())
			close(stop)
			<-polled
			require.NotZero(t, sim.Stats().UserMappings, "the counters page and the blocks are still mapped")

			stamp, ok := d.Progress()
			require.True(t, ok, "the counters stay mapped until the Device unmaps them")
			require.Equal(t, last, stamp, "the last values: nothing advances them now")
			st, err = d.Wait(seq, time.Second)
			if tc.running {
				require.ErrorIs(t, err, ErrNotOperational, "status %v", st)
			} else {
				require.NoError(t, err)
				require.Equal(t, CSCompleted, st)
			}
			require.NoError(t, cb.Close())
			_ = d.Close() // the driver calls fail (ENODEV); the host side is undone
			_, ok = d.Progress()
			require.False(t, ok)
			require.Zero(t, sim.Stats().UserMappings, "every mapping undone: none leaked")
		})
	}
}
