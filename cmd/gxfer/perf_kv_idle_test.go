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

// TestPerfAgentTargetCountsOnlyMeasuredInitiators: a peer that says hello,
// is welcomed and goes away before any request measured nothing: a
// target run with -initiators 1 must not end on it (exit 0 with no
// figure) but say so and wait for an initiator that runs. Before the fix
// it counted as the one initiator: the target exited 0 having measured
// nothing, and the real initiator found no target.
func TestPerfAgentTargetCountsOnlyMeasuredInitiators(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "1"}, kv...), out, errb)
	}()

	for i, leave := range []string{"gone", "end"} {
		eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
		require.NoError(t, err)
		a, err := agent.New(ctx, agent.Config{Name: "idle-" + leave, Engine: eng, Unix: filepath.Join(dir, leave+".sock")})
		require.NoError(t, err)
		var peer string
		require.Eventually(t, func() bool {
			peer, err = a.Connect(ctx, sock)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "the target never listened: %s", errb.String())
		p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()))
		n, err := a.Recv(ctx)
		require.NoError(t, err)
		w, err := decodeKVMsg(n.Msg)
		require.NoError(t, err)
		require.Equal(t, uint8(kvWelcome), w.kind)
		if leave == "end" {
			require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvEnd, p: p}.encode()))
		}
		a.Close()
		eng.Close()
		// The target says so and goes on.
		want := "# initiator idle-" + leave + ": "
		for deadline := time.Now().Add(30 * time.Second); strings.Count(out.String(), "nothing measured") <= i; {
			select {
			case code := <-done:
				t.Fatalf("the target ended on a peer that ran no request (exit %d): %s", code, out.String()+errb.String())
			case <-time.After(5 * time.Millisecond):
			}
			require.True(t, time.Now().Before(deadline), "the target did not notice %s: %s", leave, out.String())
		}
		assert.Regexp(t, `(?m)^`+want+`.*before any request: nothing measured, not counted \(-initiators 1: 1 more to wait for\)$`, out.String())
	}

	var iout, ierr bytes.Buffer
	icode := runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini",
		"-unix", filepath.Join(dir, "i.sock"), "-connect", sock, "-wait", "10s", "-requests", "10"}, kv...), &iout, &ierr)
	require.Equal(t, exitOK, icode, ierr.String()+iout.String())
	require.Equal(t, exitOK, <-done, errb.String()+out.String())
	assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte`, out.String())
}

// TestPerfAgentTargetIdleInitiator: a welcomed peer holds a region of the
// section until it ends or goes; one that stays connected and sends
// nothing held it for good, so enough idle peers locked every initiator
// out (their hellos dropped: 'every region of the section is in use').
// A welcomed initiator with no request within the target's -wait has now
// ended (its region freed, not counted: nothing measured), and a real
// initiator that comes after it runs.
func TestPerfAgentTargetIdleInitiator(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "1", "-wait", "1s"}, kv...), out, errb)
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "idle", Unix: filepath.Join(dir, "h.sock")}, sock, "target", errb) // connected, silent, until the test ends
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()))
	n, err := a.Recv(ctx)
	require.NoError(t, err)
	w, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	require.Equal(t, uint8(kvWelcome), w.kind)

	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "# initiator idle: idle"); {
		select {
		case code := <-done:
			t.Fatalf("the target ended (exit %d): %s", code, out.String()+errb.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the idle peer still holds the target's one region: %s", out.String())
	}
	assert.Regexp(t, `(?m)^# initiator idle: idle for 1s \(-wait\): its region freed, before any request: nothing measured, not counted`, out.String())

	var iout, ierr bytes.Buffer
	icode := runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini",
		"-unix", filepath.Join(dir, "i.sock"), "-connect", sock, "-wait", "10s", "-requests", "10"}, kv...), &iout, &ierr)
	require.Equal(t, exitOK, icode, ierr.String()+iout.String())
	require.Equal(t, exitOK, <-done, errb.String()+out.String())
	assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte`, out.String())
}

// TestPerfAgentTargetIdleInitiatorHellosAgain: a hello again from a
// welcomed initiator is answered with its region, but it is no request:
// a peer repeating its hello and sending nothing else is idle all the
// same. Before the fix each hello counted as activity, so such a peer
// held its region for good.
func TestPerfAgentTargetIdleInitiatorHellosAgain(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(tctx, []string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "0", "-wait", "1s", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, out, errb)
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "idle", Unix: filepath.Join(dir, "h.sock")}, sock, "target", errb)
	hello := kvMsg{kind: kvHello, p: kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}, unix: a.Metadata().Unix}.encode()
	// Hellos, ten a second, until the target ends it (20 s at most).
	for i := 0; !strings.Contains(out.String(), "# initiator idle: idle"); i++ {
		require.Less(t, i, 200, "the peer repeating its hello still holds its region: %s", out.String())
		require.NoError(t, a.Notify(ctx, peer, hello))
		select {
		case code := <-done:
			t.Fatalf("the target ended (exit %d): %s", code, out.String()+errb.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	require.Equal(t, exitOK, <-done, errb.String())
}

// TestPerfAgentTargetIdleInitiatorNotWelcomedAgain: a peer that was
// ended for idleness and keeps sending hellos took the region again at
// its next hello, so (hellos ten a second) it held the one region of a
// target nearly all the time and a real initiator's hello found it in
// use. That incarnation of it is not welcomed again (a restarted
// initiator, a new incarnation, is).
func TestPerfAgentTargetIdleInitiatorNotWelcomedAgain(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "1", "-wait", "1s"}, kv...), out, errb)
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "idle", Unix: filepath.Join(dir, "h.sock")}, sock, "target", errb)
	hello := kvMsg{kind: kvHello, p: kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}, unix: a.Metadata().Unix}.encode()
	// Hellos, ten a second, for the whole test (bounded: 30 s).
	stopHellos, hellosDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hellosDone)
		for range 300 {
			_ = a.Notify(ctx, peer, hello)
			select {
			case <-stopHellos:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopHellos); <-hellosDone }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "# initiator idle: idle"); {
		select {
		case code := <-done:
			t.Fatalf("the target ended (exit %d): %s", code, out.String()+errb.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the idle peer was never ended: %s", out.String())
	}
	// The real initiator comes later, among the idle peer's hellos (it
	// need not: after the fix it is welcomed whenever it comes).
	time.Sleep(500 * time.Millisecond)

	var iout, ierr bytes.Buffer
	icode := runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini",
		"-unix", filepath.Join(dir, "i.sock"), "-connect", sock, "-wait", "3s", "-requests", "10"}, kv...), &iout, &ierr)
	require.Equal(t, exitOK, icode, ierr.String()+iout.String())
	require.Equal(t, exitOK, <-done, errb.String()+out.String())
	assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte`, out.String())
	assert.Contains(t, out.String(), "# dropped a bad notification from idle: hello: it was idle for 1s (-wait) and is not welcomed again")
}
