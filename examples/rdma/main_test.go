package main

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestRunRDMA needs an RDMA device: it skips without one, saying why;
// testbed/rxe/ci.sh runs it in the Soft-RoCE VM (GXFER_REQUIRE_RDMA=1),
// once with one device and once with two NICs per side
// (GXFER_RDMA_NICS="rxe0,rxe2/rxe1,rxe3", a VM booted with -n veth2).
func TestRunRDMA(t *testing.T) {
	gid, _ := strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	user := engine.RDMAConfig{Device: os.Getenv("GXFER_RDMA_DEVICE"), GIDIndex: gid}
	owner := user
	a, b, nics := strings.Cut(os.Getenv("GXFER_RDMA_NICS"), "/")
	if nics {
		user.Device, user.Devices = "", strings.Split(a, ",")
		owner.Device, owner.Devices = "", strings.Split(b, ",")
	}
	var out bytes.Buffer
	err := run(&out, user, owner)
	if errors.Is(err, errNoRDMA) && os.Getenv("GXFER_REQUIRE_RDMA") != "1" {
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %v", err)
	}
	require.NoError(t, err)
	t.Log(out.String())
	require.Contains(t, out.String(), "connected over rdma")
	require.Contains(t, out.String(), "peer's host memory: 4 MiB put and got back: verified")
	require.Contains(t, out.String(), "peer's gaudi0 memory: 4 MiB put and got back: verified")
	require.Contains(t, out.String(), "this side's gaudi0 memory: 4 MiB put into the peer's host memory and got back: verified")
	require.Contains(t, out.String(), "0 bytes on the TCP connection")
	require.Contains(t, out.String(), "binding: 1000 puts of 8 B streamed with PutN")
	if nics {
		require.Contains(t, out.String(), "(the host transfers were sliced, the staged chunks took turns)")
	}
}
