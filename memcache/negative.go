package memcache

import "time"

// maxNegEntries bounds the negative cache; when full, the oldest entry goes.
const maxNegEntries = 256

// negEntry remembers one failed registration.
type negEntry struct {
	start, end uint64
	access     Access
	expires    time.Time
	err        error
}

// negCache remembers ranges that recently failed to register, so that a
// caller retrying a bad range does not hammer the Registrar. It is consulted
// only on the slow path, under the cache's lock. It is a short list: failures
// are rare and bounded, so a linear scan is cheaper than an index.
type negCache struct {
	ttl     time.Duration // < 0 disables
	entries []negEntry    // oldest first
}

// lookup returns a cached error if the aligned request [start, end) is a
// remembered range whose failed access is a subset of access (asking for at
// least as much would fail again; asking for less might not). A request
// inside a failed range is tried: another caller's larger range may have
// failed on a page this request does not touch, and must not lock it out.
// Expired entries are dropped on the way.
func (n *negCache) lookup(start, end uint64, access Access, now time.Time) error {
	if len(n.entries) == 0 {
		return nil
	}
	live := n.entries[:0]
	var hit *negEntry
	for _, e := range n.entries {
		if !now.Before(e.expires) {
			continue
		}
		live = append(live, e)
		if hit == nil && start == e.start && end == e.end && access&e.access == e.access {
			hit = &live[len(live)-1]
		}
	}
	clear(n.entries[len(live):]) // drop references to expired errors
	n.entries = live
	if hit == nil {
		return nil
	}
	return &RegisterError{Addr: hit.start, Len: hit.end - hit.start, Access: hit.access, Cached: true, Err: hit.err}
}

// add remembers that [start, end) failed to register with access.
func (n *negCache) add(start, end uint64, access Access, err error, now time.Time) {
	if n.ttl < 0 {
		return
	}
	if len(n.entries) == maxNegEntries {
		n.entries = append(n.entries[:0], n.entries[1:]...)
	}
	n.entries = append(n.entries, negEntry{start: start, end: end, access: access, expires: now.Add(n.ttl), err: err})
}

// forget drops every entry overlapping [start, end).
func (n *negCache) forget(start, end uint64) {
	live := n.entries[:0]
	for _, e := range n.entries {
		if e.end <= start || e.start >= end {
			live = append(live, e)
		}
	}
	clear(n.entries[len(live):])
	n.entries = live
}
