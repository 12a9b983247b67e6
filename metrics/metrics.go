// Package metrics exports gxfer's statistics to Prometheus
// (github.com/prometheus/client_golang): collectors the caller registers
// with a prometheus.Registerer, one per engine (NewEngineCollector) and
// one per cluster agent (NewAgentCollector). Nothing is registered
// globally and nothing runs in the background: each scrape reads the
// counters the engine and the agent keep anyway (lock-free atomics) and
// builds constant metrics from them.
//
// Every metric is named gxfer_..., counters end in _total, byte counts
// in _bytes or _bytes_total, latencies are histograms in seconds (the
// engine's power-of-two buckets, 1.024 µs to 34 s). Labels: kind (an
// error kind: "peer", "timeout", "invalid", ... as engine.ErrorCount
// names them), transport ("tcp", "ipc", "rdma"), peer (the peer as
// engine.Endpoint.Peer names it), endpoint (engine.EndpointStats.ID: one
// series per live endpoint; "closed": the summed counts of the
// transport's closed endpoints), device (a device index), cache, agent.
// Give each collector's metrics distinguishing labels with ConstLabels
// when one registry holds several engines or agents.
//
// cmd/gxfer serves them with its -metrics flag:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewEngineCollector(eng))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gxfer/gxfer/engine"
)

// Namespace prefixes every metric name.
const Namespace = "gxfer"

// Option configures a collector.
type Option func(*options)

type options struct {
	labels prometheus.Labels
}

// ConstLabels adds labels with fixed values to every metric of the
// collector (e.g. {"engine": "client"} when one registry holds two
// engines).
func ConstLabels(l prometheus.Labels) Option {
	return func(o *options) {
		if o.labels == nil {
			o.labels = prometheus.Labels{}
		}
		for k, v := range l {
			o.labels[k] = v
		}
	}
}

func optionsOf(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// metric is one metric family of a collector: its description and type.
type metric struct {
	d *prometheus.Desc
	t prometheus.ValueType
}

// family collects a collector's metric descriptions for Describe.
type family struct {
	o   options
	all []*prometheus.Desc
}

func (f *family) add(name, help string, t prometheus.ValueType, labels ...string) metric {
	d := prometheus.NewDesc(Namespace+"_"+name, help, labels, f.o.labels)
	f.all = append(f.all, d)
	return metric{d, t}
}

func (f *family) counter(name, help string, labels ...string) metric {
	return f.add(name, help, prometheus.CounterValue, labels...)
}

func (f *family) gauge(name, help string, labels ...string) metric {
	return f.add(name, help, prometheus.GaugeValue, labels...)
}

// histogram describes a histogram (its type is set by constHist).
func (f *family) histogram(name, help string, labels ...string) metric {
	return f.add(name, help, prometheus.UntypedValue, labels...)
}

func (f *family) describe(ch chan<- *prometheus.Desc) {
	for _, d := range f.all {
		ch <- d
	}
}

// emit sends one sample of m. A label value Prometheus cannot carry (not
// UTF-8) makes it an invalid metric, which the registry reports as that
// series' error: the collector's other metrics are still gathered (a
// panic would lose every metric after it).
func emit(ch chan<- prometheus.Metric, m metric, v float64, labels ...string) {
	s, err := prometheus.NewConstMetric(m.d, m.t, v, labels...)
	if err != nil {
		s = prometheus.NewInvalidMetric(m.d, err)
	}
	ch <- s
}

// emitHist sends the histogram of l: the engine's cumulative buckets, in
// seconds; Count holds latencies beyond the last bucket too (+Inf).
func emitHist(ch chan<- prometheus.Metric, m metric, l engine.Latency, labels ...string) {
	buckets := make(map[float64]uint64, len(l.Buckets))
	for _, b := range l.Buckets {
		buckets[b.UpperBound.Seconds()] = b.Count
	}
	s, err := prometheus.NewConstHistogram(m.d, l.Count, l.Sum.Seconds(), buckets, labels...)
	if err != nil { // as in emit
		s = prometheus.NewInvalidMetric(m.d, err)
	}
	ch <- s
}
