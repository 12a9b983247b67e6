package rdmapath

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/rdma"
)

// The tests here post on real queue pairs: on a machine without an RDMA
// device they skip, saying why; testbed/rxe/go-exec-in-vm.sh runs them in
// the Soft-RoCE VM (GXFER_REQUIRE_RDMA=1 makes a missing device fail them).

func needVerbs(t *testing.T) {
	t.Helper()
	if err := rdma.Available(); err != nil {
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" {
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but: %v", err)
		}
		t.Skipf("needs an RDMA device (runs in the Soft-RoCE VM: testbed/rxe/ci.sh): %v", err)
	}
}

// openTest opens a Transport on the test's RDMA device ($GXFER_RDMA_DEVICE,
// GID $GXFER_RDMA_GID), closed at the end of the test.
func openTest(t *testing.T, cfg Config) *Transport {
	t.Helper()
	needVerbs(t)
	cfg.Device = os.Getenv("GXFER_RDMA_DEVICE")
	cfg.GIDIndex, _ = strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	tr, err := Open(&dptest.Env{}, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, tr.Close())
		require.NoError(t, tr.Finish())
	})
	return tr
}

// loopPath is a Path with one queue pair on tr's first NIC, connected to
// another queue pair of that NIC (closed with it at the end of the test).
func loopPath(t *testing.T, tr *Transport) *Path {
	t.Helper()
	p, q := bareConn(t, tr), bareConn(t, tr)
	a, b := p.conns[0], q.conns[0]
	require.NoError(t, a.qp.Connect(b.qp.Endpoint()))
	require.NoError(t, b.qp.Connect(a.qp.Endpoint()))
	return p
}

// bareConn is a Path with one queue pair on tr's first NIC, not connected
// (closed at the end of the test).
func bareConn(t *testing.T, tr *Transport) *Path {
	t.Helper()
	a, err := tr.nics[0].newConn()
	require.NoError(t, err)
	t.Cleanup(a.close)
	return &Path{t: tr, c: newFakeCtrl(tr.env), env: tr.env, conns: []*conn{a}}
}

// testMR registers n bytes on tr's first NIC for local and remote access.
func testMR(t *testing.T, tr *Transport, n int) ([]byte, *rdma.MR) {
	t.Helper()
	b := make([]byte, n)
	mr, err := tr.nics[0].pd.Register(b, rdma.AccessDefault)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mr.Close()) })
	return b, mr
}

// wrDone is the Completer of a test's work requests: it gives the send
// credit and the CQ entry back (as op.Complete does) and reports the
// result on ch.
type wrDone struct {
	cn *conn
	ch chan error
}

func (d wrDone) Complete(c rdma.Completion) {
	d.cn.put(1)
	d.ch <- c.Err
}

// waitDone waits for n results on ch (each nil), or for ctx to end.
func waitDone(ctx context.Context, t *testing.T, ch <-chan error, n int) {
	t.Helper()
	for i := range n {
		select {
		case err := <-ch:
			require.NoError(t, err, "work request %d", i)
		case <-ctx.Done():
			t.Fatalf("%d of %d work requests completed: %v", i, n, ctx.Err())
		}
	}
}
