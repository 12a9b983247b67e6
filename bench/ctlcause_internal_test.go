package bench

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCtlCallKeepsFirstFailure: a call after a failed one fails at once,
// and its error wraps the first failure's (a keepalive's "no answer
// within", the server's hang-up, a cancel). Before the fix it said only
// that an earlier request was cancelled or failed.
func TestCtlCallKeepsFirstFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hangUp  bool // the server closes at the first request; else it never answers
		cancel  bool // the first call's context is cancelled
		wantIs  error
		wantMsg string
	}{
		{name: "no answer", wantIs: os.ErrDeadlineExceeded, wantMsg: "ping: no answer from test server within"},
		{name: "hang-up", hangUp: true, wantMsg: "ping: test server closed the control connection"},
		{name: "cancelled", cancel: true, wantIs: context.Canceled, wantMsg: context.Canceled.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan struct{}, 1)
			addr, srvDone := ctlServer(t, 4, func(net.Conn, []byte) bool { // answers nothing
				got <- struct{}{}
				return !tc.hangUp
			})
			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			c := newCtlConn(conn, "test server")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			timeout := 200 * time.Millisecond
			if tc.cancel {
				timeout = ctlTimeout
				go func() {
					<-got
					cancel()
				}()
			}
			_, err = c.call(ctx, &ctlMsg{Op: opPing}, timeout)
			require.Error(t, err)

			_, err = c.call(context.Background(), &ctlMsg{Op: opAlloc}, 5*time.Second)
			require.ErrorIs(t, err, errAborted)
			require.Contains(t, err.Error(), "unusable")
			require.Contains(t, err.Error(), tc.wantMsg, "the earlier failure is hidden")
			if tc.wantIs != nil {
				require.ErrorIs(t, err, tc.wantIs)
			}
			require.NoError(t, c.Close())
			<-srvDone
		})
	}
}
