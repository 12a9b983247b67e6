package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gxfer/gxfer/engine"
)

// Mem is a memory type, one end of a test.
type Mem string

// Memory types.
const (
	Host  Mem = "host"  // host memory allocated by the engine
	Gaudi Mem = "gaudi" // Gaudi device memory (HBM)
)

// ParseMem parses a memory type name: host, or gaudi (also device, hbm).
func ParseMem(s string) (Mem, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "host", "h":
		return Host, nil
	case "gaudi", "device", "hbm", "d":
		return Gaudi, nil
	}
	return "", fmt.Errorf("unknown memory type %q (want host or gaudi)", s)
}

// Transport is a way of moving bytes that tests run over. A transport
// that is known but cannot be used in this build or on this machine is
// registered with the reason in Unavailable.
type Transport struct {
	Name        string // "local", "ipc", "rdma", "tcp"
	Label       string // how table headers name it; "" means Name
	Desc        string // one line
	Unavailable string // why the transport cannot be used; "" if it can
}

// TransportLabel is how table headers name a transport: "ipc (unix
// socket, shared memfd)".
func TransportLabel(name string) string {
	for _, t := range Transports() {
		if t.Name == name && t.Label != "" {
			return t.Label
		}
	}
	return name
}

// Available reports whether tests can run over the transport.
func (t Transport) Available() bool { return t.Unavailable == "" }

// Env is what tests run against: the engine, the device under test and
// the transport.
type Env struct {
	Engine    *engine.Engine
	Device    int    // Gaudi index used by tests that touch device memory
	Transport string // transport name; "" means "local"

	// Peer is the server of the tests over a peer transport (ipc, tcp, rdma):
	// nil for local tests. See DialPeer.
	Peer *Peer
	// Local and Remote are the memory types of the peer tests: this
	// process's buffer and the peer's (ucx_perftest -m send,recv). Empty
	// means host.
	Local, Remote Mem
}

func (e *Env) local() Mem {
	if e.Local == "" {
		return Host
	}
	return e.Local
}

func (e *Env) remote() Mem {
	if e.Remote == "" {
		return Host
	}
	return e.Remote
}

func (e *Env) transport() string {
	if e.Transport == "" {
		return "local"
	}
	return e.Transport
}

// Workload is one test prepared for one message size: its buffers are
// allocated once and reused by every iteration.
type Workload interface {
	// Submit starts n messages (n copies of the message size) as one
	// submission and returns the future that resolves when all are done.
	Submit(ctx context.Context, n int) *engine.Future
	// Verify checks, once the run is over, that the destination holds the
	// source's bytes, so that no number is reported for a copy that did not
	// move them.
	Verify(ctx context.Context) error
	// Close releases the buffers.
	Close() error
}

// PeerEnd says which end of a peer test is the peer's memory.
type PeerEnd string

const (
	NoPeer  PeerEnd = ""    // a local test: both ends are this process's
	PeerDst PeerEnd = "dst" // puts: the destination is the peer's memory
	PeerSrc PeerEnd = "src" // gets: the source is the peer's memory
)

// Test is a workload definition: a named transfer between two memory
// types over a transport.
type Test struct {
	Name      string // short name, unique: "h2d"
	Transport string // transport it runs over: "local"
	// AlsoOver lists further transports the test runs over (the peer
	// tests run over ipc and tcp); TestsFor sets Transport to the run's.
	AlsoOver []string
	// Src and Dst are the memory types of the ends. For a peer test they
	// are bound from Env.Local and Env.Remote by TestsFor.
	Src, Dst Mem
	Desc     string // one line
	// Peer is the end of a peer test that lives in the peer process.
	Peer PeerEnd
	// Latency marks a latency test: it always runs with one operation in
	// flight (window and batch 1), whatever the run's parameters.
	Latency bool

	// Prepare allocates the buffers for one message size, fills the source
	// with a pattern and the destination with something else.
	Prepare func(ctx context.Context, env *Env, size int) (Workload, error)

	// checkSize, if set, reports why the test cannot run at a message size
	// in env: NewReport refuses the run before anything is measured.
	checkSize func(env *Env, size int) error
}

// NeedsDevice reports whether the test touches this process's Gaudi
// memory (the peer's memory is the peer's business).
func (t Test) NeedsDevice() bool {
	return (t.Src == Gaudi && t.Peer != PeerSrc) || (t.Dst == Gaudi && t.Peer != PeerDst)
}

// NeedsPeerDevice reports whether the test touches the peer's Gaudi memory.
func (t Test) NeedsPeerDevice() bool {
	return (t.Src == Gaudi && t.Peer == PeerSrc) || (t.Dst == Gaudi && t.Peer == PeerDst)
}

// LocalMem and RemoteMem are the memory types of a peer test's ends.
func (t Test) LocalMem() Mem {
	if t.Peer == PeerSrc {
		return t.Dst
	}
	return t.Src
}

// RemoteMem is the memory type of the peer's end (Host for a local test).
func (t Test) RemoteMem() Mem {
	switch t.Peer {
	case PeerSrc:
		return t.Src
	case PeerDst:
		return t.Dst
	}
	return Host
}

// RunsOver reports whether the test runs over the named transport.
func (t Test) RunsOver(transport string) bool {
	return t.Transport == transport || slices.Contains(t.AlsoOver, transport)
}

// bind sets a peer test's memory types, and its transport, from env.
func (t Test) bind(env *Env) Test {
	if tr := env.transport(); tr != t.Transport && t.RunsOver(tr) {
		t.Transport = tr
	}
	switch t.Peer {
	case PeerDst:
		t.Src, t.Dst = env.local(), env.remote()
	case PeerSrc:
		t.Src, t.Dst = env.remote(), env.local()
	}
	return t
}

// Check reports why the test cannot run in env, or nil if it can.
func (t Test) Check(env *Env) error {
	if env == nil || env.Engine == nil {
		return errors.New("no engine")
	}
	if !t.RunsOver(env.transport()) {
		if t.Peer != NoPeer && env.transport() == "local" {
			return fmt.Errorf("test %s needs a peer: start 'gxfer perf -server -x unix:PATH' (or -x tcp:HOST:PORT, -x rdma:HOST:PORT) and give the client the same -x", t.Name)
		}
		return fmt.Errorf("test %s runs over transport %s, not %s", t.Name, t.Transport, env.transport())
	}
	if t.Peer != NoPeer {
		if env.Peer == nil {
			return fmt.Errorf("test %s needs a peer and none is connected", t.Name)
		}
		if t.NeedsPeerDevice() {
			if err := env.Peer.checkDevice(); err != nil {
				return fmt.Errorf("test %s: %w", t.Name, err)
			}
		}
	}
	if t.NeedsDevice() {
		n := env.Engine.NumDevices()
		if n == 0 {
			return fmt.Errorf("test %s needs a Gaudi device and none is open", t.Name)
		}
		if env.Device < 0 || env.Device >= n {
			return fmt.Errorf("test %s: device %d does not exist (%d open: 0..%d)", t.Name, env.Device, n, n-1)
		}
	}
	return nil
}

// Path describes the test's direction for humans: "host -> gaudi0", or
// "host -> peer gaudi0" for a peer test.
func (t Test) Path(env *Env) string {
	src, dst := memName(t.Src, env), memName(t.Dst, env)
	switch t.Peer {
	case PeerSrc:
		src = "peer " + peerMemName(t.Src, env)
	case PeerDst:
		dst = "peer " + peerMemName(t.Dst, env)
	}
	return src + " -> " + dst
}

func peerMemName(m Mem, env *Env) string {
	if m == Gaudi && env != nil && env.Peer != nil {
		return fmt.Sprintf("gaudi%d", env.Peer.Device)
	}
	return string(m)
}

func memName(m Mem, env *Env) string {
	if m == Gaudi {
		return fmt.Sprintf("gaudi%d", env.Device)
	}
	return string(m)
}

var registry struct {
	mu         sync.Mutex
	tests      []Test
	transports []Transport
}

// Register adds a test. It panics on a duplicate name or a missing
// Prepare: registration happens at init time.
func Register(t Test) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if t.Name == "" || t.Prepare == nil || t.Transport == "" {
		panic("bench: Register: test needs a name, a transport and Prepare")
	}
	for _, o := range registry.tests {
		if o.Name == t.Name {
			panic("bench: Register: duplicate test " + t.Name)
		}
	}
	registry.tests = append(registry.tests, t)
}

// RegisterTransport adds a transport (available or not). It panics on a
// duplicate name.
func RegisterTransport(t Transport) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, o := range registry.transports {
		if o.Name == t.Name {
			panic("bench: RegisterTransport: duplicate transport " + t.Name)
		}
	}
	registry.transports = append(registry.transports, t)
}

// Tests returns the registered tests in registration order; with a
// transport name, only that transport's tests.
func Tests(transport string) []Test {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	var out []Test
	for _, t := range registry.tests {
		if transport == "" || t.RunsOver(transport) {
			out = append(out, t)
		}
	}
	return out
}

// LookupTest finds a test by name.
func LookupTest(name string) (Test, bool) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	i := slices.IndexFunc(registry.tests, func(t Test) bool { return t.Name == name })
	if i < 0 {
		return Test{}, false
	}
	return registry.tests[i], true
}

// Transports returns the registered transports, available or not.
func Transports() []Transport {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return slices.Clone(registry.transports)
}

// rdmaNoEngine is the rdma transport's reason until NoteRDMA has been
// told what an engine found.
const rdmaNoEngine = "no engine open yet: whether RDMA can be used is the engine's RDMA device (Engine.RDMA)"

// NoteRDMA makes the rdma transport available, or unavailable with the
// engine's reason, according to an engine's RDMA context (eng.RDMA()):
// call it once the engine is open, before LookupTransport("rdma").
func NoteRDMA(info engine.RDMAInfo) {
	why := ""
	if !info.Available {
		why = info.Reason
		if why == "" {
			why = "the engine has no RDMA device"
		}
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for i := range registry.transports {
		if registry.transports[i].Name == "rdma" {
			registry.transports[i].Unavailable = why
		}
	}
}

// RDMADevice describes an engine's RDMA device in one line ("rxe0 port 1,
// Ethernet (RoCE), GID[0] fe80::..., MTU 4096"), or "" without one.
func RDMADevice(info engine.RDMAInfo) string {
	if !info.Available {
		return ""
	}
	return fmt.Sprintf("%s port %d, %s, GID[%d] %s, MTU %d", info.Device, info.Port, info.LinkLayer, info.GIDIndex, info.GID, info.MTU)
}

// CQModeString names an RDMA completion queue mode: "event (sleeps in
// the netpoller)", "spin 50us, then event", "busy-poll".
func CQModeString(c engine.RDMAConfig) string {
	switch {
	case c.CQBusyPoll:
		return "busy-poll"
	case c.CQSpin > 0:
		return fmt.Sprintf("spin %v, then event", c.CQSpin)
	}
	return "event (sleeps in the netpoller)"
}

// ErrUnavailable is returned (wrapped) by LookupTransport for a transport
// that exists but cannot be used.
var ErrUnavailable = errors.New("unavailable")

// LookupTransport finds a usable transport. Unknown names and unavailable
// transports are errors that say why.
func LookupTransport(name string) (Transport, error) {
	for _, t := range Transports() {
		if t.Name != name {
			continue
		}
		if !t.Available() {
			return t, fmt.Errorf("transport %s is %w (%s)", name, ErrUnavailable, t.Unavailable)
		}
		return t, nil
	}
	var names []string
	for _, t := range Transports() {
		names = append(names, t.Name)
	}
	return Transport{}, fmt.Errorf("unknown transport %q (known: %s)", name, strings.Join(names, ", "))
}

// TestsFor resolves a comma-separated list of test names for env; an empty
// list means every registered test of env's transport that can run in env
// (device tests are left out when no device is open). Named tests that
// cannot run are errors.
func TestsFor(env *Env, list string) ([]Test, error) {
	if strings.TrimSpace(list) == "" {
		var out []Test
		for _, t := range Tests(env.transport()) {
			t = t.bind(env)
			if t.Check(env) == nil {
				out = append(out, t)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no test can run over transport %s here", env.transport())
		}
		return out, nil
	}
	var out []Test
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		t, ok := LookupTest(name)
		if !ok {
			var names []string
			for _, t := range Tests("") {
				names = append(names, t.Name)
			}
			return nil, fmt.Errorf("unknown test %q (known: %s)", name, strings.Join(names, ", "))
		}
		t = t.bind(env)
		if err := t.Check(env); err != nil {
			return nil, err
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, t)
		}
	}
	return out, nil
}

// TestFor finds the test of env's transport copying from src to dst.
func TestFor(env *Env, src, dst Mem) (Test, error) {
	for _, t := range Tests(env.transport()) {
		if t.Peer == NoPeer && t.Src == src && t.Dst == dst {
			return t, t.Check(env)
		}
	}
	return Test{}, fmt.Errorf("no test copies %s -> %s over transport %s", src, dst, env.transport())
}
