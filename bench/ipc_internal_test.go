package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// startPeer starts a perf server with its own engine in this process and
// connects a client engine to it.
func startPeer(tb testing.TB, mode engine.DeviceMode) (*engine.Engine, *Peer) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "s.sock")
	eng, p, _ := startPeerWith(tb, mode, ServerConfig{Path: path}, func(ctx context.Context, eng *engine.Engine, _ *Server) (*Peer, error) {
		return DialPeer(ctx, eng, path)
	})
	return eng, p
}

// startPeerWith starts a perf server configured by cfg, with its own
// engine (mode) in this process, and connects a client engine to it with
// dial; Cleanup closes everything.
func startPeerWith(tb testing.TB, mode engine.DeviceMode, cfg ServerConfig,
	dial func(context.Context, *engine.Engine, *Server) (*Peer, error)) (*engine.Engine, *Peer, *Server) {
	tb.Helper()
	srvEng, err := engine.New(engine.Config{Devices: mode, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}})
	require.NoError(tb, err)
	srv, err := Listen(srvEng, cfg)
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	eng, err := engine.New(engine.Config{Devices: mode, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}})
	require.NoError(tb, err)
	p, err := dial(context.Background(), eng, srv)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		require.NoError(tb, p.Close())
		cancel()
		require.NoError(tb, <-done)
		require.NoError(tb, eng.Close())
		require.NoError(tb, srvEng.Close())
	})
	return eng, p, srv
}

// BenchmarkIPCPut measures the client side of put_bw: one Put into the
// peer's host buffer and its completion, the loop gxfer perf runs (the
// peer is in this process, but an inline Put does not involve it).
func BenchmarkIPCPut(b *testing.B) {
	eng, p := startPeer(b, engine.DevicesNone)
	ctx := context.Background()
	for _, size := range []int{8, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%s", FormatSize(size)), func(b *testing.B) {
			local, err := eng.Alloc(size, engine.Host)
			require.NoError(b, err)
			defer local.Free()
			id, rk, err := p.alloc(ctx, Host, size, 1, false)
			require.NoError(b, err)
			defer p.free(ctx, id)
			require.NoError(b, p.preImport(ctx, rk))
			ls := local.All()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := waitFuture(ctx, p.ep.Put(ctx, ls, rk)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCopy is the same copies between two local host buffers with
// Engine.Copy: the engine's inline path without the endpoint.
func BenchmarkCopy(b *testing.B) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(b, err)
	defer eng.Close()
	ctx := context.Background()
	for _, size := range []int{8, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%s", FormatSize(size)), func(b *testing.B) {
			src, _ := eng.Alloc(size, engine.Host)
			dst, _ := eng.Alloc(size, engine.Host)
			defer src.Free()
			defer dst.Free()
			s, d := src.All(), dst.All()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := waitFuture(ctx, eng.Copy(ctx, d, s)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemmove is the floor: copy() between the same two buffers.
func BenchmarkMemmove(b *testing.B) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(b, err)
	defer eng.Close()
	for _, size := range []int{8, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%s", FormatSize(size)), func(b *testing.B) {
			src, _ := eng.Alloc(size, engine.Host)
			dst, _ := eng.Alloc(size, engine.Host)
			defer src.Free()
			defer dst.Free()
			s, d := src.Bytes(), dst.Bytes()
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(d, s)
			}
		})
	}
}

var sink atomic.Uint64

func ipcEnv(eng *engine.Engine, p *Peer, local, remote Mem) *Env {
	return &Env{Engine: eng, Transport: "ipc", Peer: p, Local: local, Remote: remote}
}

func TestIPCRunHost(t *testing.T) {
	eng, p := startPeer(t, engine.DevicesNone)
	env := ipcEnv(eng, p, "", "")
	tests, err := TestsFor(env, "")
	require.NoError(t, err)
	var names []string
	for _, tt := range tests {
		names = append(names, tt.Name)
	}
	require.Equal(t, []string{"put_lat", "put_bw", "get_lat", "get_bw"}, names)
	// 128 KiB is above the inline limit: Puts and Gets run on the engine's workers.
	sizes := []int{8, 4 << 10, 128 << 10}
	rep, err := Run(context.Background(), env, tests, Params{Sizes: sizes, Iterations: 30, Warmup: 3, Window: 4})
	require.NoError(t, err)
	require.Len(t, rep.Results, 4*len(sizes))
	for _, r := range rep.Results {
		name := fmt.Sprintf("%s %s", r.Test, FormatSize(r.Size))
		require.True(t, r.Verified, name)
		require.Equal(t, "ipc", r.Transport)
		require.EqualValues(t, 30, r.Iterations, name)
		require.Positive(t, r.BandwidthMBs, name)
		require.Positive(t, r.Latency.Median, name)
		require.Equal(t, p.String(), r.Peer)
		require.Equal(t, Host, r.Local)
		require.Equal(t, Host, r.Remote)
		require.Equal(t, "host", r.PeerDevice)
		require.False(t, r.Emulated || r.PeerEmulated)
		switch r.Test {
		case "put_lat":
			require.Equal(t, OneWay, r.LatencyKind, "ping-pong between host buffers")
			require.Equal(t, 1, r.Window)
			// Bandwidth and message rate count both directions.
			require.InDelta(t, 2*float64(r.Iterations)/r.ElapsedSec, r.MsgRate, r.MsgRate*1e-6)
		case "get_lat":
			require.Equal(t, RoundTrip, r.LatencyKind)
			require.Equal(t, 1, r.Window, "latency tests keep one operation in flight")
		default:
			require.Equal(t, PerOp, r.LatencyKind)
			require.Equal(t, 4, r.Window)
			// Host to host, bandwidth tests stream through a Binding: one
			// submission per chunk of back-to-back operations.
			k := int64(streamChunk(r.Size))
			require.Equal(t, (r.Iterations+k-1)/k, r.Submissions, name)
		}
		// What one message includes: over ipc, one call per put or get.
		switch r.Test {
		case "put_lat":
			require.Contains(t, r.Op, "one message = one Put call of a held Binding", name)
		case "put_bw":
			require.Contains(t, r.Op, "one put = one Put call of a held Binding", name)
			require.Contains(t, r.Op, "visible to the peer's loads", name)
		case "get_bw":
			require.Contains(t, r.Op, "one get = one Get call of a held Binding", name)
		case "get_lat":
			require.Contains(t, r.Op, "one get = one Binding.Get call", name)
		}
	}
	require.NotNil(t, rep.PeerEnv)
	require.Equal(t, p.String(), rep.Params.Peer)
	require.Zero(t, eng.Stats().Failed)

	var text strings.Builder
	require.NoError(t, rep.WriteText(&text))
	out := text.String()
	require.Equal(t, 4, strings.Count(out, "# transport: ipc (unix socket, shared memfd) | peer "+p.String()+" | local device: host | peer device: host | emulated: no"), out)
	require.Contains(t, out, "# test put_bw: host -> peer host")
	require.Contains(t, out, "# test get_bw: peer host -> host")
	require.Contains(t, out, "one-way, half a ping-pong round trip")
	require.Contains(t, out, "reused every iteration")
	require.Contains(t, out, "# msg/s counts messages; one put = one Put call of a held Binding")

	// Batches are refused: an endpoint has no batch API.
	_, err = NewReport(env, tests, Params{Sizes: []int{8}, Iterations: 1, Batch: 2})
	require.ErrorContains(t, err, "not supported")
}

func TestIPCRunGaudi(t *testing.T) {
	eng, p := startPeer(t, engine.DevicesEmulated)
	for _, mem := range [][2]Mem{{Host, Gaudi}, {Gaudi, Host}, {Gaudi, Gaudi}} {
		t.Run(fmt.Sprintf("%s,%s", mem[0], mem[1]), func(t *testing.T) {
			env := ipcEnv(eng, p, mem[0], mem[1])
			tests, err := TestsFor(env, "put_lat,put_bw,get_lat,get_bw")
			require.NoError(t, err)
			rep, err := Run(context.Background(), env, tests, Params{Sizes: []int{8, 8 << 10}, Iterations: 5, Warmup: 1, Window: 2})
			require.NoError(t, err)
			require.Len(t, rep.Results, 8)
			for _, r := range rep.Results {
				require.True(t, r.Verified)
				require.Equal(t, mem[0], r.Local)
				require.Equal(t, mem[1], r.Remote)
				require.Equal(t, mem[0] == Gaudi, r.Emulated, "the local end is labelled")
				require.Equal(t, mem[1] == Gaudi, r.PeerEmulated, "the peer's end is labelled")
				if mem[1] == Gaudi {
					require.Equal(t, "gaudi0", r.PeerDevice)
				}
				if r.Test == "put_lat" {
					require.Equal(t, RoundTrip, r.LatencyKind, "no ping-pong when the CPU cannot poll an end")
				}
			}
			var text strings.Builder
			require.NoError(t, rep.WriteText(&text))
			require.Contains(t, text.String(), "emulated: yes")
			require.Contains(t, text.String(), "EMULATED")
		})
	}
	// The peer's Gaudi end needs a device at the peer.
	_, noDev := startPeer(t, engine.DevicesNone)
	_, err := TestsFor(ipcEnv(eng, noDev, Host, Gaudi), "put_bw")
	require.ErrorContains(t, err, "has no Gaudi device open")
}

func TestIPCPingPongSmallSize(t *testing.T) {
	eng, p := startPeer(t, engine.DevicesNone)
	env := ipcEnv(eng, p, "", "")
	tests, err := TestsFor(env, "put_lat")
	require.NoError(t, err)
	_, err = Run(context.Background(), env, tests, Params{Sizes: []int{4}, Iterations: 5})
	require.ErrorContains(t, err, "at least 8 bytes")
	// Odd sizes put the sequence at the last aligned 8 bytes.
	rep, err := Run(context.Background(), env, tests, Params{Sizes: []int{13, 4097}, Iterations: 5})
	require.NoError(t, err)
	require.True(t, rep.Results[0].Verified && rep.Results[1].Verified)
}

func TestIPCServerVerifies(t *testing.T) {
	eng, p := startPeer(t, engine.DevicesNone)
	ctx := context.Background()
	id, rk, err := p.alloc(ctx, Host, 4096, 9, true)
	require.NoError(t, err)
	// Nothing moved: the complement is still there.
	require.ErrorContains(t, p.verify(ctx, id, 9), "verification failed")
	src, err := eng.Alloc(4096, engine.Host)
	require.NoError(t, err)
	defer src.Free()
	fillPattern(src.Bytes(), 9, false)
	src.Bytes()[100] ^= 0x40
	require.NoError(t, p.ep.PutSync(ctx, src.All(), rk))
	require.ErrorContains(t, p.verify(ctx, id, 9), "byte 100")
	src.Bytes()[100] ^= 0x40
	require.NoError(t, p.ep.PutSync(ctx, src.All(), rk))
	require.NoError(t, p.verify(ctx, id, 9))
	require.NoError(t, p.free(ctx, id))
	require.ErrorContains(t, p.free(ctx, id), "no buffer")
	_, _, err = p.alloc(ctx, Gaudi, 4096, 1, false)
	require.ErrorContains(t, err, "no Gaudi device open")
	_, _, err = p.alloc(ctx, Host, 0, 1, false)
	require.ErrorContains(t, err, "bad size")
}

func TestIPCServerOneClientAtATime(t *testing.T) {
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer srvEng.Close()
	path := filepath.Join(t.TempDir(), "s.sock")
	srv, err := Listen(srvEng, ServerConfig{Path: path})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()

	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	first, err := DialPeer(ctx, eng, path)
	require.NoError(t, err)
	_, err = DialPeer(ctx, eng, path)
	require.ErrorContains(t, err, "busy with client pid")
	require.NoError(t, first.Close())
	// The server is free again once the first client is gone.
	require.Eventually(t, func() bool {
		p, err := DialPeer(ctx, eng, path)
		if err != nil {
			return false
		}
		require.NoError(t, p.Close())
		return true
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	_, err = os.Stat(path)
	require.True(t, os.IsNotExist(err), "the sockets are removed: %v", err)
	_, err = os.Stat(path + CtlSuffix)
	require.True(t, os.IsNotExist(err))
}

func TestIPCServerOnce(t *testing.T) {
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer srvEng.Close()
	path := filepath.Join(t.TempDir(), "s.sock")
	srv, err := Listen(srvEng, ServerConfig{Path: path, Once: true})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	ctx := context.Background()
	p, err := DialPeer(ctx, eng, path)
	require.NoError(t, err)
	_, err = DialPeer(ctx, eng, path)
	require.ErrorContains(t, err, "busy")
	require.NoError(t, p.Close())
	require.NoError(t, <-done, "a client that says bye ends a -once server cleanly")
	_, err = DialPeer(ctx, eng, path)
	require.ErrorContains(t, err, "is 'gxfer perf -server -x unix:"+path+"' running?")
}

func TestIPCServerClientVanishes(t *testing.T) {
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer srvEng.Close()
	path := filepath.Join(t.TempDir(), "s.sock")
	srv, err := Listen(srvEng, ServerConfig{Path: path, Once: true})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	ctx := context.Background()
	p, err := DialPeer(ctx, eng, path)
	require.NoError(t, err)
	env := ipcEnv(eng, p, "", "")
	tests, err := TestsFor(env, "put_lat")
	require.NoError(t, err)
	w, err := tests[0].Prepare(ctx, env, 64)
	require.NoError(t, err)
	require.NoError(t, w.(*pingPong).RoundTrip(ctx))
	// The client goes away mid ping-pong without a word: the server's
	// responder and session end, and so does a -once server, with an error.
	require.NoError(t, p.ep.Close())
	require.NoError(t, p.ctl.Close())
	err = <-done
	require.ErrorContains(t, err, "disconnected without saying bye")
	require.Error(t, w.Close())
	// Close stops the client's keepalive (its bye fails: nobody listens).
	require.Error(t, p.Close())
}

func TestIPCClientTimesOut(t *testing.T) {
	saved := pingTimeout
	pingTimeout = 200 * time.Millisecond
	defer func() { pingTimeout = saved }()
	eng, p := startPeer(t, engine.DevicesNone)
	ctx := context.Background()
	env := ipcEnv(eng, p, "", "")
	tests, err := TestsFor(env, "put_lat")
	require.NoError(t, err)
	w, err := tests[0].Prepare(ctx, env, 64)
	require.NoError(t, err)
	pp := w.(*pingPong)
	require.NoError(t, pp.RoundTrip(ctx))
	// A round the server never sees (its sequence is skipped) gets no answer.
	pp.seq += 5
	err = pp.RoundTrip(ctx)
	require.ErrorContains(t, err, "no answer")
	require.Error(t, w.Close(), "the server answered fewer rounds than were sent")
}

func TestListenStaleAndLiveSockets(t *testing.T) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	// A socket file nobody listens on (a server that was killed) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path + CtlSuffix, Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	srv, err := Listen(eng, ServerConfig{Path: path})
	require.NoError(t, err)
	// A live one is not.
	_, err = Listen(eng, ServerConfig{Path: path})
	require.ErrorContains(t, err, "in use")
	require.NoError(t, srv.Close())
	_, err = Listen(eng, ServerConfig{Path: filepath.Join(dir, strings.Repeat("x", 120))})
	require.ErrorContains(t, err, "too long")
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string][2]string{
		"local": {"local", ""}, "unix:/tmp/s": {"ipc", "/tmp/s"}, "unix:rel/s": {"ipc", "rel/s"},
		"tcp:127.0.0.1:5000": {"tcp", "127.0.0.1:5000"}, "tcp:[::1]:80": {"tcp", "[::1]:80"},
		"tcp:host.example:0": {"tcp", "host.example:0"}, "tcp::5000": {"tcp", ":5000"},
		"rdma:127.0.0.1:5000": {"rdma", "127.0.0.1:5000"}, "rdma:[::1]:0": {"rdma", "[::1]:0"},
	} {
		name, addr, err := ParseTransport(in)
		require.NoError(t, err, in)
		require.Equal(t, want, [2]string{name, addr}, in)
	}
	for in, want := range map[string]string{
		"unix:": "empty socket path", "ipc": "needs the server's socket", "rdma": "needs the server's address: -x rdma:HOST:PORT",
		"rdma:": "want rdma:HOST:PORT", "rdma:127.0.0.1": "missing port", "rdma:host:http": "bad port",
		"tcp": "needs the server's address: -x tcp:HOST:PORT", "pigeon": "unknown transport", "unix:@abstract": "abstract",
		"tcp:": "want tcp:HOST:PORT", "tcp:127.0.0.1": "missing port", "tcp:host:": "missing port",
		"tcp:host:http": "bad port", "tcp:host:70000": "bad port", "tcp:host:-1": "bad port",
		"tcp:::1:5000": "too many colons", "tcp:[::1": "missing ']'",
	} {
		_, _, err := ParseTransport(in)
		require.ErrorContains(t, err, want, in)
	}
	tr, err := LookupTransport("ipc")
	require.NoError(t, err)
	require.Equal(t, "unix socket + memfd/DMA-BUF fd passing, same host", tr.Desc)
	require.Equal(t, "ipc (unix socket, shared memfd)", TransportLabel("ipc"))
	require.Equal(t, "local", TransportLabel("local"))
}

func TestPeerTestsNeedAPeer(t *testing.T) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	_, err = TestsFor(&Env{Engine: eng}, "put_bw")
	require.ErrorContains(t, err, "needs a peer")
	_, err = TestsFor(&Env{Engine: eng, Transport: "ipc"}, "put_bw")
	require.ErrorContains(t, err, "none is connected")
}

func TestClock(t *testing.T) {
	c := harnessClock()
	w0, t0 := time.Now(), c.now()
	time.Sleep(20 * time.Millisecond)
	d, wall := c.dur(c.now()-t0), time.Since(w0)
	require.InDelta(t, float64(wall), float64(d), float64(wall)/100+float64(100*time.Microsecond), "clock %v, wall %v (%s)", d, wall, c.source())
	require.InDelta(t, float64(time.Second), float64(c.dur(c.ticks(time.Second))), 1e3)
}

// fakeStreamer records what streamLoop asks of it.
type fakeStreamer struct {
	calls, ops int
	failAt     int // the call that fails (1-based); 0: none
	cancel     func()
}

func (f *fakeStreamer) CanStream() bool { return true }

func (f *fakeStreamer) Stream(_ context.Context, n int) error {
	f.calls++
	if n <= 0 {
		return fmt.Errorf("Stream(%d)", n)
	}
	if f.calls == f.failAt {
		return errors.New("boom")
	}
	if f.cancel != nil && f.calls == 2 {
		f.cancel()
	}
	f.ops += n
	return nil
}

func TestStreamChunk(t *testing.T) {
	for size, want := range map[int]int{1: 1024, 8: 1024, 4 << 10: 256, 64 << 10: 16, 256 << 10: 4, 1 << 20: 1, 16 << 20: 1, 100 << 10: 10} {
		require.Equal(t, want, streamChunk(size), "size %d", size)
	}
}

func TestStreamLoop(t *testing.T) {
	ctx := context.Background()
	p := Params{}.withDefaults()
	for _, size := range []int{8, 4 << 10, 100 << 10, 1 << 20} {
		for _, limit := range []int64{1, 63, 64, 1000, 2500} {
			f := &fakeStreamer{}
			rec := &recorder{kind: PerOp}
			var fracs []float64
			m, err := streamLoop(ctx, f, p, size, limit, 0, rec, func(x float64) { fracs = append(fracs, x) })
			require.NoError(t, err)
			k := int64(streamChunk(size))
			require.Equal(t, limit, m.msgs, "exactly the operations asked for")
			require.EqualValues(t, limit, f.ops)
			require.Equal(t, (limit+k-1)/k, m.subs)
			require.EqualValues(t, m.subs, f.calls)
			require.Equal(t, m.subs, rec.lat.seen, "one latency sample per chunk")
			require.Equal(t, limit, rec.lat.weight, "samples weighted by the operations they cover")
			for _, x := range fracs {
				require.True(t, x > 0 && x <= 1, "progress %v", x)
			}
		}
	}
	// Timed: at least one chunk, whole chunks.
	f := &fakeStreamer{}
	m, err := streamLoop(ctx, f, p, 8, 0, time.Millisecond, nil, nil)
	require.NoError(t, err)
	require.Positive(t, m.msgs)
	require.Zero(t, m.msgs%int64(streamChunk(8)))
	require.EqualValues(t, m.msgs, f.ops)
	// An error ends the loop with what was done before.
	f = &fakeStreamer{failAt: 3}
	m, err = streamLoop(ctx, f, p, 4<<10, 1000, 0, nil, nil)
	require.ErrorContains(t, err, "boom")
	require.EqualValues(t, 2*streamChunk(4<<10), m.msgs)
	// So does a cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f = &fakeStreamer{cancel: cancel}
	_, err = streamLoop(cctx, f, p, 8, 0, time.Hour, nil, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, f.calls)
}

// TestBindingPutNGetN: PutN and GetN move the bytes into and out of the
// perf server's buffer, count every operation, and refuse a closed
// binding.
func TestBindingPutNGetN(t *testing.T) {
	eng, p := startPeer(t, engine.DevicesNone)
	ctx := context.Background()
	for _, size := range []int{8, 4 << 10, 1 << 20} {
		id, rk, err := p.alloc(ctx, Host, size, 3, true)
		require.NoError(t, err)
		src, err := eng.Alloc(size, engine.Host)
		require.NoError(t, err)
		dst, err := eng.Alloc(size, engine.Host)
		require.NoError(t, err)
		fillPattern(src.Bytes(), 3, false)
		fillPattern(dst.Bytes(), 3, true)

		put, err := p.ep.Bind(ctx, src.All(), rk)
		require.NoError(t, err)
		get, err := p.ep.Bind(ctx, dst.All(), rk)
		require.NoError(t, err)
		require.NoError(t, put.PutN(0), "nothing to do")
		require.NoError(t, put.PutN(-1), "nothing to do")
		require.NoError(t, get.GetN(0))
		require.ErrorContains(t, p.verify(ctx, id, 3), "verification failed", "no Put ran yet")
		before := eng.Stats()
		require.NoError(t, put.PutN(5))
		require.NoError(t, p.verify(ctx, id, 3))
		require.NoError(t, get.GetN(3))
		require.NoError(t, checkPattern(dst.Bytes(), 3, span{}, "local destination"))
		require.NoError(t, put.Close())
		require.NoError(t, get.Close())
		after := eng.Stats()
		require.EqualValues(t, 8, after.Inline-before.Inline, "every operation counts")
		require.EqualValues(t, 8*size, after.Bytes-before.Bytes)
		require.ErrorIs(t, put.PutN(1), engine.ErrClosed)
		require.ErrorIs(t, get.GetN(1), engine.ErrClosed)
		require.NoError(t, src.Free())
		require.NoError(t, dst.Free())
		require.NoError(t, p.free(ctx, id))
	}
}

// chunkedStreamer is a fakeStreamer that chooses its own chunk.
type chunkedStreamer struct {
	fakeStreamer
	chunk int
}

func (c *chunkedStreamer) StreamChunk(int) int { return c.chunk }

func TestStreamLoopChunker(t *testing.T) {
	p := Params{}.withDefaults()
	for _, tc := range []struct {
		chunk        int
		limit, calls int64
	}{
		{chunk: 128, limit: 1000, calls: 8},
		{chunk: 128, limit: 128, calls: 1},
		{chunk: 0, limit: 3, calls: 3}, // at least one operation per call
	} {
		f := &chunkedStreamer{chunk: tc.chunk}
		m, err := streamLoop(context.Background(), f, p, 64<<10, tc.limit, 0, nil, nil)
		require.NoError(t, err)
		require.Equal(t, tc.limit, m.msgs)
		require.EqualValues(t, tc.calls, f.calls, "chunk %d", tc.chunk)
	}
}

func TestRMAStreamChunk(t *testing.T) {
	for _, tc := range []struct {
		tr   engine.TransportKind
		size int
		want int
	}{
		{engine.TransportRDMA, 64 << 10, rdmaBindWindow}, // the binding's window per PutN
		{engine.TransportRDMA, 16 << 20, rdmaBindWindow},
		{engine.TransportRDMA, 8, 1024}, // streamChunk's when larger
		{engine.TransportIPC, 64 << 10, 16},
		{engine.TransportTCP, 64 << 10, 16},
	} {
		require.Equal(t, tc.want, rmaStreamChunk(tc.tr, tc.size), "%v %d", tc.tr, tc.size)
	}
}
