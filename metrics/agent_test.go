package metrics_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/metrics"
)

// TestAgentCollector: every AgentStats field reaches its metric, each
// scrape reads the source anew, and the metrics pass promlint.
func TestAgentCollector(t *testing.T) {
	var scrapes atomic.Int64
	src := metrics.AgentFunc(func() metrics.AgentStats {
		n := uint64(scrapes.Add(1))
		return metrics.AgentStats{
			Name: "prefill-0", Writes: 10 * n, Reads: 2, Descriptors: 1000, Puts: 40, Gets: 3, Bytes: 1 << 20,
			InFlight: 4, Errors: map[string]uint64{"peer": 2, "timeout": 0, "not_found": 1},
			NotificationsSent: 12, NotificationsReceived: 9, NotificationsQueued: 1,
			Outbound: 2, Inbound: 1, Dials: 3, CacheHits: 50, StoreLookups: 4, SideFetches: 1, Invalidations: 1,
			Sections: 6, Version: 7,
			Latency: engine.Latency{Count: 3, Sum: 3 * time.Millisecond, Buckets: []engine.LatencyBucket{
				{UpperBound: 512 * time.Microsecond, Count: 1}, {UpperBound: 1024 * time.Microsecond, Count: 2},
			}},
		}
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewAgentCollector(src))
	problems, err := promtest.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	fs := gather(t, reg)
	a := []string{"agent", "prefill-0"}
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"gxfer_agent_transfers_total", []string{"op", "write"}, 20},
		{"gxfer_agent_transfers_total", []string{"op", "read"}, 2},
		{"gxfer_agent_transfers_in_flight", nil, 4},
		{"gxfer_agent_descriptors_total", nil, 1000},
		{"gxfer_agent_engine_ops_total", []string{"op", "put"}, 40},
		{"gxfer_agent_engine_ops_total", []string{"op", "get"}, 3},
		{"gxfer_agent_transferred_bytes_total", nil, 1 << 20},
		{"gxfer_agent_errors_total", []string{"kind", "peer"}, 2},
		{"gxfer_agent_errors_total", []string{"kind", "timeout"}, 0},
		{"gxfer_agent_errors_total", []string{"kind", "not_found"}, 1},
		{"gxfer_agent_notifications_sent_total", nil, 12},
		{"gxfer_agent_notifications_received_total", nil, 9},
		{"gxfer_agent_notifications_queued", nil, 1},
		{"gxfer_agent_connections", []string{"direction", "outbound"}, 2},
		{"gxfer_agent_connections", []string{"direction", "inbound"}, 1},
		{"gxfer_agent_dials_total", nil, 3},
		{"gxfer_agent_metadata_cache_hits_total", nil, 50},
		{"gxfer_agent_metadata_fetches_total", []string{"source", "store"}, 4},
		{"gxfer_agent_metadata_fetches_total", []string{"source", "side_channel"}, 1},
		{"gxfer_agent_metadata_invalidations_total", nil, 1},
		{"gxfer_agent_sections", nil, 6},
		{"gxfer_agent_metadata_version", nil, 7},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, fs.value(t, tt.name, append(a, tt.labels...)...), "%s%v", tt.name, tt.labels)
	}
	h := fs.one(t, "gxfer_agent_transfer_latency_seconds", a...).Histogram
	require.Equal(t, uint64(3), h.GetSampleCount())
	require.InDelta(t, 0.003, h.GetSampleSum(), 1e-9)
	require.Len(t, h.Bucket, 2)
	require.InDelta(t, 0.000512, h.Bucket[0].GetUpperBound(), 1e-12)
	require.Equal(t, uint64(2), h.Bucket[1].GetCumulativeCount())
}

// TestAgentCollectorNoLatency: a source without a histogram exports none.
func TestAgentCollectorNoLatency(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewAgentCollector(metrics.AgentFunc(func() metrics.AgentStats { return metrics.AgentStats{Name: "x"} })))
	fs := gather(t, reg)
	require.Nil(t, fs["gxfer_agent_transfer_latency_seconds"])
	require.Zero(t, fs.value(t, "gxfer_agent_transfers_total", "agent", "x", "op", "write"))
}

// TestAgentCollectorBadLabelValue: a label value a source gives that
// Prometheus cannot carry (not UTF-8) costs the scrape that series only,
// reported as an error: the collector's other metrics are still
// gathered, and nothing panics. (emit panicked in MustNewConstMetric; the
// registry recovered the panic, but every metric after that series was
// lost from every scrape.)
func TestAgentCollectorBadLabelValue(t *testing.T) {
	tests := []struct {
		name string
		s    metrics.AgentStats
		want []string // metric, then name=value label pairs, still gathered
	}{
		{"error kind", metrics.AgentStats{Name: "a", Errors: map[string]uint64{"bad\xff": 1}, NotificationsSent: 5, Sections: 2},
			[]string{"gxfer_agent_notifications_sent_total", "agent", "a"}},
		{"agent name", metrics.AgentStats{Name: "a\xff", Latency: engine.Latency{Count: 1, Buckets: []engine.LatencyBucket{{UpperBound: time.Millisecond, Count: 1}}}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(metrics.NewAgentCollector(metrics.AgentFunc(func() metrics.AgentStats { return tt.s })))
			mfs, err := reg.Gather()
			require.ErrorContains(t, err, "not valid UTF-8")
			require.NotContains(t, err.Error(), "panic")
			if tt.want == nil {
				return
			}
			fs := families{}
			for _, mf := range mfs {
				fs[mf.GetName()] = mf
			}
			require.NotNil(t, fs.one(t, tt.want[0], tt.want[1:]...))
			require.NotNil(t, fs.one(t, "gxfer_agent_sections", "agent", "a"))
		})
	}
}
