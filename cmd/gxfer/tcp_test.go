package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
)

var tcpListening = regexp.MustCompile(`listening on tcp:(\S+) \(control channel; engine at (\S+)\)`)

// startTCPServer runs 'gxfer perf -server -x tcp:127.0.0.1:0' in-process and returns
// the control channel's HOST:PORT, the exit status channel and the output.
func startTCPServer(t *testing.T, ctx context.Context, extra ...string) (string, <-chan int, *syncBuffer) {
	t.Helper()
	return startPerfServer(t, ctx, "tcp:127.0.0.1:0", tcpListening, extra...)
}

func TestPerfTCPClientServerJSON(t *testing.T) {
	addr, srvCode, srvOut := startTCPServer(t, context.Background(), "-once", "-devices", "none")
	assert.Contains(t, srvOut.String(), "# transport tcp (engine Data frames over TCP, TCP_NODELAY) | listening on tcp:"+addr)
	assert.Contains(t, srvOut.String(), "any client that can reach it is served")
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-t", "put_lat,put_bw,get_lat,get_bw",
		"-s", "8,4K,128K,5M", "-n", "10", "-w", "2", "-O", "4", "-json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, 0, <-srvCode, srvOut.String())
	assert.Regexp(t, `# client pid \d+ at 127\.0\.0\.1:\d+ done \(`, srvOut.String())

	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "tcp", rep.Params.Transport)
	assert.Contains(t, rep.Params.Peer, "tcp:"+addr+" (pid ")
	require.NotNil(t, rep.PeerEnv)
	seen := map[string][]int{}
	for _, r := range rep.Results {
		seen[r.Test] = append(seen[r.Test], r.Size)
		assert.True(t, r.Verified)
		assert.Equal(t, "tcp", r.Transport)
		assert.EqualValues(t, 10, r.Iterations)
		assert.Positive(t, r.BandwidthMBs)
		assert.False(t, r.Emulated || r.PeerEmulated)
		switch r.Test {
		case "put_lat":
			assert.Equal(t, bench.OneWay, r.LatencyKind)
		case "get_lat":
			assert.Equal(t, bench.RoundTrip, r.LatencyKind)
		default:
			assert.Equal(t, 4, r.Window)
		}
	}
	sizes := []int{8, 4096, 128 << 10, 5 << 20}
	assert.Equal(t, map[string][]int{"put_lat": sizes, "put_bw": sizes, "get_lat": sizes, "get_bw": sizes}, seen)
	for _, tt := range rep.Tests {
		assert.Equal(t, "tcp", tt.Transport, tt.Name)
	}
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "has 2 connection(s)")
}

func TestPerfTCPOneLane(t *testing.T) {
	addr, srvCode, srvOut := startTCPServer(t, context.Background(), "-once", "-devices", "none")
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-t", "put_bw,get_bw", "-s", "5M", "-n", "3", "-tcp-lanes", "1", "-json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, 0, <-srvCode, srvOut.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "has 1 connection(s)")
	for _, r := range rep.Results {
		assert.True(t, r.Verified)
	}
}

func TestPerfTCPTextCSVBenchfmt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, srvCode, srvOut := startTCPServer(t, ctx)
	assert.Contains(t, srvOut.String(), "EMULATED")

	// Remote Gaudi: the server's engine does the DMA; every header names
	// the transport and the emulated device.
	code, out, errs := gxfer(t, "perf", "-x", "tcp:"+addr, "-t", "put_bw,get_lat", "-m", "host,gaudi", "-s", "8,64K", "-n", "5")
	require.Equal(t, 0, code, errs)
	headers := regexp.MustCompile(`(?m)^# transport: tcp \(engine Data frames over TCP, TCP_NODELAY\) \| peer tcp:\S+ \(pid \d+\) \| local device: host \| peer device: gaudi0 Gaudi2 \[EMULATED: dma/hlsim, [^]]+\] \(the peer's engine does the DMA\) \| emulated: yes$`).FindAllString(out, -1)
	assert.Len(t, headers, 2, out)
	assert.Contains(t, out, "# transport tcp (engine Data frames over TCP, TCP_NODELAY) | memory local host, remote gaudi")
	assert.Contains(t, out, "# test put_bw: host -> peer gaudi0")

	// Host memory at both ends: the ping-pong.
	code, out, errs = gxfer(t, "perf", "-x", "tcp:"+addr, "-t", "put_lat", "-s", "8,4K", "-n", "50")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "| local device: host | peer device: host | emulated: no\n")
	assert.Contains(t, out, "one-way, half a ping-pong round trip")

	code, out, errs = gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-t", "get_bw", "-s", "4K", "-n", "5", "-csv")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^get_bw,tcp,host,host,`, out)

	code, out, errs = gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-t", "put_bw", "-s", "4K", "-n", "5", "-benchfmt")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "gxfer-transport: tcp")

	// The server serves one client after another until interrupted.
	cancel()
	require.Equal(t, 0, <-srvCode, srvOut.String())
}

func TestPerfTCPSecondClientRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, srvCode, srvOut := startTCPServer(t, ctx, "-once", "-devices", "none")
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer eng.Close()
	first, err := bench.DialPeerTCP(ctx, eng, addr)
	require.NoError(t, err)
	code, out, errs := gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-s", "8", "-n", "5")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)
	assert.Contains(t, errs, "busy with client pid")
	require.NoError(t, first.Close())
	require.Equal(t, 0, <-srvCode, srvOut.String())
	assert.Contains(t, srvOut.String(), "refused client at 127.0.0.1:")

	// Nobody listening: a clear runtime error.
	code, _, errs = gxfer(t, "perf", "-devices", "none", "-x", "tcp:"+addr, "-s", "8", "-n", "5")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "is 'gxfer perf -server -x tcp:"+addr+"' running?")
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)
}

func TestPerfTCPUsageErrors(t *testing.T) {
	checkUsageErrors(t, "gxfer perf: ", []usageCase{
		{[]string{"perf", "-x", "tcp"}, "needs the server's address: -x tcp:HOST:PORT"},
		{[]string{"perf", "-x", "tcp:"}, "want tcp:HOST:PORT"},
		{[]string{"perf", "-x", "tcp:127.0.0.1"}, "missing port"},
		{[]string{"perf", "-x", "tcp:localhost:"}, "missing port"},
		{[]string{"perf", "-x", "tcp:localhost:http"}, "bad port"},
		{[]string{"perf", "-x", "tcp:localhost:65536"}, "bad port"},
		{[]string{"perf", "-x", "tcp:::1:5000"}, "too many colons"},
		{[]string{"perf", "-x", "tcp:127.0.0.1:0"}, "port 0 is for servers"},
		{[]string{"perf", "-server", "-x", "tcp:127.0.0.1"}, "missing port"},
		{[]string{"perf", "-server", "-x", "tcp:127.0.0.1:5000", "-s", "8"}, "-s has no meaning with -server"},
		{[]string{"perf", "-x", "tcp:127.0.0.1:5000", "-b", "2"}, "batches are not supported over tcp"},
		{[]string{"perf", "-x", "tcp:127.0.0.1:5000", "-t", "nope"}, "unknown test"},
		{[]string{"perf", "-x", "unix:/tmp/x.sock", "-tcp-spin", "10us"}, "-tcp-spin needs -x tcp:HOST:PORT"},
		{[]string{"perf", "-x", "tcp:127.0.0.1:5000", "-tcp-spin", "2s"}, "bad -tcp-spin"},
		{[]string{"perf", "-x", "tcp:127.0.0.1:5000", "-tcp-lanes", "0"}, "bad -tcp-lanes"},
		{[]string{"perf", "-server", "-x", "tcp:127.0.0.1:5000", "-tcp-lanes", "1"}, "-tcp-lanes has no meaning with -server"},
		{[]string{"perf", "-x", "unix:/tmp/x.sock", "-tcp-lanes", "1"}, "-tcp-lanes needs -x tcp:HOST:PORT"},
	})
}

// TestBinaryTCP runs the client and the server as two processes over
// tcp on 127.0.0.1.
func TestBinaryTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	bin := filepath.Join(t.TempDir(), "gxfer")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "perf", "-server", "-x", "tcp:127.0.0.1:0", "-once", "-devices", "none")
	srvOut, err := srv.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	lines := bufio.NewScanner(srvOut)
	var addr string
	for addr == "" && lines.Scan() {
		if m := tcpListening.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	require.NotEmpty(t, addr, "the server did not say where it listens")
	go io.Copy(io.Discard, srvOut)
	cmd := exec.Command(bin, "perf", "-devices", "none", "-x", "tcp:"+addr, "-s", "8,64K,5M", "-n", "10", "-json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.NoError(t, srv.Wait(), "a -once server exits 0 after its client")
	var rep bench.Report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	assert.Len(t, rep.Results, 12)
	assert.Equal(t, "tcp", rep.Params.Transport)
	assert.Equal(t, "tcp:"+addr+" (pid "+strconv.Itoa(srv.Process.Pid)+")", rep.Params.Peer)
	for _, r := range rep.Results {
		assert.True(t, r.Verified)
		assert.Equal(t, "tcp", r.Transport)
	}

	cmd = exec.Command(bin, "perf", "-x", "tcp:localhost")
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Equal(t, 1, strings.Count(stderr.String(), "\n"))
	assert.Contains(t, stderr.String(), "missing port")
}
