package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
)

// ackSenders counts the goroutines of this process waiting in the
// target's acknowledgement sender loop (the line of perf_kv.go that
// ranges over an initiator's queue).
func ackSenders(t *testing.T) int { return goroutinesAt(t, "perf_kv.go", "for msg := range q {", 0) }

// goroutinesAt counts the goroutines of this process whose stack holds
// the line of file (in this directory) that is delta lines after the
// first one reading marker (spaces trimmed).
func goroutinesAt(t *testing.T, file, marker string, delta int) int {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	line := 0
	sc := bufio.NewScanner(f)
	for i := 1; sc.Scan(); i++ {
		if strings.TrimSpace(sc.Text()) == marker {
			line = i + delta
			break
		}
	}
	require.NotZero(t, line, "%q was not found in %s", marker, file)
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), fmt.Sprintf("%s:%d ", file, line))
}

// serveTarget runs a perf -agent target named t listening at addr
// (listenFlag -unix or -tcp; 0 initiators: it serves until stopped; -wait
// 30s, 8 blocks of 8 bytes) until the test ends, and returns its output
// and error buffers.
func serveTarget(t *testing.T, ctx context.Context, listenFlag, addr string) (tout, terr *syncBuffer) {
	t.Helper()
	tctx, stop := context.WithCancel(ctx)
	tout, terr = &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	args := []string{"perf", "-agent", "-role", "target", "-name", "t", listenFlag, addr,
		"-initiators", "0", "-wait", "30s", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	go func() {
		done <- runContext(tctx, args, tout, terr)
	}()
	t.Cleanup(func() { stop(); <-done })
	return tout, terr
}

// TestPerfAgentTargetFailedHelloAgainEndsAckSender: a welcomed initiator
// that was acknowledged a request has a sender of acknowledgements; a
// hello of it again whose welcome fails (here: it names an address where
// nobody listens) ends it as an initiator of this run, and its sender
// must go with it. Before the fix the sender (a goroutine and a queue of
// maxAcksQueued) was kept until the target's end, one for every name a
// peer used so: a peer cycling names grew the target without bound.
func TestPerfAgentTargetFailedHelloAgainEndsAckSender(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tout, terr := serveTarget(t, ctx, "-unix", sock)
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	const peers = 4
	for i := range peers {
		name := fmt.Sprintf("cycler%d", i)
		a, peer := kvPeer(t, ctx, agent.Config{Name: name, Unix: filepath.Join(dir, name+".sock")}, sock, "target", terr)
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()))
		waitOutput(t, tout, regexp.MustCompile(`# initiator `+name+`: welcomed`), "not welcomed")
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvReqUnfilled, p: p, r: 0, at: time.Now().UnixNano()}.encode()))
		// Its welcome, then its acknowledgement: its sender exists.
		actx, acancel := context.WithTimeout(ctx, time.Minute)
		for _, want := range []uint8{kvWelcome, kvAck} {
			n, err := a.Recv(actx)
			require.NoError(t, err, tout.String())
			m, err := decodeKVMsg(n.Msg)
			require.NoError(t, err)
			require.Equal(t, want, m.kind)
		}
		acancel()
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: filepath.Join(dir, "nobody.sock")}.encode()))
		waitOutput(t, tout, regexp.MustCompile(`# initiator `+name+`: cannot reach it at`), "the welcome did not fail")
	}
	// The senders end once their queue is closed (bounded wait).
	n := ackSenders(t)
	for i := 0; i < 2000 && n > 0; i++ {
		time.Sleep(5 * time.Millisecond)
		n = ackSenders(t)
	}
	require.Zero(t, n, "acknowledgement senders kept for initiators ended by a failed hello:\n%s", tout.String())
}
