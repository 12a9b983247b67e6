package wire

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/fd"
)

// enteredTransport is a StreamTransport that tells when a Recv has
// reached the transport (the Conn's read deadline is then set up).
type enteredTransport struct {
	*StreamTransport
	once    sync.Once
	entered chan struct{}
}

func (e *enteredTransport) Recv(buf []byte) (int, []*fd.FD, error) {
	e.once.Do(func() { close(e.entered) })
	return e.StreamTransport.Recv(buf)
}

// TestConnRecvCtxEndKind: a Recv that its ctx ends while it waits
// reports why: Canceled for a cancel (also of a ctx that has a deadline),
// DeadlineExceeded for a deadline.
func TestConnRecvCtxEndKind(t *testing.T) {
	cases := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		end  bool // cancel once Recv waits in the transport
		want error
	}{
		{"deadline ctx canceled", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, true, context.Canceled},
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}, false, context.DeadlineExceeded},
		{"deadline passed before", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, false, context.DeadlineExceeded},
		{"plain cancel", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, true, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			et := &enteredTransport{StreamTransport: NewStreamTransport(b), entered: make(chan struct{})}
			ca, cb := NewConn(NewStreamTransport(a), ConnConfig{}), NewConn(et, ConnConfig{})
			defer func() {
				_ = ca.Close()
				_ = cb.Close()
			}()
			ctx, cancel := tc.ctx()
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := cb.Recv(ctx)
				errc <- err
			}()
			if tc.end {
				select {
				case <-et.entered:
					cancel()
				case err := <-errc:
					t.Fatalf("Recv returned before its ctx ended: %v", err)
				}
			}
			err := <-errc
			require.ErrorIs(t, err, tc.want)
			other := context.Canceled
			if tc.want == context.Canceled {
				other = context.DeadlineExceeded
			}
			require.NotErrorIs(t, err, other)
		})
	}
}
