package rdma_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/rdma"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	testutil.Main(m)
}

// needDevice skips unless an RDMA device exists ("no RDMA device:
// libibverbs found, 0 devices" / "libibverbs not installed: dlopen ...").
// With GXFER_REQUIRE_RDMA=1 (CI, inside the Soft-RoCE VM) it fails instead.
func needDevice(t testing.TB) {
	t.Helper()
	if err := rdma.Available(); err != nil {
		require.ErrorIs(t, err, rdma.ErrUnavailable)
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" {
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but: %v", err)
		}
		t.Skipf("needs an RDMA device: %v", err)
	}
}

// deviceName is $GXFER_RDMA_DEVICE or "" (the first device).
func deviceName() string { return os.Getenv("GXFER_RDMA_DEVICE") }

// gidIndex is $GXFER_RDMA_GID or 0 (rxe on a dummy netdev: the IPv6
// link-local RoCE v2 GID).
func gidIndex() int {
	n, _ := strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	return n
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is an open device with a PD and a CQ, closed at cleanup, after which
// nothing created through internal/verbs may remain.
type env struct {
	d  *rdma.Device
	pd *rdma.PD
	cq *rdma.CQ
}

func newEnv(t testing.TB, cfg rdma.CQConfig) *env {
	t.Helper()
	needDevice(t)
	base := verbs.Live()
	d, err := rdma.Open(deviceName())
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, d.Close())
		assert.Equal(t, rdma.Counts{}, d.Counts())
		assert.Equal(t, base, verbs.Live(), "verbs objects left after Device.Close")
	})
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq, err := d.NewCQ(cfg)
	require.NoError(t, err)
	return &env{d: d, pd: pd, cq: cq}
}

func (e *env) qpConfig() rdma.QPConfig {
	return rdma.QPConfig{SendCQ: e.cq, GIDIndex: gidIndex(), MaxInline: 64}
}

// pair returns two connected QPs.
func (e *env) pair(t testing.TB) (a, b *rdma.QP) {
	t.Helper()
	return e.pairWith(t, e.qpConfig())
}

func (e *env) pairWith(t testing.TB, cfg rdma.QPConfig) (a, b *rdma.QP) {
	t.Helper()
	a, err := e.pd.NewQP(cfg)
	require.NoError(t, err)
	b, err = e.pd.NewQP(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	return a, b
}

// mem is a registered buffer.
type mem struct {
	buf *rdma.Buffer
	b   []byte
	mr  *rdma.MR
}

func (e *env) mem(t testing.TB, n int) *mem {
	t.Helper()
	buf, err := rdma.NewBuffer(n)
	require.NoError(t, err)
	mr, err := e.pd.Register(buf.Bytes(), 0)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, mr.Close())
		assert.NoError(t, buf.Close())
	})
	return &mem{buf: buf, b: buf.Bytes(), mr: mr}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*131+i>>11) ^ seed
	}
}

// collector gathers completions from the CQ goroutine.
type collector chan rdma.Completion

func newCollector(n int) collector { return make(collector, n) }

func (c collector) Complete(x rdma.Completion) { c <- x }

func (c collector) wait(t testing.TB, n int) []rdma.Completion {
	t.Helper()
	out := make([]rdma.Completion, 0, n)
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case x := <-c:
			out = append(out, x)
		case <-timeout:
			t.Fatalf("timed out with %d/%d completions", len(out), n)
		}
	}
	return out
}
