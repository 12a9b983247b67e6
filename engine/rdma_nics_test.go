package engine

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/rdma"
)

// RDMA tests over several NICs, and of an owner that stops answering.

// needNICs skips unless the devices of GXFER_RDMA_NICS (a comma list
// such as "rxe0,rxe2/rxe1,rxe3": this side's NICs / the peer's, NIC i of
// one reaching NIC i of the other) exist: the VM of testbed/rxe/ci.sh
// makes them with -n veth2 (two veth pairs, a Soft-RoCE device on each
// end).
func needNICs(t *testing.T) (mine, peer []string) {
	t.Helper()
	needRDMA(t)
	spec := os.Getenv("GXFER_RDMA_NICS")
	a, b, ok := strings.Cut(spec, "/")
	if !ok {
		if os.Getenv("GXFER_REQUIRE_NICS") == "1" {
			t.Fatalf("GXFER_REQUIRE_NICS=1 but GXFER_RDMA_NICS is %q", spec)
		}
		t.Skip(`needs two NICs per side: GXFER_RDMA_NICS="rxe0,rxe2/rxe1,rxe3" (testbed/rxe/ci.sh runs it in a VM booted with -n veth2)`)
	}
	return strings.Split(a, ","), strings.Split(b, ",")
}

// TestRDMANICs: with two NICs per side, an endpoint has a queue pair on
// each, keys carry both rkeys, and host transfers of RDMASliceMin bytes or
// more are split over the NICs (every byte verified, both NICs' work
// request counts moving), smaller ones and those with a peer of one NIC
// use the first only. Close leaves nothing behind on any device.
func TestRDMANICs(t *testing.T) {
	mine, theirs := needNICs(t)
	base := verbs.Live()
	cfg := func(devs []string) Config {
		c := rdmaTestConfig()
		c.RDMA.Device, c.RDMA.Devices = "", devs
		return c
	}
	owner, err := New(cfg(theirs))
	require.NoError(t, err)
	req, err := New(cfg(mine))
	require.NoError(t, err)
	single, err := New(cfg(mine[:1]))
	require.NoError(t, err)
	require.Equal(t, theirs, owner.RDMA().NICs)
	require.Equal(t, mine, req.RDMA().NICs)
	// Past a device that does not open, NIC i would not reach the peer's
	// NIC i: the rest are not used.
	for _, devs := range [][]string{{mine[0], "nosuch0", mine[1]}, {"nosuch0", mine[0], mine[1]}} {
		e, err := New(cfg(devs))
		require.NoError(t, err)
		require.Equal(t, mine[:1], e.RDMA().NICs, "%v", devs)
		require.NoError(t, e.Close())
	}
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ep, err := req.Dial(ctx, "tcp", l.Addr())
	require.NoError(t, err)
	require.Len(t, ep.Stats().NICWRs, len(mine))
	ep1, err := single.Dial(ctx, "tcp", l.Addr())
	require.NoError(t, err)
	require.Len(t, ep1.Stats().NICWRs, 1, "a peer with one NIC: one queue pair")

	dst, err := owner.Alloc(16<<20, Host)
	require.NoError(t, err)
	k, err := dst.Export()
	require.NoError(t, err)
	require.NotZero(t, k.k.RKey)
	require.NotZero(t, k.k.NICRKeys[0], "the key carries the second NIC's rkey")
	for _, tc := range []struct {
		name   string
		ep     *Endpoint
		n      int
		gaudi  bool // from and into (emulated) Gaudi memory: staged through host chunks
		sliced bool
	}{
		{"64 KiB: first NIC", ep, 64 << 10, false, false},
		{"1 MiB: sliced", ep, RDMASliceMin, false, true},
		{"5 MiB + 123: sliced", ep, 5<<20 + 123, false, true},
		{"16 MiB: sliced", ep, 16 << 20, false, true},
		{"16 MiB, peer of one NIC", ep1, 16 << 20, false, false},
		{"Gaudi 512 KiB: one chunk, first NIC", ep, 512 << 10, true, false},
		{"Gaudi 5 MiB + 123: chunks over both NICs", ep, 5<<20 + 123, true, true},
		{"Gaudi 5 MiB, peer of one NIC", ep1, 5 << 20, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.ep.e
			src, err := e.Alloc(tc.n, Host)
			require.NoError(t, err)
			defer src.Free()
			seed := uint64(tc.n) << 1 // a pattern no earlier case left in dst
			if tc.gaudi {
				seed |= 1
			}
			fill(src.Bytes(), seed)
			from, into := src, (*Buffer)(nil)
			if tc.gaudi {
				from, err = e.Alloc(tc.n, Gaudi(0))
				require.NoError(t, err)
				defer from.Free()
				require.NoError(t, e.CopySync(ctx, from.All(), src.All()))
				into, err = e.Alloc(tc.n, Gaudi(0))
				require.NoError(t, err)
				defer into.Free()
			}
			before, staged := tc.ep.Stats().NICWRs, tc.ep.Stats().Staged
			require.NoError(t, tc.ep.PutSync(ctx, from.All(), k.Slice(0, tc.n)))
			require.True(t, bytes.Equal(src.Bytes(), dst.Bytes()[:tc.n]), "put bytes differ")
			back, err := e.Alloc(tc.n, Host)
			require.NoError(t, err)
			defer back.Free()
			if tc.gaudi {
				require.NoError(t, tc.ep.GetSync(ctx, into.All(), k.Slice(0, tc.n)))
				require.NoError(t, e.CopySync(ctx, back.All(), into.All()))
				require.Equal(t, staged+2, tc.ep.Stats().Staged, "staged through host memory")
			} else {
				require.NoError(t, tc.ep.GetSync(ctx, back.All(), k.Slice(0, tc.n)))
			}
			require.True(t, bytes.Equal(src.Bytes(), back.Bytes()), "get bytes differ")
			after := tc.ep.Stats().NICWRs
			require.Greater(t, after[0], before[0])
			for i := 1; i < len(after); i++ {
				if tc.sliced {
					require.Greater(t, after[i], before[i], "NIC %d carried no slice", i)
				} else {
					require.Equal(t, before[i], after[i], "NIC %d used for an unsliced transfer", i)
				}
			}
			t.Logf("work requests per NIC: %v -> %v", before, after)
		})
	}
	// A list of small host transfers (none sliced) is spread over the
	// NICs, each element whole on one: rdmapath's StartList.
	t.Run("list of 64 x 64 KiB: spread", func(t *testing.T) {
		const n, bs = 64, 64 << 10
		src, err := req.Alloc(n*bs, Host)
		require.NoError(t, err)
		defer src.Free()
		fill(src.Bytes(), 77)
		locals, remotes := make([]Slice, n), make([]RemoteKey, n)
		for i := range n {
			locals[i] = src.Slice(i*bs, bs)
			remotes[i] = k.Slice(((i*7)%n)*bs*2, bs) // scattered over 8 MiB of dst
		}
		before := ep.Stats().NICWRs
		f := ep.PutList(ctx, locals, remotes)
		require.NoError(t, f.Wait(ctx))
		for i := range n {
			o := ((i * 7) % n) * bs * 2
			require.True(t, bytes.Equal(src.Bytes()[i*bs:(i+1)*bs], dst.Bytes()[o:o+bs]), "element %d", i)
		}
		after := ep.Stats().NICWRs
		for i := range after {
			require.Equal(t, before[i]+n/uint64(len(after)), after[i], "NIC %d: its share of the list, one WR each", i)
		}
		clear(src.Bytes())
		require.NoError(t, ep.GetList(ctx, locals, remotes).Wait(ctx))
		want := make([]byte, n*bs)
		fill(want, 77)
		require.True(t, bytes.Equal(want, src.Bytes()), "get list bytes differ")
	})
	require.NoError(t, dst.Free())
	require.NoError(t, single.Close())
	require.NoError(t, req.Close())
	require.NoError(t, owner.Close())
	for _, e := range []*Engine{owner, req, single} {
		for _, d := range e.rdma.Devices() {
			require.Equal(t, rdma.Counts{}, d.Counts(), d.Name())
		}
	}
	require.Equal(t, base, verbs.Live(), "verbs objects left after Close")
}

// TestRDMADelegateStuckOwner: an owner that never answers a delegated
// request (alive: its heartbeats keep coming) fails the endpoint
// PeerTimeout after the request's deadline, and the region it could have
// moved data against is deregistered then, not held for ever.
func TestRDMADelegateStuckOwner(t *testing.T) {
	needRDMA(t)
	served, release := make(chan struct{}, 1), make(chan struct{})
	ocfg := rdmaTestConfig()
	ocfg.PeerTimeout = time.Second // heartbeats every 250 ms
	owner := newEngine(t, ocfg)
	owner.rdma.SetServeHook(func() {
		select {
		case served <- struct{}{}:
		default:
		}
		<-release
	})
	defer close(release) // before the engines' Close (cleanups run after)
	rcfg := rdmaTestConfig()
	rcfg.PeerTimeout = time.Second
	req := newEngine(t, rcfg)
	ctx := context.Background()
	ep, _ := dialRDMA(t, owner, req)

	dev, _ := owner.Alloc(1<<20, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	require.Zero(t, dk.k.RKey, "Gaudi memory without a DMA-BUF region: delegated")
	src, _ := req.Alloc(1<<20, Host)
	mrs := req.rdma.Devices()[0].Counts().MRs
	t0 := time.Now()
	// The deadline leaves the region's registration and the request
	// time to reach the owner (Soft-RoCE in a VM under load is slow).
	f := ep.Put(ctx, src.All(), dk, Timeout(500*time.Millisecond))
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrTimeout)
	select {
	case <-served:
	default:
		t.Fatal("the request did not reach the owner before its deadline")
	}
	require.Equal(t, mrs+1, req.rdma.Devices()[0].Counts().MRs, "the region stays registered past the deadline")
	require.NoError(t, ep.Err())
	select {
	case <-ep.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the endpoint did not fail")
	}
	el := time.Since(t0)
	require.ErrorIs(t, ep.Err(), ErrPeer)
	require.Contains(t, ep.Err().Error(), "no answer to delegated RDMA request")
	req.async.Wait() // the request's goroutine has ended
	require.Equal(t, mrs, req.rdma.Devices()[0].Counts().MRs, "the region is deregistered")
	t.Logf("endpoint failed %v after the Put (deadline 500ms, PeerTimeout 1s): %v", el.Round(time.Millisecond), ep.Err())
}
