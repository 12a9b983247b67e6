package rdma_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/rdma"
)

// TestDeviceCloseFlushesBeforeDeregistering: Device.Close with a large
// RDMA write in flight whose memory regions were registered after its
// queue pairs (as a registration cache does) must stop the queue pairs
// first: the write ends flushed (or done), never with an access error
// from the NIC meeting a region Close already deregistered under it.
func TestDeviceCloseFlushesBeforeDeregistering(t *testing.T) {
	needDevice(t)
	base := verbs.Live()
	d, err := rdma.Open(deviceName())
	require.NoError(t, err)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq, err := d.NewCQ(rdma.CQConfig{})
	require.NoError(t, err)
	cfg := rdma.QPConfig{SendCQ: cq, GIDIndex: gidIndex()}
	a, err := pd.NewQP(cfg)
	require.NoError(t, err)
	b, err := pd.NewQP(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))

	const n = 64 << 20 // about two seconds on Soft-RoCE under TCG
	src, err := rdma.NewBuffer(n)
	require.NoError(t, err)
	defer src.Close()
	dst, err := rdma.NewBuffer(n)
	require.NoError(t, err)
	defer dst.Close()
	srcMR, err := pd.Register(src.Bytes(), rdma.AccessLocalWrite)
	require.NoError(t, err)
	dstMR, err := pd.Register(dst.Bytes(), 0)
	require.NoError(t, err)

	col := newCollector(1)
	_, err = a.Post([]rdma.WR{{Op: rdma.OpWrite, Local: []rdma.Seg{srcMR.Seg(0, n)}, Remote: dstMR.Remote().At(0), Done: col}})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	c := col.wait(t, 1)[0]
	t.Logf("the write ended with %v", c.Err)
	if c.Err != nil {
		assert.ErrorIs(t, c.Err, rdma.ErrFlushed, "the write met a deregistered region")
	}
	assert.Equal(t, rdma.Counts{}, d.Counts())
	assert.Equal(t, base, verbs.Live())
}

// TestQPCloseSweepsAfterDestroy: a QP.Close that gives up waiting for its
// flush (FlushTimeout) ends the work requests still outstanding with
// ErrClosed, telling their owners that the memory is theirs again: by then
// the QP must be destroyed, so that the NIC no longer reaches that memory.
func TestQPCloseSweepsAfterDestroy(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{Manual: true}) // the flush is never progressed: Close sweeps
	a, b := e.pair(t)
	defer b.Close()
	const n = 16 << 20
	src, dst := e.mem(t, n), e.mem(t, n)
	old := rdma.FlushTimeout
	rdma.FlushTimeout = time.Nanosecond
	defer func() { rdma.FlushTimeout = old }()

	type seen struct {
		err error
		qps int
	}
	got := make(chan seen, 1)
	done := rdma.CompleterFunc(func(c rdma.Completion) { got <- seen{c.Err, e.d.Counts().QPs} })
	_, err := a.Post([]rdma.WR{{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(0, n)}, Remote: dst.mr.Remote().At(0), Done: done}})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	s := <-got
	require.ErrorIs(t, s.err, rdma.ErrClosed)
	assert.Equal(t, 1, s.qps, "the Completer ran while the QP still existed")
}
