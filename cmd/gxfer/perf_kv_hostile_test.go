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

// TestPerfAgentTargetHostileRequest: a perf -agent target takes the
// workload's parameters from each notification (the peer's bytes). A
// request whose -O x -blocks is far beyond anything the command accepts
// must end the target with an error (exit 1), not make it allocate a
// permutation of that many slots before checking the request against its
// section. Before the fix the target built the permutation first: 2^31 x
// 2^31 slots (or 2^30 x 2^30) panicked (makeslice: len out of range) and
// crashed the process; 2^20 x 2^10 would have allocated 8 GiB for a
// 64-byte section (not run: it would).
func TestPerfAgentTargetHostileRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    kvParams
	}{
		{"slots beyond any slice", kvParams{seed: 1, window: 1 << 31, blocks: 1 << 31, bsize: 8}},
		{"section size wraps", kvParams{seed: 1, window: 1 << 30, blocks: 1 << 30, bsize: 1 << 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "t.sock")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errb bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- runContext(ctx, []string{"perf", "-agent", "-role", "target", "-name", "t", "-unix", sock,
					"-initiators", "0", "-blocks", "8", "-block-size", "8", "-O", "1", "-devices", "none"}, &out, &errb)
			}()

			eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
			require.NoError(t, err)
			defer eng.Close()
			a, err := agent.New(ctx, agent.Config{Name: "hostile", Engine: eng, Unix: filepath.Join(t.TempDir(), "h.sock")})
			require.NoError(t, err)
			defer a.Close()
			var peer string
			require.Eventually(t, func() bool {
				peer, err = a.Connect(ctx, sock)
				return err == nil
			}, 30*time.Second, 20*time.Millisecond, "the target never listened: %s", errb.String())
			msg := kvMsg{kind: kvReq, p: tc.p, r: 0, at: time.Now().UnixNano()}.encode()
			require.NoError(t, a.Notify(ctx, peer, msg))

			var code int
			select {
			case code = <-done:
			case <-ctx.Done():
				t.Fatal("the target did not end")
			}
			require.Equal(t, exitRuntime, code, errb.String()+out.String())
			assert.Contains(t, errb.String(), "not a kvcache workload message")
		})
	}
}
