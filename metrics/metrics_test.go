package metrics_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/metrics"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// families are gathered metric families by name.
type families map[string]*dto.MetricFamily

// value returns the value of the sample of name whose labels include
// want (name=value pairs), failing the test unless exactly one matches.
func (fs families) value(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	m := fs.one(t, name, want...)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("%s: not a counter or gauge", name)
	return 0
}

func (fs families) one(t *testing.T, name string, want ...string) *dto.Metric {
	t.Helper()
	f := fs[name]
	require.NotNil(t, f, "no metric %s", name)
	var found []*dto.Metric
	for _, m := range f.Metric {
		if hasLabels(m, want) {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "%s%v", name, want)
	return found[0]
}

func hasLabels(m *dto.Metric, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		ok := false
		for _, l := range m.Label {
			if l.GetName() == want[i] && l.GetValue() == want[i+1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func gather(t *testing.T, g prometheus.Gatherer) families {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	fs := families{}
	for _, f := range mfs {
		fs[f.GetName()] = f
	}
	return fs
}

// scrape fetches url and parses it with the client library's text parser.
func scrape(t *testing.T, url string) families {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain; version=0.0.4") // the text format, not protobuf
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	return fs
}

// pair is two engines, a dialing b over network.
type pair struct {
	a, b   *engine.Engine
	ab, ba *engine.Endpoint
}

func newPair(t *testing.T, network string) pair {
	t.Helper()
	var p pair
	var err error
	p.a, err = engine.New(engine.Config{Transport: engine.TransportTCP})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.a.Close()) })
	p.b, err = engine.New(engine.Config{Transport: engine.TransportTCP})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.b.Close()) })
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s.sock")
	}
	l, err := p.b.Listen(network, addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	p.ab, err = p.a.Dial(ctx, network, l.Addr())
	require.NoError(t, err)
	p.ba, err = l.Accept(ctx)
	require.NoError(t, err)
	return p
}

// traffic runs copies puts and gets Puts and Gets of size bytes on p,
// and one Put the owner refuses (its buffer freed: ErrInvalid).
func traffic(t *testing.T, p pair, copies, puts, gets, size int) {
	t.Helper()
	ctx := context.Background()
	local, err := p.a.Alloc(size, engine.Host)
	require.NoError(t, err)
	other, err := p.a.Alloc(size, engine.Host)
	require.NoError(t, err)
	rb, err := p.b.Alloc(size, engine.Host)
	require.NoError(t, err)
	rk, err := rb.Export()
	require.NoError(t, err)
	for range copies {
		require.NoError(t, p.a.CopySync(ctx, other.All(), local.All()))
	}
	for range puts {
		require.NoError(t, p.ab.PutSync(ctx, local.All(), rk))
	}
	for range gets {
		require.NoError(t, p.ab.GetSync(ctx, local.All(), rk))
	}
	require.NoError(t, rb.Free())
	require.ErrorIs(t, p.ab.PutSync(ctx, local.All(), rk), engine.ErrInvalid)
}

// TestEngineCollectorFollowsTraffic: after real copies, Puts and Gets
// over unix and tcp, the gathered metrics and the scraped page (parsed
// with the text parser) hold their counts, bytes, errors by kind and
// latency histograms; the metrics pass promlint.
func TestEngineCollectorFollowsTraffic(t *testing.T) {
	tests := []struct {
		network, transport string
	}{
		{"unix", "ipc"},
		{"tcp", "tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.network, func(t *testing.T) {
			p := newPair(t, tt.network)
			const copies, puts, gets, size = 3, 7, 5, 8192
			traffic(t, p, copies, puts, gets, size)

			reg := prometheus.NewPedanticRegistry()
			c := metrics.NewEngineCollector(p.a, metrics.ConstLabels(prometheus.Labels{"engine": "a"}))
			require.NoError(t, reg.Register(c))
			problems, err := promtest.GatherAndLint(reg)
			require.NoError(t, err)
			require.Empty(t, problems)

			srv, err := metrics.Serve("127.0.0.1:0", reg)
			require.NoError(t, err)
			defer func() { require.NoError(t, srv.Close()) }()

			for name, fs := range map[string]families{"gathered": gather(t, reg), "scraped": scrape(t, srv.URL())} {
				t.Run(name, func(t *testing.T) {
					tr := []string{"transport", tt.transport, "engine", "a"}
					require.Equal(t, float64(1), fs.value(t, "gxfer_transport_endpoints", tr...))
					require.Equal(t, float64(puts+gets), fs.value(t, "gxfer_transport_ops_completed_total", tr...))
					require.Equal(t, float64(1), fs.value(t, "gxfer_transport_ops_failed_total", tr...))
					require.Equal(t, float64((puts+gets)*size), fs.value(t, "gxfer_transport_bytes_total", tr...))
					require.Equal(t, float64(1), fs.value(t, "gxfer_transport_op_errors_total", append(tr, "kind", "invalid")...))
					require.Zero(t, fs.value(t, "gxfer_transport_op_errors_total", append(tr, "kind", "peer")...))
					h := fs.one(t, "gxfer_transport_op_latency_seconds", tr...).Histogram
					require.NotNil(t, h)
					require.Equal(t, uint64(puts+gets+1), h.GetSampleCount())
					require.Positive(t, h.GetSampleSum())
					require.NotEmpty(t, h.Bucket)
					prev := uint64(0)
					for _, b := range h.Bucket {
						require.GreaterOrEqual(t, b.GetCumulativeCount(), prev)
						prev = b.GetCumulativeCount()
					}

					ep := []string{"transport", tt.transport, "peer", p.ab.Peer()}
					require.Equal(t, float64(puts+1), fs.value(t, "gxfer_endpoint_puts_total", ep...))
					require.Equal(t, float64(gets), fs.value(t, "gxfer_endpoint_gets_total", ep...))
					require.Equal(t, float64(puts+gets), fs.value(t, "gxfer_endpoint_ops_completed_total", ep...))
					require.Equal(t, float64(1), fs.value(t, "gxfer_endpoint_ops_failed_total", ep...))
					require.Equal(t, float64(1), fs.value(t, "gxfer_endpoint_op_errors_total", append(ep, "kind", "invalid")...))
					require.Equal(t, float64((puts+gets)*size), fs.value(t, "gxfer_endpoint_transferred_bytes_total", ep...))
					if tt.transport == "tcp" {
						// (the refused Put's frames may have left too)
						require.GreaterOrEqual(t, fs.value(t, "gxfer_endpoint_sent_bytes_total", ep...), float64(puts*size))
						require.Equal(t, float64(gets*size), fs.value(t, "gxfer_endpoint_received_bytes_total", ep...))
					} else {
						// Puts and Gets over unix are copies through the peer's mapped memory.
						require.GreaterOrEqual(t, fs.value(t, "gxfer_ipc_cache_misses_total", "engine", "a"), float64(1))
						require.GreaterOrEqual(t, fs.value(t, "gxfer_ipc_cache_hits_total", "engine", "a"), float64(puts+gets-1), "one import, then hits")
					}
					require.GreaterOrEqual(t, fs.value(t, "gxfer_copies_completed_total", "engine", "a"), float64(copies))
					require.Zero(t, fs.value(t, "gxfer_copies_in_flight", "engine", "a"))
					require.Zero(t, fs.value(t, "gxfer_copies_failed_total", "engine", "a"))
					require.NotNil(t, fs.one(t, "gxfer_copy_latency_seconds", "engine", "a").Histogram)
				})
			}
		})
	}
}

// TestEngineCollectorEndpointsGoAway: a closed endpoint's series go, its
// counts stay in its transport's endpoint="closed" series, and the
// transport's counters stay.
func TestEngineCollectorEndpointsGoAway(t *testing.T) {
	p := newPair(t, "tcp")
	traffic(t, p, 0, 2, 0, 4096)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewEngineCollector(p.a))
	fs := gather(t, reg)
	require.Len(t, fs["gxfer_endpoint_puts_total"].Metric, 1)
	require.Len(t, fs["gxfer_endpoint_lanes"].Metric, 1)
	require.NoError(t, p.ab.Close())
	require.NoError(t, p.ba.Close())
	fs = gather(t, reg)
	require.Len(t, fs["gxfer_endpoint_puts_total"].Metric, 1, "the closed endpoints' series only")
	require.Equal(t, float64(3), fs.value(t, "gxfer_endpoint_puts_total", "transport", "tcp", "endpoint", "closed"), "two Puts and the refused one")
	require.Nil(t, fs["gxfer_endpoint_lanes"], "no lanes gauge for closed endpoints")
	require.Zero(t, fs.value(t, "gxfer_transport_endpoints", "transport", "tcp"))
	require.Equal(t, float64(2), fs.value(t, "gxfer_transport_ops_completed_total", "transport", "tcp"))
}

// samePeerPair is a pair with a second endpoint from a to b over unix
// (the same transport and peer name as p.ab), a's buffer local and a key
// rk of one of b's, 4 KiB each. The second endpoint's sides are closed
// by the test's cleanup.
func samePeerPair(t *testing.T) (p pair, ab2 *engine.Endpoint, local *engine.Buffer, rk engine.RemoteKey) {
	p = newPair(t, "unix")
	ctx := context.Background()
	local, err := p.a.Alloc(4096, engine.Host)
	require.NoError(t, err)
	rb, err := p.b.Alloc(4096, engine.Host)
	require.NoError(t, err)
	rk, err = rb.Export()
	require.NoError(t, err)
	l, err := p.b.Listen("unix", filepath.Join(t.TempDir(), "t.sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ab2, err = p.a.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	ba2, err := l.Accept(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ba2.Close(); _ = ab2.Close() })
	return p, ab2, local, rk
}

// TestEngineCollectorTwoEndpointsSamePeer: two endpoints to the same
// peer over unix (same transport and peer name) are two series, told
// apart by their endpoint label; the registry accepts the scrape (no
// duplicate series).
func TestEngineCollectorTwoEndpointsSamePeer(t *testing.T) {
	p, ab2, local, rk := samePeerPair(t)
	ctx := context.Background()
	require.NoError(t, p.ab.PutSync(ctx, local.All(), rk))
	require.NoError(t, ab2.PutSync(ctx, local.All(), rk))
	require.NoError(t, ab2.PutSync(ctx, local.All(), rk))

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewEngineCollector(p.a))
	fs := gather(t, reg)
	peers := map[string]float64{}
	for _, m := range fs["gxfer_endpoint_puts_total"].Metric {
		for _, lp := range m.Label {
			if lp.GetName() == "peer" {
				peers[lp.GetValue()] += m.Counter.GetValue()
			}
		}
	}
	var total float64
	for _, v := range peers {
		total += v
	}
	require.Equal(t, float64(3), total)
	require.Len(t, fs["gxfer_endpoint_puts_total"].Metric, 2)
	require.Equal(t, float64(2), fs.value(t, "gxfer_endpoint_puts_total", "peer", ab2.Peer(), "endpoint", strconv.FormatUint(ab2.Stats().ID, 10)))
	require.Equal(t, float64(2), fs.value(t, "gxfer_transport_endpoints", "transport", "ipc"))
}

// TestTwoEnginesOneRegistry: ConstLabels tell two engines' metrics apart.
func TestTwoEnginesOneRegistry(t *testing.T) {
	p := newPair(t, "tcp")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewEngineCollector(p.a, metrics.ConstLabels(prometheus.Labels{"engine": "client"})))
	reg.MustRegister(metrics.NewEngineCollector(p.b, metrics.ConstLabels(prometheus.Labels{"engine": "server"})))
	fs := gather(t, reg)
	require.Equal(t, float64(1), fs.value(t, "gxfer_transport_endpoints", "transport", "tcp", "engine", "client"))
	require.Equal(t, float64(1), fs.value(t, "gxfer_transport_endpoints", "transport", "tcp", "engine", "server"))
	// Without distinguishing labels the second registration is refused.
	plain := prometheus.NewRegistry()
	plain.MustRegister(metrics.NewEngineCollector(p.a))
	require.Error(t, plain.Register(metrics.NewEngineCollector(p.b)))
}

// TestEngineCollectorMessages: Endpoint.Send and Recv are counted on both
// sides, over unix and tcp.
func TestEngineCollectorMessages(t *testing.T) {
	for _, tt := range []struct{ network, transport string }{{"unix", "ipc"}, {"tcp", "tcp"}} {
		t.Run(tt.network, func(t *testing.T) {
			p := newPair(t, tt.network)
			ctx := context.Background()
			const n = 6
			for i := range n {
				require.NoError(t, p.ab.Send(ctx, make([]byte, 100+i)))
			}
			for range n {
				_, err := p.ba.Recv(ctx)
				require.NoError(t, err)
			}
			ra, rb := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
			ra.MustRegister(metrics.NewEngineCollector(p.a))
			rb.MustRegister(metrics.NewEngineCollector(p.b))
			fa, fb := gather(t, ra), gather(t, rb)
			ea := []string{"transport", tt.transport, "peer", p.ab.Peer()}
			eb := []string{"transport", tt.transport, "peer", p.ba.Peer()}
			const bytes = n*100 + 0 + 1 + 2 + 3 + 4 + 5
			require.Equal(t, float64(n), fa.value(t, "gxfer_endpoint_messages_sent_total", ea...))
			require.Equal(t, float64(bytes), fa.value(t, "gxfer_endpoint_message_sent_bytes_total", ea...))
			require.Zero(t, fa.value(t, "gxfer_endpoint_messages_received_total", ea...))
			require.Equal(t, float64(n), fb.value(t, "gxfer_endpoint_messages_received_total", eb...))
			require.Equal(t, float64(bytes), fb.value(t, "gxfer_endpoint_message_received_bytes_total", eb...))
		})
	}
}

// counterKey names a counter series: its family and its labels.
func counterKey(name string, m *dto.Metric) string {
	k := name
	for _, l := range m.Label {
		k += "," + l.GetName() + "=" + l.GetValue()
	}
	return k
}

// TestEngineCollectorCountersNeverGoDown: two endpoints to the same peer
// (same transport and peer name), one of which closes: no counter series
// that is still exported has a smaller value than before (Prometheus
// takes a decrease for a restart from zero, and counts the remaining
// value as new traffic).
func TestEngineCollectorCountersNeverGoDown(t *testing.T) {
	p, ab2, local, rk := samePeerPair(t)
	ctx := context.Background()
	require.Equal(t, p.ab.Peer(), ab2.Peer(), "the same peer name")
	require.NoError(t, p.ab.PutSync(ctx, local.All(), rk))
	for range 2 {
		require.NoError(t, ab2.PutSync(ctx, local.All(), rk))
		require.NoError(t, ab2.GetSync(ctx, local.All(), rk))
		require.NoError(t, ab2.Send(ctx, []byte("hello")))
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewEngineCollector(p.a))
	before := map[string]float64{}
	for name, f := range gather(t, reg) {
		for _, m := range f.Metric {
			if m.Counter != nil {
				before[counterKey(name, m)] = m.Counter.GetValue()
			}
		}
	}
	require.NoError(t, ab2.Close())
	after := gather(t, reg)
	var puts float64
	for _, m := range after["gxfer_endpoint_puts_total"].Metric {
		if !hasLabels(m, []string{"endpoint", "closed"}) {
			puts += m.Counter.GetValue()
		}
	}
	require.Equal(t, float64(1), puts, "the live endpoint's Put")
	require.Equal(t, float64(2), after.value(t, "gxfer_endpoint_puts_total", "endpoint", "closed"), "the closed endpoint's Puts")
	for name, f := range after {
		for _, m := range f.Metric {
			k := counterKey(name, m)
			if v, ok := before[k]; ok && m.Counter != nil {
				require.GreaterOrEqual(t, m.Counter.GetValue(), v, "counter %s went down", k)
			}
		}
	}
}

// TestEngineCollectorDeviceInfo: device_info names each device index and
// says whether it is the emulator (every output labels an emulated
// device); before, a scrape could not tell an emulated device's series
// from a real one's. An engine without devices has none.
func TestEngineCollectorDeviceInfo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     engine.Config
		devices int
	}{
		{"emulated gaudi2", engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{Model: "gaudi2", DRAMSize: 64 << 20}}, 1},
		{"no devices", engine.Config{Devices: engine.DevicesNone}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.New(tc.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Close()) })
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(metrics.NewEngineCollector(e))
			f := gather(t, reg)["gxfer_device_info"]
			if tc.devices == 0 {
				require.Nil(t, f)
				return
			}
			require.NotNil(t, f)
			require.Len(t, f.Metric, tc.devices)
			labels := map[string]string{}
			for _, l := range f.Metric[0].Label {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, "0", labels["device"])
			require.Equal(t, "Gaudi2", labels["model"], "as DeviceInfo.Model")
			require.Equal(t, "true", labels["emulated"])
			require.Contains(t, labels["name"], "emulated")
			require.Equal(t, float64(1), f.Metric[0].Gauge.GetValue())
		})
	}
}

// endpointSeries counts the series of the endpoint_* families and sums
// those of name.
func endpointSeries(fs families, name string) (series int, sum float64) {
	for n, f := range fs {
		if strings.HasPrefix(n, "gxfer_endpoint_") {
			series += len(f.Metric)
		}
	}
	if f := fs[name]; f != nil {
		for _, m := range f.Metric {
			sum += m.Counter.GetValue()
		}
	}
	return series, sum
}

// TestEngineCollectorClosedEndpointsCounted: a peer that connects, sends
// a message, Puts and closes, again and again, leaves as many endpoint
// series after the last round as after the first (no series per closed
// endpoint), and what the closed endpoints counted stays counted (in
// their transport's endpoint="closed" series). Before, a closed
// endpoint's series went with all it had counted: the messages, Puts and
// bytes of endpoints that lived between two scrapes were in no series.
func TestEngineCollectorClosedEndpointsCounted(t *testing.T) {
	for _, tt := range []struct{ network, transport string }{{"unix", "ipc"}, {"tcp", "tcp"}} {
		t.Run(tt.network, func(t *testing.T) {
			p := newPair(t, tt.network) // p.ab stays open: a live endpoint
			ctx := context.Background()
			addr := "127.0.0.1:0"
			if tt.network == "unix" {
				addr = filepath.Join(t.TempDir(), "r.sock")
			}
			l, err := p.b.Listen(tt.network, addr)
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()
			local, err := p.a.Alloc(4096, engine.Host)
			require.NoError(t, err)
			rb, err := p.b.Alloc(4096, engine.Host)
			require.NoError(t, err)
			rk, err := rb.Export()
			require.NoError(t, err)
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(metrics.NewEngineCollector(p.a))

			const rounds = 12
			firstSeries := 0
			for i := 1; i <= rounds; i++ {
				ep, err := p.a.Dial(ctx, tt.network, l.Addr())
				require.NoError(t, err)
				peer, err := l.Accept(ctx)
				require.NoError(t, err)
				require.NoError(t, ep.Send(ctx, []byte("0123456789")))
				require.NoError(t, ep.PutSync(ctx, local.All(), rk))
				require.NoError(t, ep.Close())
				require.NoError(t, peer.Close())

				fs := gather(t, reg)
				series, msgs := endpointSeries(fs, "gxfer_endpoint_messages_sent_total")
				_, puts := endpointSeries(fs, "gxfer_endpoint_puts_total")
				_, bytes := endpointSeries(fs, "gxfer_endpoint_transferred_bytes_total")
				require.Equal(t, float64(i), msgs, "round %d: messages of the closed endpoints", i)
				require.Equal(t, float64(i), puts, "round %d: Puts of the closed endpoints", i)
				require.Equal(t, float64(i*4096), bytes, "round %d", i)
				require.Equal(t, float64(i), fs.value(t, "gxfer_endpoint_puts_total", "transport", tt.transport, "endpoint", "closed"))
				if i == 1 {
					firstSeries = series
				}
				require.Equal(t, firstSeries, series, "round %d: endpoint series grow with the endpoints closed", i)
			}
			require.Len(t, p.a.EndpointStats(), 1, "the live endpoint")
		})
	}
}
