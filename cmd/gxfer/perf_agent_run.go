package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/agent/etcdmeta"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// runAgentPerf is gxfer perf -agent.
func runAgentPerf(ctx context.Context, o *perfOpts, set map[string]bool, cfg engine.Config, stdout, stderr io.Writer) (err error) {
	pl, err := o.checkAgent(set)
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfile()) }()
	ms, err := startMetrics(o.metrics, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ms.Close()) }()
	a := &o.agent
	if !set["seed"] || a.seed == 0 {
		a.seed = randomSeed()
	}
	kp := kvParams{seed: a.seed, window: pl.window, blocks: a.blocks, bsize: pl.bsize}
	log := cfg.Logger
	if a.role == "target" {
		// The initiators choose how many requests and their seeds (each
		// request carries them); the section has a region per initiator.
		fmt.Fprintf(stdout, "# gxfer perf -agent | workload kvcache | target: requests of %d blocks x %d B (%d B per request), %d in flight per initiator, section of %d slots (%d per initiator), verify %v\n",
			kp.blocks, kp.bsize, kp.requestLen(), kp.window, kp.slots()*max(1, a.initiators), kp.slots(), a.verify)
	} else {
		fmt.Fprintf(stdout, "# gxfer perf -agent | workload kvcache | %d requests x %d blocks x %d B (%d B per request), %d in flight, section of %d slots, seed %#x, verify %v\n",
			a.requests, kp.blocks, kp.bsize, kp.requestLen(), kp.window, kp.slots(), kp.seed, a.verify)
	}

	switch a.role {
	case "target":
		store, err := agentStore(ctx, pl.eps, a, log)
		if err != nil {
			return err
		}
		name := a.name
		if name == "" {
			name = defaultName("target")
		}
		pa, err := newPerfAgent(ctx, cfg, name, a.unix, a.tcp, store, store == nil, log)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, pa.close()) }()
		ms.add(pa, "target")
		t, err := setupTarget(pa, o, pl, kp, a.initiators, stdout)
		if err != nil {
			return err
		}
		t.connect = store == nil
		return interrupted(ctx, t.run(ctx))
	case "initiator":
		store, err := agentStore(ctx, pl.eps, a, log)
		if err != nil {
			return err
		}
		name := a.name
		if name == "" {
			name = defaultName("initiator")
		}
		unix := a.unix
		if unix == "" && a.tcp == "" {
			dir, cleanup, err := sockDir()
			if err != nil {
				return err
			}
			defer cleanup()
			unix = filepath.Join(dir, "i.sock")
		}
		pa, err := newPerfAgent(ctx, cfg, name, unix, a.tcp, store, false, log)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, pa.close()) }()
		ms.add(pa, "initiator")
		peer, err := findTarget(ctx, pa, store, a)
		if err != nil {
			return err
		}
		in, err := setupInitiator(ctx, pa, peer, o, pl, kp, stdout)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, in.free()) }()
		return interrupted(ctx, in.run(ctx))
	}
	// Both roles in this process: their sockets in a temporary directory
	// (a target alone listens where -unix or -tcp says: it makes none).
	dir, cleanup, err := sockDir()
	if err != nil {
		return err
	}
	defer cleanup()
	return runAgentPerfLocal(ctx, o, pl, kp, cfg, dir, ms, stdout)
}

// runAgentPerfLocal runs a target and an initiator in this process.
func runAgentPerfLocal(ctx context.Context, o *perfOpts, pl agentPlan, kp kvParams, cfg engine.Config, dir string, ms *metricsServer, stdout io.Writer) (err error) {
	stdout = &lockedWriter{w: stdout} // both roles report
	addr := func(n string) (string, string) {
		if o.agent.via == "tcp" {
			return "", "127.0.0.1:0"
		}
		return filepath.Join(dir, n+".sock"), ""
	}
	tu, tt := addr("t")
	tgt, err := newPerfAgent(ctx, cfg, "target", tu, tt, nil, true, cfg.Logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tgt.close()) }()
	ms.addAgent(tgt.a, "target") // one engine collector only: the initiator's engine is the one measured
	iu, it := addr("i")
	ini, err := newPerfAgent(ctx, cfg, "initiator", iu, it, nil, false, cfg.Logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ini.close()) }()
	ms.add(ini, "initiator")
	t, err := setupTarget(tgt, o, pl, kp, 1, stdout)
	if err != nil {
		return err
	}
	t.connect, t.sameHost = true, true
	md := tgt.a.Metadata()
	taddr := md.Unix
	if taddr == "" {
		taddr = md.TCP
	}
	peer, err := ini.a.Connect(ctx, taddr)
	if err != nil {
		return fmt.Errorf("initiator: reach the target at %s: %w", taddr, err)
	}
	in, err := setupInitiator(ctx, ini, peer, o, pl, kp, stdout)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.free()) }()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	terr := make(chan error, 1)
	go func() {
		err := t.run(rctx)
		if err != nil {
			cancel() // the initiator waits for acknowledgements that will not come
		}
		terr <- err
	}()
	ierr := in.run(rctx)
	if ierr != nil {
		cancel()
	}
	return interrupted(ctx, errors.Join(ierr, <-terr))
}

func interrupted(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return err
}

// agentStore opens the etcd store of an agent (nil without -etcd).
func agentStore(ctx context.Context, eps []string, a *agentPerfOpts, log zerolog.Logger) (meta.Store, error) {
	if eps == nil {
		return nil, nil
	}
	st, err := openStore(ctx, eps, a.prefix, etcdmeta.DefaultDialTimeout, a.ttl, log)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// setupTarget allocates and publishes the target's section.
func setupTarget(pa *perfAgent, o *perfOpts, pl agentPlan, kp kvParams, initiators int, stdout io.Writer) (*kvTarget, error) {
	buf, err := allocFor(pa.eng, kp.sectionLen()*max(1, initiators), pl.sectionMem, o.device)
	if err != nil {
		return nil, err
	}
	t := &kvTarget{a: pa.a, buf: buf, verify: o.agent.verify, out: stdout, label: pa.a.Name(), initiators: initiators, idle: o.agent.wait}
	if pl.sectionMem != "host" {
		if t.scratch, err = pa.eng.Alloc(kp.bsize, engine.Host); err != nil {
			return nil, fmt.Errorf("allocate: %w", err)
		}
	}
	if err := pa.a.Publish(o.agent.section, buf.All()); err != nil {
		return nil, fmt.Errorf("publish section %q: %w", o.agent.section, err)
	}
	md := pa.a.Metadata()
	fmt.Fprintf(stdout, "# target %s incarnation %016x | unix %s tcp %s | section %q: %d bytes of %s memory\n",
		md.Name, md.Incarnation, orNone(md.Unix), orNone(md.TCP), o.agent.section, buf.Size(), memLabel(pa.eng, pl.sectionMem, o.device))
	return t, nil
}

// findTarget resolves the initiator's target: by name (-peer, in etcd),
// at an address (-connect), or the first agent in etcd offering the
// section; it waits up to -wait for it to appear, and for its section
// (an agent listens, and is in etcd, before it publishes).
func findTarget(ctx context.Context, pa *perfAgent, store meta.Store, a *agentPerfOpts) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	name, err := findTargetName(wctx, pa, store, a)
	if err != nil {
		return "", err
	}
	for {
		p, err := pa.a.Peer(wctx, name)
		if err == nil {
			if _, err = p.Section(a.section); err == nil {
				return name, nil
			}
		}
		if !errors.Is(err, meta.ErrNotFound) {
			return "", fmt.Errorf("initiator: target %s: %w", name, err)
		}
		select {
		case <-wctx.Done():
			return "", fmt.Errorf("initiator: target %s offers no section %q after %v: %w", name, a.section, a.wait, err)
		case <-time.After(100 * time.Millisecond): // its Publish drops the cached record
		}
	}
}

// findTargetName is findTarget's lookup of the target, within wctx.
func findTargetName(wctx context.Context, pa *perfAgent, store meta.Store, a *agentPerfOpts) (string, error) {
	if a.connect != "" {
		for {
			name, err := pa.a.Connect(wctx, a.connect)
			if err == nil {
				return name, nil
			}
			// Nothing listens there yet (the target starts with us): wait.
			if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
				return "", fmt.Errorf("initiator: reach the target at %s: %w", a.connect, err)
			}
			select {
			case <-wctx.Done():
				return "", fmt.Errorf("initiator: no target at %s after %v: %w", a.connect, a.wait, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	for {
		var err error
		if a.peer != "" {
			if _, err = pa.a.Peer(wctx, a.peer); err == nil {
				return a.peer, nil
			}
		} else {
			var recs []meta.Metadata
			if recs, err = store.List(wctx); err == nil {
				for _, m := range recs {
					if _, ok := m.Section(a.section); ok && m.Name != pa.a.Name() {
						return m.Name, nil
					}
				}
				err = fmt.Errorf("no agent offers a section %q: %w", a.section, meta.ErrNotFound)
			}
		}
		if !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrUnavailable) {
			return "", fmt.Errorf("initiator: find the target: %w", err)
		}
		select {
		case <-wctx.Done():
			return "", fmt.Errorf("initiator: no target after %v: %w", a.wait, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setupInitiator checks the target's section and allocates the sources.
func setupInitiator(ctx context.Context, pa *perfAgent, peer string, o *perfOpts, pl agentPlan, kp kvParams, stdout io.Writer) (*kvInitiator, error) {
	p, err := pa.a.Peer(ctx, peer)
	if err != nil {
		return nil, fmt.Errorf("initiator: %w", err)
	}
	sec, err := p.Section(o.agent.section)
	if err != nil {
		return nil, fmt.Errorf("initiator: target %s: %w", peer, err)
	}
	if sec.Len < uint64(kp.sectionLen()) {
		return nil, fmt.Errorf("initiator: target %s's section %q has %d bytes, the workload needs %d (-O x -blocks x -block-size: give the target the same)",
			peer, o.agent.section, sec.Len, kp.sectionLen())
	}
	src, err := allocFor(pa.eng, kp.sectionLen(), pl.local, o.device)
	if err != nil {
		return nil, err
	}
	in := &kvInitiator{a: pa.a, peer: peer, section: o.agent.section, src: src, p: kp, requests: o.agent.requests,
		verify: o.agent.verify, out: stdout, label: pa.a.Name(), wait: o.agent.wait}
	if pl.local != "host" {
		if in.staging, err = pa.eng.Alloc(kp.bsize, engine.Host); err != nil {
			src.Free()
			return nil, fmt.Errorf("allocate: %w", err)
		}
	}
	tr := "not connected yet"
	if ep, err := p.Endpoint(ctx); err == nil {
		tr = ep.Transport().String()
	}
	fmt.Fprintf(stdout, "# initiator %s -> target %s (incarnation %016x) over %s | source: %s memory | target section %q: %d bytes of %s memory\n",
		pa.a.Name(), peer, p.Incarnation(), tr, memLabel(pa.eng, pl.local, o.device), o.agent.section, sec.Len, sectionLabel(sec))
	return in, nil
}

// sectionLabel names a peer's section memory for a report: its location,
// labelled emulated as memLabel does when the peer's record says so.
func sectionLabel(s meta.Section) string {
	if s.Emulated {
		return s.Location + " [EMULATED: dma/hlsim]"
	}
	return s.Location
}

func (in *kvInitiator) free() error {
	var err error
	if in.staging != nil {
		err = in.staging.Free()
	}
	return errors.Join(err, in.src.Free())
}

// add exports pa's engine and agent statistics.
func (m *metricsServer) add(pa *perfAgent, role string) {
	m.addEngine(pa.eng)
	m.addAgent(pa.a, role)
}

// lockedWriter serializes the writes of the roles of one process.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
