package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
