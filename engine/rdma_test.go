package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/rdmapath"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// These tests need an RDMA device: on a machine without one they skip,
// saying why; testbed/rxe/ci.sh runs them inside the Soft-RoCE VM (with
// GXFER_REQUIRE_RDMA=1, where a missing device fails them).

// rdmaPath is an RDMA endpoint's data path.
func rdmaPath(ep *Endpoint) *rdmapath.Path { return ep.path.(*rdmapath.Path) }

func needRDMA(t testing.TB) {
	t.Helper()
	if err := rdma.Available(); err != nil {
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" {
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but: %v", err)
		}
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %v", err)
	}
}

// rdmaTestConfig is an engine on the test's RDMA device
// ($GXFER_RDMA_DEVICE, GID $GXFER_RDMA_GID; defaults: the first, 0).
func rdmaTestConfig() Config {
	gid, _ := strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	return Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 512 << 20},
		RDMA: RDMAConfig{Device: os.Getenv("GXFER_RDMA_DEVICE"), GIDIndex: gid}}
}

func newRDMAEngine(t testing.TB) *Engine {
	t.Helper()
	e := newEngine(t, rdmaTestConfig())
	require.True(t, e.RDMA().Available, "RDMA unavailable: %s", e.RDMA().Reason)
	return e
}

// rdmaPair is two engines in this process, the second dialed to the first.
func rdmaPair(t testing.TB) (owner, req *Engine, ep *Endpoint, l *Listener) {
	t.Helper()
	owner, req = newRDMAEngine(t), newRDMAEngine(t)
	ep, l = dialRDMA(t, owner, req)
	return owner, req, ep, l
}

// rdmaAccepted is rdmaPair with the owner's side accepted: ab is req's
// endpoint, ba owner's. The test's cleanup closes both and the listener.
func rdmaAccepted(t *testing.T) (owner, req *Engine, ab, ba *Endpoint) {
	t.Helper()
	owner, req, ab, l := rdmaPair(t)
	t.Cleanup(func() { _ = l.Close() })
	ba, err := l.Accept(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ba.Close() })
	t.Cleanup(func() { _ = ab.Close() })
	return owner, req, ab, ba
}

// dialRDMA dials owner from req over RDMA.
func dialRDMA(t testing.TB, owner, req *Engine) (*Endpoint, *Listener) {
	t.Helper()
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ep, err := req.Dial(context.Background(), "tcp", l.Addr())
	require.NoError(t, err)
	require.Equal(t, TransportRDMA, ep.Transport())
	return ep, l
}

// TestRDMADisabled runs everywhere: without a usable device, Auto stays
// TCP and a forced RDMA dial says why not.
func TestRDMADisabled(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}})
	info := e.RDMA()
	require.False(t, info.Available)
	require.Contains(t, info.Reason, "disabled")
	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, err = e.Dial(context.Background(), "tcp", l.Addr(), WithTransport(TransportRDMA))
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), "disabled")
	ep, err := e.Dial(context.Background(), "tcp", l.Addr())
	require.NoError(t, err)
	require.Equal(t, TransportTCP, ep.Transport())
	e2, err := New(Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}, Transport: TransportRDMA})
	require.NoError(t, err, "New does not need RDMA")
	_, err = e2.Listen("tcp", "127.0.0.1:0")
	require.ErrorIs(t, err, ErrNotSupported, "a listener that must use RDMA cannot")
	require.NoError(t, e2.Close())
}

func TestRDMATransportSelection(t *testing.T) {
	needRDMA(t)
	e := newRDMAEngine(t)
	info := e.RDMA()
	t.Logf("RDMA: %+v", info)
	require.NotEmpty(t, info.Device)
	require.NotEmpty(t, info.DMABuf)

	l, err := e.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx := context.Background()
	for _, c := range []struct {
		opt  TransportKind
		want TransportKind
	}{{TransportAuto, TransportRDMA}, {TransportRDMA, TransportRDMA}, {TransportTCP, TransportTCP}} {
		ep, err := e.Dial(ctx, "tcp", l.Addr(), WithTransport(c.opt))
		require.NoError(t, err, c.opt.String())
		require.Equal(t, c.want, ep.Transport(), c.opt.String())
		require.Equal(t, c.want, ep.Stats().Transport)
		require.NoError(t, ep.Close())
	}

	// A peer without RDMA: Auto falls back to TCP, forced RDMA fails.
	plain := newEngine(t, Config{Devices: DevicesNone, RDMA: RDMAConfig{Disabled: true}})
	pl, err := plain.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ep, err := e.Dial(ctx, "tcp", pl.Addr())
	require.NoError(t, err)
	require.Equal(t, TransportTCP, ep.Transport())
	_, err = e.Dial(ctx, "tcp", pl.Addr(), WithTransport(TransportRDMA))
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), "does not offer RDMA")
	// ...and the other way round: it cannot force RDMA towards us.
	_, err = plain.Dial(ctx, "tcp", l.Addr(), WithTransport(TransportRDMA))
	require.ErrorIs(t, err, ErrNotSupported)
}

// TestRDMAPutGetEveryPair puts and gets between every local memory type
// and a peer process's host and (emulated) Gaudi buffers, 1 B to 16 MiB,
// and verifies every byte.
func TestRDMAPutGetEveryPair(t *testing.T) {
	needRDMA(t)
	p := startPeerAt(t, "tcp", "127.0.0.1:0")
	e := newRDMAEngine(t)
	ctx := context.Background()
	ep, err := e.Dial(ctx, "tcp", p.path)
	require.NoError(t, err)
	require.Equal(t, TransportRDMA, ep.Transport())
	require.NotZero(t, p.host.k.RKey, "the peer's host memory is registered and exported with an rkey")
	require.Zero(t, p.dev.k.RKey, "no DMA-BUF regions on Soft-RoCE: the peer's Gaudi memory has no rkey")

	const maxN = 16 << 20
	sizes := []int{1, 8, 4097, 1<<20 + 5, maxN}
	src, _ := e.Alloc(maxN, Host)
	back, _ := e.Alloc(maxN, Host)
	fill(src.Bytes(), 91)
	for _, local := range []Location{Host, Gaudi(0)} {
		lb, err := e.Alloc(maxN+4096, local)
		require.NoError(t, err)
		out, err := e.Alloc(maxN+4096, local)
		require.NoError(t, err)
		for _, remote := range []RemoteKey{p.host, p.dev} {
			for _, n := range sizes {
				name := fmt.Sprintf("%s->%s/%d", local, remote.Location(), n)
				off := 4096 - n%4096
				require.NoError(t, e.CopySync(ctx, lb.Slice(off, n), src.Slice(0, n)), name)
				require.NoError(t, ep.PutSync(ctx, lb.Slice(off, n), remote.Slice(3, n)), name)
				require.NoError(t, ep.GetSync(ctx, out.Slice(off, n), remote.Slice(3, n)), name)
				clear(back.Bytes()[:n])
				require.NoError(t, e.CopySync(ctx, back.Slice(0, n), out.Slice(off, n)), name)
				require.True(t, bytes.Equal(src.Bytes()[:n], back.Bytes()[:n]), "%s: data differs", name)
			}
		}
		require.NoError(t, lb.Free())
		require.NoError(t, out.Free())
	}
	st := ep.Stats()
	t.Logf("endpoint stats: %+v; RDMA: %+v", st, e.RDMA())
	k := uint64(len(sizes)) * 2 // a put and a get per size
	require.Equal(t, TransportRDMA, st.Transport)
	require.Equal(t, k, st.ZeroCopy, "host <-> peer host: RDMA straight between the buffers")
	require.Equal(t, k, st.Staged, "Gaudi <-> peer host: staged through pinned host buffers")
	require.Equal(t, 2*k, st.Delegated, "into the peer's Gaudi memory: the peer moves the data")
	require.Zero(t, st.BytesOut+st.BytesIn, "no data on the TCP connection")
	require.NoError(t, ep.Close())
}

// TestRDMABothSides: the acceptor puts and gets on the dialer's memory
// too, and serves the dialer's delegated requests; in-process, so both
// sides' counters are visible.
func TestRDMABothSides(t *testing.T) {
	needRDMA(t)
	owner, req, ep, l := rdmaPair(t)
	ctx := context.Background()
	back, err := l.Accept(ctx)
	require.NoError(t, err)
	require.Equal(t, TransportRDMA, back.Transport())

	for _, loc := range []Location{Host, Gaudi(0)} {
		const n = 3<<20 + 17
		theirs, _ := owner.Alloc(n, loc)
		tk, err := theirs.Export()
		require.NoError(t, err)
		mine, _ := req.Alloc(n, loc)
		mk, err := mine.Export()
		require.NoError(t, err)
		src, _ := req.Alloc(n, Host)
		fill(src.Bytes(), uint64(n))
		got, _ := req.Alloc(n, Host)
		// requester -> owner, then owner's endpoint pulls it back into the requester's buffer.
		require.NoError(t, ep.PutSync(ctx, src.All(), tk))
		require.NoError(t, back.PutSync(ctx, theirs.All(), mk))
		require.NoError(t, req.CopySync(ctx, got.All(), mine.All()))
		require.True(t, bytes.Equal(src.Bytes(), got.Bytes()), loc.String())
	}
	so, sr := back.Stats(), ep.Stats()
	t.Logf("acceptor %+v\ndialer %+v", so, sr)
	require.Equal(t, uint64(1), sr.Delegated, "into the owner's Gaudi memory")
	require.Equal(t, uint64(1), so.Delegated, "from the requester's Gaudi memory")
	require.Equal(t, uint64(1), so.ServedRDMA)
	require.Equal(t, uint64(1), sr.ServedRDMA)
}

// TestRDMADMABuf: Gaudi memory is exported as a DMA-BUF and
// ibv_reg_dmabuf_mr is attempted on it; Soft-RoCE answers EOPNOTSUPP,
// which the engine detects and stages through host memory instead.
func TestRDMADMABuf(t *testing.T) {
	needRDMA(t)
	owner, req, ep, _ := rdmaPair(t)
	info := req.RDMA()
	t.Logf("DMA-BUF probe: %s", info.DMABuf)
	if req.rdma.Probe() == nil {
		t.Skipf("%s registers DMA-BUF memory: the EOPNOTSUPP fallback cannot be tested on it", info.Device)
	}
	require.ErrorIs(t, req.rdma.Probe(), rdma.ErrNotSupported)
	require.NotEqual(t, "supported", info.DMABuf, "the probe result is reported")
	req.rdma.SetTryDMABuf(true) // attempt the real registration regardless of the probe

	ctx := context.Background()
	const n = 5<<20 + 3
	dev, _ := req.Alloc(n, Gaudi(0))
	src, _ := req.Alloc(n, Host)
	fill(src.Bytes(), 5)
	require.NoError(t, req.CopySync(ctx, dev.All(), src.All()))
	theirs, _ := owner.Alloc(n, Host)
	tk, err := theirs.Export()
	require.NoError(t, err)
	require.NoError(t, ep.PutSync(ctx, dev.All(), tk))
	require.True(t, bytes.Equal(src.Bytes(), theirs.Bytes()))

	info = req.RDMA()
	require.Equal(t, uint64(1), info.DMABufAttempts, "ibv_reg_dmabuf_mr attempted on the buffer's DMA-BUF")
	require.Zero(t, info.DMABufMRs)
	require.ErrorIs(t, rdmapath.RegionErr(dev.dp()), rdma.ErrNotSupported)
	require.ErrorIs(t, rdmapath.RegionErr(dev.dp()), syscall.EOPNOTSUPP)
	require.Contains(t, info.DMABuf, "ibv_reg_dmabuf_mr")
	require.Equal(t, uint64(1), ep.Stats().Staged, "staged through host memory")
	require.Zero(t, ep.Stats().ZeroCopy)

	// Later buffers do not try again; the Get path stages as well.
	dev2, _ := req.Alloc(n, Gaudi(0))
	require.NoError(t, ep.GetSync(ctx, dev2.All(), tk))
	got, _ := req.Alloc(n, Host)
	require.NoError(t, req.CopySync(ctx, got.All(), dev2.All()))
	require.True(t, bytes.Equal(src.Bytes(), got.Bytes()))
	require.Equal(t, uint64(1), req.RDMA().DMABufAttempts)
	require.Equal(t, uint64(2), ep.Stats().Staged)
	// The owner's Gaudi memory is exported without an rkey.
	od, _ := owner.Alloc(4096, Gaudi(0))
	ok, err := od.Export()
	require.NoError(t, err)
	require.Zero(t, ok.k.RKey)
}

// TestRDMAOutOfRange: a request outside the exported range is refused by
// the owner; an RDMA access outside the registered region fails at the NIC.
func TestRDMAOutOfRange(t *testing.T) {
	needRDMA(t)
	owner, req, ep, _ := rdmaPair(t)
	ctx := context.Background()
	dev, _ := owner.Alloc(1<<20, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	host, _ := owner.Alloc(1<<20, Host)
	hk, err := host.Export()
	require.NoError(t, err)
	h, _ := req.Alloc(8192, Host)

	// Refused before sending.
	require.ErrorIs(t, ep.PutSync(ctx, h.All(), dk.Slice(1<<20-10, 8192)), ErrInvalid)
	// A request beyond the view is refused by the owner.
	ref, err := req.rdma.MRCache().Get(h.Addr(), 8192, rdma.AccessDefault)
	require.NoError(t, err)
	defer req.rdma.MRCache().Put(ref)
	for _, off := range []uint64{4096, 1 << 62} {
		id := ep.ch.NewID()
		r := wire.Request{RequestID: id, Key: dk.Slice(0, 8192).k, Offset: off, Length: 8192,
			Local: wire.Local{Kind: wire.LocalRDMA, Addr: h.Addr(), RKey: ref.RKey()}}
		f, err := ep.ch.RoundTrip(ctx, id, &wire.Put{Request: r})
		require.NoError(t, err)
		m, err := f.Message()
		require.NoError(t, err)
		require.IsType(t, &wire.Error{}, m)
		require.Equal(t, wire.StatusOutOfRange, m.(*wire.Error).Code)
	}
	// A forged key is refused too.
	forged := dk
	forged.k.Length *= 2
	err = ep.PutSync(ctx, h.All(), forged.Slice(0, 8192))
	require.Error(t, err)
	require.True(t, errors.Is(err, ErrInvalid) || errors.Is(err, ErrPeer), "%v", err)
	require.NoError(t, ep.PutSync(ctx, h.All(), dk.Slice(0, 8192)), "the endpoint still works")

	// Beyond the registered region, the NIC refuses: the work request
	// fails with a remote access error, and so does the endpoint (its
	// queue pair is in the error state).
	beyond := hk.Slice(0, 8192).k
	beyond.Base += 64 << 20 // the rkey's region is 1 MiB
	f := newFuture(1)
	ep.path.Start(ctx, datapath.Req{Put: true, Local: h.All().mem(), Key: beyond}, f.completer())
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrPeer)
	require.ErrorIs(t, f.Err(), rdma.ErrRemoteAccess)
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.ErrorIs(t, ep.PutSync(ctx, h.All(), hk.Slice(0, 8192)), ErrPeer)
	// A new endpoint works.
	l2, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ep2, err := req.Dial(ctx, "tcp", l2.Addr())
	require.NoError(t, err)
	fill(h.Bytes(), 3)
	require.NoError(t, ep2.PutSync(ctx, h.All(), hk.Slice(100, 8192)))
	require.True(t, bytes.Equal(h.Bytes(), host.Bytes()[100:100+8192]))
}

// TestRDMAQPError: a queue pair forced into the error state fails its
// pending operations and its endpoint with ErrPeer naming the peer; the
// engine's other endpoints go on.
func TestRDMAQPError(t *testing.T) {
	needRDMA(t)
	owner, req, ep, l := rdmaPair(t)
	ctx := context.Background()
	other, err := req.Dial(ctx, "tcp", l.Addr())
	require.NoError(t, err)
	const n = 4 << 20
	theirs, _ := owner.Alloc(16*n, Host)
	tk, err := theirs.Export()
	require.NoError(t, err)
	dev, _ := owner.Alloc(16*n, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	mine, _ := req.Alloc(16*n, Host)
	var futs []*Future
	for i := 0; i < 16; i++ {
		futs = append(futs, ep.Put(ctx, mine.Slice(i*n, n), tk.Slice(i*n, n)))
		futs = append(futs, ep.Put(ctx, mine.Slice(i*n, n), dk.Slice(i*n, n)))
	}
	require.NoError(t, rdmaPath(ep).QP().SetError())
	failed := 0
	for i, f := range futs {
		<-f.Done()
		if f.Err() != nil {
			require.ErrorIs(t, f.Err(), ErrPeer, "future %d", i)
			require.Contains(t, f.Err().Error(), "pid")
			failed++
		}
	}
	t.Logf("%d of %d operations failed", failed, len(futs))
	require.NotZero(t, failed)
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.Contains(t, ep.Err().Error(), ep.Peer())
	require.ErrorIs(t, ep.PutSync(ctx, mine.Slice(0, 8), tk.Slice(0, 8)), ErrPeer)

	require.NoError(t, other.Err())
	fill(mine.Bytes()[:n], 9)
	require.NoError(t, other.PutSync(ctx, mine.Slice(0, n), tk.Slice(0, n)))
	require.NoError(t, other.PutSync(ctx, mine.Slice(0, n), dk.Slice(0, n)))
	back, _ := req.Alloc(n, Host)
	require.NoError(t, other.GetSync(ctx, back.All(), dk.Slice(0, n)))
	require.True(t, bytes.Equal(mine.Bytes()[:n], back.Bytes()))
	require.True(t, bytes.Equal(mine.Bytes()[:n], theirs.Bytes()[:n]))
}

// TestRDMAPeerKilled: a peer process killed mid-transfer fails the
// operations with ErrPeer; nothing is leaked.
func TestRDMAPeerKilled(t *testing.T) {
	needRDMA(t)
	fdsBefore := testutil.OpenFDs()
	base := verbs.Live()
	p := startPeerAt(t, "tcp", "127.0.0.1:0")
	e, err := New(rdmaTestConfig())
	require.NoError(t, err)
	ctx := context.Background()
	ep, err := e.Dial(ctx, "tcp", p.path)
	require.NoError(t, err)
	require.Equal(t, TransportRDMA, ep.Transport())
	h, _ := e.Alloc(1<<20, Host)
	require.NoError(t, ep.PutSync(ctx, h.All(), p.host.Slice(0, 1<<20)))
	p.command(t, "slow")
	require.True(t, p.out.Scan())
	var futs []*Future
	for i := 0; i < 16; i++ {
		futs = append(futs, ep.Put(ctx, h.All(), p.dev.Slice(i<<20, 1<<20)))
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	for i, f := range futs {
		<-f.Done()
		require.ErrorIs(t, f.Err(), ErrPeer, "future %d", i)
		require.Contains(t, f.Err().Error(), "pid")
	}
	<-ep.Done()
	require.ErrorIs(t, ep.Err(), ErrPeer)
	// Later operations fail at once; the engine keeps working.
	require.ErrorIs(t, ep.PutSync(ctx, h.All(), p.host.Slice(0, 1<<20)), ErrPeer)
	d, _ := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, e.CopySync(ctx, d.All(), h.All()))
	require.NoError(t, e.Close())
	p.stdin.Close()
	_ = p.cmd.Wait()
	require.Equal(t, base, verbs.Live(), "verbs objects left after Close")
	require.Empty(t, testutil.LeakedFDs(fdsBefore))
}

// TestRDMACloseReleasesEverything: after Close, no memory region, queue
// pair, CQ, PD or device context is left, and no fd.
func TestRDMACloseReleasesEverything(t *testing.T) {
	needRDMA(t)
	fdsBefore := testutil.OpenFDs()
	base := verbs.Live()
	owner, err := New(rdmaTestConfig())
	require.NoError(t, err)
	req, err := New(rdmaTestConfig())
	require.NoError(t, err)
	ctx := context.Background()
	ep, l := dialRDMA(t, owner, req)
	for _, loc := range []Location{Host, Gaudi(0)} {
		theirs, _ := owner.Alloc(3<<20, loc)
		k, err := theirs.Export()
		require.NoError(t, err)
		for _, l2 := range []Location{Host, Gaudi(0)} {
			mine, _ := req.Alloc(3<<20, l2)
			require.NoError(t, ep.PutSync(ctx, mine.All(), k))
			require.NoError(t, ep.GetSync(ctx, mine.All(), k))
		}
		require.NoError(t, theirs.Free(), "an exported buffer's region goes with it")
	}
	require.NotZero(t, owner.RDMA().CachedMRs+req.RDMA().CachedMRs)
	before := owner.rdma.Devices()[0].Counts()
	t.Logf("owner's device objects before Close: %+v", before)
	// An endpoint left open and one failed are closed by Engine.Close.
	ep2, err := req.Dial(ctx, "tcp", l.Addr())
	require.NoError(t, err)
	require.NoError(t, rdmaPath(ep2).QP().SetError())
	require.NoError(t, req.Close())
	require.NoError(t, owner.Close())
	require.Equal(t, rdma.Counts{}, owner.rdma.Devices()[0].Counts())
	require.Equal(t, rdma.Counts{}, req.rdma.Devices()[0].Counts())
	require.Equal(t, base, verbs.Live(), "verbs objects left after Close")
	require.Empty(t, testutil.LeakedFDs(fdsBefore))
}

// BenchmarkRDMAPut: Puts into a peer engine's host memory over an RDMA
// endpoint (zero copy: one RDMA write each). sync: one at a time, each
// waited for (a write and its ACK: a full round trip plus the completion
// path); window: 64 in flight (bandwidth).
func BenchmarkRDMAPut(b *testing.B) {
	needRDMA(b)
	for _, cq := range []string{"event", "spin", "busy"} {
		b.Run("cq="+cq, func(b *testing.B) { benchRDMAPut(b, cq) })
	}
}

func benchRDMAPut(b *testing.B, cqMode string) {
	cfg := rdmaTestConfig()
	switch cqMode {
	case "spin":
		cfg.RDMA.CQSpin = 200 * time.Microsecond
	case "busy":
		cfg.RDMA.CQBusyPoll = true
	}
	owner, req := newEngine(b, cfg), newEngine(b, cfg)
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	ctx := context.Background()
	ep, err := req.Dial(ctx, "tcp", l.Addr())
	require.NoError(b, err)
	require.Equal(b, TransportRDMA, ep.Transport())
	for _, n := range []int{8, 64 << 10} {
		src, _ := req.Alloc(n, Host)
		dst, _ := owner.Alloc(n, Host)
		k, err := dst.Export()
		require.NoError(b, err)
		b.Run(fmt.Sprintf("size=%d/mode=sync", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := ep.PutSync(ctx, src.All(), k); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "us/put")
		})
		b.Run(fmt.Sprintf("size=%d/mode=window64", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var ring [64]*Future
			i := 0
			for b.Loop() {
				if f := ring[i%64]; f != nil {
					if err := f.Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
				ring[i%64] = ep.Put(ctx, src.All(), k)
				i++
			}
			for _, f := range ring {
				if f != nil {
					if err := f.Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)*8/b.Elapsed().Seconds()/1e9, "Gb/s")
		})
	}
}

// TestRDMABinding: a Binding on an RDMA endpoint puts and gets with one
// write or read each (inline for small puts), PutN/GetN keep chains in
// flight that Flush waits for, and what cannot be bound is refused.
func TestRDMABinding(t *testing.T) {
	needRDMA(t)
	owner, req, ep, _ := rdmaPair(t)
	ctx := context.Background()
	require.Equal(t, rdmapath.MaxInline, rdmaPath(ep).MaxInline(), "rxe takes inline writes")
	for _, n := range []int{1, 8, rdmapath.MaxInline, rdmapath.MaxInline + 1, 4097, 1 << 20} {
		name := fmt.Sprint(n)
		theirs, _ := owner.Alloc(n+64, Host)
		tk, err := theirs.Export()
		require.NoError(t, err)
		mine, _ := req.Alloc(n, Host)
		b, err := ep.Bind(ctx, mine.All(), tk.Slice(64, n))
		require.NoError(t, err, name)
		require.Equal(t, n <= rdmapath.MaxInline, b.bd.(*rdmapath.Bound).InlineWrites(), name)
		fill(mine.Bytes(), uint64(n))
		require.NoError(t, b.Put(), name)
		require.True(t, bytes.Equal(mine.Bytes(), theirs.Bytes()[64:]), "%s: put", name)
		require.Equal(t, make([]byte, 64), theirs.Bytes()[:64], "%s: nothing before the key's view", name)
		fill(theirs.Bytes()[64:], uint64(n)+1)
		require.NoError(t, b.Get(), name)
		require.True(t, bytes.Equal(mine.Bytes(), theirs.Bytes()[64:]), "%s: get", name)

		// 300 writes (more than the window) then 300 reads, each stream
		// flushed; the last write's bytes are the ones in place.
		fill(mine.Bytes(), uint64(n)+2)
		require.NoError(t, b.PutN(300), name)
		require.NoError(t, b.Flush(), name)
		require.Zero(t, b.bd.(*rdmapath.Bound).InFlight(), name)
		require.True(t, bytes.Equal(mine.Bytes(), theirs.Bytes()[64:]), "%s: PutN", name)
		fill(theirs.Bytes()[64:], uint64(n)+3)
		require.NoError(t, b.GetN(300), name)
		require.NoError(t, b.Flush(), name)
		require.True(t, bytes.Equal(mine.Bytes(), theirs.Bytes()[64:]), "%s: GetN", name)
		// Close waits for what is in flight.
		require.NoError(t, b.PutN(200), name)
		require.NoError(t, b.Close(), name)
		require.Zero(t, b.bd.(*rdmapath.Bound).InFlight(), name)
		require.NoError(t, b.Close(), "a second Close")
		require.ErrorIs(t, b.Put(), ErrClosed)
		require.ErrorIs(t, b.Flush(), ErrClosed)
		require.NoError(t, theirs.Free())
		require.NoError(t, mine.Free())
	}
	st := ep.Stats()
	require.Equal(t, uint64(6*(2+300+300+200)), st.ZeroCopy)
	require.Zero(t, st.BytesOut+st.BytesIn, "no data on the TCP connection")

	theirs, _ := owner.Alloc(4096, Host)
	tk, _ := theirs.Export()
	dev, _ := owner.Alloc(4096, Gaudi(0))
	dk, _ := dev.Export()
	mine, _ := req.Alloc(4096, Host)
	mdev, _ := req.Alloc(4096, Gaudi(0))
	for _, c := range []struct {
		name   string
		local  Slice
		remote RemoteKey
		want   error
	}{
		{"local Gaudi memory", mdev.All(), tk, ErrNotSupported},
		{"no rkey (the peer's Gaudi memory on rxe)", mine.All(), dk, ErrNotSupported},
		{"length mismatch", mine.Slice(0, 100), tk, ErrInvalid},
		{"freed local buffer", Slice{}, tk, ErrInvalid},
	} {
		_, err := ep.Bind(ctx, c.local, c.remote)
		require.ErrorIs(t, err, c.want, c.name)
	}

	// A failed work request fails the binding's operations and its
	// endpoint; Close still returns.
	b, err := ep.Bind(ctx, mine.All(), tk)
	require.NoError(t, err)
	require.NoError(t, b.Put())
	require.NoError(t, rdmaPath(ep).QP().SetError())
	err = b.PutN(50)
	if err == nil {
		err = b.Flush()
	}
	require.ErrorIs(t, err, ErrPeer)
	require.ErrorIs(t, b.Put(), ErrPeer)
	require.ErrorIs(t, b.Close(), ErrPeer)
	require.Zero(t, b.bd.(*rdmapath.Bound).InFlight())
}

// TestRDMARegionAccess: what a peer can reach by RDMA is what was exported
// and, for a delegated request, the requester's region while the request
// lasts. Memory registered for local use (a direct Put's source, a
// binding's, a staging buffer) takes no remote access, and the region a
// delegated request exposes is deregistered when the request is over.
func TestRDMARegionAccess(t *testing.T) {
	needRDMA(t)
	owner, req, ep, _ := rdmaPair(t)
	ctx := context.Background()
	theirs, _ := owner.Alloc(1<<20, Host)
	tk, err := theirs.Export()
	require.NoError(t, err)
	dev, _ := owner.Alloc(1<<20, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	require.Zero(t, dk.k.RKey, "Soft-RoCE: the peer's Gaudi memory is reached by delegation")

	mine, _ := req.Alloc(1<<20, Host)
	fill(mine.Bytes(), 17)
	require.NoError(t, ep.PutSync(ctx, mine.All(), tk))
	ref, err := req.rdma.MRCache().Get(mine.Addr(), 1<<20, rdma.AccessLocalWrite)
	require.NoError(t, err)
	require.Zero(t, ref.Access()&(rdma.AccessRemoteWrite|rdma.AccessRemoteRead), "a direct Put's source is registered for local access only: %v", ref.Access())
	req.rdma.MRCache().Put(ref)

	// Delegated: the owner RDMAs against a registration of ours made for
	// the request, gone after it.
	mrsBefore, devBefore := req.rdma.MRCache().Stats().Regions, req.rdma.Devices()[0].Counts().MRs
	other, _ := req.Alloc(1<<20, Host)
	fill(other.Bytes(), 18)
	require.NoError(t, ep.PutSync(ctx, other.All(), dk))
	clear(other.Bytes())
	require.NoError(t, ep.GetSync(ctx, other.All(), dk))
	want := make([]byte, 1<<20)
	fill(want, 18)
	require.True(t, bytes.Equal(want, other.Bytes()))
	require.Equal(t, uint64(2), ep.Stats().Delegated)
	require.Equal(t, mrsBefore, req.rdma.MRCache().Stats().Regions, "the delegated region is not cached")
	require.Equal(t, devBefore, req.rdma.Devices()[0].Counts().MRs, "the delegated region is deregistered after its request")
}

// TestRDMATimeout: the Timeout option bounds direct and staged RDMA
// operations: the future ends with ErrTimeout at the deadline while the
// transfer goes on holding its buffers (freed, their memory goes when it is
// done), and the endpoint keeps working.
func TestRDMATimeout(t *testing.T) {
	needRDMA(t)
	// The delegated transfer below (64 MiB staged by the owner) takes
	// 5-13 s on Soft-RoCE under emulation and -race: a PeerTimeout of a
	// minute keeps "the owner answers late but within PeerTimeout" true
	// on a loaded machine (the default 10 s made the test flaky).
	cfg := rdmaTestConfig()
	cfg.PeerTimeout = time.Minute
	owner, req := newEngine(t, cfg), newEngine(t, cfg)
	ep, _ := dialRDMA(t, owner, req)
	ctx := context.Background()
	const n = 64 << 20 // hundreds of milliseconds on Soft-RoCE under emulation
	theirs, _ := owner.Alloc(n, Host)
	tk, err := theirs.Export()
	require.NoError(t, err)
	for _, loc := range []Location{Host, Gaudi(0)} {
		mine, err := req.Alloc(n, loc)
		require.NoError(t, err, loc.String())
		f := ep.Put(ctx, mine.All(), tk, Timeout(time.Microsecond))
		<-f.Done()
		require.ErrorIs(t, f.Err(), ErrTimeout, loc.String())
		require.NoError(t, ep.Err(), "a timed-out operation does not fail its endpoint")
		require.NoError(t, mine.Free(), "freed with the transfer in flight")
	}
	// Delegated (into the peer's Gaudi memory): the future ends at the
	// deadline; the region the owner moves data against stays registered
	// until it answers, so the late transfer does not fail the endpoint.
	dev, _ := owner.Alloc(n, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	require.Zero(t, dk.k.RKey)
	src, _ := req.Alloc(n, Host)
	f := ep.Put(ctx, src.All(), dk, Timeout(time.Microsecond))
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrTimeout)
	require.NoError(t, src.Free())
	req.async.Wait() // the delegated request, answered
	require.NoError(t, ep.Err(), "the late delegated transfer did not fail the endpoint")
	small, _ := req.Alloc(4096, Host)
	require.NoError(t, ep.PutSync(ctx, small.All(), dk.Slice(0, 4096)))

	// Generous deadlines do not fire. (Another destination: the timed-out
	// transfers may still be writing theirs.)
	other, _ := owner.Alloc(1<<20, Host)
	ok, err := other.Export()
	require.NoError(t, err)
	mine, _ := req.Alloc(1<<20, Host)
	fill(mine.Bytes(), 23)
	require.NoError(t, ep.PutSync(ctx, mine.All(), ok, Timeout(time.Minute)))
	require.True(t, bytes.Equal(mine.Bytes(), other.Bytes()))
}

// BenchmarkRDMABinding: Puts into a peer engine's host memory through an
// RDMA Binding: put, each waited for (its completion taken by the caller
// from the CQ), and putN, streamed with PutN (up to 128 in flight) and
// flushed at the end.
//
//	go test -run '^$' -bench RDMABinding -exec testbed/rxe/go-exec-in-vm.sh ./engine/
func BenchmarkRDMABinding(b *testing.B) {
	needRDMA(b)
	owner, req := newRDMAEngine(b), newRDMAEngine(b)
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	ctx := context.Background()
	ep, err := req.Dial(ctx, "tcp", l.Addr())
	require.NoError(b, err)
	for _, n := range []int{8, 64 << 10} {
		src, _ := req.Alloc(n, Host)
		dst, _ := owner.Alloc(n, Host)
		k, err := dst.Export()
		require.NoError(b, err)
		bd, err := ep.Bind(ctx, src.All(), k)
		require.NoError(b, err)
		b.Run(fmt.Sprintf("size=%d/mode=put", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := bd.Put(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "us/put")
		})
		b.Run(fmt.Sprintf("size=%d/mode=putN", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := bd.PutN(1); err != nil {
					b.Fatal(err)
				}
			}
			if err := bd.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)*float64(b.N)*8/b.Elapsed().Seconds()/1e9, "Gb/s")
		})
		require.NoError(b, bd.Close())
	}
}
