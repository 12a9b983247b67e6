package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
)

// The rdma transport of gxfer perf. The client/server tests need an RDMA
// device: on a machine without one they skip, saying why;
// testbed/rxe/ci.sh runs them inside the Soft-RoCE VM (with
// GXFER_REQUIRE_RDMA=1, where a missing device fails them).

var rdmaListening = regexp.MustCompile(`listening on rdma:(\S+) \(control channel; engine at (\S+)\)`)

// engineRDMA is what an engine opened here finds: its RDMA context.
func engineRDMA(t *testing.T) engine.RDMAInfo {
	t.Helper()
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	return eng.RDMA()
}

func needRDMA(t *testing.T) engine.RDMAInfo {
	t.Helper()
	info := engineRDMA(t)
	if !info.Available {
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" {
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but the engine has no RDMA: %s", info.Reason)
		}
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %s", info.Reason)
	}
	return info
}

// startRDMAServer runs 'gxfer perf -server -x rdma:127.0.0.1:0' in-process and returns
// the control channel's HOST:PORT, the exit status channel and the output.
func startRDMAServer(t *testing.T, ctx context.Context, extra ...string) (string, <-chan int, *syncBuffer) {
	t.Helper()
	return startPerfServer(t, ctx, "rdma:127.0.0.1:0", rdmaListening, extra...)
}

func TestPerfRDMAUsageErrors(t *testing.T) {
	checkUsageErrors(t, "gxfer perf: ", []usageCase{
		{[]string{"perf", "-x", "rdma"}, "needs the server's address: -x rdma:HOST:PORT"},
		{[]string{"perf", "-x", "rdma:"}, "want rdma:HOST:PORT"},
		{[]string{"perf", "-x", "rdma:127.0.0.1"}, "missing port"},
		{[]string{"perf", "-x", "rdma:localhost:http"}, "bad port"},
		{[]string{"perf", "-x", "rdma:localhost:65536"}, "bad port"},
		{[]string{"perf", "-x", "rdma:::1:5000"}, "too many colons"},
		{[]string{"perf", "-x", "rdma:127.0.0.1:0"}, "port 0 is for servers"},
		{[]string{"perf", "-server", "-x", "rdma:127.0.0.1"}, "missing port"},
		{[]string{"perf", "-server", "-x", "rdma:127.0.0.1:5000", "-t", "put_bw"}, "-t has no meaning with -server"},
		{[]string{"perf", "-x", "rdma:127.0.0.1:5000", "-b", "2"}, "batches are not supported over rdma"},
		{[]string{"perf", "-x", "rdma:127.0.0.1:5000", "-rdma-cq", "sometimes"}, "bad -rdma-cq \"sometimes\""},
		{[]string{"perf", "-x", "rdma:127.0.0.1:5000", "-rdma-cq", "spin:0s"}, "bad -rdma-cq"},
		{[]string{"perf", "-x", "rdma:127.0.0.1:5000", "-rdma-cq", "spin:2s"}, "bad -rdma-cq"},
		{[]string{"perf", "-x", "tcp:127.0.0.1:5000", "-rdma-cq", "busy"}, "-rdma-cq needs -x rdma:HOST:PORT"},
		{[]string{"perf", "-x", "rdma:127.0.0.1:5000", "-tcp-lanes", "1"}, "-tcp-lanes needs -x tcp:HOST:PORT"},
	})
}

// TestPerfRDMANoDevice: without an RDMA device, the client and the server
// fail at once with one line giving the engine's reason (exit 2: the
// transport cannot be used here, as with any unavailable transport).
func TestPerfRDMANoDevice(t *testing.T) {
	info := engineRDMA(t)
	if info.Available {
		t.Skipf("this machine has an RDMA device (%s)", info.Device)
	}
	for _, args := range [][]string{
		{"perf", "-devices", "none", "-x", "rdma:127.0.0.1:5000", "-s", "8", "-n", "1"},
		{"perf", "-devices", "none", "-server", "-x", "rdma:127.0.0.1:0", "-once"},
		{"perf", "-devices", "none", "-x", "rdma:127.0.0.1:5000", "-rdma-cq", "busy"},
	} {
		code, out, errs := gxfer(t, args...)
		assert.Equal(t, 2, code, errs)
		assert.Empty(t, out)
		assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
		assert.Contains(t, errs, "transport rdma is unavailable ("+info.Reason+")")
	}
	// gxfer info says the same.
	code, out, errs := gxfer(t, "info")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "  rdma: unavailable ("+info.Reason+")")
}

func TestPerfRDMAClientServerJSON(t *testing.T) {
	info := needRDMA(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, srvCode, srvOut := startRDMAServer(t, ctx, "-once", "-devices", "none")
	assert.Contains(t, srvOut.String(), "# transport rdma (RC RDMA write/read, control channel over TCP) | rdma device "+info.Device+" port ")
	assert.Contains(t, srvOut.String(), "completion queue event (sleeps in the netpoller)")
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "rdma:"+addr, "-t", "put_lat,put_bw,get_lat,get_bw",
		"-s", "8,64K", "-time", "50ms", "-w", "2", "-O", "4", "-json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, 0, <-srvCode, srvOut.String())
	t.Logf("server:\n%s", srvOut)

	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "rdma", rep.Params.Transport)
	assert.Contains(t, rep.Params.Peer, "rdma:"+addr+" (pid ")
	assert.Contains(t, rep.Env.RDMADevice, info.Device+" port ")
	require.NotNil(t, rep.PeerEnv)
	assert.Contains(t, rep.PeerEnv.RDMADevice, info.Device+" port ")
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "rdma: the endpoint to ")
	seen := map[string][]int{}
	for _, r := range rep.Results {
		seen[r.Test] = append(seen[r.Test], r.Size)
		assert.True(t, r.Verified)
		assert.Equal(t, "rdma", r.Transport)
		assert.Positive(t, r.Iterations)
		assert.Positive(t, r.BandwidthMBs)
		t.Logf("%s %6d B: %d iterations, median %.1f us, %.1f MB/s", r.Test, r.Size, r.Iterations, r.Latency.Median, r.BandwidthMBs)
	}
	sizes := []int{8, 64 << 10}
	assert.Equal(t, map[string][]int{"put_lat": sizes, "put_bw": sizes, "get_lat": sizes, "get_bw": sizes}, seen)
	for _, tt := range rep.Tests {
		assert.Equal(t, "rdma", tt.Transport, tt.Name)
	}
}

// TestPerfRDMATextRemoteGaudi: text headers name the transport and the
// RDMA devices; the server's (emulated) Gaudi memory, which Soft-RoCE
// cannot register as a DMA-BUF, is reached through the server's engine;
// then a busy-polling client's ping-pong; a tcp client is turned away.
func TestPerfRDMATextRemoteGaudi(t *testing.T) {
	info := needRDMA(t)
	ctx, cancel := context.WithCancel(context.Background())
	addr, srvCode, srvOut := startRDMAServer(t, ctx)
	assert.Contains(t, srvOut.String(), "EMULATED")

	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "rdma:"+addr, "-t", "put_bw,get_bw", "-m", "host,gaudi", "-s", "8,64K", "-n", "5")
	require.Equal(t, 0, code, errs)
	t.Logf("client:\n%s", out)
	headers := regexp.MustCompile(`(?m)^# transport: rdma \(RC RDMA write/read, control channel over TCP\) \| peer rdma:\S+ \(pid \d+\) \| local device: host \| peer device: gaudi0 Gaudi2 \[EMULATED: dma/hlsim, [^]]+\] \(the peer's engine does the DMA\) \| emulated: yes\n# rdma device: `+
		regexp.QuoteMeta(info.Device)+` port \d+, [^|]+ \| peer's: `+regexp.QuoteMeta(info.Device)+` port `).FindAllString(out, -1)
	assert.Len(t, headers, 2, out)
	assert.Contains(t, out, "# transport rdma (RC RDMA write/read, control channel over TCP) | rdma device "+info.Device+" port ")

	code, out, errs = gxfer(t, "perf", "-devices", "none", "-x", "rdma:"+addr, "-t", "put_lat", "-s", "8", "-time", "50ms", "-rdma-cq", "busy")
	require.Equal(t, 0, code, errs)
	t.Logf("client:\n%s", out)
	assert.Contains(t, out, "one-way, half a ping-pong round trip")
	assert.Contains(t, out, "| local device: host | peer device: host | emulated: no\n")

	code, out, errs = gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-t", "put_bw", "-s", "8", "-n", "5")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, errs, "serves rdma, not tcp")
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)

	cancel()
	require.Equal(t, 0, <-srvCode, srvOut.String())
}
