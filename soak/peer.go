package soak

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/engine"
)

// peerEnv carries a peer process's spec (JSON); its presence makes a
// program that embeds the soak run PeerMain.
const peerEnv = "GXFER_SOAK_PEER"

// IsPeer reports whether this process was started as a soak peer.
func IsPeer() bool { return os.Getenv(peerEnv) != "" }

// peerSpec is what a peer process is told.
type peerSpec struct {
	Gen      int    // its generation (restarts), echoed by "keys"
	Seed     uint64 // its read-only buffers hold this pattern
	Unix     string // socket path to listen on
	TCP      string // host:port to listen on
	Slots    int    // worker slots of slotSize in its read-write buffers
	LogLevel string
}

// The peer's line protocol on stdin/stdout (one line each way; every
// command and its answer are prefixed by the same id):
//
//	READY <unix> <tcp> <rw host key> <rw gaudi key> <ro host key> <ro gaudi key>
//	fault hang|abort|reset <dev>  -> OK | ERR <why>
//	salloc host|gaudi             -> KEY <key>   (an allocation, exported)
//	sfree <seed>                  -> FREED | ERR <why>   (freed; allocated again at once as a canary holding pattern seed)
//	check                         -> OK | BAD <why> | LOST <why>   (the canary is intact, or its device was reset; then freed)
//	keys <gen> <kgen0> <kgen1>    -> KEYS <gen> <key gen gaudi0> <key gen gaudi1> <rw host key> <rw gaudi key> <ro host key> <ro gaudi key> | ERR <why>
//
// A peer watches its devices: when one is reset, it frees nothing yet,
// waits for the engine to open the device again, allocates each of its
// exported buffers there anew (the read-only one refilled with its
// pattern), exports them and counts a new key generation of that device.
// "keys" hands out the current keys; its arguments say which key
// generations of this peer generation the driver holds, and the peer
// frees the lost buffers those replaced (so that the driver always has
// the new key before the old one is refused as stale).
//	stats                         -> STATS <goroutines> <fds> <maps> <file maps> <heap> <threads>
//	fds                           -> FDS <fd>-><target> ...
//	EOF on stdin: close everything and exit 0.

// PeerMain is the body of a peer process (see IsPeer); it returns the exit
// status.
func PeerMain(stdin io.Reader, stdout io.Writer) int {
	var spec peerSpec
	if err := json.Unmarshal([]byte(os.Getenv(peerEnv)), &spec); err != nil {
		fmt.Fprintln(stdout, "ERR bad spec:", err)
		return 2
	}
	log := zerolog.Nop()
	if lvl, err := zerolog.ParseLevel(spec.LogLevel); err == nil && spec.LogLevel != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(lvl).With().Timestamp().Int("peer", os.Getpid()).Logger()
	}
	p, err := startPeerSide(spec, log)
	if err != nil {
		fmt.Fprintln(stdout, "ERR", oneLine(err.Error()))
		return 1
	}
	defer p.close()
	p.mu.Lock()
	fmt.Fprintf(stdout, "READY %s %s %s %s %s %s\n", p.lunix.Addr(), p.ltcp.Addr(),
		keyHex(p.rwHost.key), keyHex(p.rwDev.key), keyHex(p.roHost.key), keyHex(p.roDev.key))
	p.mu.Unlock()
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		// "<id> <command>": the answer is "<id> <answer>", so that the
		// driver never takes a late answer for another command's.
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		fmt.Fprintln(stdout, f[0], p.command(f[1:]))
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func keyHex(k engine.RemoteKey) string { return hex.EncodeToString(k.Bytes()) }

func parseKey(s string) (engine.RemoteKey, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return engine.RemoteKey{}, err
	}
	return engine.ParseRemoteKey(b)
}

// peerSide is a peer process's engine and buffers.
type peerSide struct {
	e            *engine.Engine
	gen          int
	lunix, ltcp  *engine.Listener
	acceptCancel context.CancelFunc
	acceptDone   chan struct{}
	watchCtx     context.Context
	watchCancel  context.CancelFunc
	watchDone    chan struct{}

	mu                           sync.Mutex // what follows, between the commands and the device watcher
	rwHost, rwDev, roHost, roDev *exported
	kgen                         [2]int    // key generations per device (peerView.kgen)
	retired                      []retired // lost buffers that were replaced
	recErr                       string    // a recovery's failure, for the next "keys"
	canary                       *engine.Buffer
	canaryResets                 int // DeviceInfo.Resets before the canary's allocation
	stale                        *engine.Buffer
	canarySeed                   uint64
}

// exported is one of the buffers whose keys a peer hands out.
type exported struct {
	b      *engine.Buffer
	key    engine.RemoteKey
	dev    int                        // its device; -1 for host memory
	resets int                        // the device's DeviceInfo.Resets before its allocation
	fill   func(*engine.Buffer) error // what a replacement must hold before its key is handed out
}

// retired is a lost buffer a reset's recovery replaced by one of key
// generation gen of its device; freed once the driver holds that key.
type retired struct {
	b        *engine.Buffer
	dev, gen int
}

// How often a peer looks at its devices, and how long it waits for one
// to be opened again after a reset.
const (
	watchEvery     = 5 * time.Millisecond
	reopenDeadline = 10 * time.Second
)

func startPeerSide(spec peerSpec, log zerolog.Logger) (_ *peerSide, err error) {
	e, err := engine.New(engineConfig(2, log))
	if err != nil {
		return nil, err
	}
	p := &peerSide{e: e, gen: spec.Gen}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	alloc := func(n int, loc engine.Location, fill func(*engine.Buffer) error) (*exported, error) {
		x := &exported{dev: -1, fill: fill}
		if loc.IsGaudi() {
			x.dev = loc.Device()
			x.resets = e.Devices()[x.dev].Resets
		}
		var err error
		if x.b, err = e.Alloc(n, loc); err != nil {
			return nil, err
		}
		if fill != nil {
			if err := fill(x.b); err != nil {
				_ = x.b.Free()
				return nil, err
			}
		}
		if x.key, err = x.b.Export(); err != nil {
			_ = x.b.Free()
			return nil, err
		}
		return x, nil
	}
	rw := spec.Slots * slotSize
	if p.rwHost, err = alloc(rw, engine.Host, nil); err != nil {
		return nil, err
	}
	if p.rwDev, err = alloc(rw, engine.Gaudi(rwDevice), nil); err != nil {
		return nil, err
	}
	fillRO := func(b *engine.Buffer) error {
		fill(b.Bytes(), spec.Seed, 0)
		return nil
	}
	if p.roHost, err = alloc(roSize, engine.Host, fillRO); err != nil {
		return nil, err
	}
	// The read-only Gaudi buffer (and any replacement after a reset)
	// holds the read-only host buffer's pattern.
	copyRO := func(b *engine.Buffer) error { return e.CopySync(context.Background(), b.All(), p.roHost.b.All()) }
	if p.roDev, err = alloc(roSize, engine.Gaudi(roDevice), copyRO); err != nil {
		return nil, err
	}
	if p.lunix, err = e.Listen("unix", spec.Unix); err != nil {
		return nil, err
	}
	if p.ltcp, err = e.Listen("tcp", spec.TCP); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.acceptCancel, p.acceptDone = cancel, make(chan struct{})
	go func() {
		defer close(p.acceptDone)
		done := make(chan struct{}, 2)
		for _, l := range []*engine.Listener{p.lunix, p.ltcp} {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					// Endpoints are served without Accept; taking them
					// keeps the listener's queue from holding them.
					if _, err := l.Accept(ctx); err != nil {
						return
					}
				}
			}()
		}
		<-done
		<-done
	}()
	p.watchCtx, p.watchCancel = context.WithCancel(context.Background())
	p.watchDone = make(chan struct{})
	go p.watch()
	return p, nil
}

func (p *peerSide) close() {
	if p.watchCancel != nil {
		p.watchCancel()
		<-p.watchDone
	}
	if p.acceptCancel != nil {
		p.acceptCancel()
		<-p.acceptDone
	}
	for _, l := range []*engine.Listener{p.lunix, p.ltcp} {
		if l != nil {
			_ = l.Close()
		}
	}
	_ = p.e.Close()
}

// watch replaces the exported buffers of a device that was reset, as
// soon as the engine has opened it again.
func (p *peerSide) watch() {
	defer close(p.watchDone)
	tk := time.NewTicker(watchEvery)
	defer tk.Stop()
	for {
		select {
		case <-p.watchCtx.Done():
			return
		case <-tk.C:
		}
		p.mu.Lock()
		p.checkDevices()
		p.mu.Unlock()
	}
}

func (p *peerSide) exports() []*exported { return []*exported{p.rwHost, p.rwDev, p.roHost, p.roDev} }

// checkDevices (under mu) recovers each device that is lost, or that
// was opened again since one of the exported buffers on it was allocated.
func (p *peerSide) checkDevices() {
	infos := p.e.Devices()
	for dev := range min(len(infos), len(p.kgen)) {
		need := infos[dev].Lost != nil
		for _, x := range p.exports() {
			need = need || x.dev == dev && x.resets != infos[dev].Resets
		}
		if !need {
			continue
		}
		err := p.recoverDev(dev)
		switch {
		case err == nil, p.watchCtx.Err() != nil:
		case errors.Is(err, engine.ErrDeviceLost), errors.Is(err, engine.ErrAborted), errors.Is(err, engine.ErrTimeout):
			// Reset again meanwhile, or a CS fault the driver injected
			// into this device hit the refill's copy (its window explains
			// it): the next look tries again.
		case p.recErr == "":
			p.recErr = fmt.Sprintf("recovering gaudi%d after its reset: %s", dev, oneLine(err.Error()))
		}
	}
}

// recoverDev (under mu) waits for the engine to open dev again and
// replaces the exported buffers the reset lost: a new allocation, filled
// as the old one was, exported; the old one is retired (freed later, see
// keys).
func (p *peerSide) recoverDev(dev int) error {
	ctx, cancel := context.WithTimeout(p.watchCtx, reopenDeadline)
	defer cancel()
	if err := p.e.WaitDevice(ctx, dev); err != nil {
		return err
	}
	resets := p.e.Devices()[dev].Resets
	changed := false
	for _, x := range p.exports() {
		if x.dev != dev || x.resets == resets {
			continue
		}
		nb, err := p.e.Alloc(x.b.Size(), x.b.Location())
		if err != nil {
			return err
		}
		if x.fill != nil {
			if err := x.fill(nb); err != nil {
				_ = nb.Free()
				return err
			}
		}
		k, err := nb.Export()
		if err != nil {
			_ = nb.Free()
			return err
		}
		p.retired = append(p.retired, retired{b: x.b, dev: dev, gen: p.kgen[dev] + 1})
		x.b, x.key, x.resets = nb, k, resets
		changed = true
	}
	if changed {
		p.kgen[dev]++
	}
	return nil
}

// keys hands out the current keys (recovering a lost device first) and
// frees the lost buffers whose replacements the driver holds: it holds
// key generations held of peer generation gen.
func (p *peerSide) keys(gen int, held [2]int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkDevices()
	var errs []string
	if p.recErr != "" {
		errs = append(errs, p.recErr)
		p.recErr = ""
	}
	keep := p.retired[:0]
	for _, r := range p.retired {
		if gen != p.gen || r.gen > held[r.dev] {
			keep = append(keep, r)
			continue
		}
		if err := r.b.Free(); err != nil { // a lost buffer still frees
			errs = append(errs, "freeing a lost buffer: "+oneLine(err.Error()))
		}
	}
	clear(p.retired[len(keep):])
	p.retired = keep
	if len(errs) > 0 {
		return "ERR " + strings.Join(errs, "; ")
	}
	return fmt.Sprintf("KEYS %d %d %d %s %s %s %s", p.gen, p.kgen[0], p.kgen[1],
		keyHex(p.rwHost.key), keyHex(p.rwDev.key), keyHex(p.roHost.key), keyHex(p.roDev.key))
}

func (p *peerSide) command(f []string) string {
	if len(f) == 0 {
		return "ERR empty command"
	}
	switch {
	case f[0] == "fault" && len(f) == 3:
		var dev int
		if _, err := fmt.Sscan(f[2], &dev); err != nil || dev < 0 || dev >= p.e.NumDevices() {
			return "ERR bad device " + f[2]
		}
		df, ok := faultsOf(p.e, dev)
		if !ok {
			return "ERR " + csFaultsWhyNot(p.e)
		}
		switch f[1] {
		case "clear":
			df.HangNextCS(0)
			df.AbortNextCS(0)
		case "hang":
			df.HangNextCS(1)
		case "abort":
			df.AbortNextCS(1)
		case "reset":
			df.Reset()
		default:
			return "ERR bad fault " + f[1]
		}
		return "OK"
	case f[0] == "salloc" && len(f) == 2:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.staleAlloc(f[1])
	case f[0] == "sfree" && len(f) == 2:
		var seed uint64
		if _, err := fmt.Sscan(f[1], &seed); err != nil {
			return "ERR bad seed"
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.staleFree(seed)
	case f[0] == "check":
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.checkCanary()
	case f[0] == "keys" && len(f) == 4:
		var gen int
		var held [2]int
		if _, err := fmt.Sscan(strings.Join(f[1:], " "), &gen, &held[0], &held[1]); err != nil {
			return "ERR bad keys command"
		}
		return p.keys(gen, held)
	case f[0] == "stats":
		r := measure()
		return fmt.Sprintf("STATS %d %d %d %d %d %d", r.Goroutines, r.FDs, r.Maps, r.FileMaps, r.Heap, r.Threads)
	case f[0] == "fds":
		return "FDS " + strings.Join(fdList(), " ")
	}
	return "ERR unknown command " + strings.Join(f, " ")
}

const staleSize = 256 << 10

// staleAlloc allocates and exports the buffer whose key will go stale.
func (p *peerSide) staleAlloc(where string) string {
	loc := engine.Host
	if where == "gaudi" {
		loc = engine.Gaudi(staleDevice)
		// After a reset, allocate in the device's new context.
		ctx, cancel := context.WithTimeout(context.Background(), reopenDeadline)
		err := p.e.WaitDevice(ctx, staleDevice)
		cancel()
		if err != nil {
			return "ERR " + oneLine(err.Error())
		}
	}
	p.freeCanary()
	if p.stale != nil {
		_ = p.stale.Free()
		p.stale = nil
	}
	b, err := p.e.Alloc(staleSize, loc)
	if err != nil {
		return "ERR " + oneLine(err.Error())
	}
	p.stale = b
	k, err := b.Export()
	if err != nil {
		return "ERR " + oneLine(err.Error())
	}
	return "KEY " + keyHex(k)
}

// staleFree frees it and allocates another of the same size at once (the
// canary, holding pattern seed): a peer's use of the old key must fail and
// leave the canary untouched.
func (p *peerSide) staleFree(seed uint64) string {
	b := p.stale
	if b == nil {
		return "ERR nothing allocated"
	}
	p.stale = nil
	if err := b.Free(); err != nil {
		return "ERR " + oneLine(err.Error())
	}
	if b.Location().IsGaudi() {
		p.canaryResets = p.e.Devices()[b.Location().Device()].Resets
	}
	c, err := p.e.Alloc(staleSize, b.Location())
	if err != nil {
		return "ERR " + oneLine(err.Error())
	}
	p.canary, p.canarySeed = c, seed
	if err := p.fillBuf(c, seed); err != nil {
		return "ERR " + oneLine(err.Error())
	}
	return "FREED"
}

func (p *peerSide) fillBuf(b *engine.Buffer, seed uint64) error {
	if !b.Location().IsGaudi() {
		fill(b.Bytes(), seed, 0)
		return nil
	}
	h, err := p.e.Alloc(b.Size(), engine.Host)
	if err != nil {
		return err
	}
	defer h.Free()
	fill(h.Bytes(), seed, 0)
	return p.e.CopySync(context.Background(), b.All(), h.All())
}

func (p *peerSide) checkCanary() string {
	c := p.canary
	if c == nil {
		return "OK"
	}
	defer p.freeCanary()
	data := c.Bytes()
	if c.Location().IsGaudi() {
		// A reset of its device lost the canary's contents: nothing to
		// check (the driver accepts that within the device's CS fault
		// window only).
		if info := p.e.Devices()[c.Location().Device()]; info.Lost != nil || info.Resets != p.canaryResets {
			return "LOST the canary's device was reset"
		}
		h, err := p.e.Alloc(c.Size(), engine.Host)
		if err != nil {
			return "ERR " + oneLine(err.Error())
		}
		defer h.Free()
		err = p.e.CopySync(context.Background(), h.All(), c.All())
		// A cs-abort fault armed on the device aborts the next command
		// submission: read the canary again (the fault is one CS).
		for try := 1; try < canaryTries && errors.Is(err, engine.ErrAborted); try++ {
			err = p.e.CopySync(context.Background(), h.All(), c.All())
		}
		if err != nil {
			if errors.Is(err, engine.ErrDeviceLost) {
				return "LOST " + oneLine(err.Error())
			}
			return "ERR " + oneLine(err.Error())
		}
		data = h.Bytes()
	}
	if i := check(data, p.canarySeed, 0); i >= 0 {
		return fmt.Sprintf("BAD the allocation made after the stale key's Free changed at byte %d", i)
	}
	return "OK"
}

// canaryTries bounds the reads of a canary that a cs-abort fault aborted.
const canaryTries = 3

func (p *peerSide) freeCanary() {
	if p.canary != nil {
		_ = p.canary.Free()
		p.canary = nil
	}
}
