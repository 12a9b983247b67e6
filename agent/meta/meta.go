// Package meta is what one agent publishes about itself and how other
// agents find it: the Metadata record, its binary encoding (bytes that
// may come from a hostile peer or a shared store, so Decode checks
// everything), and the Store interface a cluster metadata service
// implements (package etcdmeta: etcd). With no Store at all, agents fetch
// each other's Metadata over their control channels (package agent).
package meta

import (
	"context"
	"errors"
)

// Limits on what Decode accepts.
const (
	MaxName     = 255     // bytes of an agent or section name
	MaxSections = 1 << 16 // sections in one record
	MaxAddrs    = 64      // addresses or NICs in one record
	MaxKey      = 1024    // bytes of one section's key
	MaxRecord   = 8 << 20 // bytes of one encoded record
)

// Metadata is one incarnation of one agent: how to reach it and the
// memory sections it offers.
type Metadata struct {
	Name string // unique in the cluster
	// Incarnation tells two lives of one name apart: a restarted agent
	// has a new one (random, never 0), and a record of another
	// incarnation describes another agent.
	Incarnation uint64
	// Version grows each time the agent republishes (a section added or
	// withdrawn); a cached record with a lower Version is stale.
	Version  uint64
	Unix     string    // unix socket path ("" if none)
	TCP      string    // host:port ("" if none); RDMA is negotiated over it
	NICs     []NIC     // the RDMA devices the agent's engine uses
	Sections []Section // sorted by Name, names unique
}

// NIC is one RDMA device of an agent.
type NIC struct {
	Device string // e.g. "rxe0"
	Port   int
	GID    string // as text
}

// Section is named memory an agent offers: Key is the exported key
// (engine.RemoteKey.Bytes) granting exactly the section's bytes.
type Section struct {
	Name     string
	Len      uint64
	Location string // "host", "gaudiN" or "attachedN"
	// Emulated: the section's memory is on an emulated device (dma/hlsim),
	// not a real Gaudi; output naming the section must say so. A record
	// published before this field existed decodes with false.
	Emulated bool
	Key      []byte
}

// Section returns the named section, if the record has it.
func (m *Metadata) Section(name string) (Section, bool) {
	for _, s := range m.Sections {
		if s.Name == name {
			return s, true
		}
	}
	return Section{}, false
}

// EventKind says what happened to an agent's record.
type EventKind uint8

const (
	// Put: the agent published a record (new, or a new Version).
	Put EventKind = iota + 1
	// Gone: the record was deleted or its lease ended: that
	// incarnation is dead or withdrew.
	Gone
)

// Event is one change of a watched agent's record.
type Event struct {
	Kind EventKind
	Name string
	// Meta is the new record (Put) or the last one seen, if any (Gone).
	Meta Metadata
}

// Store is a cluster metadata service. Implementations must be safe for
// concurrent use.
type Store interface {
	// Publish writes the record of this process's agent, replacing its
	// previous one; it lives while the store's lease does (Close ends
	// it).
	Publish(ctx context.Context, m Metadata) error
	// Lookup returns the live record of the named agent, or an error
	// matching ErrNotFound.
	Lookup(ctx context.Context, name string) (Metadata, error)
	// List returns every live record.
	List(ctx context.Context) ([]Metadata, error)
	// Watch calls fn for every change of the named agent's record until
	// the returned stop is called or the store closes. Calls are
	// sequential, in the order of the store's revisions. If the watch is
	// interrupted (store unreachable), fn gets a Gone for records that
	// were deleted meanwhile once it resumes.
	Watch(name string, fn func(Event)) (stop func())
	// Close withdraws this agent's record (best effort) and releases the
	// store's connections and goroutines. Idempotent.
	Close() error
}

// Errors.
var (
	ErrNotFound    = errors.New("meta: agent not found")
	ErrUnavailable = errors.New("meta: metadata service unavailable")
	ErrMalformed   = errors.New("meta: malformed record")
)
