package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
)

// tinyKV keeps agent mode runs short.
var tinyKV = []string{"-blocks", "8", "-block-size", "4K", "-requests", "40", "-O", "4"}

// checkKVReport checks the reports of both roles of a verified run.
func checkKVReport(t *testing.T, out string, requests int) {
	t.Helper()
	n := strconv.Itoa(requests)
	assert.Regexp(t, `(?m)^initiator \S+: `+n+` requests in \S+: [0-9.]+ req/s, [0-9.]+ GB/s`, out)
	assert.Regexp(t, `(?m)^initiator \S+: post of 8 descriptors: p50 [0-9.]+us p99 [0-9.]+us mean [0-9.]+us .* post to acknowledged p50 [0-9.]+us p99 [0-9.]+us$`, out)
	if !strings.Contains(out, "\ntarget ") {
		return // an initiator's output only
	}
	assert.Regexp(t, `(?m)^target \S+: `+n+` requests, `+n+` verified byte for byte \| [0-9.]+ req/s, [0-9.]+ GB/s .* post to notified p50 [0-9.]+us p99 [0-9.]+us`, out)
}

func TestPerfAgentOneProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unix host", []string{"-via", "unix"}, []string{"over ipc", "source: host memory", `section "kv": 131072 bytes of host memory`}},
		{"tcp to gaudi", []string{"-via", "tcp", "-m", "host,gaudi", "-devices", "emulated"},
			[]string{"over tcp", "gaudi0 Gaudi2 [EMULATED: dma/hlsim] memory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gxfer(t, append(append([]string{"perf", "-agent"}, tinyKV...), tc.args...)...)
			require.Equal(t, exitOK, code, errs+out)
			checkKVReport(t, out, 40)
			for _, w := range tc.want {
				assert.Contains(t, out, w)
			}
		})
	}
}

// TestPerfAgentEtcd: a target and two initiators (in-process commands, each
// with its own engine and agent) find each other through a real etcd; the
// target is listed by gxfer agents while it serves.
func TestPerfAgentEtcd(t *testing.T) {
	srv := etcdtest.New(t)
	dir, err := os.MkdirTemp("", "gxpa")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var tout, terr bytes.Buffer
	tdone := make(chan int, 1)
	go func() {
		tdone <- runContext(ctx, append([]string{"perf", "-agent", "-etcd", srv.URL(), "-role", "target", "-name", "decode-0",
			"-unix", filepath.Join(dir, "t.sock"), "-ttl", "2s", "-initiators", "2"}, "-blocks", "8", "-block-size", "4K", "-O", "4"), &tout, &terr)
	}()
	// The target appears in etcd with its section.
	require.Eventually(t, func() bool {
		code, out, _ := gxfer(t, "agents", "-etcd", srv.URL(), "-json")
		return code == 0 && strings.Contains(out, `"name": "decode-0"`) && strings.Contains(out, `"name": "kv"`)
	}, time.Minute, 50*time.Millisecond)

	// Two initiators at once: each writes its own region of the section.
	type res struct {
		code      int
		out, errs string
	}
	results := make(chan res, 2)
	for i := range 2 {
		go func() {
			var out, errs bytes.Buffer
			code := runContext(ctx, append([]string{"perf", "-agent", "-etcd", srv.URL(), "-role", "initiator",
				"-name", "prefill-" + strconv.Itoa(i), "-peer", "decode-0", "-tcp", "127.0.0.1:0"}, tinyKV...), &out, &errs)
			results <- res{code, out.String(), errs.String()}
		}()
	}
	var out string
	for range 2 {
		r := <-results
		require.Equal(t, exitOK, r.code, r.errs+r.out)
		assert.Contains(t, r.out, " -> target decode-0")
		checkKVReport(t, r.out, 40)
		out += r.out
	}
	assert.Contains(t, out, "# initiator prefill-0 -> target decode-0")
	assert.Contains(t, out, "# initiator prefill-1 -> target decode-0")
	var code int
	select {
	case code = <-tdone:
	case <-ctx.Done():
		t.Fatal("the target did not end after its initiators")
	}
	require.Equal(t, exitOK, code, terr.String()+tout.String())
	assert.Regexp(t, `(?m)^target decode-0: 80 requests, 80 verified byte for byte`, tout.String())
	// Its initiators may run on other hosts: post to notified compares
	// their clock with the target's, which it must not call one clock.
	assert.NotContains(t, tout.String(), "same-host clock")
	assert.Contains(t, tout.String(), "initiators' clocks against this host's")
	assert.Contains(t, tout.String(), "# target decode-0 incarnation ")

	// Once both ended, their records are gone (Close revokes the leases).
	code, out, errs := gxfer(t, "agents", "-etcd", srv.URL(), "-json")
	require.Equal(t, exitOK, code, errs)
	var doc agentsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Empty(t, doc.Agents)
}

func TestPerfAgentUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-agent", "-workload", "bulk"}, "bad -workload"},
		{[]string{"-agent", "-etcd", "h:1"}, "-etcd needs -role"},
		{[]string{"-agent", "-role", "boss"}, "bad -role"},
		{[]string{"-agent", "-role", "target", "-etcd", "h:1"}, "a target listens"},
		{[]string{"-agent", "-role", "initiator"}, "an initiator finds its target"},
		{[]string{"-agent", "-role", "target", "-unix", "/x", "-requests", "3"}, "an initiator's flag"},
		// A target checks each request with its initiator's seed (the request carries it).
		{[]string{"-agent", "-role", "target", "-unix", "/nonexistent/t.sock", "-seed", "5"}, "-seed is an initiator's flag"},
		{[]string{"-agent", "-block-size", "12"}, "bad -block-size"},
		{[]string{"-agent", "-blocks", "0"}, "bad -blocks"},
		{[]string{"-agent", "-O", "0"}, "bad -O"},
		{[]string{"-agent", "-via", "rdma"}, "bad -via"},
		{[]string{"-agent", "-t", "h2d"}, "-t has no meaning with -agent"},
		{[]string{"-agent", "-peer", "x"}, "-peer needs -role"},
		{[]string{"-blocks", "4"}, "-blocks needs -agent"},
		{[]string{"-agent", "-d", "-1", "-requests", "1"}, "bad -d -1"},
		{[]string{"-agent", "-d", "-1", "-m", "gaudi,gaudi", "-requests", "1"}, "bad -d -1"},
		// Names are checked before any agent starts, as agents check them.
		{[]string{"-agent", "-section", ""}, "bad -section"},
		{[]string{"-agent", "-section", "k\x01v"}, "bad -section"},
		{[]string{"-agent", "-role", "target", "-unix", "/nonexistent/t.sock", "-name", "a\nb"}, "bad -name"},
		{[]string{"-agent", "-role", "initiator", "-connect", "/nonexistent/t.sock", "-peer", "p\x7f"}, "bad -peer"},
		// etcd's flags mean nothing without it, as the others without -role.
		{[]string{"-agent", "-prefix", "/x/", "-requests", "1"}, "-prefix needs -etcd"},
		{[]string{"-agent", "-ttl", "5s", "-requests", "1"}, "-ttl needs -etcd"},
		{[]string{"-agent", "-role", "target", "-unix", "/nonexistent/t.sock", "-etcd", "127.0.0.1:1", "-prefix", ""}, "-prefix must not be empty"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gxfer(t, append([]string{"perf"}, tc.args...)...)
			require.Equal(t, exitUsage, code, errs+out)
			assert.Contains(t, errs, tc.want)
			assert.Empty(t, out, "a usage error comes before any work")
		})
	}
}

// TestPerfAgentMetrics: perf -agent -metrics exports both agents' counters
// (and the initiator's engine's), parsed with Prometheus's text parser.
func TestPerfAgentMetrics(t *testing.T) {
	fs, out := scrapeAtClose(t, append([]string{"perf", "-agent"}, tinyKV...)...)
	checkKVReport(t, out, 40)
	require.EqualValues(t, 40, sample(t, fs, "gxfer_agent_transfers_total", "agent", "initiator", "op", "write"))
	require.EqualValues(t, 40*8, sample(t, fs, "gxfer_agent_descriptors_total", "agent", "initiator"))
	require.GreaterOrEqual(t, sample(t, fs, "gxfer_agent_notifications_received_total", "agent", "target"), float64(40))
	require.GreaterOrEqual(t, sample(t, fs, "gxfer_agent_notifications_sent_total", "agent", "initiator"), float64(40))
	require.Positive(t, sample(t, fs, "gxfer_transport_ops_completed_total", "transport", "ipc"))
}

// TestPerfAgentSectionCap: the 16 GiB cap on a target's section counts
// its -initiators regions (the section has -initiators x -O x -blocks
// slots of -block-size bytes), and their product cannot overflow. Before
// the fix the cap left -initiators out: -initiators 2 with 16 GiB per
// initiator allocated a 32 GiB section and served it; -initiators 2^30
// wrapped the section's size to 0 (exit 1, "allocate 0 bytes").
func TestPerfAgentSectionCap(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "t.sock")
	per16G := []string{"-blocks", "64", "-block-size", "64M", "-O", "4"} // 16 GiB per initiator
	for _, tc := range []struct {
		name       string
		initiators string
	}{
		{"twice the cap", "2"},
		{"size wraps to 0", "1073741824"},
		{"size wraps to 16 GiB", "1073741825"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Liveness bound only: before the fix the target served its section.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			args := append([]string{"perf", "-agent", "-role", "target", "-unix", sock, "-initiators", tc.initiators}, per16G...)
			code := runContext(ctx, args, &out, &errb)
			require.Equal(t, exitUsage, code, errb.String()+out.String())
			assert.Contains(t, errb.String(), "the section would exceed 16 GiB")
		})
	}
}

// TestPerfAgentSlotCap: -O x -blocks, the descriptors an initiator
// prepares (and the slots of its region), is capped at 2^20. Before the
// fix only the bytes were capped: -O 1024 -blocks 65536 -block-size 8 (a
// 512 MiB section) passed the checks and had the initiator prepare 2^26
// descriptors, about 1 KiB of memory each (~70 GB), in agent.Prepare's
// loop that does not look at ctx: the command ignored Ctrl-C and SIGTERM
// for minutes. The check is called directly: the command line that
// failed it must not run here.
func TestPerfAgentSlotCap(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-O", "1024", "-blocks", "65536", "-block-size", "8"}, false},
		{[]string{"-O", "17", "-blocks", "65536", "-block-size", "8"}, false},
		{[]string{"-O", "16", "-blocks", "65536", "-block-size", "8"}, true},
		{[]string{"-O", "1024", "-blocks", "1024", "-block-size", "8"}, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs, o := perfFlags()
			set, err := parseFlags(fs, append([]string{"-agent"}, tc.args...), &o.common)
			require.NoError(t, err)
			_, err = o.checkAgent(set)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			var ue *usageError
			require.ErrorAs(t, err, &ue)
			assert.Contains(t, err.Error(), "-O x -blocks")
		})
	}
}

// TestPerfAgentCPUProfileAndQuiet: -cpuprofile profiles an agent mode run
// as any perf run, and -q, which agent mode does not implement (it has
// no machine format to keep), is a usage error rather than ignored.
func TestPerfAgentCPUProfileAndQuiet(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "agent.prof")
	code, out, errs := gxfer(t, append([]string{"perf", "-agent", "-cpuprofile", prof}, tinyKV...)...)
	require.Equal(t, exitOK, code, errs)
	checkKVReport(t, out, 40)
	st, err := os.Stat(prof)
	require.NoError(t, err, "-cpuprofile wrote no profile")
	assert.Positive(t, st.Size())

	checkUsageErrors(t, "gxfer perf", []usageCase{
		{append([]string{"perf", "-agent", "-q"}, tinyKV...), "-q has no meaning with -agent"},
	})
}

// TestPerfAgentInitiatorLabelsEmulatedTarget: the initiator's header
// names the target's section memory as emulated when the target's
// section is on an emulated Gaudi (the initiator learns it from the
// target's record only).
func TestPerfAgentInitiatorLabelsEmulatedTarget(t *testing.T) {
	for _, tc := range []struct {
		name, m, want string
	}{
		{"emulated gaudi", "host,gaudi", `gaudi0 \[EMULATED: dma/hlsim\]`},
		{"host", "gaudi,host", `host`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gxfer(t, append(append([]string{"perf", "-agent"}, tinyKV...), "-m", tc.m, "-devices", "emulated")...)
			require.Equal(t, exitOK, code, errs+out)
			assert.Regexp(t, `(?m)^# initiator .* target section "kv": \d+ bytes of `+tc.want+` memory$`, out)
		})
	}
}

// TestPerfAgentTargetRateOfOneRequest: a target's rate is measured from
// its first to its last notification; with one request there is no such
// interval, and the report says the rate was not measured. Before the
// fix it claimed "0.0 req/s, 0.000 GB/s".
func TestPerfAgentTargetRateOfOneRequest(t *testing.T) {
	code, out, errs := gxfer(t, "perf", "-agent", "-blocks", "8", "-block-size", "4K", "-requests", "1", "-O", "1", "-devices", "none")
	require.Equal(t, exitOK, code, errs+out)
	assert.Regexp(t, `(?m)^target \S+: 1 requests, 1 verified byte for byte \| rate not measured \(one notification: no interval\) \| post to notified p50 [0-9.]+us p99 [0-9.]+us`, out)
	assert.NotContains(t, out, " 0.0 req/s")
}
