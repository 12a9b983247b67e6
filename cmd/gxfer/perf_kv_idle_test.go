package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// TestPerfAgentTargetMakesNoTempDir: a target listens where -unix or -tcp
// says; it has no use for a temporary directory. Before the fix it made
// one (gxperf*, in $TMPDIR) on every run, removed only when it returned:
// a target killed (SIGKILL, OOM) left it behind.
func TestPerfAgentTargetMakesNoTempDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	sock := filepath.Join(t.TempDir(), "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(tctx, []string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "0", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, out, errb)
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "# target t incarnation"); {
		select {
		case code := <-done:
			t.Fatalf("the target ended early (exit %d): %s", code, errb.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the target never published its section: %s", errb.String())
	}
	ents, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "the serving target made these in $TMPDIR")
	stop()
	require.Equal(t, exitOK, <-done, errb.String())
}

// silentTarget is a target agent by hand (no etcd): it publishes section
// "kv" of size bytes, welcomes the first hello (reaching the initiator at
// its address) and from then on takes notifications and answers none.
// It returns the target's socket; got counts the requests it took.
func silentTarget(t *testing.T, ctx context.Context, size int, got *atomic.Int64) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	a, err := agent.New(ctx, agent.Config{Name: "mute", Engine: eng, Unix: sock})
	require.NoError(t, err)
	buf, err := eng.Alloc(size, engine.Host)
	require.NoError(t, err)
	require.NoError(t, a.Publish("kv", buf.All()))
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() {
		stop()
		<-done
		a.Close()
		buf.Free()
	})
	go func() {
		defer close(done)
		welcomed := false
		for {
			n, err := a.Recv(rctx)
			if err != nil {
				return
			}
			m, err := decodeKVMsg(n.Msg)
			if err != nil {
				continue
			}
			switch {
			case m.kind == kvHello && !welcomed:
				if _, err := a.Connect(rctx, m.unix); err != nil {
					return
				}
				welcomed = a.Notify(rctx, n.From, kvMsg{kind: kvWelcome, p: m.p}.encode()) == nil
			case m.kind == kvReq:
				got.Add(1)
			}
		}
	}()
	return sock
}

// TestPerfAgentInitiatorNotAcknowledged: a target that stays connected
// but stops acknowledging (stuck, or hostile) must not hold its
// initiator for good: with no acknowledgement within -wait the initiator
// exits 1, naming the requests not acknowledged, and reports no figures.
// Before the fix it waited for them until interrupted.
func TestPerfAgentInitiatorNotAcknowledged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got atomic.Int64
	tsock := silentTarget(t, ctx, 2*8*8, &got)
	ictx, icancel := context.WithTimeout(ctx, 30*time.Second) // liveness bound only
	defer icancel()
	var iout, ierr bytes.Buffer
	code := runContext(ictx, []string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-unix", filepath.Join(t.TempDir(), "i.sock"),
		"-connect", tsock, "-wait", "2s", "-requests", "10", "-blocks", "8", "-block-size", "8", "-O", "2", "-devices", "none"}, &iout, &ierr)
	require.NoError(t, ictx.Err(), "the initiator waited for acknowledgements until interrupted: %s", ierr.String())
	require.Equal(t, exitRuntime, code, ierr.String()+iout.String())
	assert.Contains(t, ierr.String(), "no acknowledgement from mute within 2s: requests 0, 1 not acknowledged")
	assert.NotContains(t, iout.String(), "req/s", "no figure was measured")
	assert.Equal(t, int64(2), got.Load(), "two requests in flight (-O 2), then none")
}
