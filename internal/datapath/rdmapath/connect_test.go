package rdmapath

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// TestRecvConnectsMalformed: the peer's RDMAConnects out of order, or
// naming more NICs than this side offered (a dialer's answer), are a
// malformed exchange (wire.ErrMalformed), as a bad RDMAConnect payload
// or a HelloAck accepting more than was offered is; the peer's refusal
// is its wire.Error. (Before, the sequence errors were untyped, and a
// dialer read every RDMAConnect of an answer naming more NICs than it
// offered before refusing it.)
func TestRecvConnectsMalformed(t *testing.T) {
	m := func(nic, nics uint8) wire.Message {
		return &wire.RDMAConnect{QPN: 0x11 + uint32(nic), MTU: 5, LID: 1, NIC: nic, NICs: nics}
	}
	for _, tc := range []struct {
		name      string
		most      int // NICs this side offered
		send      []wire.Message
		want      int   // RDMAConnects returned
		malformed bool  // else: the error is want
		err       error // the peer's error, when it sends one
	}{
		{"in order", 2, []wire.Message{m(0, 2), m(1, 2)}, 2, false, nil},
		{"fewer than offered", 3, []wire.Message{m(0, 1)}, 1, false, nil},
		{"out of order", 2, []wire.Message{m(1, 2)}, 0, true, nil},
		{"count changes", 3, []wire.Message{m(0, 2), m(1, 3)}, 0, true, nil},
		{"repeated", 2, []wire.Message{m(0, 2), m(0, 2)}, 0, true, nil},
		{"more NICs than offered", 1, []wire.Message{m(0, 2), m(1, 2)}, 0, true, nil},
		{"another message", 1, []wire.Message{&wire.Heartbeat{}}, 0, true, nil},
		{"the peer refuses", 1, []wire.Message{wire.NewError(0, wire.StatusNoResources, "no QP")}, 0, false, &wire.Error{Code: wire.StatusNoResources, Message: "no QP"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			wa := wire.NewConn(wire.NewStreamTransport(a), wire.ConnConfig{})
			wb := wire.NewConn(wire.NewStreamTransport(b), wire.ConnConfig{})
			defer func() { _ = wa.Close() }()
			defer func() { _ = wb.Close() }()
			sent := make(chan error, 1)
			go func() {
				var err error
				for _, msg := range tc.send {
					if err = wa.Send(msg); err != nil {
						break
					}
				}
				sent <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := recvConnects(ctx, wb, tc.most)
			_ = wb.Close() // a sender the receiver stopped reading ends
			<-sent
			switch {
			case tc.malformed:
				require.ErrorIs(t, err, wire.ErrMalformed)
			case tc.err != nil:
				var we *wire.Error
				require.True(t, errors.As(err, &we), "%v", err)
				require.Equal(t, tc.err.(*wire.Error).Code, we.Code)
			default:
				require.NoError(t, err)
				require.Len(t, got, tc.want)
			}
		})
	}
}
