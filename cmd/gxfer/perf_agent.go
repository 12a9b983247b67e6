package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
)

const perfAgentUsage = `
Agent mode (-agent), like nixlbench: named agents (package agent) and the
KV-cache workload. Targets offer a section named -section; initiators find
their target by name (-peer) in etcd (-etcd) and run -requests requests,
each a write of -blocks blocks of -block-size bytes to scattered slots of
the target's section (a random permutation, fixed per run by -seed) with a
notification. The target checks the bytes of a request when its
notification arrives (each request has its own pattern; -verify=false
skips the check and the initiator's fill) and acknowledges it (a
request whose bytes are not in place ends its initiator's run, exit 1,
and the target exits 1 once it ends); -O requests are in flight at most. The section has -initiators x -O x
-blocks slots: each initiator the target welcomes writes a region of its
own (initiators and target take the same -blocks, -block-size and -O); a
hello while every region is in use is dropped, and that initiator gives
up after -wait. A target answers 64 hellos at once, 16 from one host (a
local peer: one process) and one per initiator; an initiator whose
welcome failed (that run of it) is not answered again. A welcomed initiator that sends no request within the
target's -wait has ended (its region freed; that run of it is not
welcomed again); one that ends before any request measured nothing and
does not count toward -initiators.
Reports: the initiator's requests/s and GB/s, the CPU cost of posting a
request's descriptors (prepared once, posted by index) and the post to
acknowledgement time; the target's requests/s, GB/s and notification
latency (post to notified; the hosts' clocks must agree across hosts).
-m local,section gives the initiator's source memory and the target's
section memory (host or gaudi; emulated devices are labelled so).

  gxfer perf -agent -etcd http://10.0.0.1:2379 -role target -name decode-0 -tcp 10.0.0.2:0 -m host,gaudi
  gxfer perf -agent -etcd http://10.0.0.1:2379 -role initiator -name prefill-0 -tcp 10.0.0.3:0 -peer decode-0 \
      -workload kvcache -blocks 64 -block-size 64K -requests 1000 -O 4
  gxfer perf -agent                        # both roles in this process, over a unix socket, no etcd
  gxfer perf -agent -via tcp -m host,gaudi -requests 200

Without -etcd and -role, a target and an initiator run in this process
(each with its own engine) and find each other over the agents' side
channel (-via unix or tcp). With -role but no -etcd, the initiator reaches
the target at -connect ADDR (its unix socket or host:port). An initiator
must be reachable by its target (it listens at -unix or -tcp; in this
process's temporary directory by default) for the acknowledgements;
without -etcd, a target reaches an initiator whose hello came over TCP
only at its -tcp address, and only if that is the IP address its
connection comes from (no NAT between them).
`

type agentPerfOpts struct {
	on                bool
	etcd, prefix      string
	role, name, peer  string
	connect           string
	workload, section string
	blocks, requests  int
	blockSize         string
	unix, tcp, via    string
	ttl, wait         time.Duration
	verify            bool
	seed              uint64
	initiators        int
}

func (o *agentPerfOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.on, "agent", false, "agent mode: named agents and the KV-cache workload (see Agent mode)")
	fs.StringVar(&o.etcd, "etcd", "", "agent mode: etcd client `URLs` (comma-separated) where agents publish and find each other")
	fs.StringVar(&o.prefix, "prefix", "/gxfer/agents/", "agent mode: etcd key prefix")
	fs.StringVar(&o.role, "role", "", "agent mode: target or initiator (default: both, in this process)")
	fs.StringVar(&o.name, "name", "", "agent mode: this agent's name (default: the role and the pid)")
	fs.StringVar(&o.peer, "peer", "", "agent mode, initiator: the target's name (default with -etcd: the first agent offering -section)")
	fs.StringVar(&o.connect, "connect", "", "agent mode, initiator without -etcd: the target's unix socket or host:port")
	fs.StringVar(&o.workload, "workload", "kvcache", "agent mode: the workload (kvcache)")
	fs.StringVar(&o.section, "section", "kv", "agent mode: the target's section name")
	fs.IntVar(&o.blocks, "blocks", 64, "agent mode: blocks per request")
	fs.StringVar(&o.blockSize, "block-size", "64K", "agent mode: bytes per block (a multiple of 8; K, M suffixes)")
	fs.IntVar(&o.requests, "requests", 1000, "agent mode, initiator: requests to run")
	fs.StringVar(&o.unix, "unix", "", "agent mode: the unix socket to listen at")
	fs.StringVar(&o.tcp, "tcp", "", "agent mode: the host:port to listen at (port 0: any), published to peers")
	fs.StringVar(&o.via, "via", "unix", "agent mode in one process: unix or tcp (127.0.0.1)")
	fs.DurationVar(&o.ttl, "ttl", 10*time.Second, "agent mode: etcd lease TTL (how long a dead agent's record outlives it)")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "agent mode: how long to wait: an initiator for the target to appear, for its welcome, and for each acknowledgement (none within it: exit 1, naming the requests not acknowledged); a target for each request of a welcomed initiator (none within it: that initiator has ended, its region freed)")
	fs.BoolVar(&o.verify, "verify", true, "agent mode: fill each request with its own pattern and check it at the target")
	fs.Uint64Var(&o.seed, "seed", 0, "agent mode, initiator: the permutation's and patterns' seed (default: random; each request carries it to the target)")
	fs.IntVar(&o.initiators, "initiators", 1, "agent mode, target: exit after this many initiators ended having had a request measured (one that leaves before any is not counted; 0: serve until interrupted)")
}

// agentOnly are the flags that mean something only with -agent.
var agentOnly = []string{"etcd", "prefix", "role", "name", "peer", "connect", "workload", "section", "blocks",
	"block-size", "requests", "unix", "tcp", "via", "ttl", "wait", "verify", "seed", "initiators"}

// agentPlan is a checked agent mode command line.
type agentPlan struct {
	eps               []string
	bsize             int
	local, sectionMem bench.Mem
	window            int
}

// maxSlots bounds -O x -blocks: the slots of an initiator's region, each
// a descriptor it prepares.
const maxSlots = 1 << 20

func (o *perfOpts) checkAgent(set map[string]bool) (agentPlan, error) {
	a := &o.agent
	var pl agentPlan
	for _, f := range []string{"t", "s", "sweep", "n", "time", "w", "b", "count", "x", "server", "once", "json", "csv", "benchfmt", "plot", "clock", "tcp-spin", "tcp-lanes", "rdma-cq", "q"} {
		if set[f] {
			return pl, usagef("-%s has no meaning with -agent", f)
		}
	}
	if a.workload != "kvcache" {
		return pl, usagef("bad -workload %q (want kvcache)", a.workload)
	}
	if set["etcd"] {
		eps, err := parseEtcd(a.etcd)
		if err != nil {
			return pl, err
		}
		pl.eps = eps
		if a.prefix == "" { // as gxfer agents: etcdmeta would take its default instead
			return pl, usagef("-prefix must not be empty")
		}
	} else {
		for _, f := range []string{"prefix", "ttl"} {
			if set[f] {
				return pl, usagef("-%s needs -etcd (without it no record is published)", f)
			}
		}
	}
	switch a.role {
	case "":
		if set["etcd"] {
			return pl, usagef("-etcd needs -role target or -role initiator")
		}
		for _, f := range []string{"name", "peer", "connect", "unix", "tcp", "initiators"} {
			if set[f] {
				return pl, usagef("-%s needs -role (without it both roles run in this process)", f)
			}
		}
	case "target":
		for _, f := range []string{"peer", "connect", "requests", "seed"} {
			if set[f] {
				return pl, usagef("-%s is an initiator's flag", f)
			}
		}
		if a.unix == "" && a.tcp == "" {
			return pl, usagef("a target listens: give -unix PATH or -tcp HOST:PORT")
		}
	case "initiator":
		if set["initiators"] {
			return pl, usagef("-initiators is a target's flag")
		}
		if pl.eps == nil && a.connect == "" {
			return pl, usagef("an initiator finds its target in etcd (-etcd) or at -connect ADDR")
		}
		if pl.eps != nil && a.connect != "" {
			return pl, usagef("-connect and -etcd are mutually exclusive")
		}
	default:
		return pl, usagef("bad -role %q (want target or initiator)", a.role)
	}
	if set["via"] && (a.role != "" || (a.via != "unix" && a.via != "tcp")) {
		return pl, usagef("bad -via %q (want unix or tcp, without -role)", a.via)
	}
	// The names the agents would refuse (meta.CheckName: a section's name
	// follows an agent's rules) are usage errors here, before any agent
	// starts; -name and -peer may be empty (their defaults).
	for _, f := range []struct {
		flag, val string
		empty     bool
	}{{"name", a.name, true}, {"peer", a.peer, true}, {"section", a.section, false}} {
		if f.val == "" && f.empty {
			continue
		}
		if err := meta.CheckName(f.val); err != nil {
			if len(f.val) > meta.MaxName {
				return pl, usagef("bad -%s: at most %d bytes", f.flag, meta.MaxName)
			}
			return pl, usagef("bad -%s %q (want 1..%d bytes of UTF-8 without control characters)", f.flag, f.val, meta.MaxName)
		}
	}
	bs, err := bench.ParseSize(a.blockSize)
	switch {
	case err != nil:
		return pl, usagef("bad -block-size %q: %v", a.blockSize, err)
	case bs < 8 || bs%8 != 0 || bs > 64<<20:
		return pl, usagef("bad -block-size %q (want a multiple of 8 bytes, at most 64M)", a.blockSize)
	case a.blocks < 1 || a.blocks > 1<<16:
		return pl, usagef("bad -blocks %d (want 1..65536)", a.blocks)
	case a.requests < 1:
		return pl, usagef("bad -requests %d (want 1 or more)", a.requests)
	case o.window < 1 || o.window > 1024:
		return pl, usagef("bad -O %d (want 1..1024 requests in flight)", o.window)
	case o.window*a.blocks > maxSlots:
		// An initiator prepares a descriptor per slot (about 1 KiB each).
		return pl, usagef("bad -O %d with -blocks %d: -O x -blocks is at most %d descriptors", o.window, a.blocks, maxSlots)
	case a.ttl < time.Second:
		return pl, usagef("bad -ttl %v (want 1s or more)", a.ttl)
	case a.wait <= 0:
		return pl, usagef("bad -wait %v", a.wait)
	case a.initiators < 0:
		return pl, usagef("bad -initiators %d", a.initiators)
	case o.device < 0:
		return pl, usagef("bad -d %d (want a device index, 0 or more)", o.device)
	}
	// The target's section holds a region per initiator (setupTarget);
	// the per-region product is at most 2^52 here, and the division keeps
	// -initiators from overflowing it.
	const maxSection = 16 << 30
	if region := int64(bs) * int64(a.blocks) * int64(o.window); region > maxSection || int64(max(1, a.initiators)) > maxSection/region {
		return pl, usagef("the section would exceed 16 GiB (-initiators x -O x -blocks x -block-size)")
	}
	pl.bsize, pl.window = bs, o.window
	pl.local, pl.sectionMem = bench.Host, bench.Host
	if set["m"] {
		if pl.local, pl.sectionMem, err = o.memTypes(); err != nil {
			return pl, err
		}
	}
	return pl, nil
}

// perfAgent is one agent of a perf run with its engine and store.
type perfAgent struct {
	eng *engine.Engine
	a   *agent.Agent
}

func (p *perfAgent) close() error {
	var err error
	if p.a != nil {
		err = p.a.Close()
	}
	return errors.Join(err, p.eng.Close())
}

// newPerfAgent starts an agent of a perf run; a target without a store,
// which Connects at the addresses its initiators' hellos name, sets
// untrusted: a record it fetches over TCP then names no unix socket it
// would dial (agent.Config.NoUnixFromTCP, dialBack).
func newPerfAgent(ctx context.Context, cfg engine.Config, name, unix, tcp string, store meta.Store, untrusted bool, log zerolog.Logger) (*perfAgent, error) {
	eng, err := openEngine(cfg)
	if err != nil {
		if store != nil {
			store.Close()
		}
		return nil, err
	}
	a, err := agent.New(ctx, agent.Config{Name: name, Engine: eng, Unix: unix, TCP: tcp, Store: store, NoUnixFromTCP: untrusted, Logger: log})
	if err != nil {
		if store != nil {
			store.Close()
		}
		eng.Close()
		return nil, fmt.Errorf("start agent %q: %w", name, err)
	}
	return &perfAgent{eng: eng, a: a}, nil
}

func memLocation(m bench.Mem, dev int) engine.Location {
	if m == bench.Gaudi {
		return engine.Gaudi(dev)
	}
	return engine.Host
}

// memLabel names memory for a report: host, or the device, labelled
// emulated or real.
func memLabel(eng *engine.Engine, m bench.Mem, dev int) string {
	if m != bench.Gaudi {
		return "host"
	}
	for _, d := range bench.CurrentEnvironment(&bench.Env{Engine: eng}).Devices {
		if d.Index == dev {
			if d.Emulated {
				return fmt.Sprintf("gaudi%d %s [EMULATED: dma/hlsim]", d.Index, d.Model)
			}
			return fmt.Sprintf("gaudi%d %s [real: %s]", d.Index, d.Model, d.Name)
		}
	}
	return fmt.Sprintf("gaudi%d", dev)
}

func allocFor(eng *engine.Engine, n int, m bench.Mem, dev int) (*engine.Buffer, error) {
	if m == bench.Gaudi && dev >= eng.NumDevices() {
		return nil, usagef("-m: gaudi memory, but device %d is not open (%d open)", dev, eng.NumDevices())
	}
	b, err := eng.Alloc(n, memLocation(m, dev))
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes of %s memory: %w", n, m, err)
	}
	return b, nil
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint64(b[:]) | 1
}

func defaultName(role string) string {
	h, _ := os.Hostname()
	if h == "" {
		h = "host"
	}
	return fmt.Sprintf("%s-%s-%d", role, strings.SplitN(h, ".", 2)[0], os.Getpid())
}

// sockDir is a directory for this process's agents' sockets.
func sockDir() (string, func(), error) {
	d, err := os.MkdirTemp("", "gxperf")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}
