package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

var metricsAt = regexp.MustCompile(`gxfer: metrics at (http://(\S+)/metrics)`)

// scrapeText fetches url in the text format and parses it with the
// client library's text parser.
func scrapeText(url string) (map[string]*dto.MetricFamily, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(string(body)))
}

// sample is the value of name's sample whose labels include want.
func sample(t *testing.T, fs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	f := fs[name]
	require.NotNil(t, f, "no %s", name)
	var vals []float64
	for _, m := range f.Metric {
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || l.GetName() == want[i] && l.GetValue() == want[i+1]
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			vals = append(vals, m.Counter.GetValue())
		case m.Gauge != nil:
			vals = append(vals, m.Gauge.GetValue())
		case m.Histogram != nil:
			vals = append(vals, float64(m.Histogram.GetSampleCount()))
		}
	}
	require.Len(t, vals, 1, "%s%v", name, want)
	return vals[0]
}

// scrapeAtClose runs the command in-process with -metrics 127.0.0.1:0
// and scrapes its metrics page as the command ends (its work done, the
// server still up); then it checks the server is gone.
func scrapeAtClose(t *testing.T, args ...string) (fs map[string]*dto.MetricFamily, stdout string) {
	t.Helper()
	var scrapeErr error
	testHookMetricsClose = func(url string) { fs, scrapeErr = scrapeText(url) }
	defer func() { testHookMetricsClose = nil }()
	code, out, errs := gxfer(t, append(args, "-metrics", "127.0.0.1:0")...)
	require.Equal(t, exitOK, code, errs)
	require.NoError(t, scrapeErr)
	require.NotNil(t, fs, "the hook did not run")
	m := metricsAt.FindStringSubmatch(errs)
	require.NotNil(t, m, "no metrics address on stderr: %q", errs)
	_, err := net.Dial("tcp", m[2])
	require.Error(t, err, "the metrics server is shut down at the end")
	return fs, out
}

// TestPerfMetricsLocal: perf -metrics serves the engine's copies: at the
// end of the run the page counts at least the measured copies.
func TestPerfMetricsLocal(t *testing.T) {
	const n = 10
	fs, _ := scrapeAtClose(t, "perf", "-t", "h2h,h2d", "-s", "8,64K", "-n", "10", "-w", "2", "-q")
	measured := float64(2 * 2 * n) // tests x sizes x iterations
	completed := sample(t, fs, "gxfer_copies_completed_total")
	require.GreaterOrEqual(t, completed, measured)
	require.GreaterOrEqual(t, sample(t, fs, "gxfer_copied_bytes_total"), float64(2*n*(8+64<<10)))
	require.Zero(t, sample(t, fs, "gxfer_copies_failed_total"))
	require.Zero(t, sample(t, fs, "gxfer_copies_in_flight"))
	require.Zero(t, sample(t, fs, "gxfer_copy_errors_total", "kind", "device"))
	// h2d copies are asynchronous: in the latency histogram.
	require.GreaterOrEqual(t, sample(t, fs, "gxfer_copy_latency_seconds"), float64(2*n))
	require.Positive(t, sample(t, fs, "gxfer_command_submissions_total"))
	require.Positive(t, sample(t, fs, "gxfer_device_cs_retired_total", "device", "0"))
	require.Positive(t, sample(t, fs, "gxfer_registration_cache_lookups_total", "device", "0", "cache", "host_map"))
	// The process's own metrics come along.
	require.NotNil(t, fs["go_goroutines"])
	require.NotNil(t, fs["process_open_fds"])
}

// TestPerfMetricsPeer: perf -metrics as a client over unix and tcp: the
// page at the end of the run counts the Puts and Gets (over unix, perf's
// repeated transfers use a binding: copies through the server's mapped
// memory), their bytes and latencies, no failure.
func TestPerfMetricsPeer(t *testing.T) {
	const n = 10
	tests := []struct {
		name, transport string
		start           func(t *testing.T, ctx context.Context, extra ...string) (string, <-chan int, *syncBuffer)
		x               string
	}{
		{"unix", "ipc", startServer, "unix:"},
		{"tcp", "tcp", startTCPServer, "tcp:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, srvCode, srvOut := tt.start(t, context.Background(), "-once", "-devices", "none")
			fs, _ := scrapeAtClose(t, "perf", "-devices", "none", "-x", tt.x+addr, "-t", "put_lat,get_lat", "-s", "8,4K", "-n", "10", "-w", "2", "-q")
			require.Equal(t, 0, <-srvCode, srvOut.String())
			tr := []string{"transport", tt.transport}
			ops := sample(t, fs, "gxfer_transport_ops_completed_total", tr...)
			require.Zero(t, sample(t, fs, "gxfer_transport_ops_failed_total", tr...))
			require.Equal(t, ops, sample(t, fs, "gxfer_transport_op_latency_seconds", tr...), "every op in the histogram")
			require.Zero(t, sample(t, fs, "gxfer_transport_endpoints", tr...), "the client closed its endpoint")
			require.Zero(t, sample(t, fs, "gxfer_transport_op_errors_total", append(tr, "kind", "peer")...))
			measured := float64(2 * 2 * n) // tests x sizes x iterations
			if tt.transport == "tcp" {
				require.GreaterOrEqual(t, ops, measured)
				require.GreaterOrEqual(t, sample(t, fs, "gxfer_transport_bytes_total", tr...), float64(2*n*(8+4096)))
			} else {
				require.Positive(t, ops)
				require.GreaterOrEqual(t, sample(t, fs, "gxfer_copies_completed_total"), measured)
				require.Positive(t, sample(t, fs, "gxfer_ipc_cache_misses_total"))
			}
		})
	}
}

// TestSoakMetrics: soak -metrics serves the soak engine's counters.
func TestSoakMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a soak")
	}
	var fs map[string]*dto.MetricFamily
	var scrapeErr error
	testHookMetricsClose = func(url string) { fs, scrapeErr = scrapeText(url) }
	defer func() { testHookMetricsClose = nil }()
	code, out, errs := gxfer(t, "soak", "-duration", "2s", "-procs", "1", "-workers", "2", "-max-op", "16384",
		"-faults", "stale-key", "-netns", "off", "-seed", "3", "-metrics", "127.0.0.1:0")
	require.Contains(t, out, "result:", errs)
	require.Contains(t, []int{exitOK, exitRuntime}, code, errs) // what the soak finds is package soak's business
	require.Regexp(t, metricsAt, errs)
	require.NoError(t, scrapeErr)
	require.NotNil(t, fs)
	var ops float64
	for _, tr := range []string{"ipc", "tcp"} {
		ops += sample(t, fs, "gxfer_transport_ops_completed_total", "transport", tr)
	}
	require.Positive(t, ops+sample(t, fs, "gxfer_copies_completed_total"), "the soak moved data")
}

// TestMetricsFlagErrors: -metrics needs an address it can listen on (a
// runtime error, before any work); a soak peer takes no -metrics.
func TestMetricsFlagErrors(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-t", "h2h", "-s", "8", "-n", "1", "-metrics", "127.0.0.1:notaport")
	require.Equal(t, exitRuntime, code, errs)
	require.Empty(t, out)
	require.Contains(t, errs, "-metrics 127.0.0.1:notaport")
	code, _, errs = gxfer(t, "soak", "-peer", "-metrics", "127.0.0.1:0")
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "-metrics has no meaning with -peer")
}

// urlWriter is a stderr that hands out the metrics URL once printed.
type urlWriter struct {
	mu  sync.Mutex
	b   bytes.Buffer
	url chan string
}

func (w *urlWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if m := metricsAt.FindStringSubmatch(w.b.String()); m != nil && w.url != nil {
		w.url <- m[1]
		w.url = nil
	}
	return len(p), nil
}

func (w *urlWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestSoakMetricsScraped: a soak whose metrics a scraper keeps reading
// (with keep-alive, as Prometheus does) does not report the metrics
// server's connection as a leak of the soak's process. The scraper's
// goroutine exists before the soak takes its baseline.
func TestSoakMetricsScraped(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a soak")
	}
	stderr := &urlWriter{url: make(chan string, 1)}
	urls := stderr.url
	stop := make(chan struct{})
	scraped := make(chan int, 1)
	go func() {
		c := &http.Client{Timeout: 5 * time.Second}
		defer c.CloseIdleConnections()
		n := 0
		defer func() { scraped <- n }()
		var url string
		select {
		case url = <-urls:
		case <-stop:
			return
		}
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for range 3000 {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			resp, err := c.Get(url)
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			n++
		}
	}()
	var out bytes.Buffer
	code := run([]string{"soak", "-duration", "2s", "-procs", "0", "-workers", "1", "-faults", "none", "-netns", "off",
		"-seed", "5", "-metrics", "127.0.0.1:0"}, &out, stderr)
	close(stop)
	require.Positive(t, <-scraped, "the scraper read the page")
	require.NotContains(t, out.String(), "LEAK", stderr.String())
	require.Equal(t, exitOK, code, "%s\n%s", out.String(), stderr.String())
}
