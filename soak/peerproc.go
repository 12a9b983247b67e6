package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// peerProc is the driver's handle on one peer process, which it may kill
// and start again (a new generation, with new keys).
type peerProc struct {
	d      *driver
	idx    int
	inNS   bool // lives in network namespace A; its TCP address is on the veth
	faults *target
	dev    [2]*target // CS faults on each of its devices (what a device reset explains)

	cmdMu sync.Mutex // one command at a time
	seq   uint64     // under cmdMu

	mu      sync.Mutex
	view    peerView
	stdin   io.WriteCloser
	lines   chan string
	exited  chan struct{}
	killing bool
	pid     int
	base    Resources
	baseFDs []string
	tail    *tailBuffer
	exitErr error
	keysSeq uint64 // the command whose keys answer the view holds
}

// afterKeysAnswer, if set (by a test), runs in refreshKeys between the
// peer's answer and its taking into the view.
var afterKeysAnswer func()

// newFDs lists the peer's descriptors that were not open at its start.
func (p *peerProc) newFDs() []string {
	a, err := p.command("fds")
	if err != nil {
		return []string{err.Error()}
	}
	p.mu.Lock()
	base := map[string]bool{}
	for _, f := range p.baseFDs {
		base[f] = true
	}
	p.mu.Unlock()
	var out []string
	for _, f := range strings.Fields(strings.TrimPrefix(a, "FDS")) {
		if !base[f] {
			out = append(out, f)
		}
	}
	return out
}

// peerView is one generation of a peer: its addresses and keys. kgen
// counts, per device of the peer, the times it exported its buffers on
// that device again after a reset of the device (new keys; the old
// ones are then refused as stale).
type peerView struct {
	gen                          int
	alive                        bool
	unix, tcp                    string
	rwHost, rwDev, roHost, roDev engine.RemoteKey
	roSeed                       uint64
	kgen                         [2]int
}

// keyGen is the key generation of the view's keys on device dev (0 for
// host memory, dev < 0).
func (v peerView) keyGen(dev int) int {
	if dev < 0 {
		return 0
	}
	return v.kgen[dev]
}

func (p *peerProc) snapshot() peerView {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view
}

const peerStartTimeout = 60 * time.Second

// start starts generation gen of the peer and waits for it to be ready.
func (p *peerProc) start(gen int, seed uint64) error {
	spec := peerSpec{
		Gen:   gen,
		Seed:  seed,
		Unix:  filepath.Join(p.d.dir, fmt.Sprintf("p%d.%d.sock", p.idx, gen)),
		TCP:   "127.0.0.1:0",
		Slots: p.d.slotsPerPeer,
	}
	if p.inNS {
		spec.TCP = p.d.ns.addrA + ":0"
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	base := p.d.cfg.PeerCommand()
	cmd := base
	if p.inNS {
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.d.ns.a, base.Path}, base.Args[1:]...)...)
		cmd.Env = base.Env
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, peerEnv+"="+string(js))
	tail := &tailBuffer{max: 8 << 10}
	cmd.Stderr = tail
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start peer %d: %w", p.idx, err)
	}
	lines := make(chan string, 16)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // an answer nobody waits for any more
			}
		}
		close(lines)
	}()
	p.d.bg.Add(1)
	go func() {
		defer p.d.bg.Done()
		// Wait after stdout is at EOF: the reader has what the peer wrote.
		err := cmd.Wait()
		p.mu.Lock()
		killed := p.killing
		p.view.alive = false
		p.exitErr = err
		p.mu.Unlock()
		close(exited)
		// A race-built peer's data race report only changes its exit
		// status at exit, which a peer killed never reaches.
		if tail.raced() {
			p.d.t.violate("peer-race", "peer %d (generation %d, pid %d) reported a data race; stderr: %s",
				p.idx, gen, cmd.Process.Pid, tail.String())
		}
		if !killed && !p.d.stopping.Load() {
			p.d.t.violate("peer-crash", "peer %d (generation %d, pid %d) exited by itself: %v; stderr: %s",
				p.idx, gen, cmd.Process.Pid, err, tail.String())
		}
	}()
	p.mu.Lock()
	p.stdin, p.lines, p.exited, p.killing, p.pid, p.tail, p.exitErr = stdin, lines, exited, false, cmd.Process.Pid, tail, nil
	p.mu.Unlock()

	line, err := p.recv(peerStartTimeout)
	if err != nil {
		p.kill()
		return fmt.Errorf("peer %d did not start: %w; stderr: %s", p.idx, err, tail.String())
	}
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "READY" {
		p.kill()
		return fmt.Errorf("peer %d: %q; stderr: %s", p.idx, line, tail.String())
	}
	v := peerView{gen: gen, alive: true, unix: f[1], tcp: f[2], roSeed: seed}
	for i, k := range []*engine.RemoteKey{&v.rwHost, &v.rwDev, &v.roHost, &v.roDev} {
		if *k, err = parseKey(f[3+i]); err != nil {
			p.kill()
			return fmt.Errorf("peer %d: key %d: %w", p.idx, i, err)
		}
	}
	pbase, err := p.stats()
	if err != nil {
		p.kill()
		return err
	}
	fds, err := p.command("fds")
	if err != nil {
		p.kill()
		return err
	}
	p.mu.Lock()
	p.view, p.base, p.baseFDs = v, pbase, strings.Fields(strings.TrimPrefix(fds, "FDS"))
	p.mu.Unlock()
	return nil
}

var errPeerGone = errors.New("peer process gone")

// refreshKeys takes the peer's current keys ("keys") into its view when
// they are newer (a device reset made it export its buffers there
// again). The command tells the peer which key generations the view
// holds: the peer frees a lost buffer only once the driver holds its
// replacement's key, so a refusal of the old key as stale is always seen
// as superseded (remoteResult). errPeerGone: no peer is running.
func (p *peerProc) refreshKeys() error {
	v := p.snapshot()
	if !v.alive {
		return errPeerGone
	}
	a, seq, err := p.commandSeq(fmt.Sprintf("keys %d %d %d", v.gen, v.kgen[0], v.kgen[1]))
	if err != nil {
		return err
	}
	if afterKeysAnswer != nil {
		afterKeysAnswer()
	}
	f := strings.Fields(a)
	if len(f) != 8 || f[0] != "KEYS" {
		return fmt.Errorf("peer %d answered %q to keys", p.idx, a)
	}
	var pgen int
	var kgen [2]int
	if _, err := fmt.Sscan(strings.Join(f[1:4], " "), &pgen, &kgen[0], &kgen[1]); err != nil {
		return fmt.Errorf("peer %d: keys answer %q: %w", p.idx, a, err)
	}
	var keys [4]engine.RemoteKey
	for i := range keys {
		if keys[i], err = parseKey(f[4+i]); err != nil {
			return fmt.Errorf("peer %d: keys answer: key %d: %w", p.idx, i, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := &p.view
	if pgen != cur.gen || !cur.alive {
		return nil // another generation answered (restarted meanwhile)
	}
	if seq < p.keysSeq {
		// Refreshes run at once (the CS faults of several kinds follow
		// the peer): the view holds a later answer, and this one's
		// generations may be older.
		return nil
	}
	p.keysSeq = seq
	for dev := range kgen {
		if kgen[dev] < cur.kgen[dev] {
			return fmt.Errorf("peer %d: key generation of gaudi%d went back from %d to %d", p.idx, dev, cur.kgen[dev], kgen[dev])
		}
		p.d.t.keyRefreshes.Add(uint64(kgen[dev] - cur.kgen[dev]))
	}
	if !bytes.Equal(keys[0].Bytes(), cur.rwHost.Bytes()) || !bytes.Equal(keys[2].Bytes(), cur.roHost.Bytes()) {
		return fmt.Errorf("peer %d: the keys of its host buffers changed", p.idx)
	}
	cur.rwDev, cur.roDev, cur.kgen = keys[1], keys[3], kgen
	return nil
}

// recv takes the peer's next line.
func (p *peerProc) recv(timeout time.Duration) (string, error) {
	p.mu.Lock()
	lines := p.lines
	p.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l, ok := <-lines:
		if !ok {
			return "", errPeerGone
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("no answer from peer %d in %v", p.idx, timeout)
	}
}

// command sends one command and returns the answer.
func (p *peerProc) command(c string) (string, error) {
	a, _, err := p.commandSeq(c)
	return a, err
}

// commandSeq is command, also returning the command's number (later
// commands have higher ones).
func (p *peerProc) commandSeq(c string) (string, uint64, error) {
	p.cmdMu.Lock()
	defer p.cmdMu.Unlock()
	p.mu.Lock()
	w := p.stdin
	p.mu.Unlock()
	if w == nil {
		return "", 0, errPeerGone
	}
	p.seq++
	id := fmt.Sprintf("%d ", p.seq)
	if _, err := fmt.Fprintln(w, id+c); err != nil {
		return "", 0, errPeerGone
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := p.recv(time.Until(deadline))
		if err != nil {
			return "", 0, err
		}
		if a, ok := strings.CutPrefix(l, id); ok {
			return a, p.seq, nil
		}
		// a late answer to a command that timed out
	}
}

func (p *peerProc) stats() (Resources, error) {
	l, err := p.command("stats")
	if err != nil {
		return Resources{}, err
	}
	var r Resources
	if _, err := fmt.Sscanf(l, "STATS %d %d %d %d %d %d", &r.Goroutines, &r.FDs, &r.Maps, &r.FileMaps, &r.Heap, &r.Threads); err != nil {
		return r, fmt.Errorf("peer %d: %q", p.idx, l)
	}
	return r, nil
}

// kill SIGKILLs the peer and waits for it to be gone.
func (p *peerProc) kill() {
	p.mu.Lock()
	p.killing = true
	p.view.alive = false
	pid, exited, stdin := p.pid, p.exited, p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if exited == nil {
		return
	}
	// The signal first: a peer that read EOF on its stdin before it
	// would begin its orderly exit and free its buffers under the load.
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if stdin != nil {
		_ = stdin.Close()
	}
	<-exited
}

// stop asks the peer to exit (EOF on stdin), and kills it if it has not
// within the bound.
func (p *peerProc) stop(bound time.Duration) {
	p.mu.Lock()
	killed := p.killing // by a fault, and not started again
	p.killing = true
	p.view.alive = false
	exited, stdin := p.exited, p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if exited == nil {
		return
	}
	if stdin != nil {
		_ = stdin.Close()
	}
	select {
	case <-exited:
		p.mu.Lock()
		err, tail := p.exitErr, p.tail
		p.mu.Unlock()
		if err != nil && !killed {
			p.d.t.violate("peer-exit", "peer %d ended with %v after its stdin closed; stderr: %s", p.idx, err, tail.String())
		}
	case <-time.After(bound):
		p.d.t.violate("peer-exit", "peer %d did not exit within %v of its stdin closing; killed", p.idx, bound)
		p.kill()
	}
}

// raceMarker opens the race detector's report of a data race.
const raceMarker = "WARNING: DATA RACE"

// tailBuffer keeps the last max bytes written to it, and whether a data
// race report was among them (even one pushed out since).
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	b    []byte
	race bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	from := max(0, len(t.b)-len(raceMarker)+1) // a marker split across writes
	t.b = append(t.b, p...)
	if !t.race && strings.Contains(string(t.b[from:]), raceMarker) {
		t.race = true
	}
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) raced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.race
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return "(empty)"
	}
	return s
}
