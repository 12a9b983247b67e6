package agent

import (
	"errors"
	"sync/atomic"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// Stats are an agent's counters (see Agent.Stats).
type Stats struct {
	// Transfers: Xfers started (Write, Read, prepared posts), the
	// descriptors they carried, the engine operations (Puts and Gets)
	// issued after coalescing, and the bytes of the operations that
	// succeeded.
	Writes, Reads, Descs, Puts, Gets, Bytes uint64
	// InFlight is the Xfers not done yet.
	InFlight int64
	// Errors counts failed descriptors (and failed notifications of an
	// Xfer) by kind.
	Errors ErrorStats
	// Notifications sent (standalone and after transfers) and received;
	// NotifyQueued is how many received ones wait for Recv.
	NotifySent, NotifyRecv uint64
	NotifyQueued           int
	// Connections: open endpoints this agent dialed (Outbound) and
	// accepted (Inbound); Dials counts dials made.
	Outbound, Inbound int
	Dials             uint64
	// Lookups: Peer calls answered from the cache (CacheHits); records
	// fetched from the Store (StoreLookups) or over a side channel
	// (SideFetches); cached peers dropped (Invalidations).
	CacheHits, StoreLookups, SideFetches, Invalidations uint64
	// Sections this agent offers, and its record's Version.
	Sections int
	Version  uint64
}

// ErrorStats counts failures by kind.
type ErrorStats struct {
	Invalid  uint64 // engine.ErrInvalid (bad descriptors)
	Peer     uint64 // engine.ErrPeer (a peer died, republished or refused)
	Timeout  uint64 // engine.ErrTimeout
	Canceled uint64 // engine.ErrCanceled
	NotFound uint64 // meta.ErrNotFound (lookups and sections)
	Other    uint64
}

type counters struct {
	writes, reads, descs, puts, gets, bytes atomic.Uint64
	inFlight                                atomic.Int64
	errInvalid, errPeer, errTimeout         atomic.Uint64
	errCanceled, errNotFound, errOther      atomic.Uint64
	notifySent, notifyRecv                  atomic.Uint64
	outbound, inbound                       atomic.Int64
	dials                                   atomic.Uint64
	cacheHits, storeLookups, sideFetches    atomic.Uint64
	invalidations                           atomic.Uint64
}

func (c *counters) countErr(err error) {
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrInvalid):
		c.errInvalid.Add(1)
	case errors.Is(err, engine.ErrPeer):
		c.errPeer.Add(1)
	case errors.Is(err, engine.ErrTimeout):
		c.errTimeout.Add(1)
	case errors.Is(err, engine.ErrCanceled):
		c.errCanceled.Add(1)
	case errors.Is(err, meta.ErrNotFound):
		c.errNotFound.Add(1)
	default:
		c.errOther.Add(1)
	}
}

// Stats returns a snapshot of the agent's counters.
func (a *Agent) Stats() Stats {
	c := &a.stats
	s := Stats{
		Writes: c.writes.Load(), Reads: c.reads.Load(), Descs: c.descs.Load(),
		Puts: c.puts.Load(), Gets: c.gets.Load(), Bytes: c.bytes.Load(),
		InFlight: c.inFlight.Load(),
		Errors: ErrorStats{
			Invalid: c.errInvalid.Load(), Peer: c.errPeer.Load(), Timeout: c.errTimeout.Load(),
			Canceled: c.errCanceled.Load(), NotFound: c.errNotFound.Load(), Other: c.errOther.Load(),
		},
		NotifySent: c.notifySent.Load(), NotifyRecv: c.notifyRecv.Load(), NotifyQueued: len(a.notifyQ),
		Outbound: int(c.outbound.Load()), Inbound: int(c.inbound.Load()), Dials: c.dials.Load(),
		CacheHits: c.cacheHits.Load(), StoreLookups: c.storeLookups.Load(),
		SideFetches: c.sideFetches.Load(), Invalidations: c.invalidations.Load(),
	}
	a.mu.Lock()
	s.Sections = len(a.md.Sections)
	s.Version = a.md.Version
	a.mu.Unlock()
	return s
}
