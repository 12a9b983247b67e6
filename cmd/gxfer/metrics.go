package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/metrics"
)

// The -metrics flag of the long-running commands (perf, soak): serve the
// command's engine statistics to Prometheus at http://ADDR/metrics while
// the command runs (package metrics), with the Go runtime's and the
// process's own metrics.

const metricsFlagUsage = "serve Prometheus metrics of this command's engine at http://`ADDR`/metrics while it runs, e.g. 127.0.0.1:9464 (port 0: any; the address is printed on stderr)"

func registerMetricsFlag(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, "metrics", "", metricsFlagUsage)
}

// metricsServer is the -metrics server of one command run.
type metricsServer struct {
	reg *prometheus.Registry
	srv *metrics.Server
}

// startMetrics starts serving at addr ("" : no server, a nil
// *metricsServer, whose methods do nothing) and says where on stderr.
func startMetrics(addr string, stderr io.Writer) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := metrics.Serve(addr, reg)
	if err != nil {
		return nil, fmt.Errorf("-metrics %s: %w", addr, err)
	}
	fmt.Fprintf(stderr, "gxfer: metrics at %s\n", srv.URL())
	return &metricsServer{reg: reg, srv: srv}, nil
}

// addEngine exports e's statistics (its collector reads e on each scrape).
func (m *metricsServer) addEngine(e *engine.Engine) {
	if m != nil {
		m.reg.MustRegister(metrics.NewEngineCollector(e))
	}
}

// testHookMetricsClose, when set (tests), is called with the metrics
// page's URL as the server is about to stop: the command's work is done.
var testHookMetricsClose func(url string)

// Close stops the server (scrapes in progress finish first).
func (m *metricsServer) Close() error {
	if m == nil {
		return nil
	}
	if h := testHookMetricsClose; h != nil {
		h(m.srv.URL())
	}
	return m.srv.Close()
}

// addAgent exports a's statistics, labelled with its name and role (a
// registry takes several agents' collectors only if their labels differ).
func (m *metricsServer) addAgent(a *agent.Agent, role string) {
	if m == nil {
		return
	}
	m.reg.MustRegister(metrics.NewAgentCollector(metrics.AgentOf(a), metrics.ConstLabels(prometheus.Labels{"role": role})))
}
