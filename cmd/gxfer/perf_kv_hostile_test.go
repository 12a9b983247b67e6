package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/engine"
)

// TestPerfAgentTargetHostileRequest: a perf -agent target takes the
// workload's parameters from each notification (the peer's bytes). A bad
// notification (bytes that are no workload message, parameters far beyond
// anything the command accepts, a kind a target never gets, a request
// from a peer it never welcomed or whose blocks lie beyond the section, a hello whose region does not fit)
// is logged, counted and dropped: the target keeps serving, and a real
// initiator that comes after it runs to its end. The parameters must not
// make it allocate before the checks: 2^31 x 2^31 slots panicked
// (makeslice) once; 2^20 x 2^10 would allocate 8 GiB for a 64-byte
// section. Before the fix any of these ended the target (exit 1), so that
// one hostile peer stopped it serving every other.
func TestPerfAgentTargetHostileRequest(t *testing.T) {
	ok := kvParams{seed: 1, window: 1, blocks: 8, bsize: 8}
	for _, tc := range []struct {
		name  string
		msg   []byte
		hello bool // the hostile peer says hello first (and is welcomed)
	}{
		{"not a workload message", []byte("hello, target"), false},
		{"slots beyond any slice", kvMsg{kind: kvReq, p: kvParams{seed: 1, window: 1 << 31, blocks: 1 << 31, bsize: 8}}.encode(), false},
		{"section size wraps", kvMsg{kind: kvReq, p: kvParams{seed: 1, window: 1 << 30, blocks: 1 << 30, bsize: 1 << 16}}.encode(), false},
		{"an acknowledgement", kvMsg{kind: kvAck, p: ok}.encode(), false},
		{"request without a hello", kvMsg{kind: kvReq, p: ok}.encode(), false},
		{"welcomed, blocks beyond the section", kvMsg{kind: kvReq, p: ok, base: 1 << 40}.encode(), true},
		{"hello for a larger region", kvMsg{kind: kvHello, p: kvParams{seed: 1, window: 4, blocks: 8, bsize: 8}}.encode(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
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

			a, peer := kvPeer(t, ctx, agent.Config{Name: "hostile", Unix: filepath.Join(dir, "h.sock")}, sock, "target", errb)
			if tc.hello {
				require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvHello, p: ok, unix: a.Metadata().Unix}.encode()))
				n, err := a.Recv(ctx)
				require.NoError(t, err)
				w, err := decodeKVMsg(n.Msg)
				require.NoError(t, err)
				require.Equal(t, uint8(kvWelcome), w.kind)
			}
			require.NoError(t, a.Notify(ctx, peer, tc.msg))
			if tc.hello {
				// It ends having had no request measured: not counted,
				// its region (the one of -initiators 1) freed.
				require.NoError(t, a.Notify(ctx, peer, kvMsg{kind: kvEnd, p: ok}.encode()))
				require.Eventually(t, func() bool {
					return strings.Contains(out.String(), "# initiator hostile: ended, before any request")
				}, 30*time.Second, 5*time.Millisecond, "the target did not take its end: %s", out.String())
			}

			// A real initiator, after the hostile notification.
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
			assert.Regexp(t, `(?m)^# dropped a bad notification from hostile: `, out.String())
			assert.Regexp(t, `(?m)^target t: 10 requests, 10 verified byte for byte .*\| 1 bad notification\(s\) dropped$`, out.String())
		})
	}
}

// TestPerfAgentTargetInterruptedWhileNotified: a serving target (-initiators
// 0) that is interrupted ends (exit 0), also while notifications keep
// coming. Before the fix its receiving goroutine, holding a notification
// when the interruption came, could end without a word, and the target
// waited for it for good (about one interruption in two here; seen as a
// hang of TestPerfAgentInitiatorTargetGone).
func TestPerfAgentTargetInterruptedWhileNotified(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	a, err := agent.New(ctx, agent.Config{Name: "chatty", Engine: eng, Unix: filepath.Join(dir, "h.sock")})
	require.NoError(t, err)
	defer a.Close()
	for i := range 16 {
		sock := filepath.Join(dir, fmt.Sprintf("t%d.sock", i))
		tctx, stop := context.WithCancel(ctx)
		var out, errb bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- runContext(tctx, []string{"perf", "-agent", "-role", "target", "-name", fmt.Sprintf("t%d", i), "-unix", sock,
				"-initiators", "0", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, &out, &errb)
		}()
		var peer string
		require.Eventually(t, func() bool {
			peer, err = a.Connect(ctx, sock)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "the target never listened: %s", errb.String())
		// Notifications keep coming while the target is interrupted.
		sent := 0
		for ; sent < 200; sent++ {
			if a.Notify(ctx, peer, []byte("chatter")) != nil {
				break
			}
			if sent == 100 {
				stop()
			}
		}
		stop()
		select {
		case code := <-done:
			require.Equal(t, exitOK, code, errb.String()+out.String())
		case <-ctx.Done(): // liveness bound only
			t.Fatalf("interruption %d: the target did not end (%d notifications sent)", i, sent)
		}
	}
}
