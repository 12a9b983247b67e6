package main

// The agent processes of TestClusterNetns: the test binary re-executed
// (in a network namespace) with GXFER_CLUSTER_CHILD set. A child runs one
// agent with a real etcd store and obeys JSON commands, one a line, on
// stdin, answering each with one JSON line on stdout.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/agent/etcdmeta"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

const (
	envClusterChild = "GXFER_CLUSTER_CHILD" // the agent's name
	envClusterIndex = "GXFER_CLUSTER_INDEX" // 0..3: its region in every target's sections
	envClusterTCP   = "GXFER_CLUSTER_TCP"   // host:0 to listen at
	envClusterUnix  = "GXFER_CLUSTER_UNIX"  // socket path, or ""
	envClusterTTL   = "GXFER_CLUSTER_TTL"
)

func init() {
	if name := os.Getenv(envClusterChild); name != "" {
		os.Exit(clusterChildMain(name))
	}
}

// The child's workload: requests of clBlocks blocks of clBlock bytes,
// one at a time per peer, in the region of the initiator's index.
const (
	clBlocks  = 8
	clBlock   = 4096
	clRegions = 4
)

var clParams = kvParams{window: 1, blocks: clBlocks, bsize: clBlock}

func clRegion() int { return clParams.sectionLen() }

type clCmd struct {
	Op    string   `json:"op"`
	Peers []string `json:"peers,omitempty"`
	Name  string   `json:"name,omitempty"`
	N     int      `json:"n,omitempty"`
	Inc   string   `json:"inc,omitempty"`
}

type clStats struct {
	FDs, Goroutines    int
	Outbound, Inbound  int
	Endpoints          int
	IPCRegions         int
	Verified, Failures uint64
	FirstFailure       string
	StoreLookups       uint64
	Invalidations      uint64
}

type clReply struct {
	OK          bool              `json:"ok"`
	Err         string            `json:"err,omitempty"`
	Kind        string            `json:"kind,omitempty"` // lookup: found, notfound, unavailable, other; oldprep: peer
	Name        string            `json:"name,omitempty"`
	Incarnation string            `json:"incarnation,omitempty"`
	Millis      int64             `json:"millis,omitempty"`
	Stats       *clStats          `json:"stats,omitempty"`
	Transports  map[string]string `json:"transports,omitempty"`
	Writes      int               `json:"writes,omitempty"`
	Reads       int               `json:"reads,omitempty"`
}

// clChild is one agent process.
type clChild struct {
	a       *agent.Agent
	eng     *engine.Engine
	index   int
	secs    map[string]*engine.Buffer // "host", "gaudi": what peers write into
	scratch *engine.Buffer            // host, a block: gaudi read-backs (target side)

	src, dst map[string]*engine.Buffer // initiator side, per local memory
	staging  *engine.Buffer            // host, a region

	mu       sync.Mutex
	verified uint64
	failures uint64
	first    string
	acks     chan kvMsg
	r        uint64
	oldPrep  *agent.Prepared
}

func clDevice() engine.Config {
	return engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 64 << 20},
		RDMA: engine.RDMAConfig{Disabled: true}, Logger: zerolog.Nop()}
}

func clusterChildMain(name string) int {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		_ = out.Encode(clReply{Err: err.Error()})
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl, _ := time.ParseDuration(os.Getenv(envClusterTTL))
	idx, _ := strconv.Atoi(os.Getenv(envClusterIndex))
	st, err := etcdmeta.Open(ctx, etcdmeta.Config{Endpoints: strings.Split(os.Getenv("GXFER_ETCDTEST_URL"), ","),
		TTL: ttl, RequestTimeout: time.Second, DialTimeout: 10 * time.Second})
	if err != nil {
		return fail(err)
	}
	eng, err := engine.New(clDevice())
	if err != nil {
		st.Close()
		return fail(err)
	}
	defer eng.Close()
	a, err := agent.New(ctx, agent.Config{Name: name, Engine: eng, Store: st,
		TCP: os.Getenv(envClusterTCP), Unix: os.Getenv(envClusterUnix)})
	if err != nil {
		return fail(err)
	}
	defer a.Close()
	c := &clChild{a: a, eng: eng, index: idx, secs: map[string]*engine.Buffer{},
		src: map[string]*engine.Buffer{}, dst: map[string]*engine.Buffer{}, acks: make(chan kvMsg, 1)}
	for _, m := range []string{"host", "gaudi"} {
		loc := engine.Host
		if m == "gaudi" {
			loc = engine.Gaudi(0)
		}
		for _, b := range []struct {
			set map[string]*engine.Buffer
			n   int
		}{{c.secs, clRegions * clRegion()}, {c.src, clRegion()}, {c.dst, clRegion()}} {
			buf, err := eng.Alloc(b.n, loc)
			if err != nil {
				return fail(err)
			}
			b.set[m] = buf
		}
		if err := a.Publish(m, c.secs[m].All()); err != nil {
			return fail(err)
		}
	}
	if c.scratch, err = eng.Alloc(clRegion(), engine.Host); err != nil {
		return fail(err)
	}
	if c.staging, err = eng.Alloc(clRegion(), engine.Host); err != nil {
		return fail(err)
	}
	go c.serve(ctx)
	_ = out.Encode(clReply{OK: true, Name: name, Incarnation: fmt.Sprintf("%016x", a.Incarnation())})

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var cmd clCmd
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			return fail(err)
		}
		if cmd.Op == "quit" {
			_ = out.Encode(clReply{OK: true})
			return 0
		}
		_ = out.Encode(c.do(ctx, cmd))
	}
	return 0
}

// serve is the target side: it checks each request's blocks when its
// notification arrives and acknowledges it; acknowledgements of this
// agent's requests go to acks.
func (c *clChild) serve(ctx context.Context) {
	perm := clParams.perm() // seed 0: requests differ by r
	for {
		n, err := c.a.Recv(ctx)
		if err != nil {
			return
		}
		m, err := decodeKVMsg(n.Msg)
		if err == nil && m.kind == kvAck {
			c.acks <- m
			continue
		}
		if err == nil && m.kind == kvReq {
			buf, ok := c.secs[m.section]
			if !ok {
				err = fmt.Errorf("no section %q", m.section)
			} else {
				err = checkRequest(ctx, c.eng, buf, c.scratch, m, perm)
			}
		}
		c.mu.Lock()
		if err != nil {
			c.failures++
			if c.first == "" {
				c.first = fmt.Sprintf("from %s: %v", n.From, err)
			}
		} else {
			c.verified++
		}
		c.mu.Unlock()
		if err == nil {
			ack := kvMsg{kind: kvAck, p: m.p, r: m.r, at: time.Now().UnixNano()}
			go func() { _ = c.a.Notify(ctx, n.From, ack.encode()) }() // never block the receive loop
		}
	}
}

func (c *clChild) do(ctx context.Context, cmd clCmd) clReply {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	switch cmd.Op {
	case "xfer":
		return c.xfer(ctx, cmd)
	case "lookup":
		p, err := c.a.Peer(ctx, cmd.Name)
		switch {
		case err == nil:
			return clReply{OK: true, Kind: "found", Incarnation: fmt.Sprintf("%016x", p.Incarnation())}
		case errors.Is(err, meta.ErrNotFound):
			return clReply{OK: true, Kind: "notfound", Err: err.Error()}
		case errors.Is(err, meta.ErrUnavailable):
			return clReply{OK: true, Kind: "unavailable", Err: err.Error()}
		}
		return clReply{OK: true, Kind: "other", Err: err.Error()}
	case "waitgone":
		// Until the named agent's incarnation cmd.Inc is no longer
		// served: its record left etcd (or was replaced).
		start := time.Now()
		for {
			p, err := c.a.Peer(ctx, cmd.Name)
			if errors.Is(err, meta.ErrNotFound) || (err == nil && fmt.Sprintf("%016x", p.Incarnation()) != cmd.Inc) {
				return clReply{OK: true, Millis: time.Since(start).Milliseconds()}
			}
			select {
			case <-ctx.Done():
				return clReply{Err: fmt.Sprintf("%s still there after %v (last: %v)", cmd.Name, time.Since(start), err)}
			case <-time.After(20 * time.Millisecond):
			}
		}
	case "prep":
		p, err := c.prepare(ctx, cmd.Name, "host", "host")
		if err != nil {
			return clReply{Err: err.Error()}
		}
		c.oldPrep = p
		return clReply{OK: true}
	case "oldprep":
		err := c.oldPrep.Write(ctx, nil).Wait(ctx)
		var pe *agent.PeerError
		if errors.Is(err, engine.ErrPeer) && errors.As(err, &pe) {
			return clReply{OK: true, Kind: "peer", Err: err.Error(), Incarnation: fmt.Sprintf("%016x", pe.Incarnation)}
		}
		return clReply{Err: fmt.Sprintf("a post of the dead incarnation's prepared lists: %v", err)}
	case "stats":
		return clReply{OK: true, Stats: c.stats()}
	}
	return clReply{Err: "unknown op " + cmd.Op}
}

func (c *clChild) stats() *clStats {
	runtime.GC()
	fds, _ := os.ReadDir("/proc/self/fd")
	as := c.a.Stats()
	es := c.eng.Stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	return &clStats{FDs: len(fds), Goroutines: runtime.NumGoroutine(), Outbound: as.Outbound, Inbound: as.Inbound,
		Endpoints: len(c.eng.EndpointStats()), IPCRegions: es.IPCCache.Regions,
		Verified: c.verified, Failures: c.failures, FirstFailure: c.first,
		StoreLookups: as.StoreLookups, Invalidations: as.Invalidations}
}

func (c *clChild) prepare(ctx context.Context, peer, lmem, sec string) (*agent.Prepared, error) {
	perm := clParams.perm()
	local := make([]engine.Slice, clBlocks)
	remote := make([]agent.RemoteDesc, clBlocks)
	for i := range local {
		local[i] = c.src[lmem].Slice(i*clBlock, clBlock)
		remote[i] = agent.RemoteDesc{Section: sec, Off: c.index*clRegion() + perm[i]*clBlock, Len: clBlock}
	}
	return c.a.Prepare(ctx, peer, local, remote)
}

// xfer runs cmd.N rounds with each peer, for every memory pair (local
// host or gaudi, the peer's host or gaudi section): a descriptor-list
// write with a notification (the peer checks the bytes when it arrives
// and acknowledges), then a descriptor-list read of the same blocks into
// other memory, checked here.
func (c *clChild) xfer(ctx context.Context, cmd clCmd) clReply {
	rep := clReply{OK: true, Transports: map[string]string{}}
	perm := clParams.perm()
	for _, peer := range cmd.Peers {
		for _, lmem := range []string{"host", "gaudi"} {
			for _, sec := range []string{"host", "gaudi"} {
				for range cmd.N {
					c.r++
					r := c.r
					if err := c.fill(ctx, c.src[lmem], r, false); err != nil {
						return clReply{Err: err.Error()}
					}
					descs := make([]agent.Desc, clBlocks)
					for i := range descs {
						descs[i] = agent.Desc{Local: c.src[lmem].Slice(i*clBlock, clBlock), Section: sec,
							Off: c.index*clRegion() + perm[i]*clBlock}
					}
					msg := kvMsg{kind: kvReq, p: clParams, r: r, section: sec, base: uint64(c.index * clRegion()),
						at: time.Now().UnixNano()}
					if err := c.a.Write(ctx, peer, descs, agent.WithNotify(msg.encode())).Wait(ctx); err != nil {
						return clReply{Err: fmt.Sprintf("write %s->%s:%s: %v", lmem, peer, sec, err)}
					}
					select {
					case m := <-c.acks:
						if m.r != r {
							return clReply{Err: fmt.Sprintf("acknowledgement of %d, want %d", m.r, r)}
						}
					case <-ctx.Done():
						return clReply{Err: fmt.Sprintf("no acknowledgement of request %d from %s (%s->%s)", r, peer, lmem, sec)}
					}
					rep.Writes++
					// Read the blocks back into other memory, scrambled first.
					if err := c.fill(ctx, c.dst[lmem], ^r, true); err != nil {
						return clReply{Err: err.Error()}
					}
					for i := range descs {
						descs[i].Local = c.dst[lmem].Slice(i*clBlock, clBlock)
					}
					if err := c.a.Read(ctx, peer, descs).Wait(ctx); err != nil {
						return clReply{Err: fmt.Sprintf("read %s<-%s:%s: %v", lmem, peer, sec, err)}
					}
					if err := c.checkLocal(ctx, c.dst[lmem], r); err != nil {
						return clReply{Err: fmt.Sprintf("read %s<-%s:%s request %d: %v", lmem, peer, sec, r, err)}
					}
					rep.Reads++
				}
			}
		}
		p, err := c.a.Peer(ctx, peer)
		if err != nil {
			return clReply{Err: err.Error()}
		}
		tr, _ := p.Transport()
		rep.Transports[peer] = tr.String()
	}
	return rep
}

// fill writes request r's blocks into b (in order: block i at i*clBlock).
func (c *clChild) fill(ctx context.Context, b *engine.Buffer, r uint64, _ bool) error {
	h := b
	if b.Location() != engine.Host {
		h = c.staging
	}
	for i := range clBlocks {
		fillBlock(h.Bytes()[i*clBlock:(i+1)*clBlock], clParams.seed, r, i)
	}
	if h != b {
		return c.eng.CopySync(ctx, b.Slice(0, clRegion()), h.Slice(0, clRegion()))
	}
	return nil
}

func (c *clChild) checkLocal(ctx context.Context, b *engine.Buffer, r uint64) error {
	h := b
	if b.Location() != engine.Host {
		h = c.staging
		if err := c.eng.CopySync(ctx, h.Slice(0, clRegion()), b.Slice(0, clRegion())); err != nil {
			return err
		}
	}
	for i := range clBlocks {
		if at := checkBlock(h.Bytes()[i*clBlock:(i+1)*clBlock], clParams.seed, r, i); at >= 0 {
			return fmt.Errorf("block %d: byte %d differs", i, at)
		}
	}
	return nil
}

// clSockPath is a child's unix socket.
func clSockPath(dir, name string) string { return filepath.Join(dir, name+".sock") }
