package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gxfer/gxfer/engine"
)

// AgentStats are the counters of a cluster agent, as the agent package
// keeps them (AgentOf converts an *agent.Agent's Stats; any other source
// can fill them through AgentFunc).
type AgentStats struct {
	// Name is the agent's name: the value of the agent label.
	Name string
	// Transfers started (descriptor-list writes and reads, prepared posts
	// included), the descriptors they carried, the engine Puts and Gets
	// they issued after coalescing, and the bytes of the operations that
	// succeeded.
	Writes, Reads, Descriptors, Puts, Gets, Bytes uint64
	// InFlight is the transfers not done yet.
	InFlight int64
	// Errors counts failed descriptors and notifications by kind: at
	// least "invalid", "peer", "timeout", "canceled", "not_found",
	// "other" (names as engine.ErrorCount's; zeros included, so that
	// every series exists from the first scrape).
	Errors map[string]uint64
	// Notifications sent (standalone and after transfers), received, and
	// received but not taken yet.
	NotificationsSent, NotificationsReceived uint64
	NotificationsQueued                      int
	// Connections: live endpoints this agent dialed and accepted, and
	// dials made.
	Outbound, Inbound int
	Dials             uint64
	// Metadata: lookups answered from the cache, records fetched from the
	// metadata store (etcd) and over a peer's side channel, cached peers
	// dropped (the owner republished, withdrew or died).
	CacheHits, StoreLookups, SideFetches, Invalidations uint64
	// Sections this agent publishes, and its record's version.
	Sections int
	Version  uint64
	// Latency of transfers, start to completion (a histogram with the
	// engine's buckets); exported only when it has Buckets.
	Latency engine.Latency
}

// AgentSource gives an agent's counters; every scrape calls AgentStats.
type AgentSource interface {
	AgentStats() AgentStats
}

// AgentFunc adapts a function to AgentSource, e.g.
//
//	metrics.AgentFunc(func() metrics.AgentStats { return myStats() })
type AgentFunc func() AgentStats

// AgentStats implements AgentSource.
func (f AgentFunc) AgentStats() AgentStats { return f() }

// AgentCollector is a prometheus.Collector of a cluster agent's
// counters, labelled agent=AgentStats.Name.
//
// Metrics (all prefixed gxfer_agent_):
//
//	transfers_total{agent,op} (op: write, read), transfers_in_flight{agent},
//	descriptors_total{agent}, engine_ops_total{agent,op} (op: put, get),
//	transferred_bytes_total{agent}, errors_total{agent,kind},
//	notifications_sent_total{agent}, notifications_received_total{agent},
//	notifications_queued{agent},
//	connections{agent,direction} (direction: outbound, inbound), dials_total{agent},
//	metadata_cache_hits_total{agent}, metadata_fetches_total{agent,source}
//	(source: store, side_channel), metadata_invalidations_total{agent},
//	sections{agent}, metadata_version{agent},
//	transfer_latency_seconds{agent} (histogram, when the source has one)
type AgentCollector struct {
	src AgentSource
	f   family

	transfers, inFlight, descs, engineOps, bytes, errs        metric
	notifSent, notifRecv, notifQueued, conns, dials           metric
	cacheHits, fetches, invalidations, sections, version, lat metric
}

var _ prometheus.Collector = (*AgentCollector)(nil)

// NewAgentCollector returns a collector of src's counters.
func NewAgentCollector(src AgentSource, opts ...Option) *AgentCollector {
	c := &AgentCollector{src: src, f: family{o: optionsOf(opts)}}
	f := &c.f
	a := "agent"
	c.transfers = f.counter("agent_transfers_total", "Descriptor-list transfers started, by operation.", a, "op")
	c.inFlight = f.gauge("agent_transfers_in_flight", "Transfers started and not done yet.", a)
	c.descs = f.counter("agent_descriptors_total", "Descriptors of the transfers started.", a)
	c.engineOps = f.counter("agent_engine_ops_total", "Engine Puts and Gets the transfers issued after coalescing.", a, "op")
	c.bytes = f.counter("agent_transferred_bytes_total", "Bytes of the transfers' operations that succeeded.", a)
	c.errs = f.counter("agent_errors_total", "Failed descriptors and notifications by error kind.", a, "kind")
	c.notifSent = f.counter("agent_notifications_sent_total", "Notifications sent, standalone and after transfers.", a)
	c.notifRecv = f.counter("agent_notifications_received_total", "Notifications received.", a)
	c.notifQueued = f.gauge("agent_notifications_queued", "Notifications received and not taken yet.", a)
	c.conns = f.gauge("agent_connections", "Live connections to other agents, by who dialed.", a, "direction")
	c.dials = f.counter("agent_dials_total", "Connections dialed to other agents.", a)
	c.cacheHits = f.counter("agent_metadata_cache_hits_total", "Peer lookups answered from the metadata cache.", a)
	c.fetches = f.counter("agent_metadata_fetches_total", "Peer metadata records fetched, by source.", a, "source")
	c.invalidations = f.counter("agent_metadata_invalidations_total", "Cached peers dropped (republished, withdrawn or dead).", a)
	c.sections = f.gauge("agent_sections", "Memory sections the agent publishes.", a)
	c.version = f.gauge("agent_metadata_version", "Version of the agent's published metadata record.", a)
	c.lat = f.histogram("agent_transfer_latency_seconds", "Latency of transfers, start to completion.", a)
	return c
}

// Describe implements prometheus.Collector.
func (c *AgentCollector) Describe(ch chan<- *prometheus.Desc) { c.f.describe(ch) }

// Collect implements prometheus.Collector.
func (c *AgentCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.AgentStats()
	a := s.Name
	emit(ch, c.transfers, float64(s.Writes), a, "write")
	emit(ch, c.transfers, float64(s.Reads), a, "read")
	emit(ch, c.inFlight, float64(s.InFlight), a)
	emit(ch, c.descs, float64(s.Descriptors), a)
	emit(ch, c.engineOps, float64(s.Puts), a, "put")
	emit(ch, c.engineOps, float64(s.Gets), a, "get")
	emit(ch, c.bytes, float64(s.Bytes), a)
	for kind, n := range s.Errors {
		emit(ch, c.errs, float64(n), a, kind)
	}
	emit(ch, c.notifSent, float64(s.NotificationsSent), a)
	emit(ch, c.notifRecv, float64(s.NotificationsReceived), a)
	emit(ch, c.notifQueued, float64(s.NotificationsQueued), a)
	emit(ch, c.conns, float64(s.Outbound), a, "outbound")
	emit(ch, c.conns, float64(s.Inbound), a, "inbound")
	emit(ch, c.dials, float64(s.Dials), a)
	emit(ch, c.cacheHits, float64(s.CacheHits), a)
	emit(ch, c.fetches, float64(s.StoreLookups), a, "store")
	emit(ch, c.fetches, float64(s.SideFetches), a, "side_channel")
	emit(ch, c.invalidations, float64(s.Invalidations), a)
	emit(ch, c.sections, float64(s.Sections), a)
	emit(ch, c.version, float64(s.Version), a)
	if len(s.Latency.Buckets) > 0 {
		emitHist(ch, c.lat, s.Latency, a)
	}
}
