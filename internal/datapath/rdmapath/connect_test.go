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

// FuzzRecvConnects feeds arbitrary bytes, as the peer's side of the
// control connection, to recvConnects (the first byte picks how many NICs
// this side offered). Nothing may panic; what it returns is a sequence
// connect can use: 1 to most RDMAConnects, NIC i at i, all naming their
// count, each valid.
func FuzzRecvConnects(f *testing.F) {
	seq := func(most byte, msgs ...wire.Message) []byte {
		b := []byte{most}
		for _, m := range msgs {
			fr, err := wire.AppendFrame(nil, m)
			if err != nil {
				f.Fatal(err)
			}
			b = append(b, fr...)
		}
		return b
	}
	c := func(nic, nics uint8) wire.Message {
		return &wire.RDMAConnect{QPN: 0x11, PSN: 7, MTU: 5, GID: [16]byte{0xfe, 0x80, 15: 1}, NIC: nic, NICs: nics}
	}
	f.Add(seq(0, c(0, 1)))
	f.Add(seq(2, c(0, 3), c(1, 3), c(2, 3)))
	f.Add(seq(2, c(0, 2), c(0, 2)))
	f.Add(seq(0, c(0, 2), c(1, 2)))
	f.Add(seq(1, wire.NewError(0, wire.StatusNoResources, "no QP")))
	f.Add(seq(1, &wire.Heartbeat{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		most := wire.MaxNICs
		if len(data) > 0 {
			most = 1 + int(data[0])%wire.MaxNICs
			data = data[1:]
		}
		a, b := net.Pipe()
		wb := wire.NewConn(wire.NewStreamTransport(b), wire.ConnConfig{})
		written := make(chan struct{})
		go func() {
			defer close(written)
			_, _ = a.Write(data)
			_ = a.Close()
		}()
		got, err := recvConnects(context.Background(), wb, most)
		_ = wb.Close() // a writer whose bytes were not all read ends
		<-written
		if err != nil {
			return
		}
		if len(got) < 1 || len(got) > most {
			t.Fatalf("%d RDMAConnects, %d offered", len(got), most)
		}
		for i := range got {
			m := &got[i]
			if int(m.NIC) != i || int(m.NICs) != len(got) {
				t.Fatalf("RDMAConnect %d: NIC %d of %d, %d returned", i, m.NIC, m.NICs, len(got))
			}
			if _, err := m.AppendPayload(nil); err != nil {
				t.Fatalf("RDMAConnect %d does not re-encode: %v", i, err)
			}
			if err := fromWireEndpoint(m).Validate(); err != nil {
				t.Fatalf("RDMAConnect %d: endpoint %v", i, err)
			}
		}
	})
}
