package agent

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestRefusalTextQuoted: a peer's refusal text is untrusted bytes: it
// reaches this agent's errors quoted, never raw (a terminal escape or a
// newline would reach whoever prints the error, as a hello's name would
// reach the logs: decode refuses those). Before, both the handshake's
// error and the dropped peer's Err carried the text as it came.
func TestRefusalTextQuoted(t *testing.T) {
	const why = "\x1b[2Jno\nFAKE LOG LINE"
	ctx := testCtx(t)
	ea, em := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	l, err := em.Listen("unix", sockDir(t)+"/m.sock")
	require.NoError(t, err)
	defer l.Close()
	rec := mustEncode(t, "m", 7)
	tests := []struct {
		name  string
		reply [][]byte // after the hello; then a refusal
	}{
		{"in the handshake", nil},
		{"on the connection", append([][]byte{encodeHello("m", 7, 0, 1, false)}, encodeMeta(rec)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refuse := make(chan struct{}) // the refusal waits for it after a reply
			done := scriptedPeer(ctx, l, append(tt.reply, encodeRefuse(why)), func(m []byte) {
				if m[3] == byte(msgRefuse) && tt.reply != nil {
					<-refuse
				}
			})
			_, err := a.Connect(ctx, l.Addr())
			if tt.reply != nil {
				require.NoError(t, err)
				p, err := a.Peer(ctx, "m") // cached, connected
				require.NoError(t, err)
				close(refuse)
				<-p.Done()
				err = p.Err()
				require.ErrorIs(t, err, engine.ErrPeer)
				require.NoError(t, <-done)
				requireQuoted(t, err)
				return
			}
			require.ErrorIs(t, err, engine.ErrPeer)
			require.NoError(t, <-done)
			requireQuoted(t, err)
		})
	}
}

func requireQuoted(t *testing.T, err error) {
	t.Helper()
	require.NotContains(t, err.Error(), "\x1b")
	require.NotContains(t, err.Error(), "\n")
	require.True(t, strings.Contains(err.Error(), `\x1b[2Jno\nFAKE LOG LINE`), err.Error())
}
