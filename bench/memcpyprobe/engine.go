package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/memcopy"
	"github.com/gxfer/gxfer/internal/memcopy/probe"
)

// peerEnv, when set, makes the binary the peer of -engine's unix put: an
// engine listening at that socket path with one exported host buffer of
// peerSizeEnv bytes, until its stdin closes.
const (
	peerEnv     = "GXFER_MEMCPYPROBE_PEER"
	peerSizeEnv = "GXFER_MEMCPYPROBE_PEER_SIZE"
)

// runPeer is the peer process: it prints "KEY <hex>" (the host buffer's
// remote key) once it listens, and exits when stdin closes.
func runPeer(path, size string, out io.Writer) int {
	var n int
	if _, err := fmt.Sscan(size, &n); err != nil || n <= 0 {
		fmt.Fprintln(out, "ERR bad size", size)
		return 2
	}
	e, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	if err != nil {
		fmt.Fprintln(out, "ERR", err)
		return 1
	}
	defer e.Close()
	l, err := e.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(out, "ERR", err)
		return 1
	}
	defer l.Close()
	h, err := e.Alloc(n, engine.Host)
	if err != nil {
		fmt.Fprintln(out, "ERR", err)
		return 1
	}
	defer h.Free()
	k, err := h.Export()
	if err != nil {
		fmt.Fprintln(out, "ERR", err)
		return 1
	}
	fmt.Fprintln(out, "KEY", hex.EncodeToString(k.Bytes()))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// peer is the peer process as seen by the measuring one.
type peer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	path  string
	key   engine.RemoteKey
}

// startPeer re-executes this binary as the peer (peerEnv) in dir.
func startPeer(dir string, size int) (*peer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &peer{path: filepath.Join(dir, "peer.sock")}
	p.cmd = exec.Command(self)
	p.cmd.Env = append(os.Environ(), peerEnv+"="+p.path, fmt.Sprintf("%s=%d", peerSizeEnv, size))
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	line := ""
	if sc.Scan() {
		line = sc.Text()
	}
	hexKey, ok := strings.CutPrefix(line, "KEY ")
	var b []byte
	if ok {
		b, err = hex.DecodeString(hexKey)
		if err == nil {
			p.key, err = engine.ParseRemoteKey(b)
		}
	}
	if !ok || err != nil {
		_ = p.close()
		return nil, fmt.Errorf("peer: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return p, nil
}

func (p *peer) close() error {
	_ = p.stdin.Close()
	return p.cmd.Wait()
}

// engineRig is what -engine measures: an engine copy between two of its
// host buffers and a unix put from one into the peer's.
type engineRig struct {
	e        *engine.Engine
	src, dst *engine.Buffer
	p        *peer
	ep       *engine.Endpoint
	bd       *engine.Binding
	dir      string // the peer's socket's
}

func newEngineRig(size, workers, ntMin int) (_ *engineRig, err error) {
	r := &engineRig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.e, err = engine.New(engine.Config{Devices: engine.DevicesNone, CopyWorkers: workers, CopyNTMin: ntMin}); err != nil {
		return nil, err
	}
	if r.src, err = r.e.Alloc(size, engine.Host); err != nil {
		return nil, err
	}
	if r.dst, err = r.e.Alloc(size, engine.Host); err != nil {
		return nil, err
	}
	s := r.src.Bytes()
	for i := 0; i < len(s); i += 4096 {
		s[i] = byte(i>>12) | 1
	}
	if r.dir, err = os.MkdirTemp("", "memcpyprobe"); err != nil {
		return nil, err
	}
	if r.p, err = startPeer(r.dir, size); err != nil {
		return nil, err
	}
	ctx := context.Background()
	if r.ep, err = r.e.Dial(ctx, "unix", r.p.path); err != nil {
		return nil, err
	}
	if r.bd, err = r.ep.Bind(ctx, r.src.All(), r.p.key.Slice(0, size)); err != nil {
		return nil, err
	}
	// The first copy and put fault the pages in.
	if err := r.copy(); err != nil {
		return nil, err
	}
	return r, r.bd.Put()
}

func (r *engineRig) copy() error {
	return r.e.CopySync(context.Background(), r.dst.All(), r.src.All())
}

func (r *engineRig) close() error {
	var errs []error
	if r.bd != nil {
		errs = append(errs, r.bd.Close())
	}
	if r.ep != nil {
		errs = append(errs, r.ep.Close())
	}
	if r.p != nil {
		errs = append(errs, r.p.close())
	}
	if r.e != nil {
		errs = append(errs, r.e.Close())
	}
	if r.dir != "" {
		errs = append(errs, os.RemoveAll(r.dir))
	}
	return errors.Join(errs...)
}

// config is one of the figures a round measures: a probe
// configuration (impl, threads) or the engine copy or the put.
type config struct {
	name    string
	threads int // probe: threads; 0: engine or put
	op      func() (time.Duration, error)
}

// figure is a config's result over a round: its best slice and its mean
// (GB/s, 10^9 B/s).
type figure struct {
	best, mean float64
}

// measureEngine runs reps rounds of slices slices. A slice runs every
// configuration once (one copy of size bytes per thread for the probe,
// one engine copy, one put), in an order rotating between slices, so
// that a shared machine's load falls on all alike. For each
// configuration a round keeps the best slice and the mean: the limit is
// the best probe configuration's, one core's the best 1-thread one's.
// Each round prints one line in Go benchmark format (best-slice figures;
// bench/compare-goals.py reads it) and a comment line with the means.
func measureEngine(out io.Writer, size, threads, reps, slices, workers, ntMin int) error {
	r, err := newEngineRig(size, workers, ntMin)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	defer r.close()
	bufs := probe.NewBuffers(size, threads)
	timed := func(f func() error) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t0 := time.Now()
			err := f()
			return time.Since(t0), err
		}
	}
	var cs []config
	for t := 1; t <= threads; t++ {
		for _, impl := range []probe.Impl{probe.Memcpy, probe.GoCopy} {
			cs = append(cs, config{fmt.Sprintf("%s x%d", impl, t), t, func() (time.Duration, error) {
				// d = 0: every thread copies once.
				res := bufs.Measure(impl, t, 0)
				return time.Duration(float64(t*size) / res.GBps), nil
			}})
		}
	}
	cs = append(cs, config{"engine", 0, timed(r.copy)}, config{"put", 0, timed(r.bd.Put)})
	for i := range reps {
		best := make([]time.Duration, len(cs))
		total := make([]time.Duration, len(cs))
		for sl := range slices {
			for j := range cs {
				k := (j + sl + i) % len(cs)
				dt, err := cs[k].op()
				if err != nil {
					return fmt.Errorf("%s: %w", cs[k].name, err)
				}
				total[k] += dt
				if best[k] == 0 || dt < best[k] {
					best[k] = dt
				}
			}
		}
		figs := make([]figure, len(cs))
		var limit, one figure
		limitName := ""
		for k, c := range cs {
			bytes := float64(size * max(c.threads, 1))
			figs[k] = figure{best: bytes / best[k].Seconds() / 1e9, mean: bytes * float64(slices) / total[k].Seconds() / 1e9}
			if c.threads == 0 {
				continue
			}
			if figs[k].best > limit.best {
				limit.best, limitName = figs[k].best, c.name
			}
			limit.mean = max(limit.mean, figs[k].mean)
			if c.threads == 1 {
				one.best, one.mean = max(one.best, figs[k].best), max(one.mean, figs[k].mean)
			}
		}
		eng, put := figs[len(cs)-2], figs[len(cs)-1]
		fmt.Fprintf(out, "BenchmarkHostCopyVsLimit/size=%s\t%d\t%.4g engine-GB/s\t%.4g put-GB/s\t%.4g limit-GB/s\t%.4g onecore-GB/s\t%.3f engine/limit\t%.3f put/limit\t%.3f engine/onecore\t%.3f put/onecore\n",
			strings.ReplaceAll(memcopy.FormatSize(size), " ", ""), slices, eng.best, put.best, limit.best, one.best,
			eng.best/limit.best, put.best/limit.best, eng.best/one.best, put.best/one.best)
		fmt.Fprintf(out, "# round %d: best slice of %d; limit %s; means: engine %.2f, put %.2f, limit %.2f, one core %.2f GB/s\n",
			i+1, slices, limitName, eng.mean, put.mean, limit.mean, one.mean)
	}
	return nil
}
