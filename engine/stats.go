package engine

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/memcache"
)

type stats struct {
	submitted, completed, failed, bytes, inline atomic.Uint64
	cs, packets, queueFull, panics              atomic.Uint64
	lat                                         latencyHist
}

func (s *stats) record(start time.Time, n uint64, err error) {
	if err != nil {
		s.failed.Add(1)
	} else {
		s.completed.Add(1)
		s.bytes.Add(n)
	}
	s.lat.add(time.Since(start))
}

func (s *stats) recordInline(n uint64) {
	s.completed.Add(1)
	s.bytes.Add(n)
	s.inline.Add(1)
}

// latencyHist is a lock-free log-linear histogram of nanoseconds: 64
// power-of-two ranges, each split in 8.
type latencyHist struct {
	b   [64 * 8]atomic.Uint64
	max atomic.Int64
}

func (h *latencyHist) add(d time.Duration) {
	ns := max(uint64(d), 1)
	e := bits.Len64(ns) - 1
	sub := uint64(0)
	if e >= 3 {
		sub = (ns >> (e - 3)) & 7
	}
	h.b[e*8+int(sub)].Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// quantile returns the upper edge of the bucket holding quantile q.
func (h *latencyHist) quantile(q float64) (time.Duration, uint64) {
	var counts [64 * 8]uint64
	var total uint64
	for i := range h.b {
		counts[i] = h.b[i].Load()
		total += counts[i]
	}
	if total == 0 {
		return 0, 0
	}
	rank := uint64(q*float64(total-1)) + 1
	var acc uint64
	for i, c := range counts {
		acc += c
		if acc >= rank {
			e, sub := i/8, uint64(i%8)
			var hi uint64
			if e >= 3 {
				hi = (8 + sub + 1) << (e - 3)
			} else {
				hi = uint64(2) << e
			}
			return time.Duration(hi), total
		}
	}
	return time.Duration(h.max.Load()), total
}

// Latency summarises submit-to-complete latencies of asynchronous ops
// (inline host copies are not included). Values are bucket upper edges
// (within 12.5%).
type Latency struct {
	// Count is how many operations the histogram holds.
	Count uint64
	// P50, P90 and P99 are the median and the 90th and 99th percentiles.
	P50, P90, P99 time.Duration
	// Max is the longest latency recorded (exact, not a bucket edge).
	Max time.Duration
}

// DeviceStats are one device's counters.
type DeviceStats struct {
	Index        int            // the device's index (Gaudi(Index))
	HostMappings uint64         // host ranges mapped into the device MMU
	RegCache     memcache.Stats // host-mapping registration cache
	ExportCache  memcache.Stats // DMA-BUF export cache
	// Actor counts the work of the device's completion actor (the
	// goroutine that waits for its command submissions to retire).
	Actor cq.ActorStats
}

// Stats are the engine's counters. They count the copies callers ask for
// (Copy, each operation of a Batch, a Binding's transfers, an attached
// device's copies, and the copies Puts and Gets make through a peer's
// mapped memory); the engine's internal copies (staging for TCP and RDMA)
// are not counted.
type Stats struct {
	// Submitted counts copies accepted; Completed those that ended
	// without an error, Failed those that ended with one.
	Submitted, Completed, Failed uint64
	// InFlight is Submitted minus Completed and Failed: copies not ended
	// yet.
	InFlight uint64
	Bytes    uint64 // bytes of completed copies
	Inline   uint64 // host copies completed in the caller
	// CommandSubmissions counts the command submissions sent to the
	// devices, Packets the DMA packets in them.
	CommandSubmissions, Packets uint64
	QueueFull                   uint64 // submissions that found a queue full
	// Panics counts panics recovered in the engine's workers (the
	// operations concerned ended with ErrPanic).
	Panics uint64
	// Latency summarises the submit-to-complete latency of asynchronous
	// copies.
	Latency Latency
	// Devices holds one entry per device the engine drives.
	Devices []DeviceStats
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	s := Stats{
		Submitted: e.st.submitted.Load(), Completed: e.st.completed.Load(), Failed: e.st.failed.Load(),
		Bytes: e.st.bytes.Load(), Inline: e.st.inline.Load(),
		CommandSubmissions: e.st.cs.Load(), Packets: e.st.packets.Load(), QueueFull: e.st.queueFull.Load(),
		Panics: e.st.panics.Load(),
	}
	if done := s.Completed + s.Failed; s.Submitted > done {
		s.InFlight = s.Submitted - done
	}
	s.Latency.P50, s.Latency.Count = e.st.lat.quantile(0.50)
	s.Latency.P90, _ = e.st.lat.quantile(0.90)
	s.Latency.P99, _ = e.st.lat.quantile(0.99)
	s.Latency.Max = time.Duration(e.st.lat.max.Load())
	for _, g := range e.devs {
		s.Devices = append(s.Devices, DeviceStats{
			Index: g.idx, HostMappings: g.regs.Load(), RegCache: g.hostMaps.Stats(),
			ExportCache: g.exports.Stats(), Actor: g.actor.Stats(),
		})
	}
	return s
}
