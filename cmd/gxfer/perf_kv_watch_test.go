package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
)

// peerWatchers counts the goroutines of this process waiting in the
// target's watch of an initiator's peer (the select of perf_kv.go before
// the line "case <-p.Done():").
func peerWatchers(t *testing.T) int { return goroutinesAt(t, "perf_kv.go", "case <-p.Done():", -1) }

// TestPerfAgentTargetEndedInitiatorUnwatched: the target watches the peer
// of each initiator it welcomed (to end it if it goes). Before the fix
// the watch (a goroutine, and an entry holding the *agent.Peer) was kept
// after the initiator ended, as long as its peer stayed: a peer saying
// hello under a new name each time, ending and staying, grew the target
// without bound. The watch now stops at the initiator's end.
func TestPerfAgentTargetEndedInitiatorUnwatched(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tout, terr := serveTarget(t, ctx, "-unix", sock)
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	const peers = 4
	for i := range peers {
		name := fmt.Sprintf("w%d", i)
		a, peer := kvPeer(t, ctx, agent.Config{Name: name, Unix: filepath.Join(dir, name+".sock")}, sock, "target", terr)
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()))
		waitOutput(t, tout, regexp.MustCompile(`# initiator `+name+`: welcomed`), "not welcomed")
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvEnd, p: p}.encode()))
		waitOutput(t, tout, regexp.MustCompile(`# initiator `+name+`: ended`), "not ended")
	}
	// The watches end once their initiator did (bounded wait); the
	// peers are all still there.
	n := peerWatchers(t)
	for i := 0; i < 2000 && n > 0; i++ {
		time.Sleep(5 * time.Millisecond)
		n = peerWatchers(t)
	}
	require.Zero(t, n, "watches kept on the peers of ended initiators:\n%s", tout.String())
}
