package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The endpoint suite: the semantics of an endpoint (every memory pair
// byte for byte, refusals and their error kinds, cancellation, concurrent
// operations, a peer that goes away, bindings, statistics, and the
// "messages" group of messages_test.go, the "lists" group of list_test.go), run over every transport: the
// in-memory pair of data paths (no sockets at all), a unix socket, TCP on loopback, and RDMA where a device is present (the
// Soft-RoCE VM: GXFER_REQUIRE_RDMA=1 with testbed/rxe/go-exec-in-vm.sh).

// epPair is two engines connected both ways by one endpoint.
type epPair struct {
	a, b   *Engine
	ab, ba *Endpoint
}

var pairMakers = []struct {
	name string
	kind TransportKind
	make func(t *testing.T) epPair
}{
	{"pipe", transportPipe, func(t *testing.T) epPair {
		a, b := newEngine(t, Config{}), newEngine(t, Config{})
		ab, ba := pipePair(t, a, b)
		return epPair{a, b, ab, ba}
	}},
	{"unix", TransportIPC, func(t *testing.T) epPair {
		return listenDialPair(t, "unix", filepath.Join(t.TempDir(), "s.sock"))
	}},
	{"tcp", TransportTCP, func(t *testing.T) epPair {
		return listenDialPair(t, "tcp", "127.0.0.1:0")
	}},
	{"rdma", TransportRDMA, func(t *testing.T) epPair {
		needRDMA(t)
		b, a := newRDMAEngine(t), newRDMAEngine(t)
		ab, l := dialRDMA(t, b, a)
		t.Cleanup(func() { _ = l.Close() })
		ba, err := l.Accept(context.Background())
		require.NoError(t, err)
		return epPair{a, b, ab, ba}
	}},
}

func listenDialPair(t *testing.T, network, addr string) epPair {
	t.Helper()
	a := newEngine(t, Config{Transport: TransportTCP})
	b := newEngine(t, Config{Transport: TransportTCP})
	l, err := b.Listen(network, addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	ab, err := a.Dial(ctx, network, l.Addr())
	require.NoError(t, err)
	ba, err := l.Accept(ctx)
	require.NoError(t, err)
	return epPair{a, b, ab, ba}
}

var endpointSuite = []struct {
	name string
	run  func(t *testing.T, p epPair)
}{
	{"every memory pair", suiteEveryPair},
	{"refusals", suiteRefusals},
	{"canceled before it starts", suiteCanceled},
	{"concurrent operations", suiteConcurrent},
	{"a thousand requests at once", suiteThousand},
	{"peer closes", suitePeerCloses},
	{"binding", suiteBinding},
	{"stats", suiteStats},
}

func TestEndpointSuite(t *testing.T) {
	for _, pm := range pairMakers {
		t.Run(pm.name, func(t *testing.T) {
			for _, c := range endpointSuite {
				t.Run(c.name, func(t *testing.T) {
					p := pm.make(t)
					require.Equal(t, pm.kind, p.ab.Transport())
					c.run(t, p)
					require.NoError(t, p.ab.Close())
					require.NoError(t, p.ba.Close())
				})
			}
			t.Run("lists", func(t *testing.T) {
				for _, c := range listSuite {
					t.Run(c.name, func(t *testing.T) {
						p := pm.make(t)
						c.run(t, p)
						require.NoError(t, p.ab.Close())
						require.NoError(t, p.ba.Close())
					})
				}
			})
			t.Run("messages", func(t *testing.T) {
				for _, c := range messageSuite {
					t.Run(c.name, func(t *testing.T) {
						p := pm.make(t)
						c.run(t, p)
						require.NoError(t, p.ab.Close())
						require.NoError(t, p.ba.Close())
					})
				}
			})
		})
	}
}

// exported allocates and exports a buffer of n bytes at loc in e.
func exported(t *testing.T, e *Engine, n int, loc Location) (*Buffer, RemoteKey) {
	t.Helper()
	b, err := e.Alloc(n, loc)
	require.NoError(t, err)
	k, err := b.Export()
	require.NoError(t, err)
	return b, k
}

// hostCopyOf reads s into a new host slice through e.
func hostCopyOf(t *testing.T, e *Engine, s Slice) []byte {
	t.Helper()
	h, err := e.Alloc(max(s.Len(), 1), Host)
	require.NoError(t, err)
	defer h.Free()
	require.NoError(t, e.CopySync(context.Background(), h.Slice(0, s.Len()), s))
	return bytes.Clone(h.Bytes()[:s.Len()])
}

func suiteEveryPair(t *testing.T, p epPair) {
	ctx := context.Background()
	const size = 1<<20 + 4096 + 8
	src, err := p.a.Alloc(size, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 5)
	for _, rloc := range []Location{Host, Gaudi(0)} {
		_, rk := exported(t, p.b, size, rloc)
		for _, lloc := range []Location{Host, Gaudi(0)} {
			lb, err := p.a.Alloc(size, lloc)
			require.NoError(t, err)
			out, err := p.a.Alloc(size, lloc)
			require.NoError(t, err)
			for _, n := range []int{1, 4097, 1<<20 + 5} {
				name := fmt.Sprintf("%s->%s/%d", lloc, rloc, n)
				require.NoError(t, p.a.CopySync(ctx, lb.Slice(3, n), src.Slice(0, n)), name)
				require.NoError(t, p.ab.PutSync(ctx, lb.Slice(3, n), rk.Slice(5, n)), name)
				require.NoError(t, p.ab.GetSync(ctx, out.Slice(7, n), rk.Slice(5, n)), name)
				require.True(t, bytes.Equal(src.Bytes()[:n], hostCopyOf(t, p.a, out.Slice(7, n))), "%s: data differs", name)
			}
			require.NoError(t, lb.Free())
			require.NoError(t, out.Free())
		}
	}
}

func suiteRefusals(t *testing.T, p epPair) {
	ctx := context.Background()
	local, err := p.a.Alloc(8192, Host)
	require.NoError(t, err)
	rb, rk := exported(t, p.b, 8192, Host)
	other := newEngine(t, Config{})
	_, ok := exported(t, other, 8192, Host)
	forged := rk
	forged.k.MAC[0] ^= 1
	forged.root = nil
	cases := []struct {
		name  string
		local Slice
		key   RemoteKey
	}{
		{"another engine's key", local.All(), ok},
		{"length mismatch", local.Slice(0, 100), rk.Slice(0, 101)},
		{"range outside the key", local.Slice(0, 100), rk.Slice(8190, 100)},
		{"forged key", local.All(), forged},
	}
	if p.ab.Transport() == TransportRDMA {
		// RDMA writes and reads with a key's rkey reach the owner's NIC,
		// not its CPU: the NIC checks the registration, not the signed
		// grant (Buffer.Export's doc), so a forged MAC is not refused, and
		// an access to a deregistered region fails the queue pair (and
		// the endpoint) instead of answering "stale" (TestRDMAQPError).
		cases = cases[:3]
	}
	for _, c := range cases {
		err := p.ab.PutSync(ctx, c.local, c.key)
		require.ErrorIs(t, err, ErrInvalid, c.name)
		err = p.ab.GetSync(ctx, c.local, c.key)
		require.ErrorIs(t, err, ErrInvalid, c.name)
	}
	if p.ab.Transport() == TransportRDMA {
		return
	}
	// A key whose buffer its owner freed is refused as stale.
	require.NoError(t, rb.Free())
	err = p.ab.PutSync(ctx, local.All(), rk)
	require.ErrorIs(t, err, ErrInvalid, "put to a freed buffer")
	require.NoError(t, p.ab.Err(), "a refusal does not fail the endpoint")
}

func suiteCanceled(t *testing.T, p epPair) {
	local, err := p.a.Alloc(1<<20, Gaudi(0))
	require.NoError(t, err)
	_, rk := exported(t, p.b, 1<<20, Host)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := p.ab.Put(ctx, local.All(), rk)
	<-f.Done()
	require.ErrorIs(t, f.Err(), ErrCanceled)
	require.ErrorIs(t, f.Err(), context.Canceled)
	require.Zero(t, p.a.Stats().InFlight)
}

func suiteConcurrent(t *testing.T, p epPair) {
	const workers, each = 8, 256 << 10
	src, err := p.a.Alloc(workers*each, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 9)
	back, err := p.a.Alloc(workers*each, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, workers*each, Gaudi(0))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for range 4 {
				if err := p.ab.PutSync(ctx, src.Slice(w*each, each), rk.Slice(w*each, each)); err != nil {
					errs[w] = err
					return
				}
				if err := p.ab.GetSync(ctx, back.Slice(w*each, each), rk.Slice(w*each, each)); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.True(t, bytes.Equal(src.Bytes(), back.Bytes()))
}

// suiteThousand: 1000 Puts at once, then 1000 Gets, get back-pressure (Put and Get wait for one of the endpoint's
// request slots), never a refusal for having too many in progress.
func suiteThousand(t *testing.T, p epPair) {
	const n, each = 1000, 4096
	src, err := p.a.Alloc(n*each, Host)
	require.NoError(t, err)
	fill(src.Bytes(), 11)
	back, err := p.a.Alloc(n*each, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, n*each, Gaudi(0))
	ctx := context.Background()
	for _, put := range []bool{true, false} {
		// From a goroutine each: some transports move the bytes (or
		// wait for the peer) in Put itself.
		fs := make([]*Future, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if put {
					fs[i] = p.ab.Put(ctx, src.Slice(i*each, each), rk.Slice(i*each, each))
				} else {
					fs[i] = p.ab.Get(ctx, back.Slice(i*each, each), rk.Slice(i*each, each))
				}
			})
		}
		wg.Wait()
		errs := make([]error, 0, n)
		for _, f := range fs {
			errs = append(errs, f.Wait(ctx))
		}
		require.NoError(t, errors.Join(errs...), "put %v", put)
	}
	require.True(t, bytes.Equal(src.Bytes(), back.Bytes()))
}

func suitePeerCloses(t *testing.T, p epPair) {
	local, err := p.a.Alloc(4096, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, 4096, Host)
	require.NoError(t, p.ab.PutSync(context.Background(), local.All(), rk))
	require.NoError(t, p.ba.Close())
	select {
	case <-p.ab.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint did not notice its peer closed")
	}
	require.ErrorIs(t, p.ab.Err(), ErrPeer)
	err = p.ab.PutSync(context.Background(), local.All(), rk)
	require.ErrorIs(t, err, ErrPeer)
}

func suiteBinding(t *testing.T, p epPair) {
	local, err := p.a.Alloc(4096, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, 4096, Host)
	b, err := p.ab.Bind(context.Background(), local.All(), rk)
	if p.ab.Transport() == TransportTCP {
		require.ErrorIs(t, err, ErrNotSupported)
		return
	}
	require.NoError(t, err)
	fill(local.Bytes(), 3)
	want := bytes.Clone(local.Bytes())
	require.NoError(t, b.PutN(3))
	clear(local.Bytes())
	require.NoError(t, b.Get())
	require.Equal(t, want, local.Bytes())
	require.NoError(t, b.Flush())
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "idempotent")
	require.ErrorIs(t, b.Put(), ErrClosed)
}

func suiteStats(t *testing.T, p epPair) {
	local, err := p.a.Alloc(4096, Host)
	require.NoError(t, err)
	_, rk := exported(t, p.b, 4096, Host)
	ctx := context.Background()
	for range 3 {
		require.NoError(t, p.ab.PutSync(ctx, local.All(), rk))
	}
	require.NoError(t, p.ab.GetSync(ctx, local.All(), rk))
	st := p.ab.Stats()
	require.Equal(t, uint64(3), st.Puts)
	require.Equal(t, uint64(1), st.Gets)
	require.Equal(t, p.ab.Transport(), st.Transport)
	require.GreaterOrEqual(t, st.Lanes, 1)
}
