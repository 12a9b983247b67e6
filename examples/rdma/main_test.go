package main

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestRunRDMA needs an RDMA device: it skips without one, saying why;
// testbed/rxe/ci.sh runs it in the Soft-RoCE VM (GXFER_REQUIRE_RDMA=1).
func TestRunRDMA(t *testing.T) {
	gid, _ := strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	var out bytes.Buffer
	err := run(&out, engine.RDMAConfig{Device: os.Getenv("GXFER_RDMA_DEVICE"), GIDIndex: gid})
	if errors.Is(err, errNoRDMA) && os.Getenv("GXFER_REQUIRE_RDMA") != "1" {
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %v", err)
	}
	require.NoError(t, err)
	t.Log(out.String())
	require.Contains(t, out.String(), "connected over rdma")
	require.Contains(t, out.String(), "peer's host memory: 4 MiB put and got back: verified")
	require.Contains(t, out.String(), "peer's gaudi0 memory: 4 MiB put and got back: verified")
	require.Contains(t, out.String(), "0 bytes on the TCP connection")
	require.Contains(t, out.String(), "binding: 1000 puts of 8 B streamed with PutN")
}
