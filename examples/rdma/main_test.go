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
	user, owner, nics := rdmaConfigs()
	var out bytes.Buffer
	err := run(&out, user, owner, nil)
	skipWithoutRDMA(t, err)
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

// TestRunRDMACatchesMovedBytes: the round trip's check sees bytes that
// came back at the wrong offset (the peer's host buffer shifted by 256 B
// between the Put and the Get; the example's old pattern repeated every
// 256 B, so this passed as verified).
func TestRunRDMACatchesMovedBytes(t *testing.T) {
	user, owner, _ := rdmaConfigs()
	shift := func(host *engine.Buffer) {
		b := host.Bytes()
		copy(b[256:], b[:len(b)-256])
	}
	var out bytes.Buffer
	err := run(&out, user, owner, shift)
	skipWithoutRDMA(t, err)
	require.ErrorContains(t, err, "peer's host memory: data differs")
}

// rdmaConfigs are the engines' RDMA settings from the testbed's
// environment: one device (GXFER_RDMA_DEVICE, GXFER_RDMA_GID), or the
// NICs of each side (GXFER_RDMA_NICS, "A0,A1/B0,B1": nics true).
func rdmaConfigs() (user, owner engine.RDMAConfig, nics bool) {
	gid, _ := strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	user = engine.RDMAConfig{Device: os.Getenv("GXFER_RDMA_DEVICE"), GIDIndex: gid}
	owner = user
	a, b, nics := strings.Cut(os.Getenv("GXFER_RDMA_NICS"), "/")
	if nics {
		user.Device, user.Devices = "", strings.Split(a, ",")
		owner.Device, owner.Devices = "", strings.Split(b, ",")
	}
	return user, owner, nics
}

// skipWithoutRDMA skips when run found no RDMA device, unless the
// testbed requires one (GXFER_REQUIRE_RDMA=1).
func skipWithoutRDMA(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, errNoRDMA) && os.Getenv("GXFER_REQUIRE_RDMA") != "1" {
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %v", err)
	}
}
