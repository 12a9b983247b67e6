package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// envPerfChild, set to a gxfer command line (JSON), makes the test
// binary run it as gxfer would, in a process of its own (perfChild).
const envPerfChild = "GXFER_PERF_CHILD"

func init() {
	if v := os.Getenv(envPerfChild); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			fmt.Fprintln(os.Stderr, envPerfChild+":", err)
			os.Exit(exitUsage)
		}
		os.Exit(run(args, os.Stdout, os.Stderr))
	}
}

// perfChild runs gxfer args in a child process (the test binary
// re-executed) and returns its exit status and output.
func perfChild(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	v, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envPerfChild+"="+string(v))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errb.String()
}

// silentListener accepts TCP connections on 127.0.0.1 and never answers
// them; closed at the test's end.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 64)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		for c := range accepted {
			_ = c.Close()
		}
	})
	return l
}

// hostileAgents are n agents named prefix0, prefix1, ... on one engine,
// each connected to the agent at sock (their source: this process).
func hostileAgents(t *testing.T, ctx context.Context, n int, prefix, sock string) []*agent.Agent {
	t.Helper()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	var as []*agent.Agent
	for i := range n {
		a, err := agent.New(ctx, agent.Config{Name: fmt.Sprintf("%s%d", prefix, i), Engine: eng})
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		_, err = a.Connect(ctx, sock)
		require.NoError(t, err)
		as = append(as, a)
	}
	return as
}

// waitOutput waits until out matches re (the deadline only bounds the
// test) and returns the match.
func waitOutput(t *testing.T, out fmt.Stringer, re *regexp.Regexp, what string) []string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		require.True(t, time.Now().Before(deadline), "%s: %s", what, out.String())
	}
}

// TestPerfAgentTargetHelloSlotsPerSource: an agent's name is its own to
// choose, so one peer sending hellos under many names (here 64 agents of
// this process, each naming an address that accepts and never answers,
// so that each welcome waits for its dial) must not take every hello
// slot of a target: a source (the connection's address as the socket
// says: over the unix socket, the peer's pid) gets maxHellosPerSource
// of them, and an initiator from another source (another process) is
// welcomed and served. Before the fix the 64 hellos took all 64
// slots, and its hello was dropped ("64 hellos are being answered
// already"): no welcome within its -wait.
func TestPerfAgentTargetHelloSlotsPerSource(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := []string{"-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}
	tout, terr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(ctx, append([]string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "1", "-wait", "30s"}, kv...), tout, terr)
	}()
	waitOutput(t, tout, regexp.MustCompile(`(?m)^# target t incarnation`), "the target never listened")

	silent := silentListener(t)
	ok := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	for _, a := range hostileAgents(t, ctx, maxHellos, "h", sock) {
		require.NoError(t, a.Notify(ctx, "t", kvMsg{kind: kvHello, p: ok, tcp: silent.Addr().String()}.encode()))
	}

	icode, iout, ierr := perfChild(t, ctx, append([]string{"perf", "-agent", "-role", "initiator", "-name", "ini",
		"-unix", filepath.Join(dir, "i.sock"), "-connect", sock, "-wait", "20s", "-requests", "10"}, kv...)...)
	require.Equal(t, exitOK, icode, ierr+iout+tout.String())
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("the target did not end")
	}
	require.Equal(t, exitOK, code, terr.String()+tout.String())
	assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte`, tout.String())
	assert.Regexp(t, `# dropped a bad notification from h\d+: hello: \d+ hellos from its source \(pid \d+\) are being answered already`, tout.String())
}

// TestPerfAgentTargetUnwelcomedNotAnsweredAgain: a peer whose welcome
// failed (here: its hello names an address that never answers, so the
// target gives up reaching it after -wait) is not answered again: that
// run of it (incarnation) said where it is and was not there, and a peer
// repeating such hellos would hold a hello slot for -wait every time.
// Before the fix its next hello was answered as the first.
func TestPerfAgentTargetUnwelcomedNotAnsweredAgain(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	tout, terr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runContext(tctx, []string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "1", "-wait", "1s", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, tout, terr)
	}()
	silent := silentListener(t)
	a, peer := kvPeer(t, ctx, agent.Config{Name: "h"}, sock, "target", terr)
	hello := kvMsg{kind: kvHello, p: kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}, tcp: silent.Addr().String()}.encode()
	require.NoError(t, a.Notify(ctx, peer, hello))
	waitOutput(t, tout, regexp.MustCompile(`# initiator h: cannot reach it at`), "the welcome did not fail")

	require.NoError(t, a.Notify(ctx, peer, hello))
	// Either it is dropped, or (before the fix) answered and failed again.
	m := waitOutput(t, tout, regexp.MustCompile(`(# dropped a bad notification from h: hello: .*)|(?s:# initiator h: cannot reach it at .*# initiator h: cannot reach it at)`),
		"the second hello was neither dropped nor answered")
	require.NotEmpty(t, m[1], "the second hello of a peer whose welcome failed was answered:\n%s", tout.String())
	assert.Contains(t, m[1], "its welcome failed")
	stop()
	<-done
	assert.NotContains(t, tout.String(), "# initiator h: welcomed")
}

// TestPerfAgentTargetNoRegionAnsweredLater: a hello that came while every
// region of the section was in use is dropped, but its peer's welcome did
// not fail (the peer was there; the target had no room): once a region is
// free, that peer's next hello is answered. Before the fix such a peer
// was kept as one whose welcome failed, and its later hellos were dropped
// for good ("its welcome failed (this run of it): not answered again").
func TestPerfAgentTargetNoRegionAnsweredLater(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "t.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	tout, terr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		// -initiators 0: one region, and the target runs until stopped.
		done <- runContext(tctx, []string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
			"-initiators", "0", "-wait", "30s", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, tout, terr)
	}()
	p := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	first, fpeer := kvPeer(t, ctx, agent.Config{Name: "first", Unix: filepath.Join(dir, "f.sock")}, sock, "target", terr)
	later, lpeer := kvPeer(t, ctx, agent.Config{Name: "later", Unix: filepath.Join(dir, "l.sock")}, sock, "target", terr)
	require.NoError(t, first.Notify(ctx, fpeer, kvMsg{kind: kvHello, p: p, unix: first.Metadata().Unix}.encode()))
	waitOutput(t, tout, regexp.MustCompile(`# initiator first: welcomed`), "the first peer was not welcomed")

	hello := kvMsg{kind: kvHello, p: p, unix: later.Metadata().Unix}.encode()
	require.NoError(t, later.Notify(ctx, lpeer, hello))
	waitOutput(t, tout, regexp.MustCompile(`# dropped a bad notification from later: hello: every region of the section is in use`),
		"the hello with every region in use was not dropped")

	require.NoError(t, first.Notify(ctx, fpeer, kvMsg{kind: kvEnd, p: p}.encode()))
	waitOutput(t, tout, regexp.MustCompile(`# initiator first: ended`), "the first peer's end was not seen")

	require.NoError(t, later.Notify(ctx, lpeer, hello))
	m := waitOutput(t, tout, regexp.MustCompile(`(# initiator later: welcomed)|(# dropped a bad notification from later: hello: its welcome failed.*)`),
		"the later hello was neither welcomed nor dropped")
	stop()
	<-done
	require.NotEmpty(t, m[1], "a peer whose hello found every region in use was not answered once one was free:\n%s", tout.String())
}
