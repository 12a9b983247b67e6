package dma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestGaudi3StaleChunkRefused: a Gaudi3 chunk aliases its command
// buffer's bytes and carries the count of its packets that advance the
// channel's completion counter, taken at Chunk. A chunk submitted after
// its buffer was Reset and refilled wrote the new packets with the old
// count: the channel's counter then ran ahead of (or behind) the targets
// Submit records, so every later submission on that channel completed
// before its last packet (on hardware, which counts per packet) or never.
// Submit now refuses a chunk whose buffer was reset since Chunk.
func TestGaudi3StaleChunkRefused(t *testing.T) {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi3, DRAMSize: 64 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	m, err := d.AllocDevice(1 << 20)
	require.NoError(t, err)
	q := d.D2DQueues()[0]

	for _, tc := range []struct {
		name   string
		before func(cb *CB) // the buffer's packets when the chunk is taken
		after  func(cb *CB) // what it holds after Reset
	}{
		{"NOPs then a copy: one advance more than counted",
			func(cb *CB) {
				for range 5 {
					require.NoError(t, cb.AddNOP(0))
				}
			},
			func(cb *CB) { require.NoError(t, cb.AddLinDMA(m.Addr(), m.Addr()+4096, 4096)) }},
		{"a copy then NOPs: one advance fewer than counted",
			func(cb *CB) { require.NoError(t, cb.AddLinDMA(m.Addr(), m.Addr()+4096, 4096)) },
			func(cb *CB) {
				for range 5 {
					require.NoError(t, cb.AddNOP(0))
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb, err := d.NewCB(4096)
			require.NoError(t, err)
			defer cb.Close()
			tc.before(cb)
			stale := cb.Chunk(q)
			cb.Reset()
			tc.after(cb)
			_, err = d.Submit([]Chunk{stale})
			require.ErrorIs(t, err, ErrInvalid, "a chunk of a buffer reset since Chunk was submitted")

			// The buffer's current chunk is fine.
			seq, err := d.Submit([]Chunk{cb.Chunk(q)})
			require.NoError(t, err)
			st, err := d.Wait(seq, 0)
			for err == nil && st == CSBusy {
				st, err = d.Wait(seq, 1e9)
			}
			require.NoError(t, err)
			require.Equal(t, CSCompleted, st)
		})
	}
}
