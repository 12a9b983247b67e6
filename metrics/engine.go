package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/memcache"
)

// EngineCollector is a prometheus.Collector of an engine's statistics
// (engine.Engine.Stats) and of its live endpoints'
// (engine.Engine.EndpointStats). Register it with a prometheus.Registry;
// it reads the engine on every scrape, also after the engine closed (the
// counters stay readable).
//
// Metrics (all prefixed gxfer_):
//
//	copies_submitted_total, copies_completed_total, copies_failed_total,
//	copies_inline_total, copies_in_flight, copied_bytes_total,
//	copy_errors_total{kind}, copy_latency_seconds (histogram)
//	command_submissions_total, dma_packets_total, queue_full_total, panics_total
//	device_info{device,name,model,emulated} (always 1: which device an index is, and
//	  whether it is the emulator, "true", or hardware, "false")
//	device_host_mappings_total{device}
//	device_cs_outstanding{device}, device_cs_retired_total{device},
//	device_cs_polls_total{device}, device_cs_blocks_total{device}
//	registration_cache_{lookups,hits,misses,evictions,registrations,failed_registrations}_total{device,cache}
//	registration_cache_regions{device,cache}, registration_cache_registered_bytes{device,cache}
//	  (cache: "host_map", the host ranges mapped into the device; "dmabuf_export")
//	ipc_cache_{hits,misses,import_errors,evictions}_total, ipc_cache_regions, ipc_cache_bytes
//	transport_endpoints{transport}, transport_ops_completed_total{transport},
//	transport_ops_failed_total{transport}, transport_op_errors_total{transport,kind},
//	transport_bytes_total{transport}, transport_op_latency_seconds{transport} (histogram)
//	endpoint_puts_total{transport,peer,endpoint}, endpoint_gets_total{transport,peer,endpoint},
//	endpoint_ops_completed_total{transport,peer,endpoint}, endpoint_ops_failed_total{transport,peer,endpoint},
//	endpoint_op_errors_total{transport,peer,endpoint,kind} (kinds seen only),
//	endpoint_transferred_bytes_total{transport,peer,endpoint},
//	endpoint_sent_bytes_total{transport,peer,endpoint}, endpoint_received_bytes_total{transport,peer,endpoint},
//	endpoint_served_total{transport,peer,endpoint}, endpoint_lanes{transport,peer,endpoint},
//	endpoint_rdma_ops_total{transport,peer,endpoint,path} (path: zero_copy, staged, delegated, served),
//	endpoint_nic_work_requests_total{transport,peer,endpoint,nic},
//	endpoint_messages_sent_total{transport,peer,endpoint}, endpoint_messages_received_total{transport,peer,endpoint},
//	endpoint_message_sent_bytes_total{transport,peer,endpoint}, endpoint_message_received_bytes_total{transport,peer,endpoint}
//	  (Endpoint.Send and Recv)
//
// Copies are what engine.Stats counts (Copy, batches, bindings, the copies
// of Puts and Gets through a peer's mapped memory); transport_* and
// endpoint_* count the endpoints' Puts and Gets. Each live endpoint is
// its own series, labelled endpoint=engine.EndpointStats.ID (several
// endpoints may have the same peer name; were they summed into one
// series, the sum would go down when one of them closes): sum by
// transport and peer after rate. A closed endpoint's series go, and what
// it counted is added to its transport's endpoint="closed" series (peer
// empty, no endpoint_lanes; engine.Engine.ClosedEndpointStats), so the
// series stay as many as the live endpoints plus one per transport, and
// the counts of endpoints that lived between two scrapes are not lost.
type EngineCollector struct {
	e *engine.Engine
	f family

	submitted, completed, failed, inline, inFlight, bytes, copyErrs, copyLat metric
	cs, packets, queueFull, panics                                           metric

	devInfo                                                        metric
	devs                                                           []engine.DeviceInfo // at NewEngineCollector: what a device is does not change
	devMappings, devOutstanding, devRetired, devPolls, devBlocks   metric
	rcLookups, rcHits, rcMisses, rcEvictions, rcRegs, rcFailedRegs metric
	rcRegions, rcBytes                                             metric

	ipcHits, ipcMisses, ipcImportErrs, ipcEvictions, ipcRegions, ipcBytes metric

	tEndpoints, tCompleted, tFailed, tErrs, tBytes, tLat metric

	epPuts, epGets, epCompleted, epFailed, epErrs, epBytes metric
	epSent, epRecv, epServed, epLanes, epRDMA, epNICWRs    metric
	epMsgsOut, epMsgsIn, epMsgBytesOut, epMsgBytesIn       metric
}

var _ prometheus.Collector = (*EngineCollector)(nil)

// NewEngineCollector returns a collector of e's statistics.
func NewEngineCollector(e *engine.Engine, opts ...Option) *EngineCollector {
	c := &EngineCollector{e: e, f: family{o: optionsOf(opts)}}
	f := &c.f
	c.submitted = f.counter("copies_submitted_total", "Copies the engine accepted.")
	c.completed = f.counter("copies_completed_total", "Copies that ended without an error.")
	c.failed = f.counter("copies_failed_total", "Copies that ended with an error.")
	c.inline = f.counter("copies_inline_total", "Host copies completed on the caller's goroutine.")
	c.inFlight = f.gauge("copies_in_flight", "Copies accepted and not ended yet.")
	c.bytes = f.counter("copied_bytes_total", "Bytes of completed copies.")
	c.copyErrs = f.counter("copy_errors_total", "Failed copies by error kind.", "kind")
	c.copyLat = f.histogram("copy_latency_seconds", "Submit-to-complete latency of asynchronous copies.")
	c.cs = f.counter("command_submissions_total", "Command submissions sent to the devices.")
	c.packets = f.counter("dma_packets_total", "DMA packets in the command submissions.")
	c.queueFull = f.counter("queue_full_total", "Submissions that found a queue full.")
	c.panics = f.counter("panics_total", "Panics recovered in the engine's workers.")

	c.devInfo = f.gauge("device_info", "The engine's devices: always 1, the labels say what each index is (emulated: the emulator, not hardware).", "device", "name", "model", "emulated")
	c.devs = e.Devices()
	c.devMappings = f.counter("device_host_mappings_total", "Host ranges mapped into the device MMU.", "device")
	c.devOutstanding = f.gauge("device_cs_outstanding", "Command submissions the device has not retired yet.", "device")
	c.devRetired = f.counter("device_cs_retired_total", "Command submissions the device retired.", "device")
	c.devPolls = f.counter("device_cs_polls_total", "Non-blocking waits for command submissions.", "device")
	c.devBlocks = f.counter("device_cs_blocks_total", "Blocking waits for command submissions.", "device")
	rc := []string{"device", "cache"}
	c.rcLookups = f.counter("registration_cache_lookups_total", "Registration cache lookups.", rc...)
	c.rcHits = f.counter("registration_cache_hits_total", "Registration cache lookups served from the cache.", rc...)
	c.rcMisses = f.counter("registration_cache_misses_total", "Registration cache lookups that needed a new registration.", rc...)
	c.rcEvictions = f.counter("registration_cache_evictions_total", "Registrations evicted to honour the cache's limits.", rc...)
	c.rcRegs = f.counter("registration_cache_registrations_total", "Successful registrations.", rc...)
	c.rcFailedRegs = f.counter("registration_cache_failed_registrations_total", "Failed registrations.", rc...)
	c.rcRegions = f.gauge("registration_cache_regions", "Live registrations.", rc...)
	c.rcBytes = f.gauge("registration_cache_registered_bytes", "Bytes covered by live registrations.", rc...)

	c.ipcHits = f.counter("ipc_cache_hits_total", "Peers' buffers found mapped already (ipc transport).")
	c.ipcMisses = f.counter("ipc_cache_misses_total", "Peers' buffers that had to be imported (ipc transport).")
	c.ipcImportErrs = f.counter("ipc_cache_import_errors_total", "Imports of peers' buffers that failed.")
	c.ipcEvictions = f.counter("ipc_cache_evictions_total", "Imported buffers evicted to honour the cache's limits.")
	c.ipcRegions = f.gauge("ipc_cache_regions", "Peers' buffers mapped into this process.")
	c.ipcBytes = f.gauge("ipc_cache_bytes", "Bytes of peers' buffers mapped into this process.")

	c.tEndpoints = f.gauge("transport_endpoints", "Live endpoints.", "transport")
	c.tCompleted = f.counter("transport_ops_completed_total", "Puts and Gets that ended without an error, on every endpoint of the transport.", "transport")
	c.tFailed = f.counter("transport_ops_failed_total", "Puts and Gets that ended with an error, on every endpoint of the transport.", "transport")
	c.tErrs = f.counter("transport_op_errors_total", "Failed Puts and Gets by error kind.", "transport", "kind")
	c.tBytes = f.counter("transport_bytes_total", "Bytes of completed Puts and Gets.", "transport")
	c.tLat = f.histogram("transport_op_latency_seconds", "Latency of Puts and Gets, from the call to completion.", "transport")

	ep := []string{"transport", "peer", "endpoint"}
	c.epPuts = f.counter("endpoint_puts_total", "Puts requested on the endpoint.", ep...)
	c.epGets = f.counter("endpoint_gets_total", "Gets requested on the endpoint.", ep...)
	c.epCompleted = f.counter("endpoint_ops_completed_total", "Puts and Gets of the endpoint that ended without an error.", ep...)
	c.epFailed = f.counter("endpoint_ops_failed_total", "Puts and Gets of the endpoint that ended with an error.", ep...)
	c.epErrs = f.counter("endpoint_op_errors_total", "Failed Puts and Gets of the endpoint by error kind (kinds seen only).", "transport", "peer", "endpoint", "kind")
	c.epBytes = f.counter("endpoint_transferred_bytes_total", "Bytes of the endpoint's completed Puts and Gets.", ep...)
	c.epSent = f.counter("endpoint_sent_bytes_total", "Bytes sent in data frames (tcp).", ep...)
	c.epRecv = f.counter("endpoint_received_bytes_total", "Bytes received in data frames (tcp).", ep...)
	c.epServed = f.counter("endpoint_served_total", "The peer's requests this side completed (tcp).", ep...)
	c.epLanes = f.gauge("endpoint_lanes", "Connections of the endpoint.", ep...)
	c.epRDMA = f.counter("endpoint_rdma_ops_total", "RDMA Puts and Gets by path: zero_copy, staged, delegated (the peer moved the data); served: the peer's delegated requests.", "transport", "peer", "endpoint", "path")
	c.epNICWRs = f.counter("endpoint_nic_work_requests_total", "Work requests posted on the endpoint's queue pair of each NIC.", "transport", "peer", "endpoint", "nic")
	c.epMsgsOut = f.counter("endpoint_messages_sent_total", "Messages sent to the peer (Endpoint.Send).", ep...)
	c.epMsgsIn = f.counter("endpoint_messages_received_total", "Messages that arrived from the peer, taken by Recv or not yet.", ep...)
	c.epMsgBytesOut = f.counter("endpoint_message_sent_bytes_total", "Bytes of the messages sent to the peer.", ep...)
	c.epMsgBytesIn = f.counter("endpoint_message_received_bytes_total", "Bytes of the messages that arrived from the peer.", ep...)
	return c
}

// Describe implements prometheus.Collector.
func (c *EngineCollector) Describe(ch chan<- *prometheus.Desc) { c.f.describe(ch) }

// Collect implements prometheus.Collector.
func (c *EngineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	emit(ch, c.submitted, float64(s.Submitted))
	emit(ch, c.completed, float64(s.Completed))
	emit(ch, c.failed, float64(s.Failed))
	emit(ch, c.inline, float64(s.Inline))
	emit(ch, c.inFlight, float64(s.InFlight))
	emit(ch, c.bytes, float64(s.Bytes))
	for _, ec := range s.Errors {
		emit(ch, c.copyErrs, float64(ec.Count), ec.Kind)
	}
	emitHist(ch, c.copyLat, s.Latency)
	emit(ch, c.cs, float64(s.CommandSubmissions))
	emit(ch, c.packets, float64(s.Packets))
	emit(ch, c.queueFull, float64(s.QueueFull))
	emit(ch, c.panics, float64(s.Panics))
	for _, d := range c.devs {
		emit(ch, c.devInfo, 1, strconv.Itoa(d.Index), d.Name, d.Model, strconv.FormatBool(d.Emulated))
	}
	for _, d := range s.Devices {
		dev := strconv.Itoa(d.Index)
		emit(ch, c.devMappings, float64(d.HostMappings), dev)
		emit(ch, c.devOutstanding, float64(d.Actor.Outstanding), dev)
		emit(ch, c.devRetired, float64(d.Actor.Retired), dev)
		emit(ch, c.devPolls, float64(d.Actor.Polls), dev)
		emit(ch, c.devBlocks, float64(d.Actor.Blocks), dev)
		c.regCache(ch, d.RegCache, dev, "host_map")
		c.regCache(ch, d.ExportCache, dev, "dmabuf_export")
	}
	c.ipcCache(ch, s.IPCCache)
	for _, t := range s.Transports {
		tr := t.Transport.String()
		emit(ch, c.tEndpoints, float64(t.Endpoints), tr)
		emit(ch, c.tCompleted, float64(t.Ops.Completed), tr)
		emit(ch, c.tFailed, float64(t.Ops.Failed), tr)
		emit(ch, c.tBytes, float64(t.Ops.Bytes), tr)
		for _, ec := range t.Ops.Errors {
			emit(ch, c.tErrs, float64(ec.Count), tr, ec.Kind)
		}
		emitHist(ch, c.tLat, t.Ops.Latency, tr)
	}
	c.endpoints(ch, c.e.EndpointStats(), c.e.ClosedEndpointStats())
}

func (c *EngineCollector) regCache(ch chan<- prometheus.Metric, s memcache.Stats, dev, cache string) {
	emit(ch, c.rcLookups, float64(s.Gets), dev, cache)
	emit(ch, c.rcHits, float64(s.HitsFast+s.HitsSlow+s.NegativeHits), dev, cache)
	emit(ch, c.rcMisses, float64(s.Misses), dev, cache)
	emit(ch, c.rcEvictions, float64(s.Evictions), dev, cache)
	emit(ch, c.rcRegs, float64(s.Registrations), dev, cache)
	emit(ch, c.rcFailedRegs, float64(s.FailedRegistrations), dev, cache)
	emit(ch, c.rcRegions, float64(s.Regions), dev, cache)
	emit(ch, c.rcBytes, float64(s.RegisteredBytes), dev, cache)
}

func (c *EngineCollector) ipcCache(ch chan<- prometheus.Metric, s ipc.CacheStats) {
	emit(ch, c.ipcHits, float64(s.Hits))
	emit(ch, c.ipcMisses, float64(s.Misses))
	emit(ch, c.ipcImportErrs, float64(s.ImportErrors))
	emit(ch, c.ipcEvictions, float64(s.Evictions))
	emit(ch, c.ipcRegions, float64(s.Regions))
	emit(ch, c.ipcBytes, float64(s.Bytes))
}

// endpoints sends the series of the live endpoints eps, then those of
// the closed endpoints of each transport, summed (endpoint="closed",
// peer empty, no lanes gauge).
func (c *EngineCollector) endpoints(ch chan<- prometheus.Metric, eps, closed []engine.EndpointStats) {
	for _, es := range eps {
		c.endpoint(ch, es, es.Peer, strconv.FormatUint(es.ID, 10))
		emit(ch, c.epLanes, float64(es.Lanes), es.Transport.String(), es.Peer, strconv.FormatUint(es.ID, 10))
	}
	for _, es := range closed {
		c.endpoint(ch, es, "", closedEndpoints)
	}
}

// closedEndpoints is the endpoint label of a transport's closed
// endpoints' summed counters.
const closedEndpoints = "closed"

func (c *EngineCollector) endpoint(ch chan<- prometheus.Metric, es engine.EndpointStats, peer, id string) {
	tr := es.Transport.String()
	l := []string{tr, peer, id}
	emit(ch, c.epPuts, float64(es.Puts), l...)
	emit(ch, c.epGets, float64(es.Gets), l...)
	emit(ch, c.epCompleted, float64(es.Ops.Completed), l...)
	emit(ch, c.epFailed, float64(es.Ops.Failed), l...)
	emit(ch, c.epBytes, float64(es.Ops.Bytes), l...)
	emit(ch, c.epSent, float64(es.BytesOut), l...)
	emit(ch, c.epRecv, float64(es.BytesIn), l...)
	emit(ch, c.epServed, float64(es.Served), l...)
	emit(ch, c.epMsgsOut, float64(es.MsgsOut), l...)
	emit(ch, c.epMsgsIn, float64(es.MsgsIn), l...)
	emit(ch, c.epMsgBytesOut, float64(es.MsgBytesOut), l...)
	emit(ch, c.epMsgBytesIn, float64(es.MsgBytesIn), l...)
	for _, ec := range es.Ops.Errors {
		if ec.Count > 0 {
			emit(ch, c.epErrs, float64(ec.Count), tr, peer, id, ec.Kind)
		}
	}
	if es.Transport == engine.TransportRDMA {
		emit(ch, c.epRDMA, float64(es.ZeroCopy), tr, peer, id, "zero_copy")
		emit(ch, c.epRDMA, float64(es.Staged), tr, peer, id, "staged")
		emit(ch, c.epRDMA, float64(es.Delegated), tr, peer, id, "delegated")
		emit(ch, c.epRDMA, float64(es.ServedRDMA), tr, peer, id, "served")
	}
	for i, n := range es.NICWRs {
		emit(ch, c.epNICWRs, float64(n), tr, peer, id, strconv.Itoa(i))
	}
}
