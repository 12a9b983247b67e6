package bench_test

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/bench"
)

// TestPlotTitleLabelsPeerDevices: over a peer transport the plot's title
// names the peer's devices too, emulated ones as EMULATED (a put into the
// peer's emulated Gaudi from a host-only client is not "host only").
func TestPlotTitleLabelsPeerDevices(t *testing.T) {
	res := func(size int) bench.Result {
		return bench.Result{Test: "put_bw", Transport: "ipc", Src: bench.Host, Dst: bench.Gaudi, Device: "host",
			PeerDevice: "gaudi0", PeerModel: "Gaudi2", PeerEmulated: true, Size: size, Iterations: 10, Window: 1, Batch: 1,
			LatencyKind: bench.RoundTrip, Latency: bench.LatencyStats{Median: 2, Avg: 2, P99: 3, Min: 1, Max: 3},
			BandwidthMBs: float64(size), MsgRate: 1e5, ElapsedSec: 1e-3, Verified: true}
	}
	for _, tc := range []struct {
		name      string
		emulated  bool
		want, not string
	}{
		{"emulated peer", true, "peer gaudi0 Gaudi2 (EMULATED)", "host only"},
		{"real peer", false, "peer gaudi0 Gaudi2 (real)", "host only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &bench.Report{
				Tool:    "gxfer perf",
				Env:     bench.Environment{GOOS: "linux", GOARCH: "amd64", CPUs: 2, Devices: []bench.DeviceEnv{}},
				PeerEnv: &bench.Environment{Devices: []bench.DeviceEnv{{Index: 0, Model: "Gaudi2", Emulated: tc.emulated, Name: "hlsim0"}}},
				Params:  bench.RunParams{Transport: "ipc", Window: 1, Batch: 1, Count: 1, Peer: "unix:/x (pid 1)"},
				Results: []bench.Result{res(8), res(64 << 10)},
			}
			for i := range rep.Results {
				rep.Results[i].PeerEmulated = tc.emulated
			}
			var svg bytes.Buffer
			require.NoError(t, rep.WritePlot(&svg, "svg"))
			title := regexp.MustCompile(`>(gxfer perf, [^<]*)<`).FindStringSubmatch(svg.String())
			require.NotNil(t, title, "no title in the SVG")
			assert.Contains(t, title[1], tc.want)
			assert.NotContains(t, title[1], tc.not)
		})
	}
}

// TestPlotLatencyPanelNamesKind: the latency panel says what its values
// are, for every test it plots: a put_lat run plots one-way latencies
// (half a round trip), and a run mixing kinds labels each test's line.
func TestPlotLatencyPanelNamesKind(t *testing.T) {
	res := func(test string, size int, kind bench.LatencyKind) bench.Result {
		return bench.Result{Test: test, Transport: "ipc", Src: bench.Host, Dst: bench.Host, Device: "host", PeerDevice: "host",
			Size: size, Iterations: 10, Window: 1, Batch: 1, LatencyKind: kind,
			Latency:      bench.LatencyStats{Median: 2, Avg: 2, P99: 3, Min: 1, Max: 3},
			BandwidthMBs: float64(size), MsgRate: 1e5, ElapsedSec: 1e-3, Verified: true}
	}
	for _, tc := range []struct {
		name    string
		results []bench.Result
		want    []string
		not     []string
	}{
		{"round trip", []bench.Result{res("get_lat", 8, bench.RoundTrip), res("get_lat", 64, bench.RoundTrip)},
			[]string{">Latency: median round trip, µs<"}, nil},
		{"per copy", []bench.Result{res("put_bw", 8, bench.PerOp), res("put_bw", 64, bench.PerOp)},
			[]string{">Latency: median time per copy, µs<"}, nil},
		{"one-way", []bench.Result{res("put_lat", 8, bench.OneWay), res("put_lat", 64, bench.OneWay)},
			[]string{">Latency: median one-way (half a round trip), µs<"}, []string{"median round trip"}},
		{"mixed", []bench.Result{res("put_lat", 8, bench.OneWay), res("put_lat", 64, bench.OneWay), res("put_bw", 8, bench.PerOp), res("put_bw", 64, bench.PerOp)},
			[]string{">Latency: median, µs<", ">put_lat: one-way (half a round trip)<", ">put_bw: time per copy<"}, []string{"median round trip", "median time per copy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &bench.Report{
				Tool:    "gxfer perf",
				Env:     bench.Environment{GOOS: "linux", GOARCH: "amd64", CPUs: 2},
				Params:  bench.RunParams{Transport: "ipc", Window: 1, Batch: 1, Count: 1},
				Results: tc.results,
			}
			var svg bytes.Buffer
			require.NoError(t, rep.WritePlot(&svg, "svg"))
			for _, w := range tc.want {
				assert.Contains(t, svg.String(), w)
			}
			for _, n := range tc.not {
				assert.NotContains(t, svg.String(), n)
			}
		})
	}
}
