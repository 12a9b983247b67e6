package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// errCount is the count of kind in cs.
func errCount(t *testing.T, cs []ErrorCount, kind string) uint64 {
	t.Helper()
	for _, c := range cs {
		if c.Kind == kind {
			return c.Count
		}
	}
	t.Fatalf("no error kind %q in %v", kind, cs)
	return 0
}

func transportOf(t *testing.T, s Stats, k TransportKind) TransportStats {
	t.Helper()
	for _, ts := range s.Transports {
		if ts.Transport == k {
			return ts
		}
	}
	t.Fatalf("no transport %v in %+v", k, s.Transports)
	return TransportStats{}
}

// TestOpStats: the endpoints' Puts and Gets are counted as they end, per
// endpoint (Engine.EndpointStats, with the peer's name) and per transport
// (Engine.Stats, with latencies), failures by error kind.
func TestOpStats(t *testing.T) {
	for _, pm := range pairMakers {
		t.Run(pm.name, func(t *testing.T) {
			p := pm.make(t)
			ctx := context.Background()
			const n, size = 5, 4096
			local, err := p.a.Alloc(size, Host)
			require.NoError(t, err)
			rb, rk := exported(t, p.b, size, Host)
			for range n {
				require.NoError(t, p.ab.PutSync(ctx, local.All(), rk))
			}
			require.NoError(t, p.ab.GetSync(ctx, local.All(), rk))

			eps := p.a.EndpointStats()
			require.Len(t, eps, 1)
			es := eps[0]
			require.Equal(t, pm.kind, es.Transport)
			require.Equal(t, p.ab.Peer(), es.Peer)
			require.NotEmpty(t, es.Peer)
			require.Equal(t, uint64(n+1), es.Ops.Completed)
			require.Equal(t, uint64((n+1)*size), es.Ops.Bytes)
			require.Zero(t, es.Ops.Failed)

			ts := transportOf(t, p.a.Stats(), pm.kind)
			require.Equal(t, 1, ts.Endpoints)
			require.Equal(t, uint64(n+1), ts.Ops.Completed)
			lat := ts.Ops.Latency
			require.Equal(t, uint64(n+1), lat.Count)
			require.Positive(t, lat.Sum)
			require.NotEmpty(t, lat.Buckets)
			for i := 1; i < len(lat.Buckets); i++ {
				require.Equal(t, 2*lat.Buckets[i-1].UpperBound, lat.Buckets[i].UpperBound)
				require.GreaterOrEqual(t, lat.Buckets[i].Count, lat.Buckets[i-1].Count, "cumulative")
			}
			require.LessOrEqual(t, lat.Buckets[len(lat.Buckets)-1].Count, lat.Count)

			if pm.kind == TransportRDMA {
				return // a write to a deregistered region fails the queue pair (suiteRefusals)
			}
			// The owner refuses a key whose buffer it freed: ErrInvalid,
			// counted as "invalid" by the endpoint and its transport.
			require.NoError(t, rb.Free())
			require.ErrorIs(t, p.ab.PutSync(ctx, local.All(), rk), ErrInvalid)
			es = p.ab.Stats()
			require.Equal(t, uint64(1), es.Ops.Failed)
			require.Equal(t, uint64(1), errCount(t, es.Ops.Errors, "invalid"))
			require.Zero(t, errCount(t, es.Ops.Errors, "peer"))
			ts = transportOf(t, p.a.Stats(), pm.kind)
			require.Equal(t, uint64(1), errCount(t, ts.Ops.Errors, "invalid"))
			require.Equal(t, uint64(n+2), ts.Ops.Latency.Count)

			require.NoError(t, p.ab.Close())
			require.NoError(t, p.ba.Close())
			require.Empty(t, p.a.EndpointStats(), "closed endpoints are not listed")
			ts = transportOf(t, p.a.Stats(), pm.kind)
			require.Zero(t, ts.Endpoints)
			require.Equal(t, uint64(n+1), ts.Ops.Completed, "transport counters outlive the endpoints")
			closed := p.a.ClosedEndpointStats()
			require.Len(t, closed, 1, "the closed endpoint's counts, summed by transport")
			require.Equal(t, pm.kind, closed[0].Transport)
			require.Equal(t, uint64(n+1), closed[0].Puts, "n Puts and the refused one")
			require.Equal(t, uint64(1), closed[0].Gets)
			require.Equal(t, uint64(n+1), closed[0].Ops.Completed)
			require.Equal(t, uint64(1), errCount(t, closed[0].Ops.Errors, "invalid"))
		})
	}
}

// TestStatsCopyErrorsAndLatency: failed copies are counted by kind and
// the copy latency histogram fills its buckets.
func TestStatsCopyErrorsAndLatency(t *testing.T) {
	e := newEngine(t, Config{EmulatedCount: 1})
	ctx := context.Background()
	src, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	dst, err := e.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	for range 4 {
		require.NoError(t, e.CopySync(ctx, dst.All(), src.All()))
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_ = e.Copy(canceled, dst.All(), src.All()).Wait(ctx)
	s := e.Stats()
	require.Len(t, s.Errors, gxerr.NumKinds)
	require.Equal(t, s.Failed, sumErrs(s.Errors))
	require.GreaterOrEqual(t, s.Latency.Count, uint64(4))
	require.Positive(t, s.Latency.Sum)
	require.Equal(t, s.Latency.Count, s.Latency.Buckets[len(s.Latency.Buckets)-1].Count, "no copy took 34 s")
	require.Zero(t, s.IPCCache.Hits)
}

func sumErrs(cs []ErrorCount) (n uint64) {
	for _, c := range cs {
		n += c.Count
	}
	return n
}

// BenchmarkEpOpCount: what counting a Put or Get costs as it ends (the
// endpoint's and its transport's counters, the latency histogram), on top
// of the operation itself.
//
//	go test -run '^$' -bench EpOpCount ./engine/
func BenchmarkEpOpCount(b *testing.B) {
	e := newEngine(b, Config{Devices: DevicesNone})
	ep := &Endpoint{e: e, path: kindPath{k: datapath.KindTCP}}
	b.ReportAllocs()
	for b.Loop() {
		o := epOp{ep: ep, n: 8, start: opClock()}
		o.count(nil)
	}
}

// kindPath is a data path that only has a kind.
type kindPath struct {
	datapath.Path
	k datapath.Kind
}

func (p kindPath) Kind() datapath.Kind { return p.k }

// BenchmarkIPCPut: 8-byte PutSyncs into another engine's host buffer over
// a unix socket (a memmove into the peer's mapped memory): the cheapest
// Put, against which BenchmarkEpOpCount's cost is to be read.
//
//	go test -run '^$' -bench 'IPCPut$' ./engine/
func BenchmarkIPCPut(b *testing.B) {
	a := newEngine(b, Config{Devices: DevicesNone})
	o := newEngine(b, Config{Devices: DevicesNone})
	l, err := o.Listen("unix", filepath.Join(b.TempDir(), "s.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ep, err := a.Dial(ctx, "unix", l.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	dst, _ := o.Alloc(8, Host)
	k, err := dst.Export()
	if err != nil {
		b.Fatal(err)
	}
	src, _ := a.Alloc(8, Host)
	b.ReportAllocs()
	for b.Loop() {
		if err := ep.PutSync(ctx, src.All(), k); err != nil {
			b.Fatal(err)
		}
	}
}
