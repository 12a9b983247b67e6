package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), "127.0.0.1:0", false, &out))
	s := out.String()
	require.Regexp(t, `serving http://127\.0\.0\.1:\d+/metrics`, s)
	require.Regexp(t, regexp.MustCompile(`(?m)^gxfer_transport_ops_completed_total\{.*\} 15$`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^gxfer_transport_bytes_total\{.*\} 983040$`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^gxfer_endpoint_puts_total\{.*\} 10$`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^gxfer_endpoint_gets_total\{.*\} 5$`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^gxfer_transport_op_latency_seconds_count\{.*\} 15$`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^gxfer_transport_op_errors_total\{.*kind="peer".*\} 0$`), s)
}
