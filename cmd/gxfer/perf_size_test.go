package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPerfPutLatTooSmall: put_lat between host buffers carries its
// sequence number in the message's last 8 bytes, so a smaller -s is a
// usage error before anything is measured (exit status 2, one line,
// nothing on stdout), whether put_lat was named or chosen by default;
// with Gaudi memory at an end (no sequence number) any size runs.
func TestPerfPutLatTooSmall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path, srvCode, srvOut := startServer(t, ctx)
	x := "unix:" + path
	for _, args := range [][]string{
		{"perf", "-x", x, "-t", "put_lat", "-s", "4", "-n", "5"},
		{"perf", "-x", x, "-t", "put_bw,put_lat", "-s", "8,1", "-n", "5"},
		{"perf", "-x", x, "-s", "7", "-n", "5"},
	} {
		t.Run(strings.Join(args[3:], " "), func(t *testing.T) {
			code, out, errs := gxfer(t, args...)
			assert.Equal(t, exitUsage, code, errs)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			assert.Contains(t, errs, "put_lat needs messages of at least 8 bytes")
		})
	}
	code, out, errs := gxfer(t, "perf", "-x", x, "-t", "put_lat", "-m", "gaudi,host", "-s", "4", "-n", "5")
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `(?m)^\s+4B\s+5\s`, out)
	cancel()
	require.Equal(t, exitOK, <-srvCode, srvOut.String())
}
