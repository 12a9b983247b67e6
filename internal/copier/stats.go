package copier

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/internal/gxerr"
)

// Counters are the engine's copy counters (engine.Stats reads them).
type Counters struct {
	Submitted, Completed, Failed, Bytes, Inline atomic.Uint64
	CS, Packets, QueueFull, Panics              atomic.Uint64
	// InlineSubmits counts device jobs processed on the submitting
	// goroutine (the queue was idle) instead of by a worker.
	InlineSubmits atomic.Uint64
	Lat           LatencyHist
	Errs          gxerr.KindCounters // failed copies by kind
}

// Record counts an asynchronous copy of n bytes that took lat.
func (s *Counters) Record(lat time.Duration, n uint64, err error) {
	if err != nil {
		s.Failed.Add(1)
		s.Errs.Add(err)
	} else {
		s.Completed.Add(1)
		s.Bytes.Add(n)
	}
	s.Lat.add(lat)
}

// RecordN records n successful copies that each took lat, of bytes bytes
// in all (Record for each).
func (s *Counters) RecordN(lat time.Duration, n int, bytes uint64) {
	s.Completed.Add(uint64(n))
	s.Bytes.Add(bytes)
	s.Lat.addN(lat, uint64(n))
}

// RecordInline counts a copy of n bytes done on the caller's goroutine.
func (s *Counters) RecordInline(n uint64) {
	s.Completed.Add(1)
	s.Bytes.Add(n)
	s.Inline.Add(1)
}

// RecordDone counts n copies of size bytes each that a data path
// completed (no latency recorded); inline: done on callers' goroutines.
func (s *Counters) RecordDone(n, size uint64, inline bool) {
	s.Submitted.Add(n)
	s.Completed.Add(n)
	s.Bytes.Add(n * size)
	if inline {
		s.Inline.Add(n)
	}
}

// LatencyHist is a lock-free log-linear histogram of nanoseconds: 64
// power-of-two ranges, each split in 8.
type LatencyHist struct {
	b   [64 * 8]atomic.Uint64
	max atomic.Int64
	sum atomic.Int64 // nanoseconds
}

// Add records d.
func (h *LatencyHist) Add(d time.Duration) { h.add(d) }

// AddN records d n times (n operations that ended together).
func (h *LatencyHist) AddN(d time.Duration, n uint64) { h.addN(d, n) }

func (h *LatencyHist) add(d time.Duration) { h.addN(d, 1) }

// addN records d n times.
func (h *LatencyHist) addN(d time.Duration, n uint64) {
	h.sum.Add(int64(d) * int64(n))
	ns := max(uint64(d), 1)
	e := bits.Len64(ns) - 1
	sub := uint64(0)
	if e >= 3 {
		sub = (ns >> (e - 3)) & 7
	}
	h.b[e*8+int(sub)].Add(n)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// Max is the longest latency recorded.
func (h *LatencyHist) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the upper edge of the bucket holding quantile q, and
// the number of latencies recorded.
func (h *LatencyHist) Quantile(q float64) (time.Duration, uint64) {
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

// Sum is the total of the latencies recorded.
func (h *LatencyHist) Sum() time.Duration { return time.Duration(h.sum.Load()) }

// Log2 returns cumulative counts by power-of-two upper bounds: counts[i]
// latencies were below 1<<(i+1) ns (the fine buckets of each power of two
// merged), and the total; counts has 63 entries.
func (h *LatencyHist) Log2() (counts [63]uint64, total uint64) {
	for e := range 64 {
		var n uint64
		for sub := range 8 {
			n += h.b[e*8+sub].Load()
		}
		total += n
		if e < len(counts) {
			counts[e] = total
		}
	}
	return counts, total
}
