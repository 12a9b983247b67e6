package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// TestPerfAgentTargetFailedVerificationEndsItsInitiator: a request whose
// bytes are not in place when its notification arrives (here a welcomed
// peer notifies a request it never wrote) ends that initiator's run, not
// the target's: the target tells it (it exits 1 saying so), goes on
// serving the others, reports the failure, and exits 1 at its end. Before
// the fix the first such request ended the target for every initiator.
func TestPerfAgentTargetFailedVerificationEndsItsInitiator(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "2"}, kv...), &out, &errb)
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "liar", Unix: filepath.Join(dir, "h.sock")}, sock, "target", &errb)
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()))
	n, err := a.Recv(ctx)
	require.NoError(t, err)
	w, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	require.Equal(t, uint8(kvWelcome), w.kind)
	require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvReq, p: p, r: 0, base: w.base}.encode()))
	n, err = a.Recv(ctx)
	require.NoError(t, err)
	f, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	assert.NotEqual(t, uint8(kvAck), f.kind, "the target tells the initiator: no acknowledgement")

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
	require.Equal(t, exitRuntime, code, errb.String()+out.String())
	assert.Contains(t, errb.String(), "1 request(s) failed verification")
	assert.Regexp(t, `(?m)^# initiator liar: request 0: block 0 \(offset \d+\): byte 0 differs: data not in place when the notification arrived \(its run ends here\)$`, out.String())
	assert.Regexp(t, `(?m)^target t: 11 requests, 10 verified byte for byte, 1 FAILED verification `, out.String())
}

// TestPerfAgentInitiatorToldOfFailedVerification: an initiator whose
// target reports a request's bytes not in place (kvFailed) ends its run
// with exit 1, saying so, and reports no figures.
func TestPerfAgentInitiatorToldOfFailedVerification(t *testing.T) {
	dir := t.TempDir()
	tsock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The target, by hand: it welcomes, then fails the first request.
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	ta, err := agent.New(ctx, agent.Config{Name: "tgt", Engine: eng, Unix: tsock})
	require.NoError(t, err)
	defer ta.Close()
	kp := kvParams{window: 1, blocks: 8, bsize: 8}
	buf, err := eng.Alloc(kp.sectionLen(), engine.Host)
	require.NoError(t, err)
	defer buf.Free()
	require.NoError(t, ta.Publish("kv", buf.All()))

	var iout, ierr bytes.Buffer
	idone := make(chan int, 1)
	go func() {
		idone <- runContext(ctx, []string{"perf", "-agent", "-role", "initiator", "-name", "ini", "-unix", filepath.Join(dir, "i.sock"),
			"-connect", tsock, "-wait", "30s", "-requests", "10", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, &iout, &ierr)
	}()
	n, err := ta.Recv(ctx)
	require.NoError(t, err)
	hello, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	require.Equal(t, uint8(kvHello), hello.kind)
	_, err = ta.Connect(ctx, hello.unix)
	require.NoError(t, err)
	require.NoError(t, ta.Notify(ctx, n.From, kvMsg{kind: kvWelcome, p: hello.p}.encode()))
	n, err = ta.Recv(ctx)
	require.NoError(t, err)
	req, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	require.Equal(t, uint8(kvReq), req.kind)
	require.NoError(t, ta.Notify(ctx, n.From, kvMsg{kind: kvFailed, p: req.p, r: req.r}.encode()))

	select {
	case code := <-idone:
		require.Equal(t, exitRuntime, code, ierr.String()+iout.String())
		assert.Contains(t, ierr.String(), "request 0 failed verification at the target")
		assert.NotContains(t, iout.String(), "req/s")
	case <-ctx.Done(): // liveness bound only
		t.Fatal("the initiator did not end")
	}
}
