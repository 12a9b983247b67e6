// Command gxfer inspects and measures gxfer's data paths.
//
//	gxfer info [flags]   devices, memory domains, transports and caches (like ucx_info -d)
//	gxfer perf [flags]   copy bandwidth and latency (like ucx_perftest, ib_write_bw);
//	                     -agent: named agents and the KV-cache workload (like nixlbench)
//	gxfer soak [flags]   the chaos and soak workload: verified transfers under injected faults
//	gxfer agents -etcd URL  the live agents of a cluster and their sections
//	gxfer help [command]
//
// On a machine without a Gaudi, the emulated device of package dma/hlsim
// stands in, and every output says so.
//
// Exit status: 0 on success, 2 for a usage error (one line on stderr), 1
// for a runtime error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/engine"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// usageError is a bad flag or an impossible combination: one line on
// stderr and exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// command is a subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	usage   func(w io.Writer)
}

func commands() []command {
	return []command{
		{"info", "show devices, memory domains, transports and caches (like ucx_info -d)", runInfo, infoUsage},
		{"perf", "measure copy bandwidth and latency (like ucx_perftest, ib_write_bw)", runPerf, perfUsage},
		{"soak", "run the chaos and soak workload: verified transfers under injected faults", runSoak, soakUsage},
		{"agents", "list the live agents of a cluster, their addresses and sections (from etcd)", runAgents, agentsUsage},
	}
}

// commandNames lists the commands' names, joined by sep.
func commandNames(sep string) string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, sep)
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run is the whole program: main calls it with the process's arguments and
// streams; tests call it in-process. It returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "gxfer: missing command (%s or help); run 'gxfer help'\n", commandNames(", "))
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return runHelp(rest, stdout, stderr)
	}
	cmd, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "gxfer: unknown command %q (want %s or help); run 'gxfer help'\n", name, commandNames(", "))
		return exitUsage
	}
	err := cmd.run(ctx, rest, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		cmd.usage(stdout)
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gxfer %s: %s (run 'gxfer help %s')\n", name, oneLine(ue.msg), name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "gxfer %s: %s\n", name, oneLine(err.Error()))
		return exitRuntime
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		mainUsage(stdout)
		return exitOK
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "gxfer help: too many arguments; want 'gxfer help [%s]'\n", commandNames("|"))
		return exitUsage
	}
	cmd, ok := lookupCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "gxfer help: unknown command %q (want %s)\n", args[0], commandNames(", "))
		return exitUsage
	}
	cmd.usage(stdout)
	return exitOK
}

func mainUsage(w io.Writer) {
	fmt.Fprint(w, `gxfer moves data between host memory, Intel Gaudi memory and peers.

Usage:
  gxfer <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-6s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help   show help for a command: gxfer help perf

Without a Gaudi on the machine, an emulated device (dma/hlsim) stands in
and every output marks it "emulated".

Exit status: 0 ok, 1 runtime error, 2 usage error.
`)
}

// commonFlags are the device flags every command takes.
type commonFlags struct {
	devices  string
	emulated int
	model    string
	kernel   string
	verbose  bool
	set      map[string]bool // flags given on the command line
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.devices, "devices", "auto", "devices to open: auto (real Gaudis, else emulated), emulated, none")
	fs.IntVar(&c.emulated, "emulated", 1, "number of emulated devices to open (implies -devices emulated unless -devices is given)")
	fs.StringVar(&c.model, "model", "gaudi2", "model of emulated devices: gaudi1, gaudi2 or gaudi3")
	fs.StringVar(&c.kernel, "kernel", "6.8", "kernel uAPI generation emulated devices present: 6.1 and later")
	fs.BoolVar(&c.verbose, "v", false, "log engine events to stderr")
}

const maxEmulated = 8

var kernelRE = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

// engineDefaults are the engine settings gxfer passes explicitly (they are
// engine.Config's documented defaults), so that info can report them.
func engineDefaults() engine.Config {
	return engine.Config{
		QueueDepth:      4096,
		QueueFull:       engine.WaitForRoom,
		Workers:         4*runtime.GOMAXPROCS(0) + 8,
		InlineHostMax:   64 << 10,
		ParallelCopyMin: 4 << 20,
		CBSize:          64 << 10,
		MaxOpsPerCS:     1024,
		ChunkSize:       4 << 20,
		PollSpin:        50 * time.Microsecond,
		WaitSpin:        20 * time.Microsecond,
		CloseGrace:      2 * time.Second,
		Emulator: engine.EmulatorConfig{
			DRAMSize:  4 << 30,
			CSTimeout: 30 * time.Second,
		},
	}
}

// config checks the device flags and builds the engine configuration.
func (c *commonFlags) config(stderr io.Writer) (engine.Config, error) {
	cfg := engineDefaults()
	switch strings.ToLower(c.devices) {
	case "auto":
		cfg.Devices = engine.DevicesAuto
		if c.set["emulated"] && !c.set["devices"] {
			cfg.Devices = engine.DevicesEmulated
		}
	case "emulated":
		cfg.Devices = engine.DevicesEmulated
	case "none":
		cfg.Devices = engine.DevicesNone
		for _, f := range []string{"emulated", "model", "kernel"} {
			if c.set[f] {
				return cfg, usagef("-%s needs emulated devices, but -devices is none", f)
			}
		}
	default:
		return cfg, usagef("bad -devices %q (want auto, emulated or none)", c.devices)
	}
	if c.emulated < 1 || c.emulated > maxEmulated {
		return cfg, usagef("bad -emulated %d (want 1..%d)", c.emulated, maxEmulated)
	}
	switch m := strings.ToLower(c.model); m {
	case "gaudi1", "gaudi2", "gaudi3":
		cfg.Emulator.Model = m
	case "gaudi":
		cfg.Emulator.Model = "gaudi1"
	default:
		return cfg, usagef("bad -model %q (want gaudi1, gaudi2 or gaudi3)", c.model)
	}
	if !kernelRE.MatchString(c.kernel) {
		return cfg, usagef("bad -kernel %q (want a release such as 6.8 or 6.1)", c.kernel)
	}
	if hlsim.CheckKernel(c.kernel) != nil {
		return cfg, usagef("bad -kernel %q (want 6.1 or later: older uAPI generations are not emulated)", c.kernel)
	}
	cfg.Emulator.Kernel = c.kernel
	cfg.EmulatedCount = c.emulated
	cfg.Logger = zerolog.Nop()
	if c.verbose {
		cw := zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05", NoColor: !stderrIsTerminal(stderr)}
		cfg.Logger = zerolog.New(cw).
			Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	return cfg, nil
}

// parseFlags parses a command's flags: a bad flag or a stray argument is a
// usage error; -h is flag.ErrHelp.
// It returns the names of the flags given.
func parseFlags(fs *flag.FlagSet, args []string, common *commonFlags) (map[string]bool, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usagef("%s", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags come as -name value)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if common != nil {
		common.set = set
	}
	return set, nil
}

// refuseEmpty is a usage error for the first of names given with an
// empty value (an unset shell variable, say): for these flags an empty
// value would silently mean the default (no file, no server, every
// fault), not what was asked.
func refuseEmpty(fs *flag.FlagSet, set map[string]bool, names ...string) error {
	for _, n := range names {
		if set[n] && strings.TrimSpace(fs.Lookup(n).Value.String()) == "" {
			return usagef("-%s: empty value (leave the flag out for its default)", n)
		}
	}
	return nil
}

// printDefaults writes a flag set's flags like flag.PrintDefaults.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// openEngine opens the engine for cfg, with a clear error when nothing
// could be opened.
func openEngine(cfg engine.Config) (*engine.Engine, error) {
	eng, err := engine.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open engine: %w", err)
	}
	return eng, nil
}
