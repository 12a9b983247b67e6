package rdmapath

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// pipeConns is a control connection's two ends, closed at the end of the
// test.
func pipeConns(t *testing.T) (*wire.Conn, *wire.Conn) {
	a, b := net.Pipe()
	wa := wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{})
	wb := wire.NewConn(wire.NewStreamTransport(b), wire.ConnConfig{})
	t.Cleanup(func() {
		_ = wa.Close()
		_ = wb.Close()
	})
	return wa, wb
}

func closeConns(conns []*conn) {
	for _, c := range conns {
		c.close()
	}
}

// TestConnectRefusesBadPeerEndpoint: a peer's RDMAConnect naming a queue
// pair of this side (the one being connected, or another endpoint's), QP
// 1, or no GID on RoCE, is refused with ErrPeer, dialing or accepting;
// another engine's queue pair on the same device, and this engine's own
// when it dials itself, are not. (Before, the endpoint was taken as
// given: a peer answering a dial with the dialer's own endpoint looped
// its queue pair onto itself, and then had the owner of delegated
// requests RDMA its own memory, with no RDMA of its own.)
func TestConnectRefusesBadPeerEndpoint(t *testing.T) {
	tr := openTest(t, Config{})
	other := bareConn(t, openTest(t, Config{})).conns[0] // another engine's, same device
	busy := loopPath(t, tr).conns[0]                     // another endpoint's, connected
	n := tr.nics[0]
	valid := other.qp.Endpoint()
	with := func(f func(*rdma.Endpoint)) func(rdma.Endpoint) rdma.Endpoint {
		return func(rdma.Endpoint) rdma.Endpoint {
			ep := valid
			f(&ep)
			return ep
		}
	}
	type tcase struct {
		name   string
		dialer bool
		peer   func(ours rdma.Endpoint) rdma.Endpoint // ours: the dialer's endpoint sent (zero when accepting)
		ok     bool
	}
	cases := []tcase{
		{"another engine's queue pair", true, with(func(*rdma.Endpoint) {}), true},
		{"another engine's queue pair, accepting", false, with(func(*rdma.Endpoint) {}), true},
		{"the queue pair being connected", true, func(ours rdma.Endpoint) rdma.Endpoint { return ours }, false},
		{"another endpoint's queue pair", true, func(rdma.Endpoint) rdma.Endpoint { return busy.qp.Endpoint() }, false},
		{"another endpoint's queue pair, accepting", false, func(rdma.Endpoint) rdma.Endpoint { return busy.qp.Endpoint() }, false},
		{"QP 1", true, with(func(ep *rdma.Endpoint) { ep.QPN = 1 }), false},
	}
	gids, err := n.dev.GIDs(n.port)
	require.NoError(t, err)
	for _, e := range gids {
		if g := e.GID; g != n.gid {
			cases = append(cases, tcase{"the queue pair being connected, by another GID", true, func(ours rdma.Endpoint) rdma.Endpoint {
				ours.GID = g
				return ours
			}, false})
			break
		}
	}
	if n.portInfo.LinkLayer == rdma.LinkLayerEthernet {
		cases = append(cases, tcase{"no GID on RoCE", true, with(func(ep *rdma.Endpoint) { ep.GID, ep.LID = rdma.GID{}, 1 }), false})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wc, wp := pipeConns(t)
			peerDone := make(chan error, 1)
			go func() { // the peer
				var ours rdma.Endpoint
				if tc.dialer {
					got, err := recvConnects(ctx, wp, wire.MaxNICs)
					if err != nil {
						peerDone <- err
						return
					}
					ours = fromWireEndpoint(&got[0])
				}
				m := toWireEndpoint(tc.peer(ours), 0, 1)
				err := wp.Send(&m)
				if err == nil && !tc.dialer {
					_, err = wp.Recv(ctx) // the answer, or the refusal
				}
				peerDone <- err
			}()
			conns, err := tr.connect(ctx, wc, tc.dialer)
			defer closeConns(conns)
			require.NoError(t, <-peerDone)
			if tc.ok {
				require.NoError(t, err)
				require.Len(t, conns, 1)
				return
			}
			require.ErrorIs(t, err, gxerr.Peer)
			require.Nil(t, conns)
		})
	}
	t.Run("this engine dialing itself", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		wd, wa := pipeConns(t)
		accepted := make(chan error, 1)
		go func() {
			conns, err := tr.connect(ctx, wa, false)
			closeConns(conns)
			accepted <- err
		}()
		conns, err := tr.connect(ctx, wd, true)
		closeConns(conns)
		require.NoError(t, err)
		require.NoError(t, <-accepted)
	})
}
