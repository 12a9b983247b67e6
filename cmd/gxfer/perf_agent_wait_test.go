package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// TestPerfAgentConnectWaits: an initiator given -connect waits up to -wait
// for its target to appear, as -wait says (and as it does with -etcd), so
// that a target and an initiator can be started together. Before the fix
// it dialed once: started before the target listened, it failed at once
// ("connect: no such file or directory", exit 1).
func TestPerfAgentConnectWaits(t *testing.T) {
	dir := t.TempDir()
	tsock, isock := filepath.Join(dir, "t.sock"), filepath.Join(dir, "i.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "4K", "-O", "4"}

	var iout, ierr bytes.Buffer
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-unix", isock,
			"-connect", tsock, "-wait", "1m", "-requests", "20"}, kv...), &iout, &ierr)
	}()
	// The initiator's agent listens before it looks for its target; give
	// it time to look (before the fix it failed within microseconds).
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(isock); err == nil {
			break
		}
		select {
		case code := <-idone:
			t.Fatalf("the initiator gave up before its target appeared (exit %d): %s", code, ierr.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the initiator's agent never listened")
	}
	select {
	case code := <-idone:
		t.Fatalf("the initiator gave up before its target appeared (exit %d): %s", code, ierr.String())
	case <-time.After(200 * time.Millisecond):
	}

	var tout, terr bytes.Buffer
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "tgt", "-unix", tsock,
			"-initiators", "1"}, kv...), &tout, &terr)
	}()
	require.Equal(t, exitOK, <-idone, ierr.String()+iout.String())
	require.Equal(t, exitOK, <-tdone, terr.String()+tout.String())
	checkKVReport(t, iout.String(), 20)
	assert.Regexp(t, `(?m)^target tgt: 20 requests, 20 verified byte for byte`, tout.String())
}

// TestPerfAgentTargetHeader: a target's header gives what the target
// runs: not a request count or a seed (its initiators choose both; each
// request carries them), and its section's slots for every initiator.
// Before the fix it printed the -requests default ("1000 requests",
// refused as a target's flag) and a seed of its own it never used, and
// the slots of one initiator's region only.
func TestPerfAgentTargetHeader(t *testing.T) {
	tsock := filepath.Join(t.TempDir(), "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tout, terr bytes.Buffer
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(ctx, []string{"perf", "-agent", "-role", "target", "-unix", tsock, "-initiators", "2",
			"-blocks", "8", "-block-size", "4K", "-O", "4"}, &tout, &terr)
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(tsock); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the target never listened")
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // it serves until its initiators end: interrupt it
	<-tdone
	header, _, _ := strings.Cut(tout.String(), "\n")
	assert.NotContains(t, header, "requests x", "a target runs no requests of its own")
	assert.NotContains(t, header, "seed", "the initiators' requests carry their seeds")
	assert.Contains(t, header, "section of 64 slots (32 per initiator)")
}

// TestPerfAgentInitiatorTargetGone: an initiator whose target ends
// mid-run (interrupted, failed, killed) ends too, with an error naming
// the target, instead of waiting for acknowledgements that cannot come.
// Before the fix it waited for them forever (agent.Recv does not end when
// a peer goes), also for the welcome of a target that had refused its
// hello.
func TestPerfAgentInitiatorTargetGone(t *testing.T) {
	dir := t.TempDir()
	tsock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "4K", "-O", "4"}

	tctx, stopTarget := context.WithCancel(ctx)
	defer stopTarget()
	var tout, terr bytes.Buffer
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(tctx, append([]string{"perf", "-agent", "-role", "target", "-name", "tgt", "-unix", tsock}, kv...), &tout, &terr)
	}()
	iout, ierr := &syncBuffer{}, &syncBuffer{}
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-connect", tsock,
			"-wait", "1m", "-requests", "100000000"}, kv...), iout, ierr)
	}()
	// Once the initiator runs its requests, the target goes away.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(iout.String(), "# initiator ini -> target tgt"); {
		select {
		case code := <-idone:
			t.Fatalf("the initiator ended early (exit %d): %s", code, ierr.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the initiator never started: %s", ierr.String())
	}
	stopTarget()
	<-tdone
	select {
	case code := <-idone:
		require.Equal(t, exitRuntime, code, ierr.String())
		assert.Contains(t, ierr.String(), "tgt")
	case <-ctx.Done(): // liveness bound only
		t.Fatal("the initiator still waits for its target, which has ended")
	}
}

// TestPerfAgentVerifyMismatch: an initiator run with -verify=false does
// not fill its blocks with the requests' patterns, so a target that
// verifies has nothing to check them against. Before the fix the target
// checked them anyway and failed with "data not in place when the
// notification arrived", a false diagnosis of the ordering it measures;
// now it counts them as not checked, saying why.
func TestPerfAgentVerifyMismatch(t *testing.T) {
	tsock := filepath.Join(t.TempDir(), "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "4K", "-O", "4"}
	var tout, terr, iout, ierr bytes.Buffer
	tdone, idone := make(chan int, 1), make(chan int, 1)
	go func() {
		tdone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "tgt", "-unix", tsock, "-initiators", "1"}, kv...), &tout, &terr)
	}()
	go func() {
		idone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-connect", tsock,
			"-wait", "1m", "-requests", "20", "-verify=false"}, kv...), &iout, &ierr)
	}()
	require.Equal(t, exitOK, <-tdone, terr.String()+tout.String())
	require.Equal(t, exitOK, <-idone, ierr.String()+iout.String())
	assert.Regexp(t, `(?m)^target tgt: 20 requests, 0 verified byte for byte, 20 not checked \(their initiator ran -verify=false`, tout.String())
}

// TestPerfAgentInitiatorWaitsForSection: an agent listens before it
// publishes its sections, so an initiator started with its target can
// reach it before the section exists; it waits for the section (up to
// -wait) as for the target. Before the fix it failed at once with
// "no such section", with -connect as with -etcd -peer.
func TestPerfAgentInitiatorWaitsForSection(t *testing.T) {
	tsock := filepath.Join(t.TempDir(), "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The target, by hand: its agent listens, its section comes later.
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	ta, err := agent.New(ctx, agent.Config{Name: "tgt", Engine: eng, Unix: tsock})
	require.NoError(t, err)
	defer ta.Close()

	var iout, ierr bytes.Buffer
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ctx, []string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-connect", tsock,
			"-wait", "1m", "-requests", "20", "-blocks", "8", "-block-size", "4K", "-O", "4"}, &iout, &ierr)
	}()
	// The initiator has reached the target (and read its record).
	for deadline := time.Now().Add(time.Minute); ta.Stats().Inbound == 0; {
		select {
		case code := <-idone:
			t.Fatalf("the initiator gave up (exit %d): %s", code, ierr.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the initiator never reached its target")
	}
	select {
	case code := <-idone:
		t.Fatalf("the initiator gave up before the section appeared (exit %d): %s", code, ierr.String())
	case <-time.After(300 * time.Millisecond): // it has looked for the section by now
	}

	kp := kvParams{window: 4, blocks: 8, bsize: 4 << 10}
	buf, err := eng.Alloc(kp.sectionLen(), engine.Host)
	require.NoError(t, err)
	require.NoError(t, ta.Publish("kv", buf.All()))
	var tout bytes.Buffer
	tgt := &kvTarget{a: ta, buf: buf, verify: true, out: &tout, label: "tgt", initiators: 1, connect: true}
	require.NoError(t, tgt.run(ctx))
	require.Equal(t, exitOK, <-idone, ierr.String()+iout.String())
	checkKVReport(t, iout.String(), 20)
	require.NoError(t, buf.Free())
}

// TestPerfAgentTargetInitiatorInterrupted: a target run with -initiators N
// exits once N initiators ended, and an initiator that went away mid-run
// (interrupted, failed, killed) has ended too. Before the fix only an
// initiator's end message counted: a target whose initiator was
// interrupted waited for it forever, or, when an acknowledgement to it
// failed, ended with that error (exit 1; also with -initiators 0, the
// other initiators' runs with it).
func TestPerfAgentTargetInitiatorInterrupted(t *testing.T) {
	tsock := filepath.Join(t.TempDir(), "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "4K", "-O", "4"}
	tout, terr := &syncBuffer{}, &syncBuffer{}
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "tgt", "-unix", tsock, "-initiators", "1"}, kv...), tout, terr)
	}()
	ictx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	iout, ierr := &syncBuffer{}, &syncBuffer{}
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ictx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-connect", tsock,
			"-wait", "1m", "-requests", "100000000", "-metrics", "127.0.0.1:0"}, kv...), iout, ierr)
	}()
	// Once the target measured a request of the initiator (it received
	// the welcome and an acknowledgement: two notifications), the
	// initiator is interrupted (one that goes before any request is not
	// counted: TestPerfAgentTargetCountsOnlyMeasuredInitiators).
	acked := func() bool {
		m := metricsAt.FindStringSubmatch(ierr.String())
		if m == nil {
			return false
		}
		fs, err := scrapeText(m[1])
		if err != nil || fs["gxfer_agent_notifications_received_total"] == nil { // its agent may not be exported yet
			return false
		}
		return sample(t, fs, "gxfer_agent_notifications_received_total", "agent", "ini") >= 2
	}
	for deadline := time.Now().Add(time.Minute); !acked(); {
		select {
		case code := <-idone:
			t.Fatalf("the initiator ended early (exit %d): %s", code, ierr.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the initiator never started: %s", ierr.String())
	}
	interrupt() // Ctrl-C
	require.Equal(t, exitRuntime, <-idone, ierr.String())
	assert.Contains(t, ierr.String(), "interrupted")
	select {
	case code := <-tdone:
		require.Equal(t, exitOK, code, terr.String()+tout.String())
		assert.Contains(t, tout.String(), "# initiator ini: gone before its end")
	case <-time.After(time.Minute): // liveness bound only
		t.Fatal("the target still waits for its interrupted initiator")
	}
}
