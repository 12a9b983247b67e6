package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/testutil"
)

// netnsPair is two network namespaces joined by a veth pair, created by
// the test: A (10.213.0.1) and B (10.213.0.2). Only their addresses are
// used.
type netnsPair struct {
	a, b         string
	vethA, vethB string
	addrA, addrB string
}

// newNetnsPair creates the namespaces, or skips the test with the reason
// they cannot be created here.
func newNetnsPair(t *testing.T) *netnsPair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: creating network namespaces needs root (run the tests as root, as CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: the ip command (iproute2) is not installed")
	}
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, len(t.Name())%10)
	n := &netnsPair{a: "gxa" + tag, b: "gxb" + tag, vethA: "gxva" + tag, vethB: "gxvb" + tag,
		addrA: "10.213.0.1", addrB: "10.213.0.2"}
	if out, err := exec.Command("ip", "netns", "add", n.a).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot create a network namespace here: ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.a).Run() })
	n.ip(t, "netns", "add", n.b)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.b).Run() })
	n.ip(t, "link", "add", n.vethA, "netns", n.a, "type", "veth", "peer", "name", n.vethB, "netns", n.b)
	n.ip(t, "-n", n.a, "addr", "add", n.addrA+"/24", "dev", n.vethA)
	n.ip(t, "-n", n.b, "addr", "add", n.addrB+"/24", "dev", n.vethB)
	for _, x := range [][2]string{{n.a, n.vethA}, {n.b, n.vethB}, {n.a, "lo"}, {n.b, "lo"}} {
		n.ip(t, "-n", x[0], "link", "set", x[1], "up")
	}
	return n
}

func (n *netnsPair) ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// peerInA starts the test peer inside namespace A, listening on its veth
// address.
func (n *netnsPair) peerInA(t *testing.T) *peerProc {
	return startPeerAt(t, "tcp", n.addrA+":0", "ip", "netns", "exec", n.a)
}

// inB runs fn on a thread switched into namespace B: sockets fn creates
// (a Dial) live in B for good.
func (n *netnsPair) inB(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	require.NoError(t, err)
	defer orig.Close()
	target, err := os.Open("/run/netns/" + n.b)
	require.NoError(t, err)
	defer target.Close()
	require.NoError(t, unix.Setns(int(target.Fd()), unix.CLONE_NEWNET))
	fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime retires it with the
		// goroutine instead of reusing a thread in the wrong namespace.
		t.Errorf("setns back: %v", err)
		return
	}
	runtime.UnlockOSThread()
}

// dialB dials the peer in A from namespace B.
func (n *netnsPair) dialB(t *testing.T, e *Engine, p *peerProc) *Endpoint {
	t.Helper()
	var (
		ep  *Endpoint
		err error
	)
	n.inB(t, func() { ep, err = e.Dial(context.Background(), "tcp", p.path, WithTransport(TransportTCP)) })
	require.NoError(t, err)
	require.Contains(t, ep.Peer(), n.addrA)
	return ep
}

func TestNetnsPutGetEveryPair(t *testing.T) {
	n := newNetnsPair(t)
	p := n.peerInA(t)
	require.True(t, strings.HasPrefix(p.path, n.addrA+":"), p.path)
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	ep := n.dialB(t, e, p)
	require.Equal(t, TransportTCP, ep.Transport())
	putGetEveryPair(t, e, ep, p)
	require.NoError(t, ep.Close())
}

// inFlight starts puts and gets of 4 MiB between host memory here and the
// peer's Gaudi buffer (made slow first, so they are in flight).
func inFlight(t *testing.T, e *Engine, ep *Endpoint, p *peerProc) []*Future {
	t.Helper()
	ctx := context.Background()
	p.command(t, "slow")
	require.True(t, p.out.Scan())
	var futs []*Future
	for i := range 8 {
		h, err := e.Alloc(4<<20, Host)
		require.NoError(t, err)
		if i%2 == 0 {
			futs = append(futs, ep.Put(ctx, h.All(), p.dev.Slice(i<<22, 4<<20)))
		} else {
			futs = append(futs, ep.Get(ctx, h.All(), p.dev.Slice(i<<22, 4<<20)))
		}
	}
	return futs
}

func TestNetnsPeerKilled(t *testing.T) {
	n := newNetnsPair(t)
	fdsBefore := testutil.OpenFDs()
	p := n.peerInA(t)
	e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	require.NoError(t, err)
	ep := n.dialB(t, e, p)
	futs := inFlight(t, e, ep, p)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	for i, f := range futs {
		<-f.Done()
		require.ErrorIs(t, f.Err(), ErrPeer, "future %d", i)
		require.Contains(t, f.Err().Error(), n.addrA, "the error names the peer")
	}
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	// The engine keeps serving others.
	p2 := n.peerInA(t)
	ep2 := n.dialB(t, e, p2)
	h, _ := e.Alloc(4096, Host)
	fill(h.Bytes(), 5)
	require.NoError(t, ep2.PutSync(context.Background(), h.All(), p2.dev.Slice(0, 4096)))
	require.NoError(t, ep2.Close())
	require.NoError(t, e.Close())
	p.stdin.Close()
	_ = p.cmd.Wait()
	p2.stdin.Close()
	_ = p2.cmd.Wait()
	require.Empty(t, testutil.LeakedFDs(fdsBefore))
}

func TestNetnsLinkDown(t *testing.T) {
	n := newNetnsPair(t)
	p := n.peerInA(t)
	e := newEngine(t, Config{PeerTimeout: time.Second, Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	ep := n.dialB(t, e, p)
	futs := inFlight(t, e, ep, p)
	t0 := time.Now()
	n.ip(t, "-n", n.a, "link", "set", n.vethA, "down")
	for i, f := range futs {
		<-f.Done()
		if f.Err() == nil {
			continue // finished before the link went down
		}
		require.ErrorIs(t, f.Err(), ErrPeer, "future %d", i)
		require.Contains(t, f.Err().Error(), n.addrA)
	}
	<-ep.Done()
	t.Logf("endpoint failed %v after the link went down: %v", time.Since(t0), ep.Err())
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.ErrorIs(t, ep.Err(), ErrTimeout)
	require.Contains(t, ep.Err().Error(), "silent")
	// Link up again: a new endpoint works.
	n.ip(t, "-n", n.a, "link", "set", n.vethA, "up")
	ep2 := n.dialB(t, e, p)
	h, _ := e.Alloc(4096, Host)
	require.NoError(t, ep2.PutSync(context.Background(), h.All(), p.host.Slice(0, 4096)))
	require.NoError(t, ep2.Close())
}
