package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
)

// TestPerfAgentTargetHelloToSilentAddress: a target without etcd reaches
// each initiator at the address its hello gives. Hostile hellos naming an
// address that accepts and never answers must not stop the target
// serving the initiators that come after them. Before the fix the target
// answered hellos one at a time on its one loop, each blocked until the
// dial gave up (some 5 s): 30 such hellos kept the real initiator waiting
// for its welcome past this test's 90 s.
//
// With more hellos than the target answers at once (maxHellos), one peer
// took every slot until its dials gave up, and the real initiator's hello
// was dropped: a peer's hello is now answered one at a time.
func TestPerfAgentTargetHelloToSilentAddress(t *testing.T) {
	for _, n := range []int{30, 3 * maxHellos} {
		t.Run(fmt.Sprintf("%d hellos", n), func(t *testing.T) { helloToSilentAddress(t, n) })
	}
}

func helloToSilentAddress(t *testing.T, hellos int) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "1"}, kv...), &out, &errb)
	}()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		silent.Close()
		for c := range accepted {
			c.Close()
		}
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "hostile", Unix: filepath.Join(dir, "h.sock")}, sock, "target", &errb)
	ok := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	for range hellos {
		require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: ok, tcp: silent.Addr().String()}.encode()))
	}

	var iout, ierr bytes.Buffer
	icode := runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini",
		"-unix", filepath.Join(dir, "i.sock"), "-connect", sock, "-wait", "10s", "-requests", "10"}, kv...), &iout, &ierr)
	require.Equal(t, exitOK, icode, ierr.String()+iout.String())
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("the target did not end")
	}
	require.Equal(t, exitOK, code, errb.String()+out.String())
	assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte`, out.String())
}

// TestPerfAgentInitiatorHelloDropped: a target drops a hello whose region
// does not fit its section (here: the initiator runs -O 2, the target's
// regions hold -O 1) and keeps serving; the initiator must not wait for
// its welcome forever: it gives up after -wait, saying so. Before the fix
// it waited until interrupted.
func TestPerfAgentInitiatorHelloDropped(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runContext(tctx, []string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "2", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, &out, &errb)
	}()
	var iout, ierr bytes.Buffer
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ctx, []string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-unix", filepath.Join(dir, "i.sock"),
			"-connect", sock, "-wait", "3s", "-requests", "10", "-blocks", "8", "-block-size", "8", "-O", "2", "-devices", "none"}, &iout, &ierr)
	}()
	select {
	case code := <-idone:
		require.Equal(t, exitRuntime, code, ierr.String()+iout.String())
		assert.Contains(t, ierr.String(), "no welcome from t within 3s")
	case <-ctx.Done(): // liveness bound only
		t.Fatal("the initiator still waits for a welcome that will not come")
	}
	stop() // it still waits for its two initiators: interrupted
	require.Equal(t, exitRuntime, <-done, errb.String())
	assert.Contains(t, errb.String(), "interrupted")
	assert.Contains(t, out.String(), "# dropped a bad notification from ini: hello: it needs a section of 128 bytes per initiator")
}

// TestPerfAgentInitiatorIgnoresOtherAgents: an initiator listens (for its
// target's acknowledgements), so any agent can notify it. Notifications
// from agents other than its target (garbage, a forged acknowledgement or
// welcome) are counted and dropped; its run goes on. Here they wait in its
// queue before its target even exists, so they come first. Before the fix
// the first of them ended the run ("not a welcome", exit 1).
func TestPerfAgentInitiatorIgnoresOtherAgents(t *testing.T) {
	dir := t.TempDir()
	tsock, isock := filepath.Join(dir, "t.sock"), filepath.Join(dir, "i.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	var iout, ierr bytes.Buffer
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-unix", isock,
			"-connect", tsock, "-wait", "1m", "-requests", "10"}, kv...), &iout, &ierr)
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "hostile", Unix: filepath.Join(dir, "h.sock")}, isock, "initiator", &ierr)
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	for _, m := range [][]byte{[]byte("garbage"), kvMsg{kind: kvAck, p: p}.encode(), kvMsg{kind: kvWelcome, p: p, base: 1 << 30}.encode()} {
		require.NoError(t, a.Notify(ctx, peer, m))
	}

	var tout, terr bytes.Buffer
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", tsock, "-initiators", "1"}, kv...), &tout, &terr)
	}()
	require.Equal(t, exitOK, <-idone, ierr.String()+iout.String())
	require.Equal(t, exitOK, <-tdone, terr.String()+tout.String())
	checkKVReport(t, iout.String(), 10)
	assert.Contains(t, iout.String(), "| 3 notification(s) from other agents dropped")
	assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte`, tout.String())
}

// TestPerfAgentTargetRegionInUse: each initiator a target welcomes writes
// a region of the section of its own; a hello while every region is in
// use (here -initiators 0: one region, and an initiator running in it) is
// dropped, and that initiator gives up after -wait. Before the fix the
// target welcomed it into the region in use: the two initiators wrote the
// same slots, and the target failed with "data not in place when the
// notification arrived", a false diagnosis of the ordering it measures.
func TestPerfAgentTargetRegionInUse(t *testing.T) {
	dir := t.TempDir()
	tsock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "4K", "-O", "4", "-devices", "none"}
	tctx, stopTarget := context.WithCancel(ctx)
	defer stopTarget()
	tout, terr := &syncBuffer{}, &syncBuffer{}
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(tctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", tsock, "-initiators", "0"}, kv...), tout, terr)
	}()
	// The first initiator runs (for as long as the test needs).
	i1ctx, stopI1 := context.WithCancel(ctx)
	defer stopI1()
	var i1out, i1err bytes.Buffer
	i1done := make(chan int, 1)
	go func() {
		i1done <- runContext(i1ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "i1", "-unix", filepath.Join(dir, "i1.sock"),
			"-connect", tsock, "-wait", "1m", "-requests", "100000000"}, kv...), &i1out, &i1err)
	}()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(tout.String(), "# initiator i1: welcomed"); {
		select {
		case code := <-i1done:
			t.Fatalf("the first initiator ended early (exit %d): %s", code, i1err.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the first initiator was never welcomed: %s", terr.String())
	}

	var i2out, i2err bytes.Buffer
	code := runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "i2", "-unix", filepath.Join(dir, "i2.sock"),
		"-connect", tsock, "-wait", "2s", "-requests", "100"}, kv...), &i2out, &i2err)
	require.Equal(t, exitRuntime, code, i2err.String()+i2out.String())
	assert.Contains(t, i2err.String(), "no welcome from t within 2s")

	stopI1()
	<-i1done
	stopTarget()
	<-tdone
	assert.Contains(t, tout.String(), "# dropped a bad notification from i2: hello: every region of the section is in use (1:")
	assert.NotContains(t, terr.String(), "differs")
	assert.NotContains(t, i1err.String(), "differs")
}
