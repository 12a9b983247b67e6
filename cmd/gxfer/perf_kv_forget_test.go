package main

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
)

// TestPerfAgentTargetForgetsEndedInitiator: a target reaches each
// initiator it welcomes (Connect to its hello's address: a connection,
// the peer's record, its address). Before the fix it kept all of it
// after the initiator's run ended, for as long as the initiator's agent
// lived: peers saying hello under new names and staying grew the target.
// Now the target forgets the peer once the run ended and its last
// acknowledgement (here the kvFailed of a request that failed
// verification, too) was sent: the initiator sees the target's
// connection close, and a new hello of it is welcomed again.
func TestPerfAgentTargetForgetsEndedInitiator(t *testing.T) {
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	tests := []struct {
		name string
		req  uint8 // the request the initiator sends
		want uint8 // the target's answer to it
		end  bool  // the initiator then sends its end
	}{
		{"ended", kvReqUnfilled, kvAck, true},
		{"failed verification", kvReq, kvFailed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "t.sock")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tout, terr := serveTarget(t, ctx, "-unix", sock)
			a, peer := kvPeer(t, ctx, agent.Config{Name: "ini", Unix: filepath.Join(dir, "ini.sock")}, sock, "target", terr)
			recv := func(want uint8) {
				t.Helper()
				rctx, rcancel := context.WithTimeout(ctx, time.Minute)
				defer rcancel()
				n, err := a.Recv(rctx)
				require.NoError(t, err, tout.String())
				m, err := decodeKVMsg(n.Msg)
				require.NoError(t, err)
				require.Equal(t, want, m.kind, tout.String())
			}
			hello := kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()
			require.NoError(t, a.Notify(ctx, peer, hello))
			recv(kvWelcome)
			require.Equal(t, 1, a.Stats().Inbound, "the target's connection to the initiator")
			require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: tt.req, p: p, r: 0, at: time.Now().UnixNano()}.encode()))
			recv(tt.want)
			if tt.end {
				require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvEnd, p: p, r: 1}.encode()))
			}
			n := a.Stats().Inbound
			for i := 0; i < 2000 && n > 0; i++ { // bounded wait (the target takes the end)
				time.Sleep(5 * time.Millisecond)
				n = a.Stats().Inbound
			}
			require.Zero(t, n, "the target kept its connection to an initiator whose run ended:\n%s", tout.String())

			// A new run of it (a hello again) is reached and welcomed again.
			require.NoError(t, a.Notify(ctx, peer, hello))
			recv(kvWelcome)
			waitOutput(t, tout, regexp.MustCompile(`(?s)# initiator ini: welcomed.*# initiator ini: welcomed`), "not welcomed again")
		})
	}
}

// TestPerfAgentTargetForgetsPeerHelloNamed: a hello names the address the
// target reaches its sender at; Connect there caches whatever agent
// serves it. Before the fix the target went on whatever name that was,
// and forgot only the hello's sender: a hello naming another agent's
// address (here over unix, which may name any of this node's) left that
// agent cached by the target, with a connection to it, for that agent's
// life. The hello is now refused when its address serves another agent,
// and the target forgets that agent unless a run of it uses it.
func TestPerfAgentTargetForgetsPeerHelloNamed(t *testing.T) {
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tout, terr := serveTarget(t, ctx, "-unix", sock)
	a, peer := kvPeer(t, ctx, agent.Config{Name: "ini", Unix: filepath.Join(dir, "ini.sock")}, sock, "target", terr)
	other, _ := kvPeer(t, ctx, agent.Config{Name: "other", Unix: filepath.Join(dir, "other.sock")}, sock, "target", terr)

	require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: other.Metadata().Unix}.encode()))
	waitOutput(t, tout, regexp.MustCompile(`# initiator ini: .*`), "the hello was not answered")
	n := other.Stats().Inbound
	for i := 0; i < 2000 && n > 0; i++ { // bounded wait (the target takes the hello's end)
		time.Sleep(5 * time.Millisecond)
		n = other.Stats().Inbound
	}
	require.Zero(t, n, "the target kept its connection to the agent a hello's address served:\n%s", tout.String())
	require.NotContains(t, tout.String(), "# initiator ini: welcomed")
}
