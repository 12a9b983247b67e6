package bench

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/engine"
)

// Environment records where a run happened.
type Environment struct {
	GOOS       string      `json:"goos"`
	GOARCH     string      `json:"goarch"`
	GoVersion  string      `json:"go_version"`
	CPUs       int         `json:"cpus"`
	GOMAXPROCS int         `json:"gomaxprocs"`
	CPU        string      `json:"cpu,omitempty"`      // model name
	Kernel     string      `json:"kernel,omitempty"`   // uname release of the host
	Affinity   string      `json:"affinity,omitempty"` // CPUs the process may run on ("1", "0-1"), as set by taskset
	Clock      string      `json:"clock,omitempty"`    // what times operations: "tsc" (calibrated), "tsc (forced)" (-clock tsc) or "monotonic"
	Devices    []DeviceEnv `json:"devices"`
	// RDMADevice is the engine's RDMA device, for runs over rdma:
	// "rxe0 port 1, Ethernet (RoCE), GID[0] fe80::..., MTU 4096".
	RDMADevice string `json:"rdma_device,omitempty"`
}

// DeviceEnv describes one device the engine had open.
type DeviceEnv struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	Model    string `json:"model"`
	Emulated bool   `json:"emulated"`
	DRAMSize uint64 `json:"dram_size"`
}

// RunParams records the parameters of a run, defaults applied.
type RunParams struct {
	Transport   string  `json:"transport"`
	Device      int     `json:"device"`
	Sizes       []int   `json:"sizes"`
	Iterations  int     `json:"iterations,omitempty"`
	DurationSec float64 `json:"duration_s,omitempty"` // per size, when iterations is 0
	Warmup      int     `json:"warmup"`
	Window      int     `json:"window"`
	Batch       int     `json:"batch"`
	Count       int     `json:"count"`
	// Peer tests: the server and the memory types of the two ends.
	Peer   string `json:"peer,omitempty"`
	Local  Mem    `json:"local,omitempty"`
	Remote Mem    `json:"remote,omitempty"`
}

// TestInfo describes a test of the run.
type TestInfo struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Src       Mem    `json:"src"`
	Dst       Mem    `json:"dst"`
	Path      string `json:"path"` // "host -> gaudi0"
	Desc      string `json:"desc"`
}

// Units states the units of the numbers.
type Units struct {
	Bandwidth string `json:"bandwidth"`
	Latency   string `json:"latency"`
	MsgRate   string `json:"msg_rate"`
}

// Report is the outcome of a run.
type Report struct {
	Tool       string      `json:"tool"`
	Started    time.Time   `json:"started"`
	ElapsedSec float64     `json:"elapsed_s"`
	Env        Environment `json:"env"`
	// PeerEnv is the server's environment, for runs over a peer transport.
	PeerEnv *Environment `json:"peer_env,omitempty"`
	Params  RunParams    `json:"params"`
	Units   Units        `json:"units"`
	Notes   []string     `json:"notes"`
	Tests   []TestInfo   `json:"tests"`
	Results []Result     `json:"results"`

	run *runState // set by NewReport
}

// Notes every report carries.
var reportNotes = []string{
	"buffers are allocated once per (test, size) and reused across iterations",
	"the destination is verified against the source pattern after each measurement",
	"bandwidth is bytes moved / wall time of the measurement",
}

func newReport(env *Env, tests []Test, p Params, clockSrc string) *Report {
	rep := &Report{
		Tool:    "gxfer perf",
		Started: time.Now().UTC().Truncate(time.Millisecond),
		Env:     environment(env, clockSrc),
		Params: RunParams{
			Transport: env.transport(), Device: env.Device, Sizes: p.Sizes,
			Iterations: p.Iterations, DurationSec: p.Duration.Seconds(),
			Warmup: p.Warmup, Window: p.Window, Batch: p.Batch, Count: p.Count,
		},
		Units: Units{
			Bandwidth: "MB/s, MB = 2^20 bytes",
			Latency:   "microseconds",
			MsgRate:   "messages per second",
		},
		Notes:   reportNotes,
		Results: []Result{},
	}
	if env.Peer != nil {
		pe := env.Peer.Env
		rep.PeerEnv = &pe
		rep.Params.Peer, rep.Params.Local, rep.Params.Remote = env.Peer.String(), env.local(), env.remote()
		rep.Notes = append(slices.Clone(rep.Notes),
			"peer tests reuse the same local and peer buffers every iteration, as ucx_perftest does (small sizes stay cache-resident)")
		if ep := env.Peer.ep; ep != nil && ep.Transport() == engine.TransportTCP {
			rep.Notes = append(rep.Notes, fmt.Sprintf("tcp: the endpoint to %s has %d connection(s); transfers of 4 MiB and more are split over them; put_lat polls memory that the engine's socket reader lands bytes in (latency = round trip / 2)",
				env.Peer.EngineAddr, ep.Stats().Lanes))
		}
		if ep := env.Peer.ep; ep != nil && ep.Transport() == engine.TransportRDMA {
			c := env.Engine.Config().RDMA
			rep.Notes = append(rep.Notes, fmt.Sprintf("rdma: the endpoint to %s moves data by RDMA write/read on %s (connection set up and control over TCP); completion queue %s; put_lat polls memory the NIC writes (latency = round trip / 2)",
				env.Peer.EngineAddr, RDMADevice(env.Engine.RDMA()), CQModeString(c)))
		}
	}
	for _, t := range tests {
		rep.Tests = append(rep.Tests, TestInfo{Name: t.Name, Transport: t.Transport, Src: t.Src, Dst: t.Dst, Path: t.Path(env), Desc: t.Desc})
	}
	return rep
}

// CurrentEnvironment describes this process and env's devices, with the
// clock of ClockAuto.
func CurrentEnvironment(env *Env) Environment {
	return environment(env, harnessClock().source())
}

// environment describes this process and env's devices; clockSrc names
// what times operations.
func environment(env *Env, clockSrc string) Environment {
	e := Environment{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPU: cpuModel(), Kernel: KernelRelease(), Affinity: affinity(), Clock: clockSrc, Devices: []DeviceEnv{},
	}
	if env != nil && env.Engine != nil {
		for _, d := range env.Engine.Devices() {
			e.Devices = append(e.Devices, DeviceEnv{Index: d.Index, Name: d.Name, Model: d.Model, Emulated: d.Emulated, DRAMSize: d.DRAMSize})
		}
		if env.transport() == "rdma" {
			e.RDMADevice = RDMADevice(env.Engine.RDMA())
		}
	}
	return e
}

// KernelRelease is the host kernel's release (uname -r), "" if unknown.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// affinity lists the CPUs this process may run on, as ranges: "1", "0-1".
func affinity() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return ""
	}
	var parts []string
	for lo := 0; lo < 1024; lo++ {
		if !set.IsSet(lo) {
			continue
		}
		hi := lo
		for hi+1 < 1024 && set.IsSet(hi+1) {
			hi++
		}
		if hi == lo {
			parts = append(parts, strconv.Itoa(lo))
		} else {
			parts = append(parts, strconv.Itoa(lo)+"-"+strconv.Itoa(hi))
		}
		lo = hi
	}
	return strings.Join(parts, ",")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// NewReport prepares a run of tests in env; Report.Run measures.
func NewReport(env *Env, tests []Test, p Params) (*Report, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	if len(tests) == 0 {
		return nil, errors.New("no test to run")
	}
	for _, t := range tests {
		if err := t.Check(env); err != nil {
			return nil, err
		}
		if t.Peer != NoPeer && p.Batch > 1 {
			return nil, fmt.Errorf("batches (-b %d) are not supported by test %s: an endpoint has no batch API", p.Batch, t.Name)
		}
		for _, size := range p.Sizes {
			if t.checkSize == nil {
				break
			}
			if err := t.checkSize(env, size); err != nil {
				return nil, err
			}
		}
	}
	// The clock is calibrated here, once per process and mode, not in
	// the first measurement.
	clockSrc, err := ClockSource(p.Clock)
	if err != nil {
		return nil, fmt.Errorf("clock %s: %w", p.Clock, err)
	}
	rep := newReport(env, tests, p, clockSrc)
	rep.run = &runState{env: env, tests: tests, p: p, rec: &recorder{}}
	return rep, nil
}

type runState struct {
	env   *Env
	tests []Test
	p     Params
	rec   *recorder // reused by every measurement
}

// Run measures what NewReport prepared, appending to Results. On error,
// Results holds what was measured before it.
func (r *Report) Run(ctx context.Context) error {
	if r.run == nil {
		return errors.New("bench: report was not made by NewReport")
	}
	return r.measure(ctx)
}

// Emulated reports whether any device the results used is emulated.
func (r *Report) Emulated() bool {
	for _, res := range r.Results {
		if res.Emulated || res.PeerEmulated {
			return true
		}
	}
	return false
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CSVHeader is the header row of WriteCSV.
var CSVHeader = []string{
	"test", "transport", "src", "dst", "device", "device_name", "model", "emulated",
	"size", "run", "iterations", "submissions", "warmup", "window", "batch",
	"latency_kind", "median_us", "avg_us", "p99_us", "min_us", "max_us",
	"rtt_median_us", "rtt_p99_us", "bandwidth_mb_s", "msg_rate", "elapsed_s", "verified",
	"goos", "goarch", "cpus",
	"peer", "local", "remote", "peer_device", "peer_emulated",
	"cpu_user_us", "cpu_sys_us", "cpu_cores",
}

// WriteCSV writes one header row and one row per result. Bandwidth is in
// MB/s with MB = 2^20 bytes, latencies in microseconds.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, x := range r.Results {
		row := []string{
			x.Test, x.Transport, string(x.Src), string(x.Dst), x.Device, x.DeviceName, x.Model, strconv.FormatBool(x.Emulated),
			strconv.Itoa(x.Size), strconv.Itoa(x.Run), strconv.FormatInt(x.Iterations, 10), strconv.FormatInt(x.Submissions, 10),
			strconv.Itoa(x.Warmup), strconv.Itoa(x.Window), strconv.Itoa(x.Batch),
			string(x.LatencyKind), f(x.Latency.Median), f(x.Latency.Avg), f(x.Latency.P99), f(x.Latency.Min), f(x.Latency.Max),
			f(x.RoundTrip.Median), f(x.RoundTrip.P99), f(x.BandwidthMBs), f(x.MsgRate), f(x.ElapsedSec), strconv.FormatBool(x.Verified),
			r.Env.GOOS, r.Env.GOARCH, strconv.Itoa(r.Env.CPUs),
			x.Peer, string(x.Local), string(x.Remote), x.PeerDevice, strconv.FormatBool(x.PeerEmulated),
		}
		if c := x.CPU; c != nil {
			row = append(row, f(c.UserUs), f(c.SysUs), f(c.Cores))
		} else {
			row = append(row, "", "", "")
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// BenchmarkName is the Go benchmark name of a result, with key=value
// parts benchstat can pivot on (-col /size, -row /test).
func BenchmarkName(x Result, gomaxprocs int) string {
	name := fmt.Sprintf("BenchmarkGxfer/test=%s/size=%s/dev=%s", x.Test, FormatSize(x.Size), x.Device)
	if x.PeerDevice != "" {
		name += "/peer=" + x.PeerDevice
	}
	if gomaxprocs > 1 {
		name += "-" + strconv.Itoa(gomaxprocs)
	}
	return name
}

// WriteBenchfmt writes the results in the Go benchmark format, so that
// benchstat can compare runs. Bandwidth is written in B/s (exact bytes per
// second; benchstat scales it with binary prefixes), not "MB/s", which the
// format defines as 10^6 bytes per second. The latency metrics p50-ns and
// p99-ns follow the latency kind (gxfer-latency) of each result.
func (r *Report) WriteBenchfmt(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "goos: %s\ngoarch: %s\npkg: github.com/gxfer/gxfer/cmd/gxfer\n", r.Env.GOOS, r.Env.GOARCH)
	if r.Env.CPU != "" {
		fmt.Fprintf(bw, "cpu: %s\n", r.Env.CPU)
	}
	fmt.Fprintf(bw, "gxfer-cpus: %d\ngxfer-transport: %s\n", r.Env.CPUs, r.Params.Transport)
	fmt.Fprintf(bw, "gxfer-warmup: %d\n", r.Params.Warmup)
	var devs []string
	emulated := false
	for _, d := range r.Env.Devices {
		kind := "real"
		if d.Emulated {
			kind, emulated = "emulated", true
		}
		devs = append(devs, fmt.Sprintf("gaudi%d=%s(%s)", d.Index, d.Model, kind))
	}
	if len(devs) == 0 {
		devs = []string{"none"}
	}
	if r.PeerEnv != nil {
		fmt.Fprintf(bw, "gxfer-peer: %s\n", strings.ReplaceAll(r.Params.Peer, " ", "_"))
		for _, d := range r.PeerEnv.Devices {
			kind := "real"
			if d.Emulated {
				kind, emulated = "emulated", true
			}
			devs = append(devs, fmt.Sprintf("peer-gaudi%d=%s(%s)", d.Index, d.Model, kind))
		}
	}
	fmt.Fprintf(bw, "gxfer-devices: %s\ngxfer-emulated: %t\n", strings.Join(devs, ","), emulated)
	if r.Env.Kernel != "" {
		fmt.Fprintf(bw, "kernel: %s\n", r.Env.Kernel)
	}
	// Latency tests run with one operation in flight whatever the run's
	// window, and each test has its latency kind: the configuration lines
	// of a result precede it whenever they change.
	window, batch, kind := -1, -1, LatencyKind("")
	for _, x := range r.Results {
		if x.Window != window || x.Batch != batch || x.LatencyKind != kind {
			window, batch, kind = x.Window, x.Batch, x.LatencyKind
			fmt.Fprintf(bw, "gxfer-window: %d\ngxfer-batch: %d\ngxfer-latency: %s\n", window, batch, kind)
		}
		nsPerOp := 0.0
		if x.Iterations > 0 {
			nsPerOp = x.ElapsedSec * 1e9 / float64(x.Iterations)
		}
		fmt.Fprintf(bw, "%s\t%d\t%s ns/op\t%s B/s\t%s msg/s\t%s p50-ns\t%s p99-ns\n",
			BenchmarkName(x, r.Env.GOMAXPROCS), x.Iterations, num(nsPerOp), num(x.BytesPerSec()), num(x.MsgRate),
			num(x.Latency.Median*1e3), num(x.Latency.P99*1e3))
	}
	return bw.Flush()
}

// num formats a metric value without exponent and with useful precision.
func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// WriteText writes the report as text tables, one per test.
func (r *Report) WriteText(w io.Writer) error {
	tw := NewTextWriter(w, r)
	if err := tw.Banner(); err != nil {
		return err
	}
	for _, x := range r.Results {
		if err := tw.Write(x); err != nil {
			return err
		}
	}
	return nil
}

// TextWriter writes results as text tables (one per test) as they come.
type TextWriter struct {
	w     io.Writer
	r     *Report
	cur   string
	err   error
	multi bool
}

// NewTextWriter returns a TextWriter for r's results.
func NewTextWriter(w io.Writer, r *Report) *TextWriter {
	return &TextWriter{w: w, r: r, multi: r.Params.Count > 1}
}

func (t *TextWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// Banner writes the run's environment and parameters.
func (t *TextWriter) Banner() error {
	e, p := t.r.Env, t.r.Params
	t.printf("# %s | %s %s/%s | %d CPUs", t.r.Tool, e.GoVersion, e.GOOS, e.GOARCH, e.CPUs)
	if e.CPU != "" {
		t.printf(" (%s)", e.CPU)
	}
	t.printf(", GOMAXPROCS %d", e.GOMAXPROCS)
	if e.Affinity != "" {
		t.printf(", CPUs allowed %s", e.Affinity)
	}
	if e.Kernel != "" {
		t.printf(" | kernel %s", e.Kernel)
	}
	if e.Clock != "" {
		t.printf(" | clock %s", e.Clock)
	}
	t.devices("devices", e.Devices)
	if pe := t.r.PeerEnv; pe != nil {
		t.printf("\n# peer %s | GOMAXPROCS %d", p.Peer, pe.GOMAXPROCS)
		if pe.Affinity != "" {
			t.printf(", CPUs allowed %s", pe.Affinity)
		}
		t.devices("peer devices", pe.Devices)
	}
	t.printf("\n# transport %s | ", TransportLabel(p.Transport))
	if p.Transport == "rdma" {
		t.printf("rdma device %s", orUnknown(e.RDMADevice))
		if pe := t.r.PeerEnv; pe != nil {
			t.printf(", peer's %s", orUnknown(pe.RDMADevice))
		}
		t.printf(" | ")
	}
	if p.Peer != "" {
		t.printf("memory local %s, remote %s | ", p.Local, p.Remote)
	}
	if p.Iterations > 0 {
		t.printf("%d iterations per size", p.Iterations)
	} else {
		t.printf("%v per size", time.Duration(p.DurationSec*float64(time.Second)))
	}
	t.printf(" | warm-up %d | window %d | batch %d", p.Warmup, p.Window, p.Batch)
	if p.Count > 1 {
		t.printf(" | count %d", p.Count)
	}
	t.printf("\n")
	return t.err
}

func (t *TextWriter) devices(label string, ds []DeviceEnv) {
	t.printf("\n# %s:", label)
	if len(ds) == 0 {
		t.printf(" none (host memory only)")
	}
	for i, d := range ds {
		if i > 0 {
			t.printf(",")
		}
		t.printf(" gaudi%d %s %s", d.Index, d.Model, deviceKind(d.Emulated, d.Name))
	}
}

func deviceKind(emulated bool, name string) string {
	if emulated {
		return "[EMULATED: dma/hlsim, " + name + "]"
	}
	return "[real: " + name + "]"
}

func (t *TextWriter) header(x Result) {
	ti := TestInfo{Name: x.Test, Path: string(x.Src) + " -> " + string(x.Dst)}
	for _, i := range t.r.Tests {
		if i.Name == x.Test {
			ti = i
		}
	}
	dev := "host (no Gaudi in this path; nothing emulated)"
	if x.Device != "host" {
		dev = fmt.Sprintf("%s %s %s", x.Device, x.Model, deviceKind(x.Emulated, x.DeviceName))
	}
	t.printf("#\n# test %s: %s", ti.Name, ti.Path)
	if ti.Desc != "" {
		t.printf(" (%s)", ti.Desc)
	}
	if x.Peer == "" {
		t.printf("\n# transport: %s | device: %s\n", x.Transport, dev)
	} else {
		if x.Device == "host" {
			dev = "host"
		}
		pdev := "host"
		if x.PeerDevice != "host" {
			pdev = fmt.Sprintf("%s %s %s (the peer's engine does the DMA)", x.PeerDevice, x.PeerModel, deviceKind(x.PeerEmulated, x.PeerDeviceName))
		}
		emu := "no"
		if x.Emulated || x.PeerEmulated {
			emu = "yes"
		}
		t.printf("\n# transport: %s | peer %s | local device: %s | peer device: %s | emulated: %s\n",
			TransportLabel(x.Transport), x.Peer, dev, pdev, emu)
		if x.Transport == "rdma" {
			pr := ""
			if pe := t.r.PeerEnv; pe != nil {
				pr = pe.RDMADevice
			}
			t.printf("# rdma device: %s | peer's: %s\n", orUnknown(t.r.Env.RDMADevice), orUnknown(pr))
		}
	}
	t.printf("# window %d, batch %d | %s | bandwidth in MB/s, MB = 2^20 bytes\n", x.Window, x.Batch, x.LatencyKind.Describe())
	if x.Op != "" {
		t.printf("# msg/s counts messages; %s\n", x.Op)
	}
	if x.Peer != "" {
		t.printf("# the same local and peer buffers are reused every iteration (as ucx_perftest); destination verified after each size\n")
	} else {
		t.printf("# buffers allocated once per size and reused across iterations; destination verified after each size\n")
	}
	t.printf("# cpu(us): this process's CPU time per iteration over the run, user+system, every thread (getrusage)\n")
	cols := []string{"size", "iterations", "median(us)", "avg(us)", "p99(us)", "MB/s", "msg/s", "cpu(us)"}
	if t.multi {
		cols = append([]string{"run"}, cols...)
	}
	t.row(cols)
}

// row writes cells right-aligned in fixed minimum widths, so that rows
// written one at a time line up.
func (t *TextWriter) row(cells []string) {
	if t.err != nil {
		return
	}
	tw := tabwriter.NewWriter(t.w, 12, 0, 1, ' ', tabwriter.AlignRight)
	for _, c := range cells {
		fmt.Fprint(tw, c, "\t")
	}
	fmt.Fprintln(tw)
	t.err = tw.Flush()
}

// Write writes one result, preceded by its test's header when the test
// changes.
func (t *TextWriter) Write(x Result) error {
	if x.Test != t.cur {
		t.cur = x.Test
		t.header(x)
	}
	cells := []string{
		FormatSize(x.Size), strconv.FormatInt(x.Iterations, 10),
		usec(x.Latency.Median), usec(x.Latency.Avg), usec(x.Latency.P99),
		strconv.FormatFloat(x.BandwidthMBs, 'f', 2, 64), strconv.FormatFloat(x.MsgRate, 'f', 0, 64), cpuCell(x.CPU),
	}
	if t.multi {
		cells = append([]string{strconv.Itoa(x.Run)}, cells...)
	}
	t.row(cells)
	return t.err
}

// cpuCell is a result's CPU time per iteration in the text table ("-"
// where it was not read).
func cpuCell(c *CPUUse) string {
	if c == nil {
		return "-"
	}
	return usec(c.UserUs + c.SysUs)
}

func usec(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
