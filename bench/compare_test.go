package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// goalRow is one row of compare-goals.py's table (and of goals.json).
type goalRow struct {
	Area, Goal, Gxfer, Reference, Measured, Verdict, Note string
}

var verdictRE = regexp.MustCompile(`^(met|met \(memory-bound rule: .*\)|NOT met \(.*\)|skipped: .+|)$`)

// parseGoalTable reads the Markdown goal table from compare-all.sh's or
// compare-goals.py's output: the rows after the header; each must have
// seven cells and a verdict of the known forms.
func parseGoalTable(t *testing.T, out string) []goalRow {
	t.Helper()
	var rows []goalRow
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "| area | goal |"):
			in = true
			continue
		case !in || strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "| "):
			in = false
			continue
		}
		c := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		require.Len(t, c, 7, "row %q", line)
		require.Regexp(t, verdictRE, c[5], "row %q", line)
		require.NotEqual(t, "", c[5], "row %q", line)
		rows = append(rows, goalRow{c[0], c[1], c[2], c[3], c[4], c[5], c[6]})
	}
	require.NotEmpty(t, rows, "no goal table in:\n%s", out)
	return rows
}

func findRow(t *testing.T, rows []goalRow, goal string) goalRow {
	t.Helper()
	for _, r := range rows {
		if strings.Contains(r.Goal, goal) {
			return r
		}
	}
	t.Fatalf("no row %q", goal)
	return goalRow{}
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
}

// Fixtures: what the comparison scripts and go test -bench leave in OUT.
const (
	ucxSummary = `[
 {"size": 8, "ucx_bw_mbs": {"posix": [200, 210, 205], "cma": [10, 10, 10]},
  "ucx_lat_p50_us": {"posix": [0.060, 0.061, 0.059], "cma": [0.9, 0.9, 0.9]},
  "gxfer_bw_mbs": [800, 800, 800], "gxfer_lat_p50_us": [0.075, 0.076, 0.074]},
 {"size": 4096, "ucx_bw_mbs": {"posix": [1000, 1010, 1005], "cma": [500, 500, 500]},
  "ucx_lat_p50_us": {"posix": [0.3, 0.3, 0.3], "cma": [1, 1, 1]},
  "gxfer_bw_mbs": [980, 990, 1000], "gxfer_lat_p50_us": [0.3, 0.3, 0.3]},
 {"size": 65536, "ucx_bw_mbs": {"posix": [1000, 1000, 1000], "cma": [1100, 1100, 1100]},
  "ucx_lat_p50_us": {"posix": [3, 3, 3], "cma": [7, 7, 7]},
  "gxfer_bw_mbs": [1200, 1150, 1180], "gxfer_lat_p50_us": [3, 3, 3]},
 {"size": 1048576, "ucx_bw_mbs": {"posix": [35000, 34000, 36000], "cma": [20000, 20000, 20000]},
  "ucx_lat_p50_us": {"posix": [28, 28, 28], "cma": [90, 90, 90]},
  "gxfer_bw_mbs": [20000, 21000, 20500], "gxfer_lat_p50_us": [47, 47, 47]}
]`
	tcpSummary = `{"iperf3": {"1048576": [{"gbits": 4.6, "mbs": 550}, {"gbits": 4.6, "mbs": 560}],
  "16777216": [{"gbits": 4.6, "mbs": 550}, {"gbits": 4.6, "mbs": 560}]},
 "gxfer_put_bw": {"1048576": {"-O 1": [500, 520], "-O 4": [1300, 1400]},
  "16777216": {"-O 1": [400, 420], "-O 4": [500, 530]}},
 "gxfer_put_lat_p50_us": [14.8, 15.0], "ucx_ucp_put_lat_p50_us": [17.2, 17.0]}`
	rdmaLog = `kernel 6.1.0, 2 vCPU (TCG), device rxe0, GID 0; 2 rounds (and 1 warm-up round not counted); gxfer -time 3s, put_bw -O 128; modes: event busy1
=== warm-up round (printed, not counted)
ib_write_bw -s 65536 -n 2000: 65536      2000             1.60               1.50               0.002861
gxfer perf -x rdma -rdma-cq event -t put_bw -s 64K -O 128: 50.0 MB/s (5000 iterations, verified true)
gxfer perf -x rdma -rdma-cq busy1 -t put_bw -s 64K -O 128: 50.0 MB/s (5000 iterations, verified true)
ib_write_lat -s 8 -n 2000: 8       2000          10.00          50.00        20.00                 21.00           2.00             30.00                40.00
gxfer perf -x rdma -rdma-cq event -t put_lat -s 8: median 200.0 us, avg 240.0 us, p99 400.0 us (2000 iterations, verified true)
=== round 1
ib_write_bw -s 65536 -n 2000: 65536      2000             1.60               1.50               0.002861
gxfer perf -x rdma -rdma-cq event -t put_bw -s 64K -O 128: 180.5 MB/s (5000 iterations, verified true)
gxfer perf -x rdma -rdma-cq busy1 -t put_bw -s 64K -O 128: 170.0 MB/s (5000 iterations, verified true)
ib_write_lat -s 8 -n 2000: 8       2000          10.00          50.00        20.00                 21.00           2.00             30.00                40.00
rdmafloor -s 8 -n 2000: 8       2000          9.00          45.00        19.50                 20.00           2.00             29.00                39.00
gxfer perf -x rdma -rdma-cq event -t put_lat -s 8: median 23.0 us, avg 24.0 us, p99 40.0 us (2000 iterations, verified true)
gxfer perf -x rdma -rdma-cq busy1 -t put_lat -s 8: median 21.0 us, avg 22.0 us, p99 30.0 us (2000 iterations, verified true)
=== round 2
ib_write_bw -s 65536 -n 2000: 65536      2000             1.60               1.50               0.002861
gxfer perf -x rdma -rdma-cq event -t put_bw -s 64K -O 128: 160.0 MB/s (5000 iterations, verified true)
gxfer perf -x rdma -rdma-cq busy1 -t put_bw -s 64K -O 128: 170.0 MB/s (5000 iterations, verified true)
ib_write_lat -s 8 -n 2000: 8       2000          10.00          50.00        inf                 21.00           2.00             30.00                40.00
gxfer perf -x rdma -rdma-cq event -t put_lat -s 8: median 25.0 us, avg 26.0 us, p99 40.0 us (2000 iterations, verified true)
=== summary: medians over the valid rounds
`
	gaudiBench = `goos: linux
BenchmarkGaudiOverhead/gaudi2/batch=1-2         	     100	     17261 ns/op	      3362 dma-ns/op	     13900 overhead-ns/op
BenchmarkGaudiOverhead/gaudi2/batch=256-2       	     100	    824043 ns/op	      2109 dma-ns/op	       400.5 overhead-ns/op
BenchmarkGaudiOverhead/gaudi3/batch=1-2         	     100	     17261 ns/op	      3362 dma-ns/op	      3100 overhead-ns/op
BenchmarkGaudiOverhead/gaudi3/batch=256-2       	     100	    824043 ns/op	      2109 dma-ns/op	       300 overhead-ns/op
BenchmarkGaudiOverhead/gaudi2/batch=1-2         	     100	     17261 ns/op	      3362 dma-ns/op	     1500 overhead-ns/op
BenchmarkGaudiOverhead/gaudi2/batch=256-2       	     100	    824043 ns/op	      2109 dma-ns/op	       450 overhead-ns/op
BenchmarkGaudiOverhead/gaudi3/batch=1-2         	     100	     17261 ns/op	      3362 dma-ns/op	      2900 overhead-ns/op
BenchmarkGaudiOverhead/gaudi3/batch=256-2       	     100	    824043 ns/op	      2109 dma-ns/op	       310 overhead-ns/op
BenchmarkGaudiOverhead/gaudi2/batch=1-2         	     100	     17261 ns/op	      3362 dma-ns/op	     1900 overhead-ns/op
BenchmarkGaudiOverhead/gaudi2/batch=256-2       	     100	    824043 ns/op	      2109 dma-ns/op	       700 overhead-ns/op
BenchmarkGaudiOverhead/gaudi3/batch=1-2         	     100	     17261 ns/op	      3362 dma-ns/op	      3000 overhead-ns/op
BenchmarkGaudiOverhead/gaudi3/batch=256-2       	     100	    824043 ns/op	      2109 dma-ns/op	       320 overhead-ns/op
BenchmarkGaudiFloor/gaudi2-2         	     100	      3910 ns/op	      1674 dma-ns/op	      2236 overhead-ns/op
BenchmarkGaudiFloor/gaudi3-2         	     100	      3581 ns/op	      2275 dma-ns/op	      1306 overhead-ns/op
BenchmarkGaudiFloor/gaudi3-2         	     100	      3581 ns/op	      2275 dma-ns/op	      1200 overhead-ns/op
PASS
`
	hostcopyBench = `BenchmarkHostCopyVsLimit/size=64MiB	20	  21427805 ns/op	         8.6 engine-GB/s	         0.6628 engine/limit	         0.7222 engine/onecore	         9.785 limit-GB/s	         8.8 onecore-GB/s	         6.057 put-GB/s	         0.6190 put/limit
BenchmarkHostCopyVsLimit/size=64MiB	20	  21427805 ns/op	         8.5 engine-GB/s	         0.6628 engine/limit	         0.7222 engine/onecore	         9.6 limit-GB/s	         8.7 onecore-GB/s	         6.1 put-GB/s	         0.6190 put/limit
BenchmarkHostCopyVsLimit/size=64MiB	20	  21427805 ns/op	         8.7 engine-GB/s	         0.6628 engine/limit	         0.7222 engine/onecore	         9.9 limit-GB/s	         8.9 onecore-GB/s	         6.0 put-GB/s	         0.6190 put/limit
`
)

// goalRows is the rows of compare-goals.py's table: every goal, run or
// skipped.
const goalRows = 24

// TestCompareGoals runs compare-goals.py over fixtures of every part's
// output and checks each goal's verdict: per-repetition ratios, the
// memory-bound rule (0.97 of the goal and overlapping ranges), the RDMA
// every-round rule with rounds perftest spoiled (inf), absolute goals,
// and parts skipped or failed.
func TestCompareGoals(t *testing.T) {
	needTools(t, "python3")
	all := map[string]string{
		"parts.txt":          "ucx ran \ntcp ran \nrdma ran \ngaudi ran \nidle skipped PARTS\nmemcache failed see memcache.err\nhostcopy ran \n",
		"ucx/summary.json":   ucxSummary,
		"tcp/summary.json":   tcpSummary,
		"rdma.log":           rdmaLog,
		"bench-gaudi.txt":    gaudiBench,
		"bench-hostcopy.txt": hostcopyBench,
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  map[string]string // goal substring -> verdict prefix
	}{
		{"all", all, map[string]string{
			"put_bw 4 KiB >= 1.0x UCX":                     "met (memory-bound rule",
			"put_bw 64 KiB >= 1.0x UCX":                    "met",
			"put_bw 1 MiB >= 1.0x UCX":                     "NOT met (median 0.57x)",
			"put_bw 16 MiB >= 1.0x UCX":                    "skipped: size not measured",
			"put_lat 8 B p50 <= 1.1x":                      "NOT met (median 1.25x)",
			"put_bw 1 MiB >= 1.0x iper":                    "met",
			"put_bw 16 MiB >= 1.0x iper":                   "NOT met (median 0.93x)",
			"<= 1.2x UCX tcp":                              "met",
			"every round (event CQ)":                       "NOT met (min 0.89x)",
			"(event CQ, the default)":                      "met",
			"-rdma-cq busy1":                               "met",
			"rdmafloor's":                                  "met",
			"gaudi2: overhead per op, batch 1 <= 2 us":     "met",
			"gaudi2: overhead per op, batch 256 <= 0.5 us": "met",
			"gaudi3: overhead per op, batch 1 <= 2 us":     "NOT met",
			"gaudi3: overhead per op, batch 256 <= 0.5 us": "met",
			"gaudi2: idle engine CPU":                      "skipped: PARTS",
			"random <= 120 ns":                             "skipped: failed: see memcache.err",
			"engine CopySync >= 0.9x":                      "met (memory-bound rule",
			"unix put >= 0.9x":                             "NOT met (median 0.62x)",
			"engine CopySync >= 1.0x":                      "met (memory-bound rule",
		}},
		{"nothing-ran", map[string]string{"parts.txt": "rdma skipped no VM testbed\n"}, map[string]string{
			"put_bw 4 KiB >= 1.0x UCX": "skipped: not run",
			"every round":              "skipped: no VM testbed",
			"unix put >= 1.0x":         "skipped: not run",
		}},
		{"ran-no-output", map[string]string{"parts.txt": "ucx ran \nrdma ran \nhostcopy ran \n", "rdma.log": "boot failed\n",
			"bench-hostcopy.txt": "PASS\n"}, map[string]string{
			"put_lat 8 B p50 <= 1.1x": "skipped: cannot read ucx/summary.json",
			"rdmafloor's":             "skipped: no rounds in rdma.log",
			"unix put >= 0.9x":        "skipped: no benchmark lines",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			out, err := exec.Command("python3", "compare-goals.py", dir).CombinedOutput()
			require.NoError(t, err, "%s", out)
			rows := parseGoalTable(t, string(out))
			require.Len(t, rows, goalRows)
			for goal, verdict := range tc.want {
				r := findRow(t, rows, goal)
				require.True(t, strings.HasPrefix(r.Verdict, verdict), "%s: verdict %q, want %q", goal, r.Verdict, verdict)
			}
			if tc.name == "all" {
				// The floor under batch 1, per model; none under batch 256.
				for goal, floor := range map[string]string{
					"gaudi2: overhead per op, batch 1":   "dma BenchmarkGaudiFloor, alternated): 2236 [2236-2236] ns",
					"gaudi3: overhead per op, batch 1":   "dma BenchmarkGaudiFloor, alternated): 1253 [1200-1306] ns",
					"gaudi3: overhead per op, batch 256": "",
				} {
					note := findRow(t, rows, goal).Note
					if floor == "" {
						require.NotContains(t, note, "floor", goal)
					} else {
						require.Contains(t, note, floor, goal)
					}
				}
			}
			var js []goalRow
			b, err := os.ReadFile(filepath.Join(dir, "goals.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &js))
			require.Len(t, js, len(rows))
		})
	}
}

// TestCompareAllQuick runs bench/compare-all.sh once with QUICK=1 and tiny
// sizes (INSTALL=0: a part whose tools are not installed is skipped; no
// VM) and checks that its goal table parses and names every goal.
func TestCompareAllQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds gxfer and the engine's test binary, runs every comparison once")
	}
	needTools(t, "bash", "python3", "go")
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "compare-all.sh")
	cmd.Env = append(os.Environ(), "QUICK=1", "INSTALL=0", "RDMA=0", "OUT="+out,
		"UCX_SIZES=8 4096", "UCX_RUN_SEC=0.02", "TCP_RUN_SEC=0.1", "TCP_IPERF_SEC=1", "TCP_UCX_ITERS=500",
		"BENCHTIME_GAUDI=20x", "BENCHTIME_MEMCACHE=10000x", "HOSTCOPY_SLICES=2")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	rows := parseGoalTable(t, string(b))
	require.Len(t, rows, goalRows, "%s", b)
	require.Equal(t, "skipped: RDMA=0", findRow(t, rows, "every round").Verdict)
	r := findRow(t, rows, "put_bw 4 KiB >= 1.0x UCX")
	if _, err := exec.LookPath("ucx_perftest"); err == nil {
		require.False(t, strings.HasPrefix(r.Verdict, "skipped"), "%+v\n%s", r, b)
	}
	require.False(t, strings.HasPrefix(findRow(t, rows, "engine CopySync >= 0.9x").Verdict, "skipped"), "%s", b)
	// The gaudi part ran the engine's benchmark and the floor under it.
	for _, m := range []string{"gaudi2", "gaudi3"} {
		require.Contains(t, findRow(t, rows, m+": overhead per op, batch 1").Note, "dma BenchmarkGaudiFloor", "%s", b)
	}
}
