package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// startTCPPeer starts a perf server over tcp on 127.0.0.1 (an ephemeral
// port) with its own engine in this process and connects a client engine
// to it.
func startTCPPeer(tb testing.TB, mode engine.DeviceMode, cfg ServerConfig) (*engine.Engine, *Peer, *Server) {
	tb.Helper()
	cfg.TCP = "127.0.0.1:0"
	return startPeerWith(tb, mode, cfg, func(ctx context.Context, eng *engine.Engine, srv *Server) (*Peer, error) {
		return DialPeerTCP(ctx, eng, strings.TrimPrefix(srv.Addr(), "tcp:"))
	})
}

func TestTCPRunHost(t *testing.T) {
	eng, p, srv := startTCPPeer(t, engine.DevicesNone, ServerConfig{})
	require.True(t, strings.HasPrefix(srv.Addr(), "tcp:127.0.0.1:"), srv.Addr())
	require.Equal(t, "tcp", srv.Transport())
	require.Equal(t, "tcp", p.Transport())
	require.Equal(t, engine.TransportTCP, p.Endpoint().Transport())
	// The engine endpoint is at the control channel's host, on the port the
	// server's hello gave.
	require.Equal(t, srv.EngineAddr(), p.EngineAddr)
	require.NotEqual(t, strings.TrimPrefix(srv.Addr(), "tcp:"), p.EngineAddr)
	require.Equal(t, srv.Addr()+fmt.Sprintf(" (pid %d)", p.PID), p.String())

	env := &Env{Engine: eng, Transport: "tcp", Peer: p}
	tests, err := TestsFor(env, "")
	require.NoError(t, err)
	var names []string
	for _, tt := range tests {
		names = append(names, tt.Name)
		require.Equal(t, "tcp", tt.Transport)
	}
	require.Equal(t, []string{"put_lat", "put_bw", "get_lat", "get_bw"}, names)
	// 128 KiB is above the inline limit (a Put on the engine's workers),
	// 5 MiB above the lane split (two connections).
	sizes := []int{8, 4 << 10, 128 << 10, 5 << 20}
	rep, err := Run(context.Background(), env, tests, Params{Sizes: sizes, Iterations: 12, Warmup: 2, Window: 4})
	require.NoError(t, err)
	require.Len(t, rep.Results, 4*len(sizes))
	for _, r := range rep.Results {
		name := fmt.Sprintf("%s %s", r.Test, FormatSize(r.Size))
		require.True(t, r.Verified, name)
		require.Equal(t, "tcp", r.Transport, name)
		require.EqualValues(t, 12, r.Iterations, name)
		require.Positive(t, r.BandwidthMBs, name)
		require.Equal(t, p.String(), r.Peer)
		require.Equal(t, "host", r.PeerDevice)
		require.False(t, r.Emulated || r.PeerEmulated)
		switch r.Test {
		case "put_lat":
			require.Equal(t, OneWay, r.LatencyKind, "ping-pong between host buffers")
		case "get_lat":
			require.Equal(t, RoundTrip, r.LatencyKind)
		default:
			require.Equal(t, PerOp, r.LatencyKind)
			require.Equal(t, 4, r.Window)
			// No binding over tcp: one Put or Get per submission.
			require.Equal(t, r.Iterations, r.Submissions, name)
		}
	}
	require.Equal(t, "tcp", rep.Params.Transport)
	st := p.Endpoint().Stats()
	require.Equal(t, engine.TransportTCP, st.Transport)
	require.Positive(t, st.BytesOut)
	require.Positive(t, st.BytesIn)
	require.Zero(t, eng.Stats().Failed)

	var text strings.Builder
	require.NoError(t, rep.WriteText(&text))
	out := text.String()
	require.Contains(t, out, "# transport tcp (engine Data frames over TCP, TCP_NODELAY) | memory local host, remote host")
	require.Equal(t, 4, strings.Count(out, "# transport: tcp (engine Data frames over TCP, TCP_NODELAY) | peer "+p.String()+" | local device: host | peer device: host | emulated: no"), out)
	require.Contains(t, out, "one-way, half a ping-pong round trip")
	var js strings.Builder
	require.NoError(t, rep.WriteJSON(&js))
	require.Contains(t, js.String(), `"transport": "tcp"`)
	require.Contains(t, strings.Join(rep.Notes, "\n"), "tcp: the endpoint to "+p.EngineAddr)

	_, err = NewReport(env, tests, Params{Sizes: []int{8}, Iterations: 1, Batch: 2})
	require.ErrorContains(t, err, "not supported")
}

func TestTCPRunGaudi(t *testing.T) {
	eng, p, _ := startTCPPeer(t, engine.DevicesEmulated, ServerConfig{})
	for _, mem := range [][2]Mem{{Host, Gaudi}, {Gaudi, Host}, {Gaudi, Gaudi}} {
		t.Run(fmt.Sprintf("%s,%s", mem[0], mem[1]), func(t *testing.T) {
			env := &Env{Engine: eng, Transport: "tcp", Peer: p, Local: mem[0], Remote: mem[1]}
			tests, err := TestsFor(env, "put_lat,put_bw,get_bw")
			require.NoError(t, err)
			rep, err := Run(context.Background(), env, tests, Params{Sizes: []int{8, 1 << 20}, Iterations: 5, Warmup: 1, Window: 2})
			require.NoError(t, err)
			for _, r := range rep.Results {
				require.True(t, r.Verified, "%s %d", r.Test, r.Size)
				require.Equal(t, "tcp", r.Transport)
				require.True(t, r.Emulated || r.PeerEmulated, "a Gaudi end is the emulated device")
			}
			var text strings.Builder
			require.NoError(t, rep.WriteText(&text))
			require.Contains(t, text.String(), "EMULATED: dma/hlsim")
			require.Contains(t, text.String(), "# transport: tcp (")
		})
	}
}

func TestTCPServerOneClientAtATime(t *testing.T) {
	_, _, srv := startTCPPeer(t, engine.DevicesNone, ServerConfig{})
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	_, err = DialPeerTCP(context.Background(), eng, strings.TrimPrefix(srv.Addr(), "tcp:"))
	require.ErrorContains(t, err, fmt.Sprintf("busy with client pid %d at 127.0.0.1:", os.Getpid()))
}

func TestTCPServerOnceAndDialErrors(t *testing.T) {
	srvEng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer srvEng.Close()
	srv, err := Listen(srvEng, ServerConfig{TCP: "127.0.0.1:0", Once: true})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	addr := strings.TrimPrefix(srv.Addr(), "tcp:")
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	ctx := context.Background()
	p, err := DialPeerTCP(ctx, eng, addr)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NoError(t, <-done)
	// The server is gone: a clear error naming the address.
	_, err = DialPeerTCP(ctx, eng, addr)
	require.ErrorContains(t, err, "connect to the perf server at tcp:"+addr)
	require.ErrorContains(t, err, "is 'gxfer perf -server -x tcp:"+addr+"' running?")
	_, err = DialPeerTCP(ctx, eng, "127.0.0.1:0")
	require.ErrorContains(t, err, "port 0 is for servers")
	_, err = Listen(srvEng, ServerConfig{TCP: "127.0.0.1"})
	require.ErrorContains(t, err, "missing port")
}

func TestTCPServerMatchesClientEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := l.Accept()
	require.NoError(t, err)
	defer s.Close()
	ss := &session{s: &Server{tcp: true}, c: newCtlConn(s, "client"), pid: 42}
	require.True(t, ss.ours(`peer "gxfer" (pid 42 at 127.0.0.1:40000)`))
	require.False(t, ss.ours(`peer "gxfer" (pid 43 at 127.0.0.1:40000)`), "another pid")
	require.False(t, ss.ours(`peer "gxfer" (pid 42 at 10.0.0.9:40000)`), "another host")
	require.False(t, ss.ours(`peer "gxfer" (pid 42)`), "not a tcp peer")
	require.False(t, ss.ours(`peer "x (pid 42 at 127.0.0.1:1)" (pid 7 at 10.0.0.9:40000)`), "the name cannot fake it")
}

// TestCheckDialAddrPortZero: every spelling of port 0 is refused for a
// client ("00" and "+0" passed the check and the dial then failed with a
// runtime error instead of the usage message).
func TestCheckDialAddrPortZero(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", false},
		{"127.0.0.1:00", false},
		{"127.0.0.1:+0", false},
		{"[::1]:000", false},
		{"127.0.0.1:1", true},
		{"127.0.0.1:08080", true},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			err := CheckDialAddr(tc.addr)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "port 0 is for servers")
		})
	}
}
