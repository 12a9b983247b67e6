package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/soak"
)

func soakUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: gxfer soak [flags]

Runs the chaos and soak workload of package soak: peer processes (this
program again) and engines move data over unix sockets and TCP (and, as
root, TCP between two network namespaces it creates) while faults are
injected at random: CS hang, abort and reset on the emulated Gaudis, peer
SIGKILL and restart, link down and up, stale and widened keys, Close
under load, hostile connections, device copies that time out. Every byte reported
moved is checked, every operation must end in time with success or a
typed error a fault explains, and goroutines, fds, mappings and heap must
return to their baseline, here and in the peers. It prints what it
injected and what survived; the exit status is 1 when it found a problem.
Interrupt (Ctrl-C) ends the load early and still reports. Traffic stays
on loopback and in the namespaces it creates. Emulated devices only.
A seed fixes the random choices, not the timing: a rerun with the same
seed injects the same faults at the same pace, not in the same
interleaving with the load.

  gxfer soak -duration 30m -seed 1

Flags:
`)
	fs, _ := soakFlags()
	printDefaults(w, fs)
}

type soakOpts struct {
	duration   time.Duration
	seed       int64
	procs      int
	workers    int
	faults     string
	faultEvery time.Duration
	maxOp      int
	netns      string
	verbose    bool
	peer       bool
	metrics    string // -metrics ADDR
}

func soakFlags() (*flag.FlagSet, *soakOpts) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	o := &soakOpts{}
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long the load and faults run (the checks take up to a minute more)")
	fs.Int64Var(&o.seed, "seed", 0, "seed of every random choice (0: from the clock; the summary prints it)")
	fs.IntVar(&o.procs, "procs", 2, "peer processes (0..16)")
	fs.IntVar(&o.workers, "workers", 4, fmt.Sprintf("load goroutines in this process (1..64; 1..%d with peer processes)", soak.MaxPeerWorkers))
	fs.StringVar(&o.faults, "faults", "all", "faults to inject, comma-separated: all, none, or of "+faultNames())
	fs.DurationVar(&o.faultEvery, "fault-every", 250*time.Millisecond, "mean time between two injected faults")
	fs.IntVar(&o.maxOp, "max-op", 256<<10, "largest transfer in bytes (at most 1 MiB)")
	fs.StringVar(&o.netns, "netns", "auto", "network namespaces for the link faults: auto (when root), on, off")
	fs.BoolVar(&o.verbose, "v", false, "log engine warnings of this process to stderr")
	fs.BoolVar(&o.peer, "peer", false, "internal: run as a peer process of a soak")
	registerMetricsFlag(fs, &o.metrics)
	return fs, o
}

func faultNames() string {
	s := ""
	for i, f := range soak.AllFaults {
		if i > 0 {
			s += ","
		}
		s += string(f)
	}
	return s
}

// errSoakFailed is the runtime error of a soak that found problems (the
// summary says which).
var errSoakFailed = errors.New("the soak found problems (see VIOLATION and LEAK lines above)")

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs, o := soakFlags()
	set, err := parseFlags(fs, args, nil)
	if err != nil {
		return err
	}
	if err := refuseEmpty(fs, set, "metrics", "faults"); err != nil {
		return err
	}
	if o.peer {
		if set["metrics"] {
			return usagef("-metrics has no meaning with -peer")
		}
		if !soak.IsPeer() {
			return usagef("-peer is internal: a soak starts its peer processes with it")
		}
		if code := soak.PeerMain(os.Stdin, stdout); code != 0 {
			return fmt.Errorf("peer exited with status %d", code)
		}
		return nil
	}
	faults, err := soak.ParseFaults(o.faults)
	if err != nil {
		return usagef("bad -faults: %v", err)
	}
	switch {
	case o.duration <= 0:
		return usagef("bad -duration %v (want > 0)", o.duration)
	case o.procs < 0 || o.procs > 16:
		return usagef("bad -procs %d (want 0..16)", o.procs)
	case o.workers < 1 || o.workers > 64:
		return usagef("bad -workers %d (want 1..64)", o.workers)
	case o.procs > 0 && o.workers > soak.MaxPeerWorkers:
		return usagef("bad -workers %d (want 1..%d with peer processes)", o.workers, soak.MaxPeerWorkers)
	case o.faultEvery <= 0:
		return usagef("bad -fault-every %v (want > 0)", o.faultEvery)
	case o.maxOp < 1 || o.maxOp > 1<<20:
		return usagef("bad -max-op %d (want 1..1048576)", o.maxOp)
	case o.netns != "auto" && o.netns != "on" && o.netns != "off":
		return usagef("bad -netns %q (want auto, on or off)", o.netns)
	case set["seed"] && o.seed == 0:
		return usagef("bad -seed 0 (0 means from the clock: leave -seed out)")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program for the peers: %w", err)
	}
	log := zerolog.Nop()
	if o.verbose {
		log = zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05", NoColor: !stderrIsTerminal(stderr)}).
			Level(zerolog.WarnLevel).With().Timestamp().Logger()
	}
	cfg := soak.Config{
		Duration:    o.duration,
		Seed:        o.seed,
		Procs:       o.procs,
		Workers:     o.workers,
		Faults:      faults,
		FaultEvery:  o.faultEvery,
		MaxOp:       o.maxOp,
		Netns:       o.netns,
		PeerCommand: soakPeerCommand(exe),
		Progress:    func(s string) { fmt.Fprintln(stderr, s) },
		Logger:      log,
	}
	if o.procs == 0 {
		cfg.PeerCommand = nil
	}
	ms, err := startMetrics(o.metrics, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ms.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("-metrics: %w", cerr)
		}
	}()
	cfg.OnEngine = ms.addEngine
	rep, err := soak.Run(ctx, cfg)
	if err != nil {
		return err
	}
	// The soak's engines open emulated devices only (package soak), and
	// every gxfer output labels an emulated device as such.
	fmt.Fprintln(stdout, "devices: emulated Gaudis (dma/hlsim) in this process and its peers, not real hardware")
	rep.Write(stdout)
	if !rep.OK() {
		return errSoakFailed
	}
	return nil
}

// soakPeerCommand starts this program as a soak peer.
var soakPeerCommand = func(exe string) func() *exec.Cmd {
	return func() *exec.Cmd { return exec.Command(exe, "soak", "-peer") }
}
