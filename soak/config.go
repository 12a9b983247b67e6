// Package soak is gxfer's chaos and soak workload: several processes and
// engines move verified data over unix sockets and TCP (and TCP between
// network namespaces the run creates, when it runs as root) while faults
// are injected at random. It checks that every byte an operation reports
// moved is right, that every operation ends (within a bound) with success
// or a typed error that a fault explains, and that goroutines, fds,
// mappings and heap return to their baseline, in this process and in the
// peers. Run builds a Report; gxfer soak and the package's test run it.
//
// Every load loop is bounded in count and time and stops by itself; all
// traffic stays on loopback or inside the namespaces the run creates.
package soak

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/engine"
)

// Fault is a kind of fault the soak injects.
type Fault string

// Faults.
const (
	FaultCSHang    Fault = "cs-hang"    // the next CS of an emulated Gaudi never completes (its TDR ends it)
	FaultCSAbort   Fault = "cs-abort"   // the next CS ends ABORTED
	FaultCSReset   Fault = "cs-reset"   // the device resets now
	FaultPeerKill  Fault = "peer-kill"  // a peer process is SIGKILLed, then started again
	FaultLinkDown  Fault = "link-down"  // the veth of a peer in a network namespace goes down, then up
	FaultStaleKey  Fault = "stale-key"  // the owner frees an allocation (and allocates again); a Put with the old key must fail
	FaultCloseLoad Fault = "close-load" // an engine is closed while goroutines copy through it
	FaultHostile   Fault = "hostile"    // raw connections that send garbage, nothing, or only a Hello
	FaultTimeout   Fault = "timeout"    // a device-to-device copy with a deadline too short for the queued work
)

// AllFaults lists every fault kind, in report order.
var AllFaults = []Fault{FaultCSHang, FaultCSAbort, FaultCSReset, FaultPeerKill, FaultLinkDown,
	FaultStaleKey, FaultCloseLoad, FaultHostile, FaultTimeout}

// ParseFaults parses a comma-separated list of fault kinds ("all" or ""
// for every kind, "none" for none).
func ParseFaults(s string) ([]Fault, error) {
	switch strings.TrimSpace(s) {
	case "", "all":
		return slices.Clone(AllFaults), nil
	case "none":
		return []Fault{}, nil
	}
	var out []Fault
	for _, f := range strings.Split(s, ",") {
		k := Fault(strings.TrimSpace(f))
		if !slices.Contains(AllFaults, k) {
			return nil, fmt.Errorf("unknown fault %q (want one of %s, all or none)", f, joinFaults(AllFaults))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

func joinFaults(fs []Fault) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

// Config is a soak run.
type Config struct {
	Duration time.Duration // load phase; default 20 s
	Seed     int64         // drives every random choice; 0 picks one from the clock (reported)
	Procs    int           // peer processes; default 2
	Workers  int           // load goroutines of this process; default 4, at most 64 (MaxPeerWorkers with peers)
	// Faults to inject (nil: all; each one of AllFaults). FaultEvery is the mean time between
	// two injections; default 250 ms.
	Faults     []Fault
	FaultEvery time.Duration
	// MaxOp is the largest transfer; default 256 KiB (some ops use
	// up to 4x it on device memory).
	MaxOp int
	// Netns: "auto" (default: used when running as root with iproute2),
	// "off", or "on" (an error when it cannot be set up).
	Netns string
	// PeerCommand returns the command that starts a peer process: this
	// program again, in a mode that calls PeerMain (the soak adds the
	// environment that says so). Required when Procs > 0.
	PeerCommand func() *exec.Cmd
	// Bound is how long any operation may take to end; default 30 s.
	Bound time.Duration
	// Progress, if set, gets a line every ProgressEvery (default 10 s).
	Progress      func(string)
	ProgressEvery time.Duration
	Logger        zerolog.Logger
	// OnEngine, if set, is called with this process's engine once it is
	// open, before the load starts (e.g. to register a metrics collector
	// of it); the engine is closed before Run returns.
	OnEngine func(*engine.Engine)
}

func (c *Config) defaults() error {
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano() & (1<<53 - 1)
	}
	if c.Procs < 0 || c.Procs > 16 {
		return fmt.Errorf("soak: procs %d (want 0..16)", c.Procs)
	}
	if c.Procs == 0 && c.PeerCommand != nil {
		c.Procs = 2
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Workers > 64 {
		return fmt.Errorf("soak: workers %d (want 1..64)", c.Workers)
	}
	if c.Procs > 0 && c.Workers > MaxPeerWorkers {
		return fmt.Errorf("soak: workers %d with peer processes (want 1..%d: each peer's Gaudi holds %d MiB per worker)",
			c.Workers, MaxPeerWorkers, slotsPerWorker*slotSize>>20)
	}
	if c.Faults == nil {
		c.Faults = slices.Clone(AllFaults)
	}
	for _, f := range c.Faults {
		if !slices.Contains(AllFaults, f) {
			return fmt.Errorf("soak: unknown fault %q (want one of %s)", f, joinFaults(AllFaults))
		}
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 250 * time.Millisecond
	}
	if c.MaxOp <= 0 {
		c.MaxOp = 256 << 10
	}
	if c.MaxOp > slotSize/4 {
		return fmt.Errorf("soak: max op %d (want at most %d)", c.MaxOp, slotSize/4)
	}
	switch c.Netns {
	case "":
		c.Netns = "auto"
	case "auto", "on", "off":
	default:
		return fmt.Errorf("soak: netns %q (want auto, on or off)", c.Netns)
	}
	if c.Procs > 0 && c.PeerCommand == nil {
		return fmt.Errorf("soak: %d peer processes but no PeerCommand", c.Procs)
	}
	if c.Bound <= 0 {
		c.Bound = 30 * time.Second
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 10 * time.Second
	}
	return nil
}

func (c *Config) wants(f Fault) bool { return slices.Contains(c.Faults, f) }

// Timing of the engines the soak runs: short enough that every fault
// ends its operations within a few seconds.
const (
	csTimeout   = 2 * time.Second // the emulated TDR
	peerTimeout = 5 * time.Second // silence that fails an endpoint
	closeGrace  = time.Second

	// slotSize is one worker's slot in a peer's exported buffers;
	// slots per worker let a worker retire a slot a failed operation
	// may still write.
	slotSize       = 4 << 20
	slotsPerWorker = 3
	roSize         = 4 << 20

	// emulatedDRAM is the device memory of every emulated Gaudi of the
	// soak.
	emulatedDRAM = 512 << 20
)

// MaxPeerWorkers is the most Workers a run with peer processes takes:
// every worker has its slots in each peer's read-write Gaudi buffer,
// which one emulated device holds (with room left for the stale-key
// probes and the engine's own allocations).
const MaxPeerWorkers = (emulatedDRAM - 32<<20) / (slotsPerWorker * slotSize)

// engineConfig is the configuration of every engine of the soak.
func engineConfig(devices int, log zerolog.Logger) engine.Config {
	return engine.Config{
		Logger:        log,
		Devices:       engine.DevicesEmulated,
		EmulatedCount: devices,
		Emulator:      engine.EmulatorConfig{DRAMSize: emulatedDRAM, CSTimeout: csTimeout},
		CloseGrace:    closeGrace,
		PeerTimeout:   peerTimeout,
		RDMA:          engine.RDMAConfig{Disabled: true},
		Transport:     engine.TransportTCP,
	}
}
