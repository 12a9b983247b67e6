package engine

import (
	"time"

	"github.com/gxfer/gxfer/cq"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/memcache"
)

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
	// Sum is the total of the latencies recorded.
	Sum time.Duration
	// Buckets is the cumulative histogram, by powers of two from 1.024 µs
	// to about 34 s (latencies at or above the last bound are counted only
	// in Count).
	Buckets []LatencyBucket
}

// DeviceStats are one device's counters. They count on across the
// device's resets (the engine opens it again with new caches and a new
// completion actor); the gauges (RegCache.Regions, Actor.Outstanding...)
// are the current context's.
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
	// Errors counts Failed by kind, one entry per kind (zeros included).
	Errors []ErrorCount
	// Latency summarises the submit-to-complete latency of asynchronous
	// copies.
	Latency Latency
	// Transports counts the endpoints' Puts and Gets by transport (every
	// endpoint the engine ever had), with their latency from the Put or
	// Get call to completion; tcp and ipc are always listed, rdma and the
	// others once they had an endpoint.
	Transports []TransportStats
	// IPCCache counts the cache of peers' buffers mapped into this process
	// (the "ipc" transport).
	IPCCache ipc.CacheStats
	// Devices holds one entry per device the engine drives.
	Devices []DeviceStats
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	if e.invalid() {
		return Stats{}
	}
	s := Stats{
		Submitted: e.st.Submitted.Load(), Completed: e.st.Completed.Load(), Failed: e.st.Failed.Load(),
		Bytes: e.st.Bytes.Load(), Inline: e.st.Inline.Load(),
		CommandSubmissions: e.st.CS.Load(), Packets: e.st.Packets.Load(), QueueFull: e.st.QueueFull.Load(),
		Panics: e.st.Panics.Load(),
	}
	if done := s.Completed + s.Failed; s.Submitted > done {
		s.InFlight = s.Submitted - done
	}
	s.Errors = errorCounts(&e.st.Errs)
	s.Latency = latencyOf(&e.st.Lat)
	s.Transports = e.transportStats()
	s.IPCCache = e.ipcCacheStats()
	for _, g := range e.cp.DevList() {
		c := g.Counts() // they count on across the device's resets
		s.Devices = append(s.Devices, DeviceStats{
			Index: g.Idx, HostMappings: c.HostMappings, RegCache: c.HostMaps,
			ExportCache: c.Exports, Actor: c.Actor,
		})
	}
	return s
}
