package dma

import (
	"bytes"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
)

// TestGaudi3TDRStopsEveryChannelOfAnAbortedSubmission: direct mode's
// TDR ends ABORTED every unfinished submission that shares a channel with
// the one that timed out, so it must stop every channel such a
// submission still has work queued on, not only the timed-out one's. It
// stopped only the timed-out submission's channels: a submission with a
// chunk on the hung channel and another on a busy one was reported
// ABORTED while the busy channel went on to run its chunk, writing the
// destination the caller had been told was given up (and may reuse).
//
// Each row hangs channel a under T, then submits X with a chunk behind
// the hang on a and a chunk on channel b: a long memset, then a copy of a
// zeroed device page into a host page. Once Wait has reported T TIMEDOUT
// and X ABORTED the host page is filled with a sentinel; no channel may
// write it afterwards.
func TestGaudi3TDRStopsEveryChannelOfAnAbortedSubmission(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b func(d *Device) uint32
	}{
		{"hung H2D channel, busy D2H channel", func(d *Device) uint32 { return d.H2DQueues()[0] }, func(d *Device) uint32 { return d.D2HQueues()[0] }},
		{"hung D2H channel, busy H2D channel", func(d *Device) uint32 { return d.D2HQueues()[0] }, func(d *Device) uint32 { return d.H2DQueues()[1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const long = 256 << 20 // the memset still runs when T's TDR fires
			sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi3, DRAMSize: 1 << 30,
				Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sim.Close() })
			d, err := OpenBackend(sim.Name(), simOpen(sim), Options{CSTimeout: 2 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			a, b := tc.a(d), tc.b(d)
			require.NotEqual(t, a, b)

			big, err := d.AllocDevice(long)
			require.NoError(t, err)
			zero, err := d.AllocDevice(4096)
			require.NoError(t, err)
			h, err := AllocHostPages(4096)
			require.NoError(t, err)
			t.Cleanup(func() { _ = FreeHostPages(h) })
			hm, err := d.MapHostBytes(h)
			require.NoError(t, err)

			hung := copyCB(t, d)
			behind := copyCB(t, d)
			busy, err := d.NewCB(4096)
			require.NoError(t, err)
			t.Cleanup(func() { _ = busy.Close() })
			require.NoError(t, busy.AddMemset(zero.Addr(), 0, 4096))
			require.NoError(t, busy.AddMemset(big.Addr(), 0x5a5a5a5a5a5a5a5a, long))
			require.NoError(t, busy.AddLinDMA(hm.DeviceAddr(), zero.Addr(), 4096))

			sim.HangNextCS(1)
			tSeq, err := d.Submit([]Chunk{hung.Chunk(a)})
			require.NoError(t, err)
			xSeq, err := d.Submit([]Chunk{behind.Chunk(a), busy.Chunk(b)})
			require.NoError(t, err)

			st, err := d.Wait(tSeq, 5*time.Second)
			require.Equal(t, CSTimedOut.String(), st.String(), "T (err %v)", err)
			st, err = d.Wait(xSeq, 0)
			require.Equal(t, CSAborted.String(), st.String(), "X (err %v)", err)
			require.ErrorIs(t, err, ErrCSAborted)

			sentinel := bytes.Repeat([]byte{0xee}, len(h))
			copy(h, sentinel)
			time.Sleep(time.Second) // well past the memset's end
			require.True(t, bytes.Equal(sentinel, h),
				"a channel ran X's chunk after Wait reported X aborted (first byte %#x)", h[0])
		})
	}
}
