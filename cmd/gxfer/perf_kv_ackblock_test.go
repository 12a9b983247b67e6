package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
)

// TestPerfAgentTargetInitiatorNotReading: a welcomed peer that sends
// requests and never takes its acknowledgements (its agent's queue
// full: Notify blocks) must not stop the target serving the others.
func TestPerfAgentTargetInitiatorNotReading(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "2", "-wait", "2s"}, kv...), out, errb)
	}()

	a, peer := kvPeer(t, ctx, agent.Config{Name: "deaf", Unix: filepath.Join(dir, "h.sock"), NotifyQueue: 2}, sock, "target", errb)
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: p, unix: a.Metadata().Unix}.encode()))
	n, err := a.Recv(ctx)
	require.NoError(t, err)
	w, err := decodeKVMsg(n.Msg)
	require.NoError(t, err)
	require.Equal(t, uint8(kvWelcome), w.kind)
	// Requests, never taking an acknowledgement (until the test ends).
	hctx, stopReqs := context.WithCancel(ctx)
	reqsDone := make(chan struct{})
	go func() {
		defer close(reqsDone)
		for r := range 5000 {
			if a.Notify(hctx, peer, kvMsg{kind: kvReqUnfilled, p: p, r: uint64(r), at: time.Now().UnixNano(), base: w.base}.encode()) != nil {
				return
			}
		}
	}()
	defer func() { stopReqs(); <-reqsDone }()

	var iout, ierr bytes.Buffer
	icode := runContext(ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini",
		"-unix", filepath.Join(dir, "i.sock"), "-connect", sock, "-wait", "10s", "-requests", "10"}, kv...), &iout, &ierr)
	require.Equal(t, exitOK, icode, ierr.String()+iout.String())
	// The deaf peer's requests go on until the target ended it (its
	// acknowledgements overflow, or one waits -wait): closed before, it
	// would be gone instead (the initiator may end first).
	waitOutput(t, out, regexp.MustCompile(`# initiator deaf: takes no acknowledgements`), "the deaf peer was not ended")
	stopReqs()
	<-reqsDone
	a.Close()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, errb.String()+out.String())
	case <-ctx.Done():
		t.Fatal("the target did not end")
	}
	assert.Contains(t, out.String(), "# initiator deaf: takes no acknowledgements")
	assert.Regexp(t, `(?m)^target t: \d+ requests, 10 verified byte for byte, \d+ not checked`, out.String())
}
