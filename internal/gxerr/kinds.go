package gxerr

import (
	"context"
	"errors"
	"sync/atomic"
)

// kinds lists every error kind KindOf recognises; kindNames names them
// (snake case, for metrics labels) in the same order.
var kinds = [...]error{
	Closed, QueueFull, Timeout, Invalid, Freed, Foreign, NotSupported, NoDevice, Aborted, Device,
	Panic, NotEmulated, Peer, Canceled, NotDone, Unauthenticated, TooManyPeers, NoCopier,
	DeviceLost,
}

var kindNames = [...]string{
	"closed", "queue_full", "timeout", "invalid", "freed", "foreign", "not_supported", "no_device", "aborted", "device",
	"panic", "not_emulated", "peer", "canceled", "not_done", "unauthenticated", "too_many_peers", "no_copier",
	"device_lost",
}

// NumKinds is the number of kinds KindOf returns: every error kind of
// this package and Other.
const NumKinds = len(kinds) + 1

// Other is the kind index of errors of no kind of this package.
const Other = len(kinds)

// KindName names kind index k ("peer", "timeout", ..., "other").
func KindName(k int) string {
	if k >= 0 && k < len(kindNames) {
		return kindNames[k]
	}
	return "other"
}

// KindOf returns the index of err's kind: the first kind met walking err's
// wrap tree depth first (an error of kind Peer caused by a Closed is a
// Peer), so the outermost kind wins. A bare context.Canceled or
// context.DeadlineExceeded counts as Canceled or Timeout; anything else
// (and nil) is Other. Meant for the failure path only: it walks the tree.
func KindOf(err error) int {
	if k := kindOf(err, 0); k >= 0 {
		return k
	}
	switch {
	case errors.Is(err, context.Canceled):
		return kindIndex(Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return kindIndex(Timeout)
	}
	return Other
}

func kindIndex(err error) int {
	for i, k := range kinds {
		if err == k {
			return i
		}
	}
	return -1
}

// kindOf walks err's tree; depth bounds pathological chains.
func kindOf(err error, depth int) int {
	for err != nil && depth < 64 {
		if e, ok := err.(*opError); ok {
			if i := kindIndex(e.kind); i >= 0 {
				return i
			}
		}
		if i := kindIndex(err); i >= 0 {
			return i
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err, depth = u.Unwrap(), depth+1
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if i := kindOf(e, depth+1); i >= 0 {
					return i
				}
			}
			return -1
		default:
			return -1
		}
	}
	return -1
}

// KindCounters counts errors by kind, lock-free.
type KindCounters struct {
	n [NumKinds]atomic.Uint64
}

// Add counts err under its kind (KindOf); nil is not counted.
func (c *KindCounters) Add(err error) {
	if err != nil {
		c.n[KindOf(err)].Add(1)
	}
}

// Load returns the count of kind index k.
func (c *KindCounters) Load(k int) uint64 { return c.n[k].Load() }
