package bench_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"image/png"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
)

func newEngine(t *testing.T, mode engine.DeviceMode) *engine.Engine {
	t.Helper()
	eng, err := engine.New(engine.Config{Devices: mode})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, eng.Close()) })
	return eng
}

var tiny = bench.Params{Sizes: []int{8, 4 << 10, 64 << 10}, Iterations: 20, Warmup: 2}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{
		"8": 8, "8B": 8, "4K": 4096, "4k": 4096, "4KiB": 4096, "4KB": 4096, "64K": 64 << 10,
		"1M": 1 << 20, "1MiB": 1 << 20, "16m": 16 << 20, "1G": 1 << 30, " 12 ": 12,
	} {
		got, err := bench.ParseSize(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{"", "0", "-1", "K", "4X", "1.5K", "2G", "4 KK"} {
		_, err := bench.ParseSize(in)
		assert.Error(t, err, in)
	}
	got, err := bench.ParseSizes("8,4K,64K,1M,16M")
	require.NoError(t, err)
	assert.Equal(t, bench.DefaultSizes, got)
	_, err = bench.ParseSizes("8,,4K")
	assert.Error(t, err)
}

func TestParseSweep(t *testing.T) {
	got, err := bench.ParseSweep("8:64")
	require.NoError(t, err)
	assert.Equal(t, []int{8, 16, 32, 64}, got)
	got, err = bench.ParseSweep("4K:4K")
	require.NoError(t, err)
	assert.Equal(t, []int{4096}, got)
	for _, in := range []string{"8", "64:8", "6:64", "8:100", "x:8", "8:"} {
		_, err := bench.ParseSweep(in)
		assert.Error(t, err, in)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{8: "8B", 1000: "1000B", 1024: "1KiB", 1536: "1536B", 64 << 10: "64KiB", 1 << 20: "1MiB", 16 << 20: "16MiB", 1 << 30: "1GiB"} {
		assert.Equal(t, want, bench.FormatSize(n))
	}
	assert.Equal(t, "4.00 GiB", bench.FormatBytes(4<<30))
	assert.Equal(t, "512 B", bench.FormatBytes(512))
}

func TestParamsValidate(t *testing.T) {
	assert.NoError(t, bench.Params{}.Validate())
	for _, p := range []bench.Params{
		{Iterations: 10, Duration: time.Second},
		{Iterations: -1},
		{Warmup: -1},
		{Window: -2},
		{Batch: 1 << 20},
		{Sizes: []int{0}},
		{Count: -1},
	} {
		assert.Error(t, p.Validate(), "%+v", p)
	}
}

func TestRegistry(t *testing.T) {
	var names []string
	for _, tt := range bench.Tests("local") {
		names = append(names, tt.Name)
	}
	assert.Equal(t, []string{"h2d", "d2h", "d2d", "h2h"}, names)

	_, err := bench.LookupTransport("local")
	assert.NoError(t, err)
	// rdma's availability is the engine's RDMA context's (NoteRDMA).
	bench.NoteRDMA(engine.RDMAInfo{Reason: "no RDMA device: test"})
	tr, err := bench.LookupTransport("rdma")
	assert.ErrorIs(t, err, bench.ErrUnavailable)
	assert.Equal(t, "no RDMA device: test", tr.Unavailable)
	assert.ErrorContains(t, err, "transport rdma is unavailable (no RDMA device: test)")
	bench.NoteRDMA(engine.RDMAInfo{Available: true, Device: "rxe0", Port: 1, LinkLayer: "Ethernet (RoCE)", GID: "fe80::1", MTU: 4096})
	tr, err = bench.LookupTransport("rdma")
	assert.NoError(t, err)
	assert.True(t, tr.Available())
	assert.Equal(t, "rxe0 port 1, Ethernet (RoCE), GID[0] fe80::1, MTU 4096", bench.RDMADevice(engine.RDMAInfo{Available: true, Device: "rxe0", Port: 1, LinkLayer: "Ethernet (RoCE)", GID: "fe80::1", MTU: 4096}))
	func() {
		eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
		require.NoError(t, err)
		defer eng.Close()
		bench.NoteRDMA(eng.RDMA())
		tr, err = bench.LookupTransport("rdma")
		if info := eng.RDMA(); info.Available {
			assert.NoError(t, err)
		} else {
			assert.ErrorIs(t, err, bench.ErrUnavailable)
			assert.Equal(t, info.Reason, tr.Unavailable)
		}
	}()
	tr, err = bench.LookupTransport("tcp")
	assert.NoError(t, err)
	assert.True(t, tr.Available())
	// The peer tests run over ipc and tcp.
	names = nil
	for _, tt := range bench.Tests("tcp") {
		names = append(names, tt.Name)
	}
	assert.Equal(t, []string{"put_lat", "put_bw", "get_lat", "get_bw"}, names)
	_, err = bench.LookupTransport("carrier-pigeon")
	assert.ErrorContains(t, err, "unknown transport")
}

func TestTestsForHostOnly(t *testing.T) {
	env := &bench.Env{Engine: newEngine(t, engine.DevicesNone)}
	tests, err := bench.TestsFor(env, "")
	require.NoError(t, err)
	require.Len(t, tests, 1)
	assert.Equal(t, "h2h", tests[0].Name)
	_, err = bench.TestsFor(env, "h2d")
	assert.ErrorContains(t, err, "needs a Gaudi device")
	_, err = bench.TestsFor(env, "nope")
	assert.ErrorContains(t, err, "unknown test")
}

func TestRunEmulated(t *testing.T) {
	eng := newEngine(t, engine.DevicesEmulated)
	env := &bench.Env{Engine: eng}
	tests, err := bench.TestsFor(env, "")
	require.NoError(t, err)
	require.Len(t, tests, 4)
	rep, err := bench.Run(context.Background(), env, tests, tiny)
	require.NoError(t, err)
	require.Len(t, rep.Results, 4*3)
	for _, r := range rep.Results {
		assert.True(t, r.Verified, r.Test)
		assert.EqualValues(t, 20, r.Iterations, r.Test)
		assert.Positive(t, r.BandwidthMBs, r.Test)
		assert.Positive(t, r.MsgRate, r.Test)
		assert.Positive(t, r.Latency.Median, r.Test)
		assert.LessOrEqual(t, r.Latency.Min, r.Latency.Median)
		assert.LessOrEqual(t, r.Latency.Median, r.Latency.Max)
		assert.Equal(t, bench.RoundTrip, r.LatencyKind)
		if r.Test == "h2h" {
			assert.Equal(t, "host", r.Device)
			assert.False(t, r.Emulated)
		} else {
			assert.Equal(t, "gaudi0", r.Device)
			assert.True(t, r.Emulated, "the emulated device must be labelled")
		}
	}
	assert.True(t, rep.Emulated())
	require.Len(t, rep.Env.Devices, 1)
	assert.True(t, rep.Env.Devices[0].Emulated)
	assert.Zero(t, eng.Stats().Failed)
}

func TestRunWindowBatchDuration(t *testing.T) {
	eng := newEngine(t, engine.DevicesEmulated)
	env := &bench.Env{Engine: eng}
	tests, err := bench.TestsFor(env, "h2d,h2h")
	require.NoError(t, err)
	var progress []bench.Progress
	var streamed int
	rep, err := bench.Run(context.Background(), env, tests, bench.Params{
		Sizes: []int{4 << 10}, Duration: 20 * time.Millisecond, Window: 4, Batch: 3, Count: 2,
		Progress: func(p bench.Progress) { progress = append(progress, p) },
		OnResult: func(bench.Result) { streamed++ },
	})
	require.NoError(t, err)
	require.Len(t, rep.Results, 4)
	assert.Equal(t, 4, streamed)
	for i, r := range rep.Results {
		assert.Equal(t, bench.PerOp, r.LatencyKind)
		assert.Equal(t, i%2, r.Run)
		assert.Positive(t, r.Iterations)
		assert.Zero(t, r.Iterations%3, "whole batches in duration mode")
		assert.EqualValues(t, r.Iterations/3, r.Submissions)
		assert.True(t, r.Verified)
		// The process's CPU time over the run, per iteration and in cores.
		require.NotNil(t, r.CPU, r.Test)
		assert.Positive(t, r.CPU.UserUs+r.CPU.SysUs, r.Test)
		assert.Positive(t, r.CPU.Cores, r.Test)
	}
	require.NotEmpty(t, progress)
	last := progress[len(progress)-1]
	assert.Equal(t, last.Total, last.Done)
	assert.Equal(t, 4, last.Total)
}

func TestRunIterationsRoundPartialBatch(t *testing.T) {
	env := &bench.Env{Engine: newEngine(t, engine.DevicesNone)}
	tests, err := bench.TestsFor(env, "h2h")
	require.NoError(t, err)
	rep, err := bench.Run(context.Background(), env, tests, bench.Params{Sizes: []int{128 << 10}, Iterations: 10, Batch: 4, Window: 2})
	require.NoError(t, err)
	assert.EqualValues(t, 10, rep.Results[0].Iterations)
	assert.EqualValues(t, 3, rep.Results[0].Submissions)
}

// broken is a workload whose copies move nothing.
type broken struct{ verifyErr error }

func (b broken) Submit(context.Context, int) *engine.Future { return engine.ResolvedFuture(nil) }
func (b broken) Verify(context.Context) error               { return b.verifyErr }
func (b broken) Close() error                               { return nil }

func init() {
	bench.RegisterTransport(bench.Transport{Name: "test-only", Desc: "fake transport of the tests"})
	bench.Register(bench.Test{Name: "test-broken", Transport: "test-only", Src: bench.Host, Dst: bench.Host,
		Prepare: func(context.Context, *bench.Env, int) (bench.Workload, error) {
			return broken{verifyErr: errors.New("verification failed: byte 0 is 0x00, want 0x01")}, nil
		}})
	bench.Register(bench.Test{Name: "test-failing", Transport: "test-only", Src: bench.Host, Dst: bench.Host,
		Prepare: func(context.Context, *bench.Env, int) (bench.Workload, error) {
			return failing{}, nil
		}})
}

type failing struct{ broken }

func (failing) Submit(context.Context, int) *engine.Future {
	return engine.ResolvedFuture(engine.ErrDevice)
}

func TestVerificationFailureIsAnError(t *testing.T) {
	env := &bench.Env{Engine: newEngine(t, engine.DevicesNone), Transport: "test-only"}
	tests, err := bench.TestsFor(env, "test-broken")
	require.NoError(t, err)
	rep, err := bench.Run(context.Background(), env, tests, bench.Params{Sizes: []int{8, 16}, Iterations: 5})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "test-broken 8B: verification failed")
	assert.Empty(t, rep.Results, "no number for a copy that did not move bytes")

	tests, err = bench.TestsFor(env, "test-failing")
	require.NoError(t, err)
	_, err = bench.Run(context.Background(), env, tests, bench.Params{Sizes: []int{8}, Iterations: 5})
	assert.ErrorIs(t, err, engine.ErrDevice)
}

func TestRunCanceled(t *testing.T) {
	env := &bench.Env{Engine: newEngine(t, engine.DevicesNone)}
	tests, _ := bench.TestsFor(env, "h2h")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := bench.Run(ctx, env, tests, tiny)
	assert.ErrorIs(t, err, context.Canceled)
}

func sampleReport(t *testing.T) *bench.Report {
	t.Helper()
	env := &bench.Env{Engine: newEngine(t, engine.DevicesEmulated)}
	tests, err := bench.TestsFor(env, "")
	require.NoError(t, err)
	rep, err := bench.Run(context.Background(), env, tests, bench.Params{Sizes: []int{8, 4 << 10}, Iterations: 10})
	require.NoError(t, err)
	return rep
}

func TestReportFormats(t *testing.T) {
	rep := sampleReport(t)

	var text bytes.Buffer
	require.NoError(t, rep.WriteText(&text))
	out := text.String()
	assert.Equal(t, 4, strings.Count(out, "# test "), out)
	assert.Equal(t, 3, strings.Count(out, "# transport: local | device: gaudi0 Gaudi2 [EMULATED"), "every device table header says emulated:\n%s", out)
	assert.Contains(t, out, "# transport: local | device: host (no Gaudi in this path; nothing emulated)")
	assert.Contains(t, out, "MB = 2^20 bytes")
	assert.Contains(t, out, "buffers allocated once per size and reused")
	assert.Contains(t, out, "cpu(us)")

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	back, err := bench.ReadJSON(&js)
	require.NoError(t, err)
	assert.Equal(t, rep.Results, back.Results)
	assert.Equal(t, "MB/s, MB = 2^20 bytes", back.Units.Bandwidth)
	assert.Equal(t, rep.Env.GOARCH, back.Env.GOARCH)

	var c bytes.Buffer
	require.NoError(t, rep.WriteCSV(&c))
	rows, err := csv.NewReader(&c).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+len(rep.Results))
	assert.Equal(t, bench.CSVHeader, rows[0])
	cores := slices.Index(rows[0], "cpu_cores")
	require.Positive(t, cores)
	for _, row := range rows[1:] {
		assert.NotEmpty(t, row[cores], "every measured result has its CPU time: %v", row)
	}

	var bf bytes.Buffer
	require.NoError(t, rep.WriteBenchfmt(&bf))
	checkBenchfmt(t, bf.String(), len(rep.Results))
}

// benchLine is a result line of the Go benchmark format: name, iterations,
// then value-unit pairs.
var (
	benchLine  = regexp.MustCompile(`^Benchmark[^\s]+(-\d+)?\t\d+(\t[0-9.]+ [^\s]+)+$`)
	configLine = regexp.MustCompile(`^[a-z][^\s:]*: .*$`)
)

func checkBenchfmt(t *testing.T, out string, results int) {
	t.Helper()
	n := 0
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "Benchmark"):
			assert.Regexp(t, benchLine, line)
			assert.Regexp(t, `/test=\w+/size=\d+[KMG]?i?B/dev=\w+`, line)
			assert.Contains(t, line, " ns/op")
			assert.Contains(t, line, " B/s")
			n++
		default:
			assert.Regexp(t, configLine, line)
		}
	}
	assert.Equal(t, results, n)
	assert.Contains(t, out, "gxfer-emulated: true")
}

func TestPlot(t *testing.T) {
	rep := sampleReport(t)
	var svg bytes.Buffer
	require.NoError(t, rep.WritePlot(&svg, "svg"))
	s := svg.String()
	assert.True(t, strings.HasPrefix(s, "<?xml") || strings.HasPrefix(s, "<svg"), s[:min(len(s), 80)])
	for _, name := range []string{"h2d", "d2h", "d2d", "h2h", "Bandwidth", "Latency", "EMULATED"} {
		assert.Contains(t, s, name)
	}
	var pngBuf bytes.Buffer
	require.NoError(t, rep.WritePlot(&pngBuf, "png"))
	img, err := png.Decode(&pngBuf)
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 500)

	dir := t.TempDir()
	require.NoError(t, rep.SavePlot(dir+"/p.svg"))
	assert.Error(t, rep.SavePlot(dir+"/p.gif"))
	assert.Error(t, rep.WritePlot(&svg, "gif"))

	empty := &bench.Report{}
	assert.Error(t, empty.WritePlot(&svg, "svg"))
}

func TestPlotSinglePoint(t *testing.T) {
	env := &bench.Env{Engine: newEngine(t, engine.DevicesNone)}
	tests, _ := bench.TestsFor(env, "h2h")
	rep, err := bench.Run(context.Background(), env, tests, bench.Params{Sizes: []int{1000}, Iterations: 5})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WritePlot(&buf, "svg"))
	assert.Contains(t, buf.String(), "h2h")
}
