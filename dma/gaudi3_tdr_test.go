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

// TestGaudi3TDRAfterTheSubmissionCompleted: the TDR of a submission that
// completed after its caller (a Wait, or a Submit looking for a slot) last
// saw it unfinished past its timeout ends it COMPLETED and resets nothing.
// timeout stopped and programmed its channels anyway and ended every
// other unfinished submission on them ABORTED, healthy ones included.
// Each row calls timeout as such a caller would, once the submission's
// counter has reached its target, with another submission still running
// on the channel (its completion held back by DelayNextCS).
func TestGaudi3TDRAfterTheSubmissionCompleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue func(d *Device) uint32
	}{
		{"H2D channel", func(d *Device) uint32 { return d.H2DQueues()[0] }},
		{"D2H channel", func(d *Device) uint32 { return d.D2HQueues()[0] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, sim := openG3(t, hlsim.Config{}, nil)
			g, q := d.g3, tc.queue(d)
			cb := copyCB(t, d)
			done, err := d.Submit([]Chunk{cb.Chunk(q)})
			require.NoError(t, err)
			pending := func(seq uint64) *g3CS {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.pending[seq]
			}
			cs := pending(done)
			require.NotNil(t, cs)
			require.Eventually(t, cs.reached, 5*time.Second, time.Millisecond)
			sim.DelayNextCS(1, 300*time.Millisecond)
			running, err := d.Submit([]Chunk{cb.Chunk(q)})
			require.NoError(t, err)
			programs := g.programs.Load()

			g.timeout(cs)

			require.Equal(t, programs, g.programs.Load(), "a channel was reset")
			st, err := d.Wait(done, 0)
			require.NoError(t, err)
			require.Equal(t, CSCompleted.String(), st.String())
			st, err = d.Wait(running, 5*time.Second)
			require.NoError(t, err, "the submission running on the channel")
			require.Equal(t, CSCompleted.String(), st.String())
		})
	}
}
