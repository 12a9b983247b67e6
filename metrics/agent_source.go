package metrics

import "github.com/gxfer/gxfer/agent"

// AgentOf is the AgentSource of an agent: its Stats, converted at each
// scrape. Register it with NewAgentCollector:
//
//	reg.MustRegister(metrics.NewAgentCollector(metrics.AgentOf(a)))
func AgentOf(a *agent.Agent) AgentSource {
	return AgentFunc(func() AgentStats { return fromAgent(a.Name(), a.Stats()) })
}

func fromAgent(name string, s agent.Stats) AgentStats {
	return AgentStats{
		Name:   name,
		Writes: s.Writes, Reads: s.Reads, Descriptors: s.Descs, Puts: s.Puts, Gets: s.Gets, Bytes: s.Bytes,
		InFlight: s.InFlight,
		Errors: map[string]uint64{
			"invalid": s.Errors.Invalid, "peer": s.Errors.Peer, "timeout": s.Errors.Timeout,
			"canceled": s.Errors.Canceled, "not_found": s.Errors.NotFound, "other": s.Errors.Other,
		},
		NotificationsSent: s.NotifySent, NotificationsReceived: s.NotifyRecv, NotificationsQueued: s.NotifyQueued,
		Outbound: s.Outbound, Inbound: s.Inbound, Dials: s.Dials,
		CacheHits: s.CacheHits, StoreLookups: s.StoreLookups, SideFetches: s.SideFetches, Invalidations: s.Invalidations,
		Sections: s.Sections, Version: s.Version,
	}
}
