package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/wire"
)

const (
	childEnv    = "GXFER_ENGINE_TEST_CHILD" // the address the peer listens at
	childNetEnv = "GXFER_ENGINE_TEST_NET"   // its network: "unix" (default) or "tcp"
)

// TestMain runs the peer role when the test binary is re-executed as a
// child process, and the tests otherwise.
func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runPeer(os.Getenv(childNetEnv), path))
	}
	if addr := os.Getenv(hostileEnv); addr != "" {
		os.Exit(runHostile(addr))
	}
	testutil.Main(m)
}

// peerSize is the size of every buffer the peer exports.
const peerSize = 64<<20 + 4096

// runPeer is the child: an engine listening at path that exports a host
// and a Gaudi buffer, prints their keys, and obeys commands on stdin.
func runPeer(network, path string) int {
	if network == "" {
		network = "unix"
	}
	e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer e.Close()
	l, err := e.Listen(network, path)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer l.Close()
	fmt.Println("ADDR", l.Addr())
	h, _ := e.Alloc(peerSize, Host)
	d, _ := e.Alloc(peerSize, Gaudi(0))
	printKeys := func() {
		hk, err1 := h.Export()
		dk, err2 := d.Export()
		if err := errors.Join(err1, err2); err != nil {
			fmt.Println("ERR", err)
			return
		}
		fmt.Println("KEYS", hex.EncodeToString(hk.Bytes()), hex.EncodeToString(dk.Bytes()))
	}
	printKeys()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "realloc": // free the host buffer and allocate a new one
			_ = h.Free()
			h, _ = e.Alloc(peerSize, Host)
			printKeys()
		case "slow": // make the device slow so transfers are in flight
			e.cp.Devs[0].Sim.DelayNextCS(1000, 200*time.Millisecond)
			fmt.Println("OK")
		}
	}
	return 0
}

type peerProc struct {
	cmd   *exec.Cmd
	stdin *os.File
	out   *bufio.Scanner
	path  string
	host  RemoteKey
	dev   RemoteKey
}

func startPeer(t testing.TB) *peerProc {
	t.Helper()
	return startPeerAt(t, "unix", filepath.Join(t.TempDir(), "peer.sock"))
}

// startPeerAt starts the peer listening on network at addr; prefix, if
// given, runs it through a wrapper (ip netns exec NS).
func startPeerAt(t testing.TB, network, addr string, prefix ...string) *peerProc {
	t.Helper()
	args := append(append([]string(nil), prefix...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+addr, childNetEnv+"="+network)
	cmd.Stderr = os.Stderr
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdin = pr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pr.Close()
	p := &peerProc{cmd: cmd, stdin: pw, out: bufio.NewScanner(stdout)}
	require.True(t, p.out.Scan(), "peer exited")
	a, ok := strings.CutPrefix(p.out.Text(), "ADDR ")
	require.True(t, ok, p.out.Text())
	p.path = a
	p.readKeys(t)
	t.Cleanup(func() {
		p.stdin.Close()
		_ = p.cmd.Wait()
	})
	return p
}

func (p *peerProc) readKeys(t testing.TB) {
	t.Helper()
	require.True(t, p.out.Scan(), "peer exited")
	f := strings.Fields(p.out.Text())
	require.Equal(t, "KEYS", f[0], p.out.Text())
	for i, k := range []*RemoteKey{&p.host, &p.dev} {
		b, err := hex.DecodeString(f[i+1])
		require.NoError(t, err)
		*k, err = ParseRemoteKey(b)
		require.NoError(t, err)
	}
}

func (p *peerProc) command(t *testing.T, c string) {
	_, err := fmt.Fprintln(p.stdin, c)
	require.NoError(t, err)
}

func TestIPCPutGetEveryPair(t *testing.T) {
	p := startPeer(t)
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	ep, err := e.Dial(context.Background(), "unix", p.path)
	require.NoError(t, err)
	require.Contains(t, ep.Peer(), "pid")
	require.Equal(t, TransportIPC, ep.Transport())
	putGetEveryPair(t, e, ep, p)
	st := e.shm().CacheStats()
	require.Equal(t, uint64(1), st.Misses, "the peer's host buffer is imported once")
	require.NoError(t, ep.Close())
}

// putGetEveryPair puts and gets every size between every local memory
// type and both of the peer's buffers, and verifies every byte.
func putGetEveryPair(t *testing.T, e *Engine, ep *Endpoint, p *peerProc) {
	ctx := context.Background()
	sizes := []int{1, 8, 4097, 1<<20 + 5, 64 << 20}
	if testing.Short() {
		sizes = sizes[:4]
	}
	src, _ := e.Alloc(64<<20, Host)
	back, _ := e.Alloc(64<<20, Host)
	fill(src.Bytes(), 77)
	for _, local := range []Location{Host, Gaudi(0)} {
		lb, err := e.Alloc(64<<20+4096, local)
		require.NoError(t, err)
		for _, remote := range []RemoteKey{p.host, p.dev} {
			for _, n := range sizes {
				name := fmt.Sprintf("%s->%s/%d", local, remote.Location(), n)
				off := 4096 - n%4096
				if off+n > 64<<20+4096 {
					off = 0
				}
				require.NoError(t, e.CopySync(ctx, lb.Slice(off, n), src.Slice(0, n)), name)
				require.NoError(t, ep.PutSync(ctx, lb.Slice(off, n), remote.Slice(3, n)), name)
				out, err := e.Alloc(n+4096, local)
				require.NoError(t, err)
				require.NoError(t, ep.GetSync(ctx, out.Slice(4096-n%4096, n), remote.Slice(3, n)), name)
				clear(back.Bytes()[:n])
				require.NoError(t, e.CopySync(ctx, back.Slice(0, n), out.Slice(4096-n%4096, n)), name)
				require.True(t, bytes.Equal(src.Bytes()[:n], back.Bytes()[:n]), "%s: data differs", name)
				require.NoError(t, out.Free())
			}
		}
		require.NoError(t, lb.Free())
	}
	require.NoError(t, src.Free())
	require.NoError(t, back.Free())
}

func TestIPCRefusals(t *testing.T) {
	p := startPeer(t)
	e := newEngine(t, Config{})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(t, err)
	h, _ := e.Alloc(4096, Host)

	// A range outside the key is refused locally...
	require.ErrorIs(t, ep.PutSync(ctx, h.All(), p.dev.Slice(peerSize-10, 4096)), ErrInvalid)
	// An edited view (the view is not signed) is caught before sending...
	edited := p.dev
	edited.k.Offset, edited.k.Len = peerSize-10, 4096
	require.ErrorIs(t, ep.PutSync(ctx, h.All(), edited), ErrInvalid)
	// ...and a request beyond the view is refused by the owner.
	lk, err := h.Export()
	require.NoError(t, err)
	for _, off := range []uint64{4096, 1 << 62} {
		id := ep.ch.NewID()
		req := wire.Request{RequestID: id, Key: p.dev.Slice(0, 8192).k, Offset: off, Length: 8192,
			Local: wire.Local{Kind: wire.LocalKey, Key: lk.k}}
		f, err := ep.ch.RoundTrip(ctx, id, &wire.Put{Request: req})
		require.NoError(t, err)
		m, err := f.Message()
		require.NoError(t, err)
		require.IsType(t, &wire.Error{}, m)
		require.Equal(t, wire.StatusOutOfRange, m.(*wire.Error).Code)
	}
	// A forged key (signed fields changed) is refused by the owner.
	for _, k := range []RemoteKey{p.dev, p.host} {
		forged := k
		forged.k.Base += 4096
		forged = forged.Slice(0, 4096)
		err := ep.PutSync(ctx, h.All(), forged)
		require.Error(t, err)
		require.True(t, errors.Is(err, ErrInvalid) || errors.Is(err, ErrPeer), "%v", err)
	}
	// Registered memory is not shareable.
	reg, _ := e.Register(make([]byte, 4096))
	_, err = reg.Export()
	require.ErrorIs(t, err, ErrNotSupported)
	// The endpoint still works.
	require.NoError(t, ep.PutSync(ctx, h.All(), p.dev.Slice(0, 4096)))
}

func TestIPCInvalidation(t *testing.T) {
	p := startPeer(t)
	e := newEngine(t, Config{})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(t, err)
	h, _ := e.Alloc(4096, Host)
	fill(h.Bytes(), 1)
	old := p.host
	require.NoError(t, ep.PutSync(ctx, h.All(), old.Slice(0, 4096)))
	p.command(t, "realloc")
	p.readKeys(t)
	require.Eventually(t, func() bool { return e.shm().CacheStats().Invalidations == 1 }, 5*time.Second, time.Millisecond,
		"the exporter's free invalidates the importer's cached mapping")
	err = ep.PutSync(ctx, h.All(), old.Slice(0, 4096))
	require.ErrorIs(t, err, ErrInvalid, "a stale key is refused")
	fill(h.Bytes(), 2)
	require.NoError(t, ep.PutSync(ctx, h.All(), p.host.Slice(0, 4096)))
	back, _ := e.Alloc(4096, Host)
	require.NoError(t, ep.GetSync(ctx, back.All(), p.host.Slice(0, 4096)))
	require.Equal(t, h.Bytes(), back.Bytes())
}

func countMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return bytes.Count(b, []byte("memfd:gxfer"))
}

func TestIPCPeerKilled(t *testing.T) {
	fdsBefore := testutil.OpenFDs()
	mapsBefore := countMaps(t)
	p := startPeer(t)
	e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 512 << 20}})
	require.NoError(t, err)
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(t, err)
	h, _ := e.Alloc(1<<20, Host)
	require.NoError(t, ep.PutSync(ctx, h.All(), p.host.Slice(0, 1<<20)))
	p.command(t, "slow")
	require.True(t, p.out.Scan())
	var futs []*Future
	for i := 0; i < 16; i++ {
		futs = append(futs, ep.Put(ctx, h.All(), p.dev.Slice(i<<20, 1<<20)))
	}
	t0 := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	defer func() { t.Logf("futures resolved %v after the kill", time.Since(t0)) }()
	for i, f := range futs {
		<-f.Done()
		t.Logf("future %d: %v at %v", i, f.Err(), time.Since(t0))
		require.ErrorIs(t, f.Err(), ErrPeer, "future %d", i)
		require.Contains(t, f.Err().Error(), "pid")
	}
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.Zero(t, e.shm().CacheStats().Regions, "the dead peer's imported regions are released")
	// The engine keeps working.
	d, _ := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, e.CopySync(ctx, d.All(), h.All()))
	require.NoError(t, e.Close())
	p.stdin.Close()
	_ = p.cmd.Wait()
	require.Empty(t, testutil.LeakedFDs(fdsBefore))
	require.Equal(t, mapsBefore, countMaps(t))
}

func TestRemoteKeyParse(t *testing.T) {
	_, err := ParseRemoteKey([]byte("short"))
	require.ErrorIs(t, err, ErrInvalid)
	e := newEngine(t, Config{Devices: DevicesNone})
	h, _ := e.Alloc(100, Host)
	k, err := h.Export()
	require.NoError(t, err)
	k2, err := ParseRemoteKey(k.Bytes())
	require.NoError(t, err)
	require.Equal(t, 100, k2.Len())
	require.Equal(t, Host, k2.Location())
	require.ErrorIs(t, k2.Slice(90, 20).Err(), ErrInvalid)
	require.Equal(t, 10, k2.Slice(90, 10).Len())
	var wk wire.RemoteKey
	require.NoError(t, wk.UnmarshalBinary(k.Bytes()))
	require.NoError(t, e.ident.signer.Verify(&wk))
}

// BenchmarkIPCPut4K: 4 KiB puts into a peer process's host buffer, with the
// import cached (the mapping is made once) and uncached (invalidated after
// every put, so each one imports the memfd again: a request, an fd pass
// and an mmap).
func BenchmarkIPCPut4K(b *testing.B) {
	for _, cached := range []bool{true, false} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			p := startPeer(b)
			e := newEngine(b, Config{Devices: DevicesNone})
			ctx := context.Background()
			ep, err := e.Dial(ctx, "unix", p.path)
			require.NoError(b, err)
			h, _ := e.Alloc(4096, Host)
			k := p.host.Slice(0, 4096)
			for b.Loop() {
				if err := ep.PutSync(ctx, h.All(), k); err != nil {
					b.Fatal(err)
				}
				if !cached {
					e.shm().Invalidate(ep.ch.Peer(), k.k.AllocID, k.k.Generation)
				}
			}
			b.ReportMetric(float64(e.shm().CacheStats().Misses), "imports")
		})
	}
}

func TestIPCBinding(t *testing.T) {
	p := startPeer(t)
	e := newEngine(t, Config{})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(t, err)
	h, _ := e.Alloc(4096, Host)
	back, _ := e.Alloc(4096, Host)
	d, _ := e.Alloc(4096, Gaudi(0))
	_, err = ep.Bind(ctx, d.All(), p.host.Slice(0, 4096))
	require.ErrorIs(t, err, ErrNotSupported)
	_, err = ep.Bind(ctx, h.All(), p.host.Slice(0, 100))
	require.ErrorIs(t, err, ErrInvalid)

	put, err := ep.Bind(ctx, h.All(), p.host.Slice(8, 4096))
	require.NoError(t, err)
	get, err := ep.Bind(ctx, back.All(), p.host.Slice(8, 4096))
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		fill(h.Bytes(), uint64(i))
		require.NoError(t, put.Put())
		require.NoError(t, get.Get())
		require.Equal(t, h.Bytes(), back.Bytes())
	}
	require.NoError(t, h.Free(), "Free is deferred while bound")
	require.NoError(t, put.Put())
	require.NoError(t, put.Close())
	require.NoError(t, put.Close())
	require.ErrorIs(t, put.Put(), ErrClosed)

	// The exporter frees the buffer: the binding goes stale.
	p.command(t, "realloc")
	p.readKeys(t)
	require.Eventually(t, func() bool { return get.Get() != nil }, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, get.Get(), ErrInvalid)
	require.NoError(t, get.Close())
}

// BenchmarkIPCBindingPut: 8-byte and 4 KiB puts into a peer's host buffer
// through a Binding, and through the same binding held (without the
// per-call lock, gate and counter).
func BenchmarkIPCBindingPut(b *testing.B) {
	p := startPeer(b)
	e := newEngine(b, Config{Devices: DevicesNone})
	ctx := context.Background()
	ep, err := e.Dial(ctx, "unix", p.path)
	require.NoError(b, err)
	for _, n := range []int{8, 4096} {
		for _, held := range []bool{false, true} {
			name := fmt.Sprintf("size=%d", n)
			if held {
				name += "/held"
			}
			b.Run(name, func(b *testing.B) {
				h, _ := e.Alloc(n, Host)
				bd, err := ep.Bind(ctx, h.All(), p.host.Slice(0, n))
				require.NoError(b, err)
				defer bd.Close()
				put := bd.Put
				if held {
					hd, err := bd.Hold()
					require.NoError(b, err)
					defer hd.Release()
					put = hd.Put
				}
				for b.Loop() {
					if err := put(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
