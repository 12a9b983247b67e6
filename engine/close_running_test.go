package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestCloseDoesNotFreeUnderRunningCS closes the engine while a copy much
// longer than CloseGrace runs on the device. Close gives up on the CS,
// but nothing the device may still touch (the host mapping, the device
// memory, the buffers the copy holds, also when the caller freed them
// meanwhile) may be released before the device has stopped: the emulated
// DMA engine must not fault on an unmapped address, and caller memory
// must not change after Close returns.
func TestCloseDoesNotFreeUnderRunningCS(t *testing.T) {
	for _, tc := range []struct {
		model, dir string
		free       bool // the caller frees both buffers while the copy runs
	}{
		{"gaudi2", "h2d", false}, {"gaudi2", "d2h", false}, {"gaudi2", "h2d", true}, {"gaudi2", "d2h", true},
		{"gaudi3", "h2d", false}, {"gaudi3", "d2h", true},
	} {
		model, dir := tc.model, tc.dir
		{
			t.Run(fmt.Sprintf("%s/%s/free=%v", model, dir, tc.free), func(t *testing.T) {
				const size = 512 << 20
				e, err := New(Config{Devices: DevicesEmulated, CloseGrace: time.Millisecond,
					Emulator: EmulatorConfig{Model: model, DRAMSize: 2 << 30}})
				require.NoError(t, err)
				mem := make([]byte, size)
				h, err := e.Register(mem)
				require.NoError(t, err)
				d, err := e.Alloc(size, Gaudi(0))
				require.NoError(t, err)
				sim := e.cp.Devs[0].Sim
				var f *Future
				if dir == "h2d" {
					f = e.Copy(context.Background(), d.All(), h.All())
				} else {
					f = e.Copy(context.Background(), h.All(), d.All())
				}
				// The copy is on the device once a CS was submitted.
				for sim.Stats().CSSubmitted == 0 && !f.IsDone() {
					time.Sleep(100 * time.Microsecond)
				}
				if tc.free {
					require.NoError(t, h.Deregister())
					require.NoError(t, d.Free())
				}
				time.Sleep(2 * time.Millisecond)
				require.NoError(t, e.Close())
				require.True(t, f.IsDone(), "Close resolves the copy it gave up on")
				t.Logf("copy: %v", f.Err())
				require.ErrorIs(t, f.Err(), ErrClosed)
				snap := bytes.Clone(mem[:1<<20])
				tail := bytes.Clone(mem[size-1<<20:])
				time.Sleep(20 * time.Millisecond)
				require.Zero(t, sim.Stats().EngineFaults, "the device ran into memory Close released")
				require.Equal(t, snap, mem[:1<<20], "caller memory changed after Close returned")
				require.Equal(t, tail, mem[size-1<<20:], "caller memory changed after Close returned")
			})
		}
	}
}

// TestCloseWhileCompletionSlotsFull closes the engine while a copy waits
// for a completion slot that hung CSs hold: the CS ioctl's retries went
// on (for seconds, the device's gate held) after Close had given up on the
// CSs ahead, and the copy then failed as a device error (ErrBusy) instead
// of ending with ErrClosed like every copy Close ends, and after Close
// had returned.
func TestCloseWhileCompletionSlotsFull(t *testing.T) {
	for _, model := range []string{"gaudi2", "gaudi3"} {
		t.Run(model, func(t *testing.T) {
			e, err := New(Config{Devices: DevicesEmulated, CloseGrace: time.Millisecond, MaxOpsPerCS: 1,
				Emulator: EmulatorConfig{Model: model, DRAMSize: 1 << 30}})
			require.NoError(t, err)
			h, err := e.Alloc(1<<20, Host)
			require.NoError(t, err)
			d, err := e.Alloc(1<<20, Gaudi(0))
			require.NoError(t, err)
			ctx := context.Background()
			sim := e.cp.Devs[0].Sim
			const slots = 64 // hlsim.DefaultMaxPendingCS, and dma's Gaudi3 submissions in flight
			sim.HangNextCS(slots)
			var hung []*Future
			for i := range slots {
				hung = append(hung, e.Copy(ctx, d.Slice(i*4096, 4096), h.Slice(i*4096, 4096)))
			}
			for sim.Stats().CSSubmitted < slots {
				time.Sleep(100 * time.Microsecond)
			}
			f := e.Copy(ctx, d.Slice(512<<10, 4096), h.Slice(512<<10, 4096))
			// Its worker is in the CS ioctl's retries once they are counted.
			for e.cp.Devs[0].Dev.Stats().SubmitRetries == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			require.NoError(t, e.Close())
			for i, f := range append(hung, f) {
				require.ErrorIs(t, f.Err(), ErrClosed, "copy %d, after Close returned", i)
			}
		})
	}
}

// TestCloseWhileInlineSubmitStalled closes the engine while a Copy run on
// its caller's goroutine (an idle device) waits in the CS ioctl's retries
// for the completion slot a hung CS holds. Close waits for such a call
// before it releases the device, and the call went on retrying (10 s),
// then failed as a device error (ErrBusy), instead of ending with
// ErrClosed at once: nothing of it had reached the device.
func TestCloseWhileInlineSubmitStalled(t *testing.T) {
	e, err := New(Config{Devices: DevicesEmulated, CloseGrace: time.Millisecond, MaxOpsPerCS: 1,
		Emulator: EmulatorConfig{DRAMSize: 1 << 30}})
	require.NoError(t, err)
	h, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	d, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	ctx := context.Background()
	g := e.cp.Devs[0]
	hung := holdEverySlot(t, e, d, h)
	res := make(chan *Future, 1)
	go func() { res <- e.Copy(ctx, d.Slice(512<<10, 4096), h.Slice(512<<10, 4096)) }()
	for g.Dev.Stats().SubmitRetries == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	require.NoError(t, e.Close())
	f := <-res
	require.ErrorIs(t, f.Err(), ErrClosed)
	require.ErrorIs(t, hung.Err(), ErrClosed)
	require.EqualValues(t, maxPendingCS, g.Sim.Stats().CSSubmitted, "the stalled copy reached the device")
}

// holdEverySlot fills device 0's completion slots (hlsim's
// DefaultMaxPendingCS, one op per CS with MaxOpsPerCS 1) behind a hung
// CS, whose copy it returns: the next CS needs the hung CS's slot, and
// its submission retries until the hung CS ends (the TDR, or Close).
// Copies of 4096 bytes at the start of d and h, up to 256 KiB.
func holdEverySlot(t *testing.T, e *Engine, d, h *Buffer) *Future {
	t.Helper()
	ctx := context.Background()
	e.cp.Devs[0].Sim.HangNextCS(1)
	hung := e.Copy(ctx, d.Slice(0, 4096), h.Slice(0, 4096))
	for i := 1; i < maxPendingCS; i++ {
		require.NoError(t, e.CopySync(ctx, d.Slice(i*4096, 4096), h.Slice(i*4096, 4096)))
	}
	return hung
}

// delayEverySlot fills device 0's completion slots with copies whose CSs
// end a second after they ran (one op per CS with MaxOpsPerCS 1), and
// returns their futures once every CS is submitted: the next CS finds no
// free slot until the first of them ends. Copies of 4096 bytes at the
// start of d and h, up to 256 KiB.
func delayEverySlot(t *testing.T, e *Engine, d, h *Buffer) []*Future {
	t.Helper()
	ctx := context.Background()
	sim := e.cp.Devs[0].Sim
	sim.DelayNextCS(maxPendingCS, time.Second)
	var fill []*Future
	for i := range maxPendingCS {
		fill = append(fill, e.Copy(ctx, d.Slice(i*4096, 4096), h.Slice(i*4096, 4096)))
	}
	for sim.Stats().CSSubmitted < maxPendingCS {
		time.Sleep(100 * time.Microsecond)
	}
	return fill
}

// maxPendingCS is the emulated driver's completion slots (and dma's
// Gaudi3 submissions in flight).
const maxPendingCS = hlsim.DefaultMaxPendingCS
