package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"server", []string{"-server", "-addr", "127.0.0.1:1"}, ""},
		{"client", []string{"-addr", "127.0.0.1:1", "-s", "16777216", "-O", "1", "-time", "1s"}, ""},
		{"noaddr", []string{"-s", "8"}, "-addr is required"},
		{"small", []string{"-addr", "a:1", "-s", "0"}, "from 1 to"},
		{"large", []string{"-addr", "a:1", "-s", "268435457"}, "from 1 to"},
		{"window", []string{"-addr", "a:1", "-O", "65"}, "from 1 to 64"},
		{"time", []string{"-addr", "a:1", "-time", "0s"}, "must be positive"},
		{"warm", []string{"-addr", "a:1", "-w", "-1"}, "not be negative"},
		{"args", []string{"-addr", "a:1", "x"}, "unexpected arguments"},
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

// serveOne receives one run on a loopback listener; its error arrives on
// the channel.
func serveOne(t *testing.T) (string, <-chan error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		errc <- serve(c, 10*time.Second)
	}()
	return ln.Addr().String(), errc
}

// TestRun: a run through the command line at sizes of one byte, one frame
// and several frames with a short last one, one put and several
// outstanding: every byte verified by the receiver, the result's fields
// consistent.
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		size, window int
	}{{1, 1}, {4096, 4}, {maxFrame, 2}, {2*maxFrame + 3, 4}} {
		addr, errc := serveOne(t)
		var out, stderr bytes.Buffer
		code := run([]string{"-addr", addr, "-s", strconv.Itoa(tc.size), "-O", strconv.Itoa(tc.window), "-time", "50ms", "-w", "3"}, &out, &stderr)
		require.Equal(t, 0, code, stderr.String())
		require.NoError(t, <-errc)
		var r result
		require.NoError(t, json.Unmarshal(out.Bytes(), &r))
		require.True(t, r.Verified)
		require.Equal(t, tc.size, r.Size)
		require.Equal(t, tc.window, r.Window)
		require.Positive(t, r.Puts)
		require.InDelta(t, float64(r.Puts)*float64(tc.size)/r.Seconds/(1<<20), r.MBs, r.MBs*1e-9)
		require.NotNil(t, r.CPU)
	}
}

// TestServeRefuses: a receiver given malformed bytes stops with an error
// that says what was wrong, and writes nothing out of bounds.
func TestServeRefuses(t *testing.T) {
	head := func(n int, id uint32, off int) []byte {
		h := make([]byte, headSize)
		putHead(h, n, id, off)
		return h
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"magic", []byte("NOTFLOOR\x01\x00\x00\x00\x00\x00\x00\x00"), "bad hello"},
		{"size0", hello(0), "put size 0"},
		{"big", cat(hello(8), head(maxFrame+1, 1, 0)), "at most"},
		{"overrun", cat(hello(8), head(9, 1, 0)), "overruns"},
		{"offset", cat(hello(8), head(4, 1, 4)), "expected 0"},
		{"mixed", cat(hello(8), head(4, 1, 0), []byte("abcd"), head(4, 2, 4)), "inside put 1"},
		{"midend", cat(hello(8), head(4, 1, 0), []byte("abcd"), head(0, 0, 0)), "middle of put 1"},
		{"short", cat(hello(8), head(4, 1, 0), []byte("ab")), "payload of put 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, errc := serveOne(t)
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			_, err = c.Write(tc.in)
			require.NoError(t, err)
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			require.ErrorContains(t, <-errc, tc.err)
			require.NoError(t, c.Close())
		})
	}
}

// TestVerifyFails: a destination that does not hold the pattern is
// answered as not verified, and the sender fails.
func TestVerifyFails(t *testing.T) {
	addr, errc := serveOne(t)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	h := make([]byte, headSize)
	putHead(h, 4, 7, 0)
	_, err = c.Write(bytes.Join([][]byte{hello(4), h, []byte("xxxx")}, nil))
	require.NoError(t, err)
	got := make([]byte, headSize)
	_, err = c.Read(got)
	require.NoError(t, err)
	want := make([]byte, headSize)
	reply(want, 7, 0)
	require.Equal(t, want, got, "the put's completion")
	putHead(h, 0, endID, 0)
	_, err = c.Write(h)
	require.NoError(t, err)
	_, err = c.Read(got)
	require.NoError(t, err)
	reply(want, endID, 0)
	require.Equal(t, want, got, "not verified")
	require.NoError(t, <-errc)
}

// FuzzFrame: any sequence of frame headers from a sender is either
// refused or lands inside the destination, a put's frames in order.
func FuzzFrame(f *testing.F) {
	h := make([]byte, headSize)
	putHead(h, 3, 1, 0)
	f.Add(uint16(5), bytes.Repeat(h, 3))
	f.Add(uint16(1), make([]byte, 40))
	f.Fuzz(func(t *testing.T, size uint16, in []byte) {
		r := &receiver{dst: make([]byte, int(size)+1)}
		for ; len(in) >= headSize; in = in[headSize:] {
			next := r.next
			dst, _, last, end, err := r.frame(in[:headSize])
			if err != nil {
				return
			}
			if end {
				if next != 0 {
					t.Fatalf("end accepted in the middle of a put")
				}
				continue
			}
			if len(dst) == 0 || len(dst) > maxFrame || next+len(dst) > len(r.dst) {
				t.Fatalf("frame of %d bytes at %d in a %d-byte destination", len(dst), next, len(r.dst))
			}
			if last != (next+len(dst) == len(r.dst)) {
				t.Fatalf("last %v at %d+%d of %d", last, next, len(dst), len(r.dst))
			}
		}
	})
}

func FuzzHello(f *testing.F) {
	f.Add(hello(1))
	f.Add(hello(maxSize + 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		size, err := parseHello(in)
		if err == nil && (size < 1 || size > maxSize) {
			t.Fatalf("size %d accepted", size)
		}
	})
}
