package dma

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestWaitAllocatesNothing: polling a CS (Wait with timeout 0, as the
// completion actor and a waiting future do many times per CS) allocates
// nothing: the WAIT_CS argument struct, which escapes through the
// backend's Ioctl, is reused. It was one allocation per poll, a third of
// a 256-copy batch's allocations.
func TestWaitAllocatesNothing(t *testing.T) {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 64 << 20})
	require.NoError(t, err)
	defer sim.Close()
	d, err := OpenBackend(sim.Name(), sim.Open, Options{})
	require.NoError(t, err)
	defer d.Close()
	mem, err := d.AllocDevice(4096)
	require.NoError(t, err)
	host, err := AllocHostPages(4096)
	require.NoError(t, err)
	defer FreeHostPages(host)
	hm, err := d.MapHostBytes(host)
	require.NoError(t, err)
	cb, err := d.NewCB(4096)
	require.NoError(t, err)
	require.NoError(t, cb.AddLinDMA(mem.Addr(), hm.DeviceAddr(), 4096))
	require.NoError(t, cb.AddNOP(EB|MB))
	seq, err := d.Submit([]Chunk{cb.Chunk(d.H2DQueues()[0])})
	require.NoError(t, err)
	st, err := d.Wait(seq, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, CSCompleted, st)
	allocs := testing.AllocsPerRun(100, func() {
		if st, err := d.Wait(seq, 0); err != nil || st != CSCompleted {
			panic(err)
		}
	})
	require.Zero(t, allocs, "allocations per Wait poll")
}
