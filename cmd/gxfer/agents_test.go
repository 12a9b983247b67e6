package main

import (
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta"
	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
)

// publishRecord publishes m in etcd under prefix, as an agent would; the
// record lives until the test ends.
func publishRecord(t *testing.T, srv *etcdtest.Server, prefix string, m meta.Metadata) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := etcdmeta.Open(ctx, etcdmeta.Config{Endpoints: srv.Endpoints(), Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	require.NoError(t, st.Publish(ctx, m))
}

// testRecords are two agents: one with NICs and two sections, one with
// nothing but a unix socket.
func testRecords() []meta.Metadata {
	return []meta.Metadata{
		{
			Name: "decode-0", Incarnation: 0xfedcba9876543210, Version: 3,
			Unix: "/run/gx/decode-0.sock", TCP: "10.0.0.7:41000",
			NICs: []meta.NIC{{Device: "rxe0", Port: 1, GID: "fe80::1"}},
			Sections: []meta.Section{
				{Name: "kv", Len: 16 << 20, Location: "gaudi0", Key: []byte{1, 2, 3}},
				{Name: "weights", Len: 4096, Location: "host", Key: []byte{4}},
			},
		},
		{Name: "prefill-1", Incarnation: 42, Version: 1, Unix: "/run/gx/prefill-1.sock"},
	}
}

func TestAgentsJSONAndText(t *testing.T) {
	srv := etcdtest.New(t)
	const prefix = "/test-agents/"
	for _, m := range testRecords() {
		publishRecord(t, srv, prefix, m)
	}
	// Another prefix's agent is not listed.
	publishRecord(t, srv, "/other/", meta.Metadata{Name: "stranger", Incarnation: 7, Version: 1})

	code, out, errs := gxfer(t, "agents", "-etcd", srv.URL(), "-prefix", prefix, "-json")
	require.Equal(t, exitOK, code, errs)
	var doc agentsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	assert.Equal(t, "gxfer.agents/v1", doc.Schema)
	assert.Equal(t, []string{srv.URL()}, doc.Etcd)
	assert.Equal(t, prefix, doc.Prefix)
	require.Len(t, doc.Agents, 2, out)
	d, p := doc.Agents[0], doc.Agents[1]
	assert.Equal(t, agentJSON{
		Name: "decode-0", Incarnation: "fedcba9876543210", Version: 3,
		Unix: "/run/gx/decode-0.sock", TCP: "10.0.0.7:41000",
		NICs: []nicJSON{{Device: "rxe0", Port: 1, GID: "fe80::1"}},
		Sections: []sectionJSON{
			{Name: "kv", Length: 16 << 20, Location: "gaudi0"},
			{Name: "weights", Length: 4096, Location: "host"},
		},
	}, d)
	assert.Equal(t, agentJSON{
		Name: "prefill-1", Incarnation: "000000000000002a", Version: 1,
		Unix: "/run/gx/prefill-1.sock", NICs: []nicJSON{}, Sections: []sectionJSON{},
	}, p)
	// The schema's field names, as documented (parsed generically too).
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	a0 := raw["agents"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "incarnation", "version", "unix", "tcp", "nics", "sections"} {
		assert.Contains(t, a0, k)
	}
	s0 := a0["sections"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"name": "kv", "length": float64(16 << 20), "location": "gaudi0", "emulated": false}, s0)

	code, out, errs = gxfer(t, "agents", "-etcd", strings.TrimPrefix(srv.URL(), "http://"), "-prefix", prefix)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "2 live agent(s)")
	assert.Regexp(t, `(?m)^decode-0\s+fedcba9876543210\s+3\s+/run/gx/decode-0.sock\s+10.0.0.7:41000\s+rxe0:1\(fe80::1\)\s+2$`, out)
	assert.Regexp(t, `(?m)^prefill-1\s+000000000000002a\s+1\s+/run/gx/prefill-1.sock\s+-\s+-\s+0$`, out)
	assert.Regexp(t, `(?m)^decode-0\s+kv\s+16MiB\s+16777216\s+gaudi0$`, out)
	assert.Regexp(t, `(?m)^decode-0\s+weights\s+4KiB\s+4096\s+host$`, out)
	assert.NotContains(t, out, "stranger")

	// No agents: an empty list, not an error.
	code, out, errs = gxfer(t, "agents", "-etcd", srv.URL(), "-prefix", "/empty/", "-json")
	require.Equal(t, exitOK, code, errs)
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Empty(t, doc.Agents)
	assert.Contains(t, out, `"agents": []`)
}

func TestAgentsUnreachable(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	start := time.Now()
	code, out, errs := gxfer(t, "agents", "-etcd", addr, "-timeout", "500ms")
	assert.Equal(t, exitRuntime, code, out)
	assert.Empty(t, out)
	assert.Regexp(t, regexp.MustCompile(`^gxfer agents: connect to etcd: meta: metadata service unavailable: etcd http://`+regexp.QuoteMeta(addr)+`: `), errs)
	assert.Less(t, time.Since(start), 30*time.Second)
}

func TestAgentsUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-etcd is required"},
		{[]string{"-etcd", "ftp://x:1"}, "bad -etcd URL"},
		{[]string{"-etcd", "http://nohost"}, "bad -etcd URL"},
		{[]string{"-etcd", "h:1", "-timeout", "0s"}, "bad -timeout"},
		{[]string{"-etcd", "h:1", "-prefix", ""}, "-prefix must not be empty"},
		{[]string{"-etcd", "h:1", "extra"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gxfer(t, append([]string{"agents"}, tc.args...)...)
			require.Equal(t, exitUsage, code, errs)
			assert.Empty(t, out)
			assert.Contains(t, errs, tc.want)
		})
	}
}

// TestAgentsLabelsEmulated: gxfer agents says which sections are on an
// emulated Gaudi (dma/hlsim), from the agent's record: the text in the
// LOCATION column, and -json as "emulated" (true or false) in each
// section. Before the fix both showed a bare "gaudi0".
func TestAgentsLabelsEmulated(t *testing.T) {
	srv := etcdtest.New(t)
	const prefix = "/test-emulated/"
	publishRecord(t, srv, prefix, meta.Metadata{Name: "decode-0", Incarnation: 1, Version: 1, Sections: []meta.Section{
		{Name: "emu", Len: 4096, Location: "gaudi0", Emulated: true, Key: []byte{1}},
		{Name: "host", Len: 4096, Location: "host", Key: []byte{2}},
	}})
	code, out, errs := gxfer(t, "agents", "-etcd", srv.URL(), "-prefix", prefix)
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `(?m)^decode-0\s+emu\s+4KiB\s+4096\s+gaudi0 \[EMULATED: dma/hlsim\]$`, out)
	assert.Regexp(t, `(?m)^decode-0\s+host\s+4KiB\s+4096\s+host$`, out)

	code, out, errs = gxfer(t, "agents", "-etcd", srv.URL(), "-prefix", prefix, "-json")
	require.Equal(t, exitOK, code, errs)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw), out)
	secs := raw["agents"].([]any)[0].(map[string]any)["sections"].([]any)
	require.Len(t, secs, 2)
	assert.Equal(t, map[string]any{"name": "emu", "length": float64(4096), "location": "gaudi0", "emulated": true}, secs[0])
	assert.Equal(t, map[string]any{"name": "host", "length": float64(4096), "location": "host", "emulated": false}, secs[1])
}
