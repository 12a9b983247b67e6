package main

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/rdma"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"server", []string{"-d", "rxe0", "-x", "1", "-F", "-s", "8", "-n", "10"}, ""},
		{"client", []string{"-s", "2048", "10.0.0.1"}, ""},
		{"small", []string{"-s", "7"}, "from 8 to 2048"},
		{"large", []string{"-s", "2049"}, "from 8 to 2048"},
		{"iters", []string{"-n", "1"}, "at least 2"},
		{"port", []string{"-p", "70000"}, "not a TCP port"},
		{"ibport", []string{"-i", "0"}, "out of range"},
		{"gid", []string{"-x", "256"}, "out of range"},
		{"timeout", []string{"-timeout", "0s"}, "-timeout"},
		{"peers", []string{"a", "b"}, "one server address"},
		{"flag", []string{"-z"}, "not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := parse(tc.args, &stderr)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			var out bytes.Buffer
			require.Equal(t, 2, run(tc.args, &out, &stderr), "usage errors exit 2")
			require.Empty(t, out.String())
		})
	}
}

func TestDecode(t *testing.T) {
	good := info{qpn: 17, psn: 0xabcdef, rkey: 0x1234, addr: 0x7f0000001000, mtu: 3, gid: [16]byte{0xfe, 0x80, 15: 1}}
	got, err := decode(good.encode())
	require.NoError(t, err)
	require.Equal(t, good, got)
	bad := func(f func(b []byte) []byte) []byte { return f(good.encode()) }
	for _, tc := range []struct {
		name string
		b    []byte
		err  string
	}{
		{"short", bad(func(b []byte) []byte { return b[:infoLen-1] }), "bytes, want"},
		{"long", bad(func(b []byte) []byte { return append(b, 0) }), "bytes, want"},
		{"magic", bad(func(b []byte) []byte { b[0] ^= 1; return b }), "magic"},
		{"qpn", bad(func(b []byte) []byte { b[4] = 1; return b }), "out of range"},
		{"zero qpn", bad(func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }), "out of range"},
		{"psn", bad(func(b []byte) []byte { b[8] = 1; return b }), "out of range"},
		{"mtu", bad(func(b []byte) []byte { b[27] = 9; return b }), "MTU"},
		{"addr", bad(func(b []byte) []byte { copy(b[16:24], make([]byte, 8)); return b }), "address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode(tc.b)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// FuzzDecode: the peer's bytes never panic the parser, and what it
// accepts encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(info{qpn: 1, psn: 2, rkey: 3, addr: 4, mtu: 5}.encode())
	f.Add(make([]byte, infoLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := decode(b)
		if err == nil && !bytes.Equal(i.encode(), b) {
			t.Fatalf("decode(%x) = %+v encodes to %x", b, i, i.encode())
		}
	})
}

// TestRDMAFloorPingPong runs both sides in this process on the test's
// RDMA device (the Soft-RoCE VM: testbed/rxe/ci.sh) and checks the
// report: every round trip took time, the table has ib_write_lat's
// columns.
func TestRDMAFloorPingPong(t *testing.T) {
	if err := rdma.Available(); err != nil {
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" {
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but: %v", err)
		}
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	gid := os.Getenv("GXFER_RDMA_GID")
	if gid == "" {
		gid = "0"
	}
	args := []string{"-d", os.Getenv("GXFER_RDMA_DEVICE"), "-x", gid, "-n", "300", "-s", "64", "-p", strconv.Itoa(port), "-timeout", "30s"}
	p, err := parse(args, os.Stderr)
	require.NoError(t, err)
	srv := make(chan error, 1)
	go func() {
		_, err := pingPong(p, ln)
		srv <- err
	}()
	var out, stderr bytes.Buffer
	rc := run(append(args, "127.0.0.1"), &out, &stderr)
	require.NoError(t, <-srv, "server")
	require.Equal(t, 0, rc, "client: %s", stderr.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	require.Contains(t, lines[0], "t_typical[usec]")
	f := strings.Fields(lines[1])
	require.Len(t, f, 9, lines[1])
	require.Equal(t, []string{"64", "300"}, f[:2])
	for _, s := range f[2:] {
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		require.Greater(t, v, 0.0, lines[1])
	}
	min, _ := strconv.ParseFloat(f[2], 64)
	max, _ := strconv.ParseFloat(f[3], 64)
	require.LessOrEqual(t, min, max)
}
