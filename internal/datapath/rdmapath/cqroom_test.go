package rdmapath

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/rdma"
)

// waitSignal is a context that reports the first call of its Done: a post
// calls it only once it has to wait.
type waitSignal struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *waitSignal) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// TestPostWaitsForCQRoom: the NIC's completion queue is shared by every
// endpoint's queue pair; while the work requests of others fill it, a
// post on another endpoint waits for room (bounded by its ctx) instead of
// failing with ErrQueueFull. (Before, once the endpoints' send queues
// held as many work requests as the CQ has entries, every Put and Get on
// any other endpoint failed with ErrQueueFull, whatever Config.QueueFull
// said: one peer with many endpoints locked the others out.) The CQ here
// has the entries of one endpoint (the real one, cqSize, those of 128),
// filled by sends the peer's queue pair cannot take yet (no receive
// posted: they wait, receiver not ready, until one is).
func TestPostWaitsForCQRoom(t *testing.T) {
	tr := openTest(t, Config{cqSize: maxSend})
	n := tr.nics[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The busy endpoint: its queue pair's peer is on a CQ of its own.
	busy := bareConn(t, tr)
	cq, err := n.dev.NewCQ(rdma.CQConfig{Size: maxSend})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cq.Close()) })
	sink, err := n.pd.NewQP(rdma.QPConfig{SendCQ: cq, MaxSend: 1, MaxRecv: maxSend, MaxSendSGE: 1, MaxRecvSGE: 1,
		Port: n.port, GIDIndex: n.gidIndex})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sink.Close()) })
	bc := busy.conns[0]
	require.NoError(t, bc.qp.Connect(sink.Endpoint()))
	require.NoError(t, sink.Connect(bc.qp.Endpoint()))
	sends := make([]rdma.WR, maxSend)
	busyDone := wrDone{cn: bc, ch: make(chan error, maxSend)}
	for i := range sends {
		sends[i] = rdma.WR{Op: rdma.OpSend, Done: busyDone}
	}
	posted, err := busy.post(ctx, bc, sends, nil)
	require.NoError(t, err)
	require.Equal(t, maxSend, posted)

	// Another endpoint's write, with room in its own send queue.
	other := loopPath(t, tr)
	oc := other.conns[0]
	buf, mr := testMR(t, tr, 16)
	copy(buf, "8 bytes!")
	otherDone := wrDone{cn: oc, ch: make(chan error, 1)}
	w := rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{mr.Seg(0, 8)}, Remote: rdma.RemoteAddr{Addr: mr.Addr() + 8, RKey: mr.RKey()}, Done: otherDone}
	wctx := &waitSignal{Context: ctx, waiting: make(chan struct{})}
	res := make(chan error, 1)
	go func() {
		_, err := other.post(wctx, oc, []rdma.WR{w}, nil)
		res <- err
	}()
	select {
	case err := <-res:
		require.NoError(t, err, "the post did not wait for room in the CQ")
	case <-wctx.waiting:
	}
	// Receives let the sends complete: their CQ entries come back.
	recvs := make([]rdma.RecvWR, maxSend)
	got, err := sink.PostRecv(recvs)
	require.NoError(t, err)
	require.Equal(t, maxSend, got)
	select {
	case err := <-res:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the post still waits with the CQ drained")
	}
	waitDone(ctx, t, busyDone.ch, maxSend)
	waitDone(ctx, t, otherDone.ch, 1)
	require.Equal(t, "8 bytes!", string(buf[8:]))
}
