package ctrlchan

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// tcpPair is a loopback TCP connection: the dialer's end and the
// listener's, closed when the test ends.
func tcpPair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	accepted, ok := <-got
	require.True(t, ok, "accept failed")
	t.Cleanup(func() { _ = dialed.Close(); _ = accepted.Close() })
	return dialed, accepted
}

// tcpChan is a channel on nc whose peer's Hello announced caps.
func tcpChan(env *dptest.Env, nc net.Conn, dialer bool, caps wire.Caps) *Chan {
	cfg := wire.ConnConfig{ReadTimeout: env.Cfg.PeerTimeout}
	return New(Config{Env: env, Conn: wire.NewConn(wire.NewStreamTransport(nc), cfg), Name: "peer",
		Peer: wire.Hello{Caps: caps}, Dialer: dialer})
}

// TestUseReportedWithHeartbeat: a dialer's use that sends no frame (what
// one-sided RDMA into the listener's memory is: the engine marks it with
// MarkUsed only) reaches the listener over TCP with the dialer's next
// heartbeat, which marks the listener's endpoint active (so that
// Config.PeerIdleEvict does not close it under the dialer's use); the
// report is taken, not repeated.
func TestUseReportedWithHeartbeat(t *testing.T) {
	env := &dptest.Env{Cfg: datapath.Config{PeerTimeout: time.Second}} // a heartbeat each 250 ms
	dc, lc := tcpPair(t)
	d := tcpChan(env, dc, true, wire.CapHeartbeat|wire.CapUseReport)
	l := tcpChan(env, lc, false, wire.CapHeartbeat|wire.CapUseReport)
	startPair(t, env, d, l)
	l.TakeActivity() // the channel's first

	d.MarkUsed()
	active := false
	for i := 0; i < 1000 && !active; i++ { // 10 s at most: 40 heartbeats
		time.Sleep(10 * time.Millisecond)
		active = l.TakeActivity()
	}
	require.True(t, active, "the listener never saw the dialer's use")
	require.False(t, d.used.Load(), "the report was taken")
	require.NoError(t, d.Err())
	require.NoError(t, l.Err())
}

// TestUseReportForm: what a dialer's heartbeats say after its use, by
// what its listener announced: a Heartbeat with Used to one with
// wire.CapUseReport (TCP or unix), a MsgBell to one with message rings
// but without the capability (an engine of before it, which rejects a
// Heartbeat with a payload), nothing over TCP to one with neither. One
// use, one report; the channel stays up.
func TestUseReportForm(t *testing.T) {
	for _, tc := range []struct {
		name       string
		unix       bool
		caps       wire.Caps // the listener's Hello
		used, bell int       // reports of each form among the first beats
	}{
		{"tcp", false, wire.CapHeartbeat | wire.CapUseReport, 1, 0},
		{"tcp older listener", false, wire.CapHeartbeat, 0, 0},
		{"unix rings", true, ringPeer.Caps | wire.CapHeartbeat | wire.CapUseReport, 1, 0},
		{"unix rings older listener", true, ringPeer.Caps | wire.CapHeartbeat, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &dptest.Env{Cfg: datapath.Config{PeerTimeout: 400 * time.Millisecond}} // a beat each 100 ms
			cfg := Config{Env: env, Name: "peer", Peer: wire.Hello{Caps: tc.caps}, Dialer: true}
			var peer *wire.Conn
			if tc.unix {
				a, b := unixConns(t)
				cfg.Conn = wire.NewConn(a, wire.ConnConfig{ReadTimeout: env.Cfg.PeerTimeout})
				cfg.MsgRing = true
				peer = wire.NewConn(b, wire.ConnConfig{ReadTimeout: 10 * time.Second})
			} else {
				dc, lc := tcpPair(t)
				cfg.Conn = wire.NewConn(wire.NewStreamTransport(dc), wire.ConnConfig{ReadTimeout: env.Cfg.PeerTimeout})
				peer = wire.NewConn(wire.NewStreamTransport(lc), wire.ConnConfig{ReadTimeout: 10 * time.Second})
			}
			d := New(cfg)
			d.Start(&fakePath{c: d})
			t.Cleanup(func() { require.NoError(t, d.Close()); _ = peer.Close(); env.Wait() })

			d.MarkUsed()
			used, bell := 0, 0
			for beats := 0; beats < 3; {
				f, err := peer.Recv(context.Background())
				require.NoError(t, err)
				m, err := f.Message()
				require.NoError(t, err)
				require.NoError(t, f.CloseFDs())
				switch m := m.(type) {
				case *wire.Heartbeat:
					if m.Used {
						used++
					}
				case *wire.MsgBell:
					bell++
				case *wire.MsgRing, *wire.MsgCredit: // the dialer's window
					continue
				default:
					t.Fatalf("the dialer sent %v", f.Header.Type)
				}
				beats++
				require.NoError(t, peer.Send(&wire.Heartbeat{}))
			}
			require.Equal(t, tc.used, used, "heartbeats reporting use")
			require.Equal(t, tc.bell, bell, "bells reporting use")
			require.NoError(t, d.Err())
		})
	}
}

// TestUseReportReceived: what a listener does with a dialer's heartbeats,
// with and without the dialer's wire.CapUseReport: a report marks the
// endpoint active, a plain heartbeat does not (an older dialer's: the
// channel stays up), and a report from a dialer that did not announce the
// capability is a malformed frame.
func TestUseReportReceived(t *testing.T) {
	for _, tc := range []struct {
		name       string
		caps       wire.Caps // the dialer's Hello
		used       bool      // its first heartbeat reports use
		wantActive bool
		wantFail   bool
	}{
		{"report", wire.CapHeartbeat | wire.CapUseReport, true, true, false},
		{"plain", wire.CapHeartbeat | wire.CapUseReport, false, false, false},
		{"older dialer", wire.CapHeartbeat, false, false, false},
		{"unannounced report", wire.CapHeartbeat, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &dptest.Env{Cfg: datapath.Config{PeerTimeout: 10 * time.Second}}
			dc, lc := tcpPair(t)
			seen := make(chan struct{}, 2)
			p := &fakePath{handle: func(m wire.Message) (bool, error) {
				if _, ok := m.(*wire.Heartbeat); ok {
					seen <- struct{}{} // before the channel takes it
				}
				return false, nil
			}}
			l := tcpChan(env, lc, false, tc.caps)
			p.c = l
			l.Start(p)
			t.Cleanup(func() { require.NoError(t, l.Close()); env.Wait() })
			l.TakeActivity() // the channel's first
			peer := wire.NewConn(wire.NewStreamTransport(dc), wire.ConnConfig{})
			require.NoError(t, peer.Send(&wire.Heartbeat{Used: tc.used}))
			<-seen
			if tc.wantFail {
				select {
				case <-l.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("an unannounced report did not fail the channel")
				}
				require.ErrorIs(t, l.Err(), gxerr.Peer)
				require.ErrorContains(t, l.Err(), "malformed frame")
				return
			}
			// The second heartbeat is handled once the first was taken.
			require.NoError(t, peer.Send(&wire.Heartbeat{}))
			<-seen
			require.Equal(t, tc.wantActive, l.TakeActivity())
			require.NoError(t, l.Err())
		})
	}
}
