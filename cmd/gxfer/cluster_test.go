package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
)

// clNet is the test's network: a bridge in this namespace and two
// namespaces on it, each with an address; etcd is reached at the bridge's
// address.
type clNet struct {
	br, nsA, nsB   string
	brIP, ipA, ipB string
	vethA, vethB   string
}

func clIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func setupClusterNet(t *testing.T) *clNet {
	tag := fmt.Sprintf("%d", os.Getpid()%1000000)
	sub := 1 + os.Getpid()%250
	n := &clNet{br: "gxcbr" + tag, nsA: "gxcna" + tag, nsB: "gxcnb" + tag, vethA: "gxcva" + tag, vethB: "gxcvb" + tag,
		brIP: fmt.Sprintf("10.218.%d.254", sub), ipA: fmt.Sprintf("10.218.%d.1", sub), ipB: fmt.Sprintf("10.218.%d.2", sub)}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", n.nsA).Run()
		_ = exec.Command("ip", "netns", "del", n.nsB).Run()
		_ = exec.Command("ip", "link", "del", n.br).Run()
	})
	steps := [][]string{
		{"link", "add", n.br, "type", "bridge"},
		{"addr", "add", n.brIP + "/24", "dev", n.br},
		{"link", "set", n.br, "up"},
	}
	for _, ns := range []struct{ ns, veth, ip string }{{n.nsA, n.vethA, n.ipA}, {n.nsB, n.vethB, n.ipB}} {
		steps = append(steps,
			[]string{"netns", "add", ns.ns},
			[]string{"link", "add", ns.veth + "h", "type", "veth", "peer", "name", ns.veth + "n", "netns", ns.ns},
			[]string{"link", "set", ns.veth + "h", "master", n.br},
			[]string{"link", "set", ns.veth + "h", "up"},
			[]string{"-n", ns.ns, "addr", "add", ns.ip + "/24", "dev", ns.veth + "n"},
			[]string{"-n", ns.ns, "link", "set", ns.veth + "n", "up"},
			[]string{"-n", ns.ns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		require.NoError(t, clIP(s...))
	}
	return n
}

// forward relays connections from addr (on the bridge) to target (etcd's
// loopback URL): when either side ends, both do.
func forward(t *testing.T, addr, target string) string {
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				u, err := net.DialTimeout("tcp", target, time.Second)
				if err != nil {
					return
				}
				defer u.Close()
				track(c, true)
				track(u, true)
				defer track(c, false)
				defer track(u, false)
				done := make(chan struct{}, 2)
				cp := func(dst, src net.Conn) {
					buf := make([]byte, 32<<10)
					for {
						n, err := src.Read(buf)
						if n > 0 {
							if _, werr := dst.Write(buf[:n]); werr != nil {
								break
							}
						}
						if err != nil {
							break
						}
					}
					done <- struct{}{}
				}
				go cp(u, c)
				go cp(c, u)
				<-done
				c.Close()
				u.Close()
				<-done
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// clProc is a child agent process.
type clProc struct {
	name, inc string
	cmd       *exec.Cmd
	in        io.WriteCloser
	out       *bufio.Scanner
	waited    chan error
}

func (p *clProc) call(t *testing.T, c clCmd) clReply {
	t.Helper()
	b, _ := json.Marshal(c)
	_, err := p.in.Write(append(b, '\n'))
	require.NoError(t, err, p.name)
	require.True(t, p.out.Scan(), "%s: no answer to %s: %v", p.name, c.Op, p.out.Err())
	var r clReply
	require.NoError(t, json.Unmarshal(p.out.Bytes(), &r), p.out.Text())
	return r
}

// callAll sends c to every process at once and returns their replies.
func callAll(t *testing.T, ps []*clProc, c func(p *clProc) clCmd) []clReply {
	t.Helper()
	reps := make([]clReply, len(ps))
	for i, p := range ps {
		b, _ := json.Marshal(c(p))
		_, err := p.in.Write(append(b, '\n'))
		require.NoError(t, err, p.name)
		_ = i
	}
	for i, p := range ps {
		require.True(t, p.out.Scan(), "%s: no answer: %v", p.name, p.out.Err())
		require.NoError(t, json.Unmarshal(p.out.Bytes(), &reps[i]), p.out.Text())
	}
	return reps
}

func startClProc(t *testing.T, ns, name string, index int, env []string) *clProc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), envClusterChild+"="+name, fmt.Sprintf("%s=%d", envClusterIndex, index))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &clProc{name: name, cmd: cmd, in: in, out: bufio.NewScanner(out), waited: make(chan error, 1)}
	p.out.Buffer(make([]byte, 1<<20), 1<<20)
	require.True(t, p.out.Scan(), "%s did not start: %v", name, p.out.Err())
	var hello clReply
	require.NoError(t, json.Unmarshal(p.out.Bytes(), &hello), p.out.Text())
	require.True(t, hello.OK, "%s: %s", name, hello.Err)
	p.inc = hello.Incarnation
	go func() { p.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.waited
		p.waited <- nil
	})
	return p
}

func (p *clProc) quit(t *testing.T) {
	r := p.call(t, clCmd{Op: "quit"})
	require.True(t, r.OK)
	require.NoError(t, <-p.waited, p.name)
	p.waited <- nil
}

func names(ps []*clProc, except string) []string {
	var out []string
	for _, p := range ps {
		if p.name != except {
			out = append(out, p.name)
		}
	}
	return out
}

func listAgents(t *testing.T, url string) map[string]string {
	t.Helper()
	code, out, errs := gxfer(t, "agents", "-etcd", url, "-json")
	require.Equal(t, exitOK, code, errs)
	var doc agentsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	m := map[string]string{}
	for _, a := range doc.Agents {
		m[a.Name] = a.Incarnation
	}
	return m
}

// TestClusterNetns: four agent processes, two in each of two network
// namespaces joined by a bridge, with a real etcd (see the steps).
func TestClusterNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and a bridge")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	// The lease TTL: long enough that an agent's keep-alives (one a third
	// of it) reach etcd under a loaded CI machine with -race; at 2 s one
	// lapsed once mid-transfer there and every peer dropped a0 as gone.
	const ttl = 5 * time.Second
	n := setupClusterNet(t)
	srv := etcdtest.New(t)
	fwd := forward(t, n.brIP+":0", strings.TrimPrefix(srv.URL(), "http://"))
	dir, err := os.MkdirTemp("", "gxcl")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })

	type spec struct {
		ns, name, ip string
		unix         bool
	}
	specs := []spec{{n.nsA, "a0", n.ipA, true}, {n.nsA, "a1", n.ipA, false}, {n.nsB, "b0", n.ipB, true}, {n.nsB, "b1", n.ipB, false}}
	start := func(i int) *clProc {
		s := specs[i]
		env := []string{"GXFER_ETCDTEST_URL=http://" + fwd, envClusterTCP + "=" + s.ip + ":0", envClusterTTL + "=" + ttl.String()}
		if s.unix {
			env = append(env, envClusterUnix+"="+clSockPath(dir, s.name))
		}
		return startClProc(t, s.ns, s.name, i, env)
	}
	ps := make([]*clProc, len(specs))
	for i := range specs {
		ps[i] = start(i)
	}
	require.Equal(t, map[string]string{"a0": ps[0].inc, "a1": ps[1].inc, "b0": ps[2].inc, "b1": ps[3].inc}, listAgents(t, srv.URL()))

	// 1. Lookups by name, through etcd.
	for _, p := range ps {
		for _, q := range ps {
			if p != q {
				r := p.call(t, clCmd{Op: "lookup", Name: q.name})
				require.Equal(t, "found", r.Kind, "%s looks up %s: %s", p.name, q.name, r.Err)
				require.Equal(t, q.inc, r.Incarnation)
			}
		}
	}

	// 2. Every agent writes to and reads from every other, every memory
	// pair, all at once; each write's notification is checked by its
	// target against the bytes.
	const initialRounds = 48
	xferAll := func(ps []*clProc, rounds int) int {
		reps := callAll(t, ps, func(p *clProc) clCmd { return clCmd{Op: "xfer", Peers: names(ps, p.name), N: rounds} })
		total := 0
		for i, r := range reps {
			require.True(t, r.OK, "%s: %s", ps[i].name, r.Err)
			require.Equal(t, len(ps[i:i+1])*(len(ps)-1)*4*rounds, r.Writes)
			require.Equal(t, r.Writes, r.Reads)
			total += r.Writes
			if rounds == initialRounds {
				t.Logf("%s: transports %v", ps[i].name, r.Transports)
			}
		}
		return total
	}
	writes := xferAll(ps, initialRounds)
	verified := uint64(0)
	for _, p := range ps {
		st := p.call(t, clCmd{Op: "stats"}).Stats
		require.Zero(t, st.Failures, "%s: %s", p.name, st.FirstFailure)
		verified += st.Verified
	}
	require.EqualValues(t, writes, verified)
	t.Logf("%d notifications checked against their data by the targets", verified)

	// 3. SIGKILL b0: the others see it gone within the lease TTL and
	// release its connections, mappings and goroutines; lists prepared
	// for it fail with ErrPeer.
	victim := ps[2]
	rest := []*clProc{ps[0], ps[1], ps[3]}
	before := map[string]*clStats{}
	for _, p := range rest {
		require.True(t, p.call(t, clCmd{Op: "prep", Name: victim.name}).OK)
		before[p.name] = p.call(t, clCmd{Op: "stats"}).Stats
	}
	killed := time.Now()
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	gone := callAll(t, rest, func(*clProc) clCmd { return clCmd{Op: "waitgone", Name: victim.name, Inc: victim.inc} })
	seen := time.Since(killed)
	for i, r := range gone {
		require.True(t, r.OK, "%s: %s", rest[i].name, r.Err)
	}
	t.Logf("SIGKILL of %s seen gone by all in %v (lease TTL %v)", victim.name, seen, ttl)
	require.Less(t, seen, ttl+3*time.Second, "gone within the lease TTL (plus etcd's expiry tick)")
	require.NotContains(t, listAgents(t, srv.URL()), victim.name)
	for _, p := range rest {
		var after *clStats
		poll(t, func() bool {
			after = p.call(t, clCmd{Op: "stats"}).Stats
			return after.Outbound == before[p.name].Outbound-1 && after.Inbound == before[p.name].Inbound-1
		}, 10*time.Second, "%s keeps a connection to the dead agent", p.name)
		b := before[p.name]
		t.Logf("%s released %s: fds %d->%d, goroutines %d->%d, endpoints %d->%d, connections out %d->%d in %d->%d, mapped peer regions %d->%d (RDMA MRs: no RDMA here)",
			p.name, victim.name, b.FDs, after.FDs, b.Goroutines, after.Goroutines, b.Endpoints, after.Endpoints,
			b.Outbound, after.Outbound, b.Inbound, after.Inbound, b.IPCRegions, after.IPCRegions)
		assert.Equal(t, b.Endpoints-2, after.Endpoints, p.name)
		assert.Less(t, after.FDs, b.FDs, p.name)
		assert.Less(t, after.Goroutines, b.Goroutines, p.name)
		assert.LessOrEqual(t, after.IPCRegions, b.IPCRegions, p.name)
		r := p.call(t, clCmd{Op: "oldprep"})
		require.True(t, r.OK, "%s: %s", p.name, r.Err)
		assert.Equal(t, victim.inc, r.Incarnation, "the failure names the dead incarnation")
	}
	<-victim.waited
	victim.waited <- nil

	// 4. Restart it: a new incarnation, found by name, served. The
	// SIGKILLed agent left its unix socket file behind; the restarted
	// one listens on the same path (ipc.Listen replaces a stale socket).
	_, err = os.Lstat(clSockPath(dir, victim.name))
	require.NoError(t, err, "the killed agent's socket file is still there")
	ps[2] = start(2)
	require.NotEqual(t, victim.inc, ps[2].inc)
	for _, p := range rest {
		r := p.call(t, clCmd{Op: "lookup", Name: "b0"})
		require.Equal(t, "found", r.Kind, r.Err)
		require.Equal(t, ps[2].inc, r.Incarnation, "%s: the new incarnation", p.name)
	}
	xferAll(ps, 2)

	// 5. Stop etcd: transfers between connected agents go on; a new
	// lookup fails with meta.ErrUnavailable.
	require.NoError(t, srv.Stop())
	xferAll(ps, 2)
	for _, p := range ps {
		r := p.call(t, clCmd{Op: "lookup", Name: "ghost"})
		require.Equal(t, "unavailable", r.Kind, "%s: %s", p.name, r.Err)
	}

	// 6. Restart etcd: lookups recover, the records are back.
	require.NoError(t, srv.Restart())
	for _, p := range ps {
		poll(t, func() bool {
			return p.call(t, clCmd{Op: "lookup", Name: "ghost"}).Kind == "notfound"
		}, 30*time.Second, p.name)
	}
	want := map[string]string{}
	for _, p := range ps {
		want[p.name] = p.inc
	}
	var got map[string]string
	poll(t, func() bool {
		got = listAgents(t, srv.URL())
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, 60*time.Second, func() string { return fmt.Sprintf("the records are back: want %v, last listed %v", want, got) })
	xferAll(ps, 2)
	for _, p := range ps {
		st := p.call(t, clCmd{Op: "stats"}).Stats
		require.Zero(t, st.Failures, "%s: %s", p.name, st.FirstFailure)
	}
	for _, p := range ps {
		p.quit(t)
	}
	// Each agent's Close revokes its lease; should a revoke time out
	// under load, the record still ends with the lease (TTL 2 s).
	poll(t, func() bool { return len(listAgents(t, srv.URL())) == 0 }, 15*time.Second, "closed agents withdraw their records")
}

// poll calls cond on the test goroutine until it holds, for d at most; a
// lone func() string in msgAndArgs makes the failure's message then.
func poll(t *testing.T, cond func() bool, d time.Duration, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if len(msgAndArgs) == 1 {
				if f, ok := msgAndArgs[0].(func() string); ok {
					msgAndArgs = []any{f()}
				}
			}
			require.FailNow(t, "condition not met within "+d.String(), msgAndArgs...)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
