package engine

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hostile peer's role (runHostile) when the test binary is
// re-executed by startHostile: it dials the listener at hostileEnv
// hostileNEnv times, carries one activity of kind hostileActEnv on each
// endpoint, and then leaves them idle.
const (
	hostileEnv    = "GXFER_ENGINE_TEST_HOSTILE"      // the listener's unix socket
	hostileNEnv   = "GXFER_ENGINE_TEST_HOSTILE_N"    // how many endpoints
	hostileActEnv = "GXFER_ENGINE_TEST_HOSTILE_ACT"  // put, refused or msg
	hostileKeyEnv = "GXFER_ENGINE_TEST_HOSTILE_KEYS" // hex keys: a good one, a stale one
)

// runHostile is the hostile peer. It prints READY once its endpoints
// carried their activity; on "use" it makes a Put on each and prints OK i,
// PEER i (the Put failed with ErrPeer) or ERR i, then DONE.
func runHostile(addr string) int {
	fail := func(what string, err error) int {
		fmt.Println("ERR", what, err)
		return 1
	}
	var keys []RemoteKey
	for _, h := range strings.Fields(os.Getenv(hostileKeyEnv)) {
		b, err := hex.DecodeString(h)
		if err != nil {
			return fail("key", err)
		}
		k, err := ParseRemoteKey(b)
		if err != nil {
			return fail("key", err)
		}
		keys = append(keys, k)
	}
	n, err := strconv.Atoi(os.Getenv(hostileNEnv))
	if err != nil || len(keys) != 2 {
		return fail("args", err)
	}
	good, stale := keys[0], keys[1]
	e, err := New(Config{Devices: DevicesNone})
	if err != nil {
		return fail("new", err)
	}
	defer e.Close()
	src, err := e.Alloc(4096, Host)
	if err != nil {
		return fail("alloc", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var eps []*Endpoint
	for range n {
		ep, err := e.Dial(ctx, "unix", addr)
		if err != nil {
			return fail("dial", err)
		}
		eps = append(eps, ep)
		switch act := os.Getenv(hostileActEnv); act {
		case "put":
			err = ep.PutSync(ctx, src.Slice(0, 64), good)
		case "refused": // the owner refuses it: the key's buffer is freed
			if err = ep.PutSync(ctx, src.Slice(0, 64), stale); err != nil && !errors.Is(err, ErrPeer) {
				err = nil
			} else {
				err = fmt.Errorf("the freed buffer's Put ended with %v, not a refusal", err)
			}
		case "msg":
			err = ep.Send(ctx, []byte("hello"))
		default:
			err = errors.New("unknown activity " + act)
		}
		if err != nil {
			return fail("activity", err)
		}
	}
	fmt.Println("READY")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "use" {
			continue
		}
		for i, ep := range eps {
			switch err := ep.PutSync(ctx, src.Slice(0, 64), good); {
			case err == nil:
				fmt.Println("OK", i)
			case errors.Is(err, ErrPeer):
				fmt.Println("PEER", i)
			default:
				fmt.Println("ERR", i, err)
			}
		}
		fmt.Println("DONE")
	}
	return 0
}

// hostile is the hostile peer's process.
type hostile struct {
	cmd   *exec.Cmd
	stdin *os.File
	out   *bufio.Scanner
}

// startHostile starts the hostile peer on the listener at addr (n
// endpoints, each carrying act) and returns once it is READY.
func startHostile(t *testing.T, addr string, n int, act string, good, stale RemoteKey) *hostile {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostileEnv+"="+addr, hostileNEnv+"="+strconv.Itoa(n), hostileActEnv+"="+act,
		hostileKeyEnv+"="+hex.EncodeToString(good.Bytes())+" "+hex.EncodeToString(stale.Bytes()))
	cmd.Stderr = os.Stderr
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdin = pr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pr.Close()
	h := &hostile{cmd: cmd, stdin: pw, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		h.stdin.Close()
		_ = h.cmd.Wait()
	})
	require.True(t, h.out.Scan(), "the hostile peer exited")
	require.Equal(t, "READY", h.out.Text())
	return h
}

// use has the hostile peer make a Put on each endpoint; it returns how
// many succeeded and how many failed with ErrPeer.
func (h *hostile) use(t *testing.T) (ok, peerErr int) {
	t.Helper()
	_, err := fmt.Fprintln(h.stdin, "use")
	require.NoError(t, err)
	for h.out.Scan() {
		switch f := strings.Fields(h.out.Text()); f[0] {
		case "DONE":
			return ok, peerErr
		case "OK":
			ok++
		case "PEER":
			peerErr++
		default:
			t.Fatalf("hostile peer: %s", h.out.Text())
		}
	}
	t.Fatal("the hostile peer exited")
	return 0, 0
}

// TestPeerIdleEvictHostileLockout: a hostile peer (another process, so
// another source) fills a listener's MaxPeers with endpoints that each
// carried one request (or a refused one, or a message the owner took)
// and then stay idle. Once they have been idle for Config.PeerIdleEvict, a newcomer
// gets in, closing one of them, whose peer's next Put fails with
// ErrPeer; the others still work. With a negative PeerIdleEvict (never)
// the newcomer keeps getting ErrTooManyPeers. Before PeerIdleEvict, an
// endpoint that had carried one request was busy for ever: every
// newcomer was refused for the listener's whole life.
func TestPeerIdleEvictHostileLockout(t *testing.T) {
	const maxPeers = 4
	tests := []struct {
		name      string
		act       string
		idleEvict time.Duration
		admitted  bool // the newcomer gets in
	}{
		{"request", "put", 200 * time.Millisecond, true},
		{"refused request", "refused", 200 * time.Millisecond, true},
		{"message", "msg", 200 * time.Millisecond, true},
		{"request never evicted", "put", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			owner := newEngine(t, Config{Devices: DevicesNone, MaxPeers: maxPeers, PeerIdleEvict: tt.idleEvict})
			l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
			require.NoError(t, err)
			defer l.Close()
			b, err := owner.Alloc(4096, Host)
			require.NoError(t, err)
			k, err := b.Export()
			require.NoError(t, err)
			freed, err := owner.Alloc(4096, Host)
			require.NoError(t, err)
			fk, err := freed.Export()
			require.NoError(t, err)
			require.NoError(t, freed.Free())
			// Narrowed keys: the owner serves each Put (no mapping of
			// the whole buffer at the peer), so a closed endpoint is
			// seen at its next Put.
			h := startHostile(t, l.Addr(), maxPeers, tt.act, k.Slice(0, 64), fk.Slice(0, 64))
			if tt.act == "msg" { // the owner takes the messages
				for range maxPeers {
					actx, cancel := context.WithTimeout(ctx, 10*time.Second)
					a, err := l.Accept(actx)
					require.NoError(t, err)
					m, err := a.Recv(actx)
					cancel()
					require.NoError(t, err)
					require.Equal(t, "hello", string(m))
				}
			}

			newcomer := newEngine(t, Config{Devices: DevicesNone})
			src, err := newcomer.Alloc(4096, Host)
			require.NoError(t, err)
			attempts := 40 // 2 s: ten times PeerIdleEvict
			if tt.admitted {
				attempts = 200 // a loaded machine
			}
			var ep *Endpoint
			for range attempts {
				if ep, err = newcomer.Dial(ctx, "unix", l.Addr()); err == nil {
					break
				}
				require.ErrorIs(t, err, ErrTooManyPeers)
				time.Sleep(50 * time.Millisecond)
			}
			if !tt.admitted {
				require.ErrorIs(t, err, ErrTooManyPeers)
				ok, peerErr := h.use(t)
				require.Equal(t, [2]int{maxPeers, 0}, [2]int{ok, peerErr}, "the hostile peer's endpoints (ok, ErrPeer)")
				return
			}
			require.NoError(t, err, "the newcomer was locked out")
			require.NoError(t, ep.PutSync(ctx, src.Slice(0, 64), k.Slice(0, 64)))
			ok, peerErr := h.use(t)
			require.Equal(t, [2]int{maxPeers - 1, 1}, [2]int{ok, peerErr}, "the hostile peer's endpoints (ok, ErrPeer)")
			require.NoError(t, ep.Close())
		})
	}
}

// TestPeerIdleEvictSparesInFlight: an endpoint whose request the owner is
// serving (its copy into the owner's Gaudi memory runs, held by a slow
// device) is not closed to make room however long ago its request came:
// the newcomer is refused and the request completes. Once it has, the
// endpoint is idle and the next newcomer closes it.
func TestPeerIdleEvictSparesInFlight(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 64 << 20}, MaxPeers: 1, PeerIdleEvict: minPeerIdleEvict})
	peer := newEngine(t, Config{Devices: DevicesNone})
	other := newEngine(t, Config{Devices: DevicesNone})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	defer l.Close()
	d, err := owner.Alloc(4096, Gaudi(0))
	require.NoError(t, err)
	k, err := d.Export()
	require.NoError(t, err)
	src, err := peer.Alloc(4096, Host)
	require.NoError(t, err)
	ep, err := peer.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)

	sim := owner.cp.Devs[0].Sim
	before := sim.Stats()
	sim.DelayNextCS(1, 3*time.Second)
	put := ep.Put(ctx, src.Slice(0, 4096), k)
	for i := 0; sim.Stats().CSSubmitted == before.CSSubmitted; i++ {
		require.Less(t, i, 10000, "the owner never started the copy")
		require.False(t, put.IsDone(), "the Put ended before its copy: %v", put.Err())
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * minPeerIdleEvict) // the request came long before PeerIdleEvict ago
	_, err = other.Dial(ctx, "unix", l.Addr())
	require.ErrorIs(t, err, ErrTooManyPeers)
	require.Equal(t, before.CSCompleted, sim.Stats().CSCompleted, "the copy ended before the newcomer came: the test proved nothing")
	require.NoError(t, put.Wait(ctx))
	require.NoError(t, ep.Err())

	// Idle now: the next newcomer closes it.
	var ep2 *Endpoint
	for i := 0; ; i++ {
		if ep2, err = other.Dial(ctx, "unix", l.Addr()); err == nil {
			break
		}
		require.ErrorIs(t, err, ErrTooManyPeers)
		require.Less(t, i, 200, "the idle endpoint was never closed")
		time.Sleep(10 * time.Millisecond)
	}
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.NoError(t, ep2.Close())
}
