package rdmapath

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// testPath is a Path without queue pairs over a fake control channel.
func testPath(pt time.Duration) (*Path, *fakeCtrl, *dptest.Env) {
	env := &dptest.Env{Cfg: datapath.Config{PeerTimeout: pt}}
	c := newFakeCtrl(env)
	return &Path{t: &Transport{env: env}, c: c, env: env}, c, env
}

// TestAskCtx: a delegated request whose ctx ends goes on waiting for the
// owner's answer (the owner may be moving data against the region it
// names), for PeerTimeout more; an owner silent that long fails the
// endpoint, so that the region is out of its reach, before the request
// returns, with the ctx's typed error. (Before, the request ignored the
// Put's ctx: cancelled, it waited for the answer for ever and reported
// the owner's result.)
func TestAskCtx(t *testing.T) {
	const never = time.Duration(-1)
	for _, tc := range []struct {
		name     string
		pt       time.Duration
		deadline time.Duration // from now; 0: none
		cancel   bool          // cancel ctx once the request is out
		answer   time.Duration // the owner answers this long after the request (never: it does not)
		want     []error
		fails    string // the endpoint fails with this
	}{
		{"answered", time.Minute, 0, false, 0, nil, ""},
		{"answered late, within its deadline", time.Minute, time.Minute, false, 10 * time.Millisecond, nil, ""},
		{"cancelled, the owner answers", time.Minute, 0, true, 50 * time.Millisecond, []error{gxerr.Canceled, context.Canceled}, ""},
		{"cancelled, the owner is silent", 50 * time.Millisecond, 0, true, never, []error{gxerr.Canceled}, "within PeerTimeout (50ms) after the end of its context"},
		{"cancelled, no PeerTimeout: waits for the answer", 0, 0, true, 50 * time.Millisecond, []error{gxerr.Canceled}, ""},
		{"deadline, the owner is silent", 50 * time.Millisecond, 20 * time.Millisecond, false, never, []error{gxerr.Timeout, gxerr.Peer}, "after its deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c, _ := testPath(tc.pt)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var deadline time.Time
			if tc.deadline > 0 {
				deadline = time.Now().Add(tc.deadline)
			}
			res := make(chan error, 1)
			answered := make(chan struct{})
			go func() { res <- p.ask(ctx, true, wire.Request{RequestID: c.NewID()}, deadline) }()
			<-c.sent
			if tc.cancel {
				cancel()
			}
			if tc.answer != never {
				go func() {
					time.Sleep(tc.answer)
					close(answered)
					c.answer <- nil
				}()
			}
			var err error
			select {
			case err = <-res:
			case <-time.After(30 * time.Second):
				c.Fail(errors.New("test over"))
				<-res
				t.Fatal("the request did not return")
			}
			if tc.answer != never {
				select {
				case <-answered:
				default:
					t.Fatal("returned before the owner answered: the region could still be reached")
				}
			}
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
			if tc.want == nil {
				require.NoError(t, err)
			}
			if tc.fails == "" {
				require.NoError(t, c.Err())
				return
			}
			require.ErrorIs(t, c.Err(), gxerr.Peer)
			require.Contains(t, c.Err().Error(), "no answer to delegated RDMA request")
			require.Contains(t, c.Err().Error(), tc.fails)
		})
	}
	t.Run("not sent once ctx has ended", func(t *testing.T) {
		p, c, _ := testPath(time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := p.delegateRegion(ctx, true, datapath.Mem{}, wire.RemoteKey{}, time.Time{})
		require.ErrorIs(t, err, gxerr.Canceled)
		require.Empty(t, c.sent)
	})
	t.Run("endpoint fails", func(t *testing.T) {
		p, c, _ := testPath(time.Minute)
		res := make(chan error, 1)
		go func() { res <- p.ask(context.Background(), false, wire.Request{RequestID: c.NewID()}, time.Time{}) }()
		<-c.sent
		failed := gxerr.New(gxerr.Peer, "connection lost", nil)
		c.Fail(failed)
		require.ErrorIs(t, <-res, failed)
	})
}

// TestGoAsyncCtx: a transfer waiting for one of the engine's transfer
// slots ends when its ctx does, with its typed error naming the wait; it
// never runs, and its buffer is let go.
func TestGoAsyncCtx(t *testing.T) {
	p, _, env := testPath(0)
	env.SetSlots(1)
	release, err := env.Slot(context.Background())
	require.NoError(t, err)
	b := env.NewBuf(64, false)
	ctx, cancel := context.WithCancel(context.Background())
	c := newCompletion()
	ran := false
	p.goAsync(ctx, datapath.Mem{B: b, Len: 64}, time.Time{}, c, func() error { ran = true; return nil })
	cancel()
	<-c.done
	env.Wait()
	require.ErrorIs(t, c.err, gxerr.Canceled)
	require.Contains(t, c.err.Error(), "peer: waiting for a transfer slot")
	require.False(t, ran)
	require.Zero(t, b.Held())
	release()

	// A deadline resolves the completion early; the function goes on,
	// holding the buffer, and its result is dropped.
	c = newCompletion()
	stop := make(chan struct{})
	p.goAsync(context.Background(), datapath.Mem{B: b, Len: 64}, time.Now().Add(time.Millisecond), c, func() error { <-stop; return nil })
	<-c.done
	require.ErrorIs(t, c.err, gxerr.Timeout)
	require.Equal(t, int32(1), b.Held(), "held until the function returns")
	close(stop)
	env.Wait()
	require.Zero(t, b.Held())
	require.Equal(t, int32(2), c.n.Load(), "the late result reaches the completer, which ignores it")
}

// TestXferParts: a transfer of several parts resolves once, after the
// last, with the first error.
func TestXferParts(t *testing.T) {
	p, _, _ := testPath(0)
	first, second := errors.New("first"), errors.New("second")
	for _, tc := range []struct {
		results []error
		want    error
	}{
		{[]error{nil}, nil},
		{[]error{nil, nil, nil}, nil},
		{[]error{nil, first, second}, first},
		{[]error{first, nil}, first},
	} {
		c := newCompletion()
		x := &xfer{p: p, c: c}
		x.parts.Store(int32(len(tc.results)))
		for i, err := range tc.results {
			require.False(t, c.resolved(), "resolved after %d of %d parts", i, len(tc.results))
			x.partDone(err)
		}
		require.True(t, c.resolved())
		require.Equal(t, tc.want, c.err)
		require.Equal(t, int32(1), c.n.Load())
	}
}

// TestSplitArithmetic: which NICs a transfer spreads over, and how many
// work requests carry it.
func TestSplitArithmetic(t *testing.T) {
	for _, tc := range []struct {
		n     uint64
		keys  []uint32 // the peer's rkeys on its further NICs
		conns int      // this endpoint's queue pairs
		want  []uint32
	}{
		{SliceMin - 1, []uint32{7, 8}, 3, []uint32{1}},
		{SliceMin, []uint32{7, 8}, 3, []uint32{1, 7, 8}},
		{SliceMin, []uint32{7, 8}, 2, []uint32{1, 7}},
		{SliceMin, []uint32{7, 8}, 1, []uint32{1}},
		{SliceMin, []uint32{0, 8}, 3, []uint32{1}}, // the peer lacks NIC 1: stop there
		{64 << 20, nil, 3, []uint32{1}},
	} {
		got := appendNICRKeys([]uint32{1}, tc.n, tc.keys, tc.conns)
		require.Equal(t, tc.want, got, "%d bytes, keys %v, %d conns", tc.n, tc.keys, tc.conns)
	}
	for _, tc := range []struct {
		n    uint64
		want int
	}{{1, 1}, {maxWR - 1, 1}, {maxWR, 1}, {maxWR + 1, 2}, {3 * maxWR, 3}} {
		require.Equal(t, tc.want, numWRs(tc.n), "%d bytes", tc.n)
	}
	// The slices of a split transfer cover it, in order, each NIC's
	// aligned.
	for _, n := range []uint64{SliceMin, 5<<20 + 123, 16 << 20} {
		for nics := 1; nics <= wire.MaxNICs; nics++ {
			var buf [wire.MaxNICs]rdma.Slice
			parts, err := rdma.AppendSplit(buf[:0], n, nics, sliceAlign)
			require.NoError(t, err)
			var off uint64
			for i, s := range parts {
				require.Equal(t, off, s.Off, "%d over %d: slice %d", n, nics, i)
				require.Less(t, s.NIC, nics)
				if i < len(parts)-1 {
					require.Zero(t, s.Len%sliceAlign, "%d over %d: slice %d", n, nics, i)
				}
				off += s.Len
			}
			require.Equal(t, n, off)
		}
	}
}

// TestCheckConnect: the peer's RDMAConnects come in order, all naming
// the same count.
func TestCheckConnect(t *testing.T) {
	m := func(nic, nics uint8) wire.RDMAConnect { return wire.RDMAConnect{NIC: nic, NICs: nics} }
	for _, tc := range []struct {
		got  []wire.RDMAConnect
		next wire.RDMAConnect
		ok   bool
	}{
		{nil, m(0, 1), true},
		{nil, m(1, 2), false},
		{[]wire.RDMAConnect{m(0, 2)}, m(1, 2), true},
		{[]wire.RDMAConnect{m(0, 2)}, m(1, 3), false},
		{[]wire.RDMAConnect{m(0, 3)}, m(2, 3), false},
	} {
		err := checkConnect(tc.got, &tc.next, wire.MaxNICs)
		require.Equal(t, tc.ok, err == nil, "%v then %v: %v", tc.got, tc.next, err)
	}
}

// TestDMABufUnsupported: the probe's verdict (unless tests insist), then
// the first refusal the NIC reports as unsupported, make Gaudi memory
// stage at once, before any registration.
func TestDMABufUnsupported(t *testing.T) {
	env := &dptest.Env{}
	probe := fmt.Errorf("probe: %w", rdma.ErrNotSupported)
	tr := &Transport{env: env, probe: probe, bufs: map[datapath.Buf]struct{}{}}
	b := env.NewBuf(4096, true)
	_, err := tr.gaudiMR(b)
	require.ErrorIs(t, err, probe)
	require.Zero(t, tr.dmabufAttempts.Load())
	tr.SetTryDMABuf(true)
	require.NoError(t, tr.dmabufUnsupported())
	tr.noteDMABufRefusal(errors.New("some other failure"))
	require.NoError(t, tr.dmabufUnsupported(), "a failure of one buffer")
	refused := fmt.Errorf("ibv_reg_dmabuf_mr: %w", rdma.ErrNotSupported)
	tr.noteDMABufRefusal(refused)
	tr.noteDMABufRefusal(fmt.Errorf("later: %w", rdma.ErrNotSupported))
	require.Equal(t, refused, tr.dmabufUnsupported(), "the first refusal is the reason")
	_, err = tr.gaudiMR(b)
	require.Equal(t, refused, err)
	require.NoError(t, RegionErr(b), "no registration attempted")
}

// TestBindRefusals: what an RDMA binding refuses before it registers
// anything.
func TestBindRefusals(t *testing.T) {
	p, _, env := testPath(0)
	host, dev := env.NewBuf(4096, false), env.NewBuf(4096, true)
	k := wire.RemoteKey{Flags: wire.KeyRead | wire.KeyWrite, Length: 4096, Len: 4096, RKey: 5}
	for _, tc := range []struct {
		name  string
		local datapath.Mem
		k     func(k wire.RemoteKey) wire.RemoteKey
		want  error
	}{
		{"length mismatch", datapath.Mem{B: host, Len: 100}, nil, gxerr.Invalid},
		{"another engine's key", datapath.Mem{B: host, Len: 4096}, func(k wire.RemoteKey) wire.RemoteKey { k.Owner[0] = 1; return k }, gxerr.Invalid},
		{"read only", datapath.Mem{B: host, Len: 4096}, func(k wire.RemoteKey) wire.RemoteKey { k.Flags = wire.KeyRead; return k }, gxerr.Invalid},
		{"no rkey", datapath.Mem{B: host, Len: 4096}, func(k wire.RemoteKey) wire.RemoteKey { k.RKey = 0; return k }, gxerr.NotSupported},
		{"local Gaudi memory", datapath.Mem{B: dev, Len: 4096}, nil, gxerr.NotSupported},
	} {
		key := k
		if tc.k != nil {
			key = tc.k(k)
		}
		_, err := p.Bind(context.Background(), tc.local, key, nil, time.Time{})
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Zero(t, host.Held()+dev.Held(), tc.name)
	}
}

// TestDelegatedRegionAccess: the region a delegated request names grants
// the owner only what serving it takes. A Put's owner reads the region
// (RDMA READ): a hostile owner must not be able to write into it, which
// is the Put's source (the caller's own buffer, for host memory). A Get's
// owner writes it, then reads a few bytes back (readBack, the fence).
func TestDelegatedRegionAccess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		put   bool
		want  rdma.Access
		never rdma.Access
	}{
		{"put: remote read only", true, rdma.AccessRemoteRead, rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic},
		{"get: remote write, and read for the fence", false, rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead, rdma.AccessRemoteAtomic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c, env := testPath(time.Minute)
			var got []rdma.Access
			refused := errors.New("test: not registered")
			p.t.registerHook = func(_ []byte, a rdma.Access) (*rdma.MR, error) {
				got = append(got, a)
				return nil, refused
			}
			b := env.NewBuf(4096, false)
			err := p.delegateRegion(context.Background(), tc.put, datapath.Mem{B: b, Len: 4096}, wire.RemoteKey{}, time.Time{})
			require.ErrorIs(t, err, gxerr.NotSupported)
			require.ErrorIs(t, err, refused)
			require.Empty(t, c.sent, "no request without a region")
			require.Len(t, got, 1)
			require.Equal(t, tc.want, got[0]&tc.want, "access %#x", uint32(got[0]))
			require.Zero(t, got[0]&tc.never, "access %#x", uint32(got[0]))
		})
	}
}
