package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
