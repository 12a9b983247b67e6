package engine

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// TestCloseEndsDialsInFlight: Engine.Close ends a Dial whose handshake is
// in flight (here: the listener never answers its Hello) and returns only
// once it has returned, with ErrClosed. Before, Close returned at once and
// left the Dial running on the closed engine, its socket open, for up to
// the handshake's 5 s (and an RDMA Dial could go on setting up queue
// pairs on NICs Close was releasing).
func TestCloseEndsDialsInFlight(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			var addr string
			accepted := make(chan wire.Transport, 1)
			if network == "unix" {
				il, err := ipc.Listen(filepath.Join(t.TempDir(), "silent.sock"), ipc.Config{})
				require.NoError(t, err)
				defer il.Close()
				addr = il.Path()
				go func() {
					if c, err := il.Accept(context.Background()); err == nil {
						accepted <- c
					}
				}()
			} else {
				nl, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				defer nl.Close()
				addr = nl.Addr().String()
				go func() {
					if c, err := nl.Accept(); err == nil {
						accepted <- wire.NewStreamTransport(c)
					}
				}()
			}
			e, err := New(Config{Devices: DevicesNone, Transport: TransportTCP})
			require.NoError(t, err)
			dialed := make(chan error, 1)
			go func() {
				_, err := e.Dial(context.Background(), network, addr)
				dialed <- err
			}()
			c := wire.NewConn(<-accepted, wire.ConnConfig{MaxFrame: handshake.IPCMaxFrame})
			defer c.Close()
			_, err = c.Recv(context.Background()) // its Hello: the Dial waits for our answer
			require.NoError(t, err)

			require.NoError(t, e.Close())
			select {
			case err := <-dialed:
				require.ErrorIs(t, err, ErrClosed)
			default:
				err := <-dialed // within the handshake's deadline
				t.Fatalf("Close returned while a Dial was still in flight (it then ended with: %v)", err)
			}
		})
	}
}
