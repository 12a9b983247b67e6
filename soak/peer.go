package soak

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

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
//	check                         -> OK | BAD <why>   (the canary is intact; then freed)
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
	fmt.Fprintf(stdout, "READY %s %s %s %s %s %s\n", p.lunix.Addr(), p.ltcp.Addr(),
		keyHex(p.rwHost), keyHex(p.rwDev), keyHex(p.roHost), keyHex(p.roDev))
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
	e                            *engine.Engine
	lunix, ltcp                  *engine.Listener
	bufs                         []*engine.Buffer
	rwHost, rwDev, roHost, roDev engine.RemoteKey
	canary                       *engine.Buffer
	stale                        *engine.Buffer
	canarySeed                   uint64
	acceptCancel                 context.CancelFunc
	acceptDone                   chan struct{}
}

func startPeerSide(spec peerSpec, log zerolog.Logger) (_ *peerSide, err error) {
	e, err := engine.New(engineConfig(2, log))
	if err != nil {
		return nil, err
	}
	p := &peerSide{e: e}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	alloc := func(n int, loc engine.Location) (*engine.Buffer, engine.RemoteKey, error) {
		b, err := e.Alloc(n, loc)
		if err != nil {
			return nil, engine.RemoteKey{}, err
		}
		p.bufs = append(p.bufs, b)
		k, err := b.Export()
		return b, k, err
	}
	rw := spec.Slots * slotSize
	if _, p.rwHost, err = alloc(rw, engine.Host); err != nil {
		return nil, err
	}
	if _, p.rwDev, err = alloc(rw, engine.Gaudi(0)); err != nil {
		return nil, err
	}
	var roh, rod *engine.Buffer
	if roh, p.roHost, err = alloc(roSize, engine.Host); err != nil {
		return nil, err
	}
	fill(roh.Bytes(), spec.Seed, 0)
	if rod, p.roDev, err = alloc(roSize, engine.Gaudi(1)); err != nil {
		return nil, err
	}
	if err := e.CopySync(context.Background(), rod.All(), roh.All()); err != nil {
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
	return p, nil
}

func (p *peerSide) close() {
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
		return p.staleAlloc(f[1])
	case f[0] == "sfree" && len(f) == 2:
		var seed uint64
		if _, err := fmt.Sscan(f[1], &seed); err != nil {
			return "ERR bad seed"
		}
		return p.staleFree(seed)
	case f[0] == "check":
		return p.checkCanary()
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
		loc = engine.Gaudi(0)
	}
	p.freeCanary()
	if p.stale != nil {
		_ = p.stale.Free()
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
		h, err := p.e.Alloc(c.Size(), engine.Host)
		if err != nil {
			return "ERR " + oneLine(err.Error())
		}
		defer h.Free()
		if err := p.e.CopySync(context.Background(), h.All(), c.All()); err != nil {
			return "ERR " + oneLine(err.Error())
		}
		data = h.Bytes()
	}
	if i := check(data, p.canarySeed, 0); i >= 0 {
		return fmt.Sprintf("BAD the allocation made after the stale key's Free changed at byte %d", i)
	}
	return "OK"
}

func (p *peerSide) freeCanary() {
	if p.canary != nil {
		_ = p.canary.Free()
		p.canary = nil
	}
}
