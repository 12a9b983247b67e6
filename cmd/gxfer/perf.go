package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
)

func perfUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: gxfer perf [flags]

Measures copy bandwidth and latency between each pair of memory types
(h2d, d2h, d2d, h2h) on the device under test, like ucx_perftest and
ib_write_bw. Without flags it runs every local test that the open devices
allow (the emulated Gaudi on a plain machine) at 8B, 4KiB, 64KiB, 1MiB and
16MiB, 0.3 s per size, and prints one table per test: size, iterations,
latency (median, average, p99, in microseconds), bandwidth (MB/s with
MB = 2^20 bytes) and message rate. Every header names the device and the
transport and says whether the device is emulated.

Buffers are allocated once per (test, size) and reused across iterations;
the destination is verified after each size, and a failed verification is
an error (exit status 1).

With -O or -b above 1, the latency columns are the time per copy over the
last window of completions (average: wall time / copies), not a round trip.

Client/server mode, like ucx_perftest and ib_write_bw: start a server,
then a client with the same -x. The server serves one client at a time
(a second concurrent one is refused) until interrupted, or exits after
one client with -once. A connection holds the server only once it said
hello (it must within 10 s; of the connections yet to say it, the server
keeps 8 per address, per pid for local clients, and 64 in all: a new one
closes the oldest of its address, or at 64 of the address holding the
most); a client then sends a request or a ping at
least every 2 minutes (it pings every 20 s while it measures), so a
client that stopped does not hold the server. Client
and server must be of the same control version. Three transports:

  ipc  -x unix:PATH      same host: unix sockets (0600, the peer's uid is
                         checked), shared memfd
  tcp  -x tcp:HOST:PORT  any host: the engine's TCP data path (Data
                         frames; transfers of 4 MiB and more split over 2
                         connections). The control channel is HOST:PORT;
                         the server's engine listens on an ephemeral port
                         of the same host (the client learns it on the
                         control channel and dials the host it reached).
                         The TCP perf server accepts any client that can
                         reach it (no credentials are checked): run it on
                         a trusted network only, with -once when in doubt.
                         Server port 0 picks a free port (printed).
  rdma -x rdma:HOST:PORT the tcp mode, with the engine endpoint dialed
                         with TransportRDMA: Puts and Gets are RDMA writes
                         and reads on the engine's RDMA device (see gxfer
                         info); connection setup and the control channel
                         stay TCP. Both engines need an RDMA device (else
                         a one-line error giving the engine's reason, exit
                         status 2). -rdma-cq chooses how the engine's
                         completion queue waits.

  gxfer perf -server -x unix:/tmp/gx.sock [-once] [-d N]
  gxfer perf -x unix:/tmp/gx.sock [-t put_lat,put_bw,get_lat,get_bw] [-m local,remote] [-s sizes] [-O window]
  gxfer perf -server -x tcp:10.0.0.1:13337 [-once]
  gxfer perf -x tcp:10.0.0.1:13337 -t put_lat,put_bw,get_lat,get_bw
  gxfer perf -server -x rdma:10.0.0.1:13337 [-once]
  gxfer perf -x rdma:10.0.0.1:13337 -t put_lat,put_bw -rdma-cq busy

Tests over ipc, tcp and rdma:
  put_lat  ping-pong: the client Puts into the server's buffer, the server
           polls its memory (the last aligned 8 bytes carry a sequence
           number) and Puts back; latency = round trip / 2, as
           ucx_perftest put_lat (sizes of 8 bytes and more). With Gaudi
           memory at either end, where the CPU cannot poll: the Put's
           completion round trip.
  put_bw   Puts into the server's buffer with -O outstanding.
  get_lat  Get round trip, one at a time.
  get_bw   Gets from the server's buffer with -O outstanding.
-m local,remote gives the memory types of the client's and the server's
buffers (host or gaudi; default host,host); with remote gaudi the server's
engine does the DMA. Latency tests run with one operation in flight
whatever -O says; -b is not supported over ipc or tcp. Over tcp, put_lat
polls memory that the engine's socket reader lands the peer's bytes in:
the poller parks 1 us between looks so that the reader can run (a spinning
poller would starve it). Transfers of 4 MiB and more go over 2
connections, so a large put_lat's sequence word can land before the rest
of the message; the round still ends only once the Put has completed.
Over rdma the NIC writes the peer's bytes into the polled memory itself:
put_lat spins on it as ipc does (a round ends once the answer has landed
and the Put's completion has come back through the completion queue).
On few cores the lowest rdma put_lat is with GOMAXPROCS=1 and -rdma-cq
busy on both sides (one thread per process polls the memory and the
completion queue, as perftest's does); busy with more Ps keeps a second
core busy per process. As
ucx_perftest, the same buffers are used every iteration (small sizes stay
in the cache). The
server verifies its buffer after each size of a put test, the client its
own after each get test.

Examples:
  gxfer perf
  gxfer perf -t h2d,d2h -sweep 4K:64M -time 1s
  gxfer perf -t d2d -s 1M -n 1000 -O 16 -benchfmt > new.txt
  gxfer perf -json > run.json
  gxfer perf -plot perf.svg
  taskset -c 0 gxfer perf -server -x unix:/tmp/gx.sock -once &
  taskset -c 1 gxfer perf -x unix:/tmp/gx.sock -t put_lat,put_bw -s 8,4K,1M
  bash bench/tcp-compare.sh   # tcp between two network namespaces vs iperf3 (and nuttcp) and ucx_perftest
  bash bench/compare-all.sh   # every comparison (UCX, iperf3, perftest, engine goals) and one table of issue 20's goals
  gxfer perf -server -x tcp:10.0.0.1:13337 -metrics 127.0.0.1:9464   # Prometheus scrapes :9464/metrics

-metrics ADDR serves the engine's statistics (package metrics: copies,
Puts and Gets by transport, errors by kind, latency histograms, caches,
endpoints) to Prometheus at http://ADDR/metrics while the command runs.
`+perfAgentUsage+`
Flags:
`)
	fs, _ := perfFlags()
	printDefaults(w, fs)
}

type perfOpts struct {
	common              commonFlags
	tests, mem          string
	sizes, sweep        string
	iters               int
	dur                 time.Duration
	warmup              int
	window, batch       int
	count               int
	device              int
	transport           string
	server, once        bool
	json, csv, benchfmt bool
	plot                string
	quiet               bool
	cpuprofile          string
	tcpSpin             time.Duration
	tcpLanes            int
	rdmaCQ              string
	clock               string
	metrics             string // -metrics ADDR
	agent               agentPerfOpts
}

func perfFlags() (*flag.FlagSet, *perfOpts) {
	o := &perfOpts{}
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.StringVar(&o.tests, "t", "", "tests, comma-separated: h2d, d2h, d2d, h2h; over ipc and tcp put_lat, put_bw, get_lat, get_bw (default: all that can run)")
	fs.StringVar(&o.mem, "m", "", "memory types `src,dst` (host or gaudi) instead of -t, as ucx_perftest -m; over ipc and tcp: local,remote")
	fs.StringVar(&o.sizes, "s", "", "message sizes, comma-separated, with K, M, G suffixes (binary) (default 8,4K,64K,1M,16M)")
	fs.StringVar(&o.sweep, "sweep", "", "message sizes `MIN:MAX`: every power of two from MIN to MAX, e.g. 8:16M")
	fs.IntVar(&o.iters, "n", 0, "measured iterations (messages) per size; excludes -time")
	fs.DurationVar(&o.dur, "time", bench.DefaultDuration, "measuring time per size; excludes -n")
	fs.IntVar(&o.warmup, "w", bench.DefaultWarmup, "warm-up iterations per size, not measured")
	fs.IntVar(&o.window, "O", 1, "outstanding submissions (window)")
	fs.IntVar(&o.batch, "b", 1, "copies per submission, sent as one engine batch")
	fs.IntVar(&o.count, "count", 1, "measure each (test, size) this many times (for benchstat)")
	fs.IntVar(&o.device, "d", 0, "index of the Gaudi device under test")
	fs.StringVar(&o.transport, "x", "local", "transport: local; unix:PATH for ipc to a perf server at PATH; tcp:HOST:PORT for tcp to a perf server at HOST:PORT; rdma:HOST:PORT for the same with RDMA data transfers (needs an RDMA device)")
	fs.BoolVar(&o.server, "server", false, "serve clients at -x unix:PATH, -x tcp:HOST:PORT or -x rdma:HOST:PORT (one at a time) until interrupted")
	fs.BoolVar(&o.once, "once", false, "with -server: exit after one client")
	fs.BoolVar(&o.json, "json", false, "write the report as JSON on stdout instead of tables")
	fs.BoolVar(&o.csv, "csv", false, "write the results as CSV on stdout instead of tables")
	fs.BoolVar(&o.benchfmt, "benchfmt", false, "write the results in Go benchmark format on stdout, for benchstat")
	fs.StringVar(&o.plot, "plot", "", "also draw bandwidth and latency against size into `FILE`.svg or FILE.png")
	fs.BoolVar(&o.quiet, "q", false, "quiet: no tables and no progress (machine formats and -plot are still written)")
	fs.DurationVar(&o.tcpSpin, "tcp-spin", 0, "over tcp: poll the socket this long before parking the reader (engine Config.TCPReadSpin, default 50us; negative: never; costs a core while it spins)")
	fs.IntVar(&o.tcpLanes, "tcp-lanes", 0, "over tcp (client): connections per endpoint; transfers of 4 MiB and more are split over them (engine Config.TCPLanes; default 2)")
	fs.StringVar(&o.rdmaCQ, "rdma-cq", "event", "over rdma: how the engine's completion queue waits: event (sleep in the netpoller), spin (poll 50us after each completion, then sleep), spin:DURATION, or busy (poll always: lowest latency, a core busy) (engine Config.RDMA.CQSpin, CQBusyPoll)")
	fs.StringVar(&o.clock, "clock", "auto", "what times operations: auto (the TSC where it is invariant, else the monotonic clock), tsc (the TSC even without the invariant flags, as perftest does; an error unless two calibrations against the monotonic clock agree within 1%), or monotonic")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of this process to `FILE` (go tool pprof)")
	registerMetricsFlag(fs, &o.metrics)
	o.common.register(fs)
	o.agent.register(fs)
	return fs, o
}

// perfPlan is a checked perf command line.
type perfPlan struct {
	p         bench.Params
	format    string // text, json, csv, benchfmt
	progress  bool
	transport string // local, ipc, tcp, rdma
	addr      string // the server's socket (ipc) or HOST:PORT (tcp, rdma)
}

// clientOnly are the flags a server has no use for: the client chooses.
var clientOnly = []string{"t", "m", "s", "sweep", "n", "time", "w", "O", "b", "count", "json", "csv", "benchfmt", "plot", "clock"}

// check validates the flags that need no engine.
func (o *perfOpts) check(set map[string]bool) (perfPlan, error) {
	var pl perfPlan
	name, addr, err := bench.ParseTransport(o.transport)
	if err != nil {
		return pl, usagef("-x: %v", err)
	}
	pl.transport, pl.addr = name, addr
	if o.once && !o.server {
		return pl, usagef("-once needs -server")
	}
	if o.server {
		if name != "ipc" && name != "tcp" && name != "rdma" {
			return pl, usagef("-server needs -x unix:PATH, -x tcp:HOST:PORT or -x rdma:HOST:PORT, where to listen")
		}
		for _, f := range clientOnly {
			if set[f] {
				return pl, usagef("-%s has no meaning with -server (the client chooses)", f)
			}
		}
		if o.device < 0 {
			return pl, usagef("bad -d %d (want a device index, 0 or more)", o.device)
		}
		return pl, nil
	}
	if set["n"] && set["time"] {
		return pl, usagef("-n and -time are mutually exclusive")
	}
	if set["s"] && set["sweep"] {
		return pl, usagef("-s and -sweep are mutually exclusive")
	}
	if name == "tcp" || name == "rdma" {
		if err := bench.CheckDialAddr(addr); err != nil {
			return pl, usagef("-x: bad -x %q: %v", o.transport, err)
		}
	}
	if set["t"] && set["m"] && name == "local" {
		return pl, usagef("-t and -m are mutually exclusive (except over ipc, tcp and rdma, where -m gives the local and remote memory types)")
	}
	if name != "local" && o.batch > 1 {
		return pl, usagef("-b %d: batches are not supported over %s (an endpoint has no batch API)", o.batch, name)
	}
	formats := 0
	pl.format = "text"
	for name, on := range map[string]bool{"json": o.json, "csv": o.csv, "benchfmt": o.benchfmt} {
		if on {
			formats++
			pl.format = name
		}
	}
	if formats > 1 {
		return pl, usagef("-json, -csv and -benchfmt are mutually exclusive")
	}
	switch {
	case set["n"] && o.iters < 1:
		return pl, usagef("bad -n %d (want 1 or more)", o.iters)
	case !set["n"] && o.dur <= 0:
		return pl, usagef("bad -time %v (want a positive duration such as 300ms)", o.dur)
	case o.warmup < 0:
		return pl, usagef("bad -w %d (want 0 or more)", o.warmup)
	case o.window < 1 || o.window > 1<<16:
		return pl, usagef("bad -O %d (want 1..65536)", o.window)
	case o.batch < 1 || o.batch > 1<<16:
		return pl, usagef("bad -b %d (want 1..65536)", o.batch)
	case o.count < 1 || o.count > 1000:
		return pl, usagef("bad -count %d (want 1..1000)", o.count)
	case o.device < 0:
		return pl, usagef("bad -d %d (want a device index, 0 or more)", o.device)
	}
	if set["m"] {
		if _, _, err := o.memTypes(); err != nil {
			return pl, err
		}
	}
	if set["t"] {
		// Names now; whether the open devices allow them once the engine is open.
		for _, name := range strings.Split(o.tests, ",") {
			if _, ok := bench.LookupTest(strings.ToLower(strings.TrimSpace(name))); !ok {
				return pl, usagef("unknown test %q (known: %s)", strings.TrimSpace(name), strings.Join(testNames(), ", "))
			}
		}
	}
	var sizes []int
	switch {
	case set["sweep"]:
		sizes, err = bench.ParseSweep(o.sweep)
	case set["s"]:
		sizes, err = bench.ParseSizes(o.sizes)
	default:
		sizes = bench.DefaultSizes
	}
	if err != nil {
		return pl, usagef("%v", err)
	}
	if o.plot != "" {
		if _, err := bench.PlotFormat(o.plot); err != nil {
			return pl, usagef("-plot: %v", err)
		}
		if st, err := os.Stat(filepath.Dir(o.plot)); err != nil || !st.IsDir() {
			return pl, usagef("-plot: directory %q does not exist", filepath.Dir(o.plot))
		}
	}
	clock, err := bench.ParseClockMode(o.clock)
	if err != nil {
		return pl, usagef("bad -clock %q (want auto, tsc or monotonic)", o.clock)
	}
	pl.p = bench.Params{
		Sizes: sizes, Warmup: o.warmup, Window: o.window, Batch: o.batch, Count: o.count, Clock: clock,
	}
	if set["n"] {
		pl.p.Iterations = o.iters
	} else {
		pl.p.Duration = o.dur
	}
	if err := pl.p.Validate(); err != nil {
		return pl, usagef("%v", err)
	}
	return pl, nil
}

func testNames() []string {
	var names []string
	for _, t := range bench.Tests("") {
		names = append(names, t.Name)
	}
	return names
}

// memTypes parses -m src,dst.
func (o *perfOpts) memTypes() (src, dst bench.Mem, err error) {
	a, b, ok := strings.Cut(o.mem, ",")
	if !ok {
		return "", "", usagef("bad -m %q (want src,dst memory types, e.g. host,gaudi)", o.mem)
	}
	if src, err = bench.ParseMem(a); err != nil {
		return "", "", usagef("-m: %v", err)
	}
	if dst, err = bench.ParseMem(b); err != nil {
		return "", "", usagef("-m: %v", err)
	}
	return src, dst, nil
}

// selectTests resolves -t or -m for env.
func (o *perfOpts) selectTests(env *bench.Env) ([]bench.Test, error) {
	if env.Peer != nil {
		if o.mem != "" {
			l, r, err := o.memTypes()
			if err != nil {
				return nil, err
			}
			env.Local, env.Remote = l, r
		}
		tests, err := bench.TestsFor(env, o.tests)
		if err != nil {
			return nil, usagef("%v", err)
		}
		return tests, nil
	}
	if o.mem != "" {
		s, d, err := o.memTypes()
		if err != nil {
			return nil, err
		}
		t, err := bench.TestFor(env, s, d)
		if err != nil {
			return nil, usagef("-m: %v", err)
		}
		return []bench.Test{t}, nil
	}
	tests, err := bench.TestsFor(env, o.tests)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return tests, nil
}

func runPerf(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs, o := perfFlags()
	set, err := parseFlags(fs, args, &o.common)
	if err != nil {
		return err
	}
	if err := refuseEmpty(fs, set, "metrics", "plot", "cpuprofile"); err != nil {
		return err
	}
	cfg, err := o.common.config(stderr)
	if err != nil {
		return err
	}
	if o.agent.on {
		return runAgentPerf(ctx, o, set, cfg, stdout, stderr)
	}
	for _, f := range agentOnly {
		if set[f] {
			return usagef("-%s needs -agent", f)
		}
	}
	plan, err := o.check(set)
	if err != nil {
		return err
	}
	if set["tcp-spin"] {
		if plan.transport != "tcp" {
			return usagef("-tcp-spin needs -x tcp:HOST:PORT")
		}
		if o.tcpSpin > time.Second {
			return usagef("bad -tcp-spin %v (want at most 1s; negative: never spin)", o.tcpSpin)
		}
		cfg.TCPReadSpin = o.tcpSpin
	}
	if set["tcp-lanes"] {
		switch {
		case plan.transport != "tcp":
			return usagef("-tcp-lanes needs -x tcp:HOST:PORT")
		case o.server:
			return usagef("-tcp-lanes has no meaning with -server (the client's Dial opens the connections)")
		case o.tcpLanes < 1 || o.tcpLanes > 16:
			return usagef("bad -tcp-lanes %d (want 1..16)", o.tcpLanes)
		}
		cfg.TCPLanes = o.tcpLanes
	}
	if set["rdma-cq"] {
		if plan.transport != "rdma" {
			return usagef("-rdma-cq needs -x rdma:HOST:PORT")
		}
		spin, busy, err := parseRDMACQ(o.rdmaCQ)
		if err != nil {
			return err
		}
		cfg.RDMA.CQSpin, cfg.RDMA.CQBusyPoll = spin, busy
	}
	if !o.server {
		// Calibrate now (once per process): -clock tsc can fail.
		if _, err := bench.ClockSource(plan.p.Clock); err != nil {
			return fmt.Errorf("-clock %s: %w", o.clock, err)
		}
	}
	stopProfile, err := startCPUProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := stopProfile(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	eng, err := openEngine(cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := eng.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close engine: %w", cerr)
		}
	}()
	ms, err := startMetrics(o.metrics, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ms.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("-metrics: %w", cerr)
		}
	}()
	ms.addEngine(eng)

	if n := eng.NumDevices(); set["d"] && o.device >= n {
		return usagef("-d %d: no such device (%d open)", o.device, n)
	}
	// Whether rdma can be used is the engine's RDMA device's to say.
	bench.NoteRDMA(eng.RDMA())
	if plan.transport == "rdma" {
		if _, err := bench.LookupTransport("rdma"); err != nil {
			return usagef("-x %s: %v", o.transport, err)
		}
	}
	if o.server {
		return runServer(ctx, o, plan, eng, stdout)
	}
	env := &bench.Env{Engine: eng, Device: o.device, Transport: plan.transport}
	if plan.transport == "ipc" || plan.transport == "tcp" || plan.transport == "rdma" {
		var peer *bench.Peer
		switch plan.transport {
		case "tcp":
			peer, err = bench.DialPeerTCP(ctx, eng, plan.addr)
		case "rdma":
			peer, err = bench.DialPeerRDMA(ctx, eng, plan.addr)
		default:
			peer, err = bench.DialPeer(ctx, eng, plan.addr)
		}
		if err != nil {
			if ctx.Err() != nil {
				return errors.New("interrupted")
			}
			return err
		}
		defer func() {
			if cerr := peer.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close the connection to the server: %w", cerr)
			}
		}()
		env.Peer = peer
	}
	tests, err := o.selectTests(env)
	if err != nil {
		return err
	}

	p := plan.p
	var bar *progressBar
	if !o.quiet && stderrIsTerminal(stderr) {
		bar = newProgressBar(stderr)
		p.Progress = bar.update
	}
	text := plan.format == "text" && !o.quiet
	var tw *bench.TextWriter
	if text {
		// Stream the tables: each row as soon as it is measured.
		p.OnResult = func(x bench.Result) {
			bar.clear()
			_ = tw.Write(x)
		}
	}
	rep, err := bench.NewReport(env, tests, p)
	if err != nil {
		return usagef("%v", err)
	}
	if text {
		tw = bench.NewTextWriter(stdout, rep)
		if err := tw.Banner(); err != nil {
			return err
		}
		if eng.NumDevices() == 0 && o.tests == "" && o.mem == "" && env.Peer == nil {
			fmt.Fprintln(stdout, "# no Gaudi device open: h2d, d2h and d2d skipped")
		}
	}
	runErr := rep.Run(ctx)
	bar.clear()
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			return errors.New("interrupted")
		}
		return runErr
	}
	switch plan.format {
	case "json":
		err = rep.WriteJSON(stdout)
	case "csv":
		err = rep.WriteCSV(stdout)
	case "benchfmt":
		err = rep.WriteBenchfmt(stdout)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", plan.format, err)
	}
	if o.plot != "" {
		if err := rep.SavePlot(o.plot); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		if text {
			fmt.Fprintf(stdout, "#\n# plot written to %s\n", o.plot)
		}
	}
	return nil
}

// startCPUProfile starts -cpuprofile's profile into path ("": none);
// stop ends it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usagef("-cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// runServer is gxfer perf -server: it serves ipc or tcp clients until
// interrupted, or one client with -once.
func runServer(ctx context.Context, o *perfOpts, plan perfPlan, eng *engine.Engine, stdout io.Writer) error {
	var log io.Writer
	if !o.quiet {
		log = stdout
	}
	cfg := bench.ServerConfig{Path: plan.addr, Device: o.device, Once: o.once, Log: log}
	if plan.transport == "tcp" || plan.transport == "rdma" {
		cfg.Path, cfg.TCP, cfg.RDMA = "", plan.addr, plan.transport == "rdma"
	}
	srv, err := bench.Listen(eng, cfg)
	if err != nil {
		return err
	}
	if !o.quiet {
		e := bench.CurrentEnvironment(&bench.Env{Engine: eng})
		fmt.Fprintf(stdout, "# gxfer perf server | %s %s/%s | %d CPUs, GOMAXPROCS %d", e.GoVersion, e.GOOS, e.GOARCH, e.CPUs, e.GOMAXPROCS)
		if e.Affinity != "" {
			fmt.Fprintf(stdout, ", CPUs allowed %s", e.Affinity)
		}
		fmt.Fprintf(stdout, " | pid %d\n# devices:", os.Getpid())
		if len(e.Devices) == 0 {
			fmt.Fprint(stdout, " none (host memory only; clients cannot use remote gaudi)")
		}
		for i, d := range e.Devices {
			if i > 0 {
				fmt.Fprint(stdout, ",")
			}
			kind := "[real: " + d.Name + "]"
			if d.Emulated {
				kind = "[EMULATED: dma/hlsim, " + d.Name + "]"
			}
			fmt.Fprintf(stdout, " gaudi%d %s %s", d.Index, d.Model, kind)
		}
		if len(e.Devices) > 0 {
			fmt.Fprintf(stdout, " | gaudi buffers on gaudi%d", o.device)
		}
		mode := "one client at a time, until interrupted"
		if o.once {
			mode = "one client, then exit (-once)"
		}
		switch plan.transport {
		case "rdma":
			fmt.Fprintf(stdout, "\n# transport %s | rdma device %s | completion queue %s", bench.TransportLabel("rdma"),
				bench.RDMADevice(eng.RDMA()), bench.CQModeString(eng.Config().RDMA))
			fmt.Fprintf(stdout, "\n# listening on %s (control channel; engine at %s) | any client that can reach it is served | %s\n",
				srv.Addr(), srv.EngineAddr(), mode)
		case "tcp":
			fmt.Fprintf(stdout, "\n# transport %s | listening on %s (control channel; engine at %s) | any client that can reach it is served | %s\n",
				bench.TransportLabel("tcp"), srv.Addr(), srv.EngineAddr(), mode)
		default:
			fmt.Fprintf(stdout, "\n# transport %s | listening on %s (control socket %s%s) | %s\n",
				bench.TransportLabel("ipc"), srv.Addr(), plan.addr, bench.CtlSuffix, mode)
		}
	}
	if err := srv.Serve(ctx); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// parseRDMACQ parses -rdma-cq: event, spin (50us), spin:DURATION or busy.
func parseRDMACQ(v string) (spin time.Duration, busy bool, err error) {
	switch v {
	case "event":
		return 0, false, nil
	case "busy":
		return 0, true, nil
	case "spin":
		return 50 * time.Microsecond, false, nil
	}
	if d, ok := strings.CutPrefix(v, "spin:"); ok {
		spin, err := time.ParseDuration(d)
		if err != nil || spin <= 0 || spin > time.Second {
			return 0, false, usagef("bad -rdma-cq %q (want spin:DURATION with 0 < DURATION <= 1s, e.g. spin:100us)", v)
		}
		return spin, false, nil
	}
	return 0, false, usagef("bad -rdma-cq %q (want event, spin, spin:DURATION or busy)", v)
}
