package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// gxfer runs the command in-process.
func gxfer(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// tinyPerf keeps perf runs fast: two small sizes, a few iterations.
var tinyPerf = []string{"perf", "-s", "8,4K", "-n", "10", "-w", "2"}

func TestPerfDefaultStyleRun(t *testing.T) {
	code, out, errs := gxfer(t, tinyPerf...)
	require.Equal(t, 0, code, errs)
	assert.Empty(t, errs, "no progress bar when stderr is not a terminal")
	for _, name := range []string{"h2d", "d2h", "d2d", "h2h"} {
		assert.Contains(t, out, "# test "+name+":")
	}
	// Every header names the transport and the device, and says emulated.
	headers := regexp.MustCompile(`(?m)^# transport: local \| device: (.*)$`).FindAllStringSubmatch(out, -1)
	require.Len(t, headers, 4, out)
	for _, h := range headers {
		if strings.HasPrefix(h[1], "host") {
			assert.Contains(t, h[1], "nothing emulated")
		} else {
			assert.Contains(t, h[1], "EMULATED")
		}
	}
	assert.Equal(t, 4, strings.Count(out, "MB = 2^20 bytes"))
	assert.Equal(t, 4, strings.Count(out, "median(us)"))
	// size, iterations, median, avg, p99, MB/s, msg/s, cpu(us)
	assert.Regexp(t, `(?m)^\s+8B\s+10\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+\d+\s+[0-9.]+\s*$`, out)
	assert.Regexp(t, `(?m)^\s+4KiB\s+10\s`, out)
}

// TestPerfGaudi3: perf measures an emulated Gaudi3 (direct PDMA mode),
// every destination verified.
func TestPerfGaudi3(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-model", "gaudi3", "-t", "h2d,d2h,d2d", "-s", "8,1M", "-n", "10", "-w", "2")
	require.Equal(t, 0, code, errs)
	for _, name := range []string{"h2d", "d2h", "d2d"} {
		assert.Contains(t, out, "# test "+name+":")
	}
	assert.Contains(t, out, "gaudi0 Gaudi3 [EMULATED")
	assert.Regexp(t, `(?m)^\s+1MiB\s+10\s`, out)
}

func TestPerfJSON(t *testing.T) {
	code, out, errs := gxfer(t, append(tinyPerf, "-json")...)
	require.Equal(t, 0, code, errs)
	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "gxfer perf", rep.Tool)
	assert.Equal(t, []int{8, 4096}, rep.Params.Sizes)
	assert.Equal(t, "MB/s, MB = 2^20 bytes", rep.Units.Bandwidth)
	assert.NotEmpty(t, rep.Env.GOOS)
	assert.Positive(t, rep.Env.CPUs)
	require.NotEmpty(t, rep.Env.Devices)
	assert.True(t, rep.Env.Devices[0].Emulated)

	seen := map[string][]int{}
	for _, r := range rep.Results {
		seen[r.Test] = append(seen[r.Test], r.Size)
		assert.Positive(t, r.BandwidthMBs, "%s %d", r.Test, r.Size)
		assert.Positive(t, r.MsgRate)
		assert.EqualValues(t, 10, r.Iterations)
		assert.True(t, r.Verified)
		assert.Equal(t, r.Test != "h2h", r.Emulated, r.Test)
	}
	assert.Equal(t, map[string][]int{"h2d": {8, 4096}, "d2h": {8, 4096}, "d2d": {8, 4096}, "h2h": {8, 4096}}, seen)
}

func TestPerfCSV(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-t", "h2d,h2h", "-sweep", "8:32", "-n", "5", "-csv")
	require.Equal(t, 0, code, errs)
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+2*3)
	assert.Equal(t, bench.CSVHeader, rows[0])
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, r := range rows[1:] {
		assert.Contains(t, []string{"h2d", "h2h"}, r[col["test"]])
		assert.Contains(t, []string{"8", "16", "32"}, r[col["size"]])
		assert.Equal(t, r[col["test"]] == "h2d", r[col["emulated"]] == "true")
		assert.NotEqual(t, "0", r[col["bandwidth_mb_s"]])
	}
}

func TestPerfBenchfmt(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-t", "d2h", "-s", "8,1K", "-n", "5", "-count", "2", "-benchfmt")
	require.Equal(t, 0, code, errs)
	line := regexp.MustCompile(`^BenchmarkGxfer/test=d2h/size=(8B|1KiB)/dev=gaudi0(-\d+)?\t\d+\t[0-9.]+ ns/op\t[0-9.]+ B/s\t[0-9.]+ msg/s\t[0-9.]+ p50-ns\t[0-9.]+ p99-ns$`)
	config := regexp.MustCompile(`^[a-z][^\s:]*: \S.*$`)
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			assert.Regexp(t, line, l)
			n++
		} else {
			assert.Regexp(t, config, l)
		}
	}
	assert.Equal(t, 4, n)
	assert.Contains(t, out, "gxfer-emulated: true\n")
	assert.Contains(t, out, "goos: ")
}

func TestPerfPlot(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "perf.svg")
	code, out, errs := gxfer(t, append(tinyPerf, "-q", "-plot", svg)...)
	require.Equal(t, 0, code, errs)
	assert.Empty(t, out, "-q prints no table")
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	s := string(b)
	assert.True(t, strings.HasPrefix(s, "<?xml") || strings.HasPrefix(s, "<svg"), s[:min(80, len(s))])
	for _, name := range []string{"h2d", "d2h", "d2d", "h2h"} {
		assert.Contains(t, s, ">"+name+"<", "legend entry for %s", name)
	}

	pngFile := filepath.Join(dir, "perf.png")
	code, _, errs = gxfer(t, "perf", "-t", "h2d,h2h", "-s", "8,64K", "-n", "5", "-plot", pngFile)
	require.Equal(t, 0, code, errs)
	f, err := os.Open(pngFile)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 500)
}

func TestPerfHostOnly(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-s", "8", "-n", "5")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "no Gaudi device open")
	assert.Contains(t, out, "# test h2h:")
	assert.NotContains(t, out, "# test h2d:")
}

func TestPerfMemTypes(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-m", "gaudi,gaudi", "-s", "8", "-n", "5", "-O", "2", "-b", "2", "-json")
	require.Equal(t, 0, code, errs)
	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	assert.Equal(t, "d2d", r.Test)
	assert.Equal(t, bench.PerOp, r.LatencyKind)
	assert.Equal(t, 2, r.Window)
	assert.Equal(t, 2, r.Batch)
}

func TestPerfProgressOnlyOnTerminal(t *testing.T) {
	saved := stderrIsTerminal
	t.Cleanup(func() { stderrIsTerminal = saved })
	stderrIsTerminal = func(io.Writer) bool { return true }
	code, out, errs := gxfer(t, "perf", "-t", "h2h", "-s", "8,16", "-n", "5")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "\r[")
	assert.Contains(t, errs, "100%")
	assert.True(t, strings.HasSuffix(errs, "\r\x1b[K"), "the bar is erased at the end: %q", errs)
	assert.NotContains(t, out, "\r", "no progress on stdout")

	code, _, errs = gxfer(t, "perf", "-t", "h2h", "-s", "8", "-n", "5", "-q")
	require.Equal(t, 0, code)
	assert.Empty(t, errs, "-q: no progress")
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"perf", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"perf", "-n", "10", "-time", "1s"}, "-n and -time are mutually exclusive"},
		{[]string{"perf", "-n", "0"}, "bad -n 0"},
		{[]string{"perf", "-n", "x"}, "invalid value"},
		{[]string{"perf", "-time", "-1s"}, "bad -time"},
		{[]string{"perf", "-s", "8", "-sweep", "8:16"}, "mutually exclusive"},
		{[]string{"perf", "-s", "8,zz"}, "bad size"},
		{[]string{"perf", "-sweep", "16:8"}, "MIN is larger than MAX"},
		{[]string{"perf", "-t", "h2x"}, "unknown test"},
		{[]string{"perf", "-t", "h2d", "-devices", "none"}, "needs a Gaudi device"},
		{[]string{"perf", "-t", "h2d", "-m", "host,gaudi"}, "mutually exclusive"},
		{[]string{"perf", "-m", "host"}, "bad -m"},
		{[]string{"perf", "-m", "host,ssd"}, "unknown memory type"},
		{[]string{"perf", "-x", "rdma"}, "transport rdma needs the server's address: -x rdma:HOST:PORT"},
		{[]string{"perf", "-x", "tcp"}, "transport tcp needs the server's address: -x tcp:HOST:PORT"},
		{[]string{"perf", "-x", "smoke"}, "unknown transport"},
		{[]string{"perf", "-d", "3", "-s", "8", "-n", "1"}, "-d 3: no such device"},
		{[]string{"perf", "-d", "-1"}, "bad -d"},
		{[]string{"perf", "-O", "0"}, "bad -O"},
		{[]string{"perf", "-b", "0"}, "bad -b"},
		{[]string{"perf", "-w", "-1"}, "bad -w"},
		{[]string{"perf", "-count", "0"}, "bad -count"},
		{[]string{"perf", "-clock", "rdtsc"}, "bad -clock \"rdtsc\" (want auto, tsc or monotonic)"},
		{[]string{"perf", "-json", "-csv"}, "mutually exclusive"},
		{[]string{"perf", "-plot", "out.gif"}, "unsupported extension"},
		{[]string{"perf", "-plot", filepath.Join(dir, "missing", "p.svg")}, "does not exist"},
		{[]string{"perf", "stray"}, "unexpected argument"},
		{[]string{"perf", "-devices", "some"}, "bad -devices"},
		{[]string{"perf", "-devices", "none", "-emulated", "2"}, "-emulated needs emulated devices"},
		{[]string{"info", "-emulated", "0"}, "bad -emulated"},
		{[]string{"info", "-model", "gaudi9"}, "bad -model"},
		{[]string{"info", "-kernel", "six"}, "bad -kernel"},
		{[]string{"info", "-yaml"}, "flag provided but not defined"},
		{[]string{"help", "nope"}, "unknown command"},
		// Given empty (an unset shell variable), a file or address flag is
		// not "off" nor a fault list "all": each ran without a word. (-n 0
		// keeps a run that takes them from starting.)
		{[]string{"perf", "-metrics", "", "-n", "0"}, "-metrics: empty value"},
		{[]string{"perf", "-plot", "", "-n", "0"}, "-plot: empty value"},
		{[]string{"perf", "-cpuprofile", "", "-n", "0"}, "-cpuprofile: empty value"},
		{[]string{"perf", "-agent", "-metrics", "", "-O", "0"}, "-metrics: empty value"},
		{[]string{"soak", "-metrics", "", "-workers", "0"}, "-metrics: empty value"},
		{[]string{"soak", "-faults", "", "-workers", "0"}, "-faults: empty value"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gxfer(t, tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			assert.Contains(t, errs, tc.want)
			assert.True(t, strings.HasPrefix(errs, "gxfer"), errs)
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"help", "perf"}, {"perf", "-h"}, {"help", "info"}, {"info", "-help"}} {
		code, out, errs := gxfer(t, args...)
		assert.Equal(t, 0, code, args)
		assert.Empty(t, errs)
		assert.Contains(t, out, "Usage:")
	}
	_, out, _ := gxfer(t, "help", "perf")
	for _, f := range []string{"-t", "-s", "-sweep", "-n", "-time", "-w", "-O", "-b", "-d", "-x", "-server", "-once", "-json", "-csv", "-benchfmt", "-plot", "-q", "-emulated", "-model", "-devices"} {
		assert.Regexp(t, "\n  "+regexp.QuoteMeta(f)+"[\t\n ]", out, f)
	}
}

func TestInfoText(t *testing.T) {
	code, out, errs := gxfer(t, "info", "-emulated", "2", "-model", "gaudi1", "-kernel", "6.1")
	require.Equal(t, 0, code, errs)
	for _, want := range []string{
		"Devices: 2 open (2 EMULATED",
		"gaudi0: EMULATED (dma/hlsim, not a real Gaudi)",
		"gaudi1: EMULATED",
		"Gaudi (PCI 0x1da3:0x1000)",
		"legacy",
		"PCI address", "none (emulated)",
		"device node", "DRAM",
		"Memory domains:",
		"ipc: available (unix socket + memfd/DMA-BUF fd passing, same host)",
		"rdma: unavailable (RDMA unavailable",
		"Endpoints (engine Listen/Dial):",
		"tcp: Data frames on the connection",
		"Dial(\"tcp\") picks: ",
		"tcp: available (TCP data path to a peer on any host",
		"local: available",
		"registration cache",
		"DMA-BUF export cache",
		"yes (emulated)",
	} {
		assert.Contains(t, out, want)
	}
	// host: alloc yes, register yes; gaudiN: alloc yes, export yes, import no.
	assert.Regexp(t, `(?m)^\s+host\s+yes\s+yes\s+no\s+no\s`, out)
	assert.Regexp(t, `(?m)^\s+gaudi0\s+yes\s+no\s+yes \(emulated\)\s+no\s`, out)
}

// TestInfoGaudi3: an emulated Gaudi3 with its memory and its DMA engines
// (the PDMA channels of direct mode).
func TestInfoGaudi3(t *testing.T) {
	code, out, errs := gxfer(t, "info", "-model", "gaudi3")
	require.Equal(t, 0, code, errs)
	for _, want := range []string{
		"gaudi0: EMULATED (dma/hlsim, not a real Gaudi)",
		"Gaudi3 (PCI 0x1da3:0x1060)",
		"DRAM", "at 0x201000000000000",
		"DMA path", "direct PDMA mode",
		"DMA engines", "PDMA channels: host-to-device [0 1], device-to-host [2], device-to-device [0 1]",
	} {
		assert.Contains(t, out, want)
	}
	assert.Regexp(t, `(?m)^\s+gaudi0\s+yes\s+no\s+yes \(emulated\)\s+no\s`, out)
}

func TestInfoJSON(t *testing.T) {
	code, out, errs := gxfer(t, "info", "-json")
	require.Equal(t, 0, code, errs)
	var doc infoDoc
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Len(t, doc.Devices, 1)
	d := doc.Devices[0]
	assert.True(t, d.Emulated)
	assert.Equal(t, "dma/hlsim", d.Emulator)
	assert.Equal(t, "Gaudi2", d.Model)
	assert.Equal(t, "6.8", d.KernelRelease)
	assert.Contains(t, d.IoctlNumbering, "accel")
	assert.Positive(t, d.DRAMSize)
	assert.Empty(t, d.PCIAddress)
	require.Len(t, doc.MemoryDomains, 2)
	assert.Equal(t, memoryDomain{Name: "host", Alloc: true, Register: true, Notes: doc.MemoryDomains[0].Notes}, doc.MemoryDomains[0])
	g := doc.MemoryDomains[1]
	assert.True(t, g.Alloc && g.DMABufExport && g.Emulated)
	assert.False(t, g.DMABufImport)
	tr := map[string]transportInfo{}
	for _, x := range doc.Transports {
		tr[x.Name] = x
	}
	assert.True(t, tr["local"].Available)
	assert.True(t, tr["ipc"].Available)
	assert.Equal(t, "unix socket + memfd/DMA-BUF fd passing, same host", tr["ipc"].Desc)
	assert.False(t, tr["rdma"].Available)
	assert.Equal(t, doc.Endpoints.RDMA.Reason, tr["rdma"].Reason, "the engine's reason")
	assert.Equal(t, 2, doc.Endpoints.TCPLanes)
	assert.NotEmpty(t, doc.Endpoints.Selection)
	assert.True(t, tr["tcp"].Available)
	assert.Empty(t, tr["tcp"].Reason)
	assert.Equal(t, 4096, doc.Engine.QueueDepth)
	assert.Len(t, doc.Caches, 3)

	code, out, errs = gxfer(t, "info", "-devices", "none", "-json")
	require.Equal(t, 0, code, errs)
	doc = infoDoc{}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Empty(t, doc.Devices)
}

// TestBinary builds the real binary and runs it as a process: exit
// statuses and streams as a shell sees them.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	bin := filepath.Join(t.TempDir(), "gxfer")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "perf", "-t", "h2d,h2h", "-s", "8", "-n", "5")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	assert.Contains(t, stdout.String(), "EMULATED")
	assert.Empty(t, stderr.String(), "stderr is a pipe: no progress bar")

	// Client and server as two processes: the client maps the server's
	// memfds, the server the client's.
	sock := filepath.Join(t.TempDir(), "gx.sock")
	srv := exec.Command(bin, "perf", "-server", "-x", "unix:"+sock, "-once", "-devices", "none")
	srvOut, err := srv.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	lines := bufio.NewScanner(srvOut)
	for lines.Scan() && !strings.Contains(lines.Text(), "listening on") {
	}
	go io.Copy(io.Discard, srvOut)
	cmd = exec.Command(bin, "perf", "-devices", "none", "-x", "unix:"+sock, "-s", "8,64K", "-n", "20", "-json")
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.NoError(t, srv.Wait(), "a -once server exits 0 after its client")
	var rep bench.Report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	assert.Len(t, rep.Results, 8)
	assert.Equal(t, "unix:"+sock+" (pid "+strconv.Itoa(srv.Process.Pid)+")", rep.Params.Peer)
	for _, r := range rep.Results {
		assert.True(t, r.Verified)
	}

	cmd = exec.Command(bin, "perf", "-x", "rdma")
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Equal(t, 1, strings.Count(stderr.String(), "\n"))
}

// startServer runs 'gxfer perf -server' in-process until ctx ends (or
// after one client with -once) and returns the socket path and the exit
// status channel.
func startServer(t *testing.T, ctx context.Context, extra ...string) (string, <-chan int, *syncBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gx.sock")
	ready := regexp.MustCompile(regexp.QuoteMeta("listening on unix:" + path))
	_, code, out := startPerfServer(t, ctx, "unix:"+path, ready, extra...)
	return path, code, out
}

// startPerfServer runs 'gxfer perf -server -x X' in-process with the extra
// flags and waits until its output matches ready. It returns ready's first
// submatch (the whole match without one), the exit status channel and the
// output.
func startPerfServer(t *testing.T, ctx context.Context, x string, ready *regexp.Regexp, extra ...string) (string, <-chan int, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	code := make(chan int, 1)
	args := append([]string{"perf", "-server", "-x", x}, extra...)
	go func() { code <- runContext(ctx, args, out, out) }()
	var got string
	ok := assert.Eventually(t, func() bool {
		m := ready.FindStringSubmatch(out.String())
		if m != nil {
			got = m[min(1, len(m)-1)]
		}
		return m != nil
	}, 20*time.Second, 5*time.Millisecond, "the server did not start: %s", out)
	if !ok {
		select {
		case c := <-code:
			t.Fatalf("the server exited with status %d: %s", c, out)
		default:
			t.FailNow()
		}
	}
	return got, code, out
}

// usageCase is a command line and what its one-line usage error says.
type usageCase struct {
	args []string
	want string
}

// checkUsageErrors runs each case: exit status 2, nothing on stdout, one
// line on stderr that contains want (and starts with prefix, if set).
func checkUsageErrors(t *testing.T, prefix string, cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gxfer(t, tc.args...)
			assert.Equal(t, 2, code, errs)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			assert.Contains(t, errs, tc.want)
			if prefix != "" {
				assert.True(t, strings.HasPrefix(errs, prefix), errs)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestPerfIPCClientServerJSON(t *testing.T) {
	path, srvCode, srvOut := startServer(t, context.Background(), "-once", "-devices", "none")
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "unix:"+path, "-s", "8,4K,128K", "-n", "20", "-w", "2", "-O", "4", "-json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, 0, <-srvCode, srvOut.String())
	assert.Contains(t, srvOut.String(), "done (")

	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "ipc", rep.Params.Transport)
	assert.Contains(t, rep.Params.Peer, "unix:"+path+" (pid ")
	require.NotNil(t, rep.PeerEnv)
	seen := map[string][]int{}
	for _, r := range rep.Results {
		seen[r.Test] = append(seen[r.Test], r.Size)
		assert.True(t, r.Verified)
		assert.EqualValues(t, 20, r.Iterations)
		assert.Positive(t, r.BandwidthMBs)
		assert.Equal(t, bench.Host, r.Local)
		assert.Equal(t, bench.Host, r.Remote)
		assert.False(t, r.Emulated || r.PeerEmulated)
		switch r.Test {
		case "put_lat":
			assert.Equal(t, bench.OneWay, r.LatencyKind)
		case "get_lat":
			assert.Equal(t, bench.RoundTrip, r.LatencyKind)
			assert.Equal(t, 1, r.Window)
		default:
			assert.Equal(t, 4, r.Window)
		}
	}
	sizes := []int{8, 4096, 128 << 10}
	assert.Equal(t, map[string][]int{"put_lat": sizes, "put_bw": sizes, "get_lat": sizes, "get_bw": sizes}, seen)
}

func TestPerfIPCText(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	path, srvCode, srvOut := startServer(t, ctx)
	assert.Contains(t, srvOut.String(), "# transport ipc (unix socket, shared memfd) | listening on unix:"+path)
	assert.Contains(t, srvOut.String(), "EMULATED")

	// Remote Gaudi: the server's engine does the DMA; every header says so.
	code, out, errs := gxfer(t, "perf", "-x", "unix:"+path, "-t", "put_bw,get_lat", "-m", "host,gaudi", "-s", "8,64K", "-n", "5")
	require.Equal(t, 0, code, errs)
	headers := regexp.MustCompile(`(?m)^# transport: ipc \(unix socket, shared memfd\) \| peer unix:\S+ \(pid \d+\) \| local device: host \| peer device: gaudi0 Gaudi2 \[EMULATED: dma/hlsim, [^]]+\] \(the peer's engine does the DMA\) \| emulated: yes$`).FindAllString(out, -1)
	assert.Len(t, headers, 2, out)
	assert.Contains(t, out, "# test put_bw: host -> peer gaudi0")
	assert.Contains(t, out, "# test get_lat: peer gaudi0 -> host")
	assert.Contains(t, out, "# peer devices: gaudi0 Gaudi2 [EMULATED")
	assert.Contains(t, out, "memory local host, remote gaudi")
	assert.Regexp(t, `(?m)^\s+64KiB\s+5\s`, out)

	// Host memory at both ends: nothing emulated in the path.
	code, out, errs = gxfer(t, "perf", "-x", "unix:"+path, "-t", "put_lat", "-s", "8", "-n", "50")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "| local device: host | peer device: host | emulated: no\n")
	assert.Contains(t, out, "one-way, half a ping-pong round trip")

	// The server serves one client after another until interrupted.
	cancel()
	require.Equal(t, 0, <-srvCode, srvOut.String())
	_, err := os.Stat(path)
	assert.True(t, os.IsNotExist(err), "the socket is removed")
}

func TestPerfIPCSecondClientRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path, srvCode, srvOut := startServer(t, ctx, "-once", "-devices", "none")
	// A first client holds the server...
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	first, err := bench.DialPeer(ctx, eng, path)
	require.NoError(t, err)
	// ...so the second is refused: a runtime error, one line.
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "unix:"+path, "-s", "8", "-n", "5")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)
	assert.Contains(t, errs, "busy with client pid")
	require.NoError(t, first.Close())
	require.Equal(t, 0, <-srvCode, srvOut.String())
	assert.Contains(t, srvOut.String(), "refused client pid")

	// Nobody listening: a clear runtime error.
	code, _, errs = gxfer(t, "perf", "-devices", "none", "-x", "unix:"+path, "-s", "8", "-n", "5")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "is 'gxfer perf -server -x unix:"+path+"' running?")
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)
}

func TestPerfIPCUsageErrors(t *testing.T) {
	checkUsageErrors(t, "", []usageCase{
		{[]string{"perf", "-once"}, "-once needs -server"},
		{[]string{"perf", "-server"}, "-server needs -x unix:PATH, -x tcp:HOST:PORT or -x rdma:HOST:PORT"},
		{[]string{"perf", "-server", "-x", "local"}, "-server needs -x unix:PATH, -x tcp:HOST:PORT or -x rdma:HOST:PORT"},
		{[]string{"perf", "-server", "-x", "unix:/tmp/x.sock", "-s", "8"}, "-s has no meaning with -server"},
		{[]string{"perf", "-server", "-x", "unix:/tmp/x.sock", "-json"}, "-json has no meaning with -server"},
		{[]string{"perf", "-server", "-x", "unix:/tmp/x.sock", "-clock", "tsc"}, "-clock has no meaning with -server"},
		{[]string{"perf", "-server", "-x", "unix:/tmp/x.sock", "-d", "-2"}, "bad -d"},
		{[]string{"perf", "-x", "unix:"}, "empty socket path"},
		{[]string{"perf", "-x", "ipc"}, "needs the server's socket"},
		{[]string{"perf", "-x", "unix:/" + strings.Repeat("x", 110)}, "too long"},
		{[]string{"perf", "-x", "unix:/tmp/x.sock", "-b", "2"}, "batches are not supported over ipc"},
		{[]string{"perf", "-t", "put_bw"}, "needs a peer"},
		{[]string{"perf", "-t", "put_lat", "-devices", "none"}, "needs a peer"},
		{[]string{"perf", "-x", "unix:/tmp/x.sock", "-m", "host"}, "bad -m"},
		{[]string{"perf", "-x", "unix:/tmp/x.sock", "-t", "nope"}, "unknown test"},
	})
	// Usage errors that need the server's answer are still usage errors.
	path, srvCode, _ := startServer(t, context.Background(), "-once", "-devices", "none")
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "unix:"+path, "-m", "host,gaudi", "-t", "put_bw")
	assert.Equal(t, 2, code, errs)
	assert.Empty(t, out)
	assert.Contains(t, errs, "has no Gaudi device open")
	assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
	assert.Equal(t, 0, <-srvCode)
}
