package bench_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/bench"
)

// TestBenchfmtConfigPerResult: a run mixing latency and bandwidth tests
// (put_lat and get_lat run with one operation in flight whatever -O says,
// put_bw with -O) writes, for each benchmark line, the window, batch and
// latency kind that line was measured with: a configuration line applies
// to the results that follow it.
func TestBenchfmtConfigPerResult(t *testing.T) {
	res := func(test string, window int, kind bench.LatencyKind) bench.Result {
		return bench.Result{Test: test, Transport: "ipc", Src: bench.Host, Dst: bench.Host, Device: "host", PeerDevice: "host",
			Size: 8, Iterations: 10, Window: window, Batch: 1, LatencyKind: kind, ElapsedSec: 1e-3, Verified: true}
	}
	for _, tc := range []struct {
		name    string
		window  int
		results []bench.Result
	}{
		{"latency first", 4, []bench.Result{res("put_lat", 1, bench.OneWay), res("put_bw", 4, bench.PerOp), res("get_lat", 1, bench.RoundTrip)}},
		{"bandwidth first", 4, []bench.Result{res("put_bw", 4, bench.PerOp), res("get_lat", 1, bench.RoundTrip)}},
		{"one kind", 1, []bench.Result{res("put_lat", 1, bench.OneWay), res("put_lat", 1, bench.OneWay)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &bench.Report{
				Tool:    "gxfer perf",
				Env:     bench.Environment{GOOS: "linux", GOARCH: "amd64", CPUs: 2, GOMAXPROCS: 1},
				Params:  bench.RunParams{Transport: "ipc", Window: tc.window, Batch: 1, Count: 1, Peer: "unix:/x (pid 1)"},
				PeerEnv: &bench.Environment{},
				Results: tc.results,
			}
			var out bytes.Buffer
			require.NoError(t, rep.WriteBenchfmt(&out))
			config := map[string]string{}
			n := 0
			for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
				if !strings.HasPrefix(line, "Benchmark") {
					k, v, ok := strings.Cut(line, ": ")
					require.True(t, ok, line)
					config[k] = v
					continue
				}
				require.Less(t, n, len(tc.results), out.String())
				x := tc.results[n]
				assert.Contains(t, line, "/test="+x.Test+"/")
				assert.Equal(t, strconv.Itoa(x.Window), config["gxfer-window"], "window of %s:\n%s", x.Test, out.String())
				assert.Equal(t, strconv.Itoa(x.Batch), config["gxfer-batch"], "batch of %s", x.Test)
				assert.Equal(t, string(x.LatencyKind), config["gxfer-latency"], "latency kind of %s:\n%s", x.Test, out.String())
				n++
			}
			assert.Equal(t, len(tc.results), n)
		})
	}
}
