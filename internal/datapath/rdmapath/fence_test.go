package rdmapath

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/rdma"
)

// TestFenceState: a queue pair's writes are noted after they are posted
// (the last remote, at most fenceRead bytes of it), taken once by a
// fence, and put back by a fence that did not happen unless a newer
// write was noted meanwhile. (The READ itself needs a device: the engine's
// TestRDMAFence, in the Soft-RoCE VM.)
func TestFenceState(t *testing.T) {
	var cn conn
	_, _, ok := cn.takeWrite()
	require.False(t, ok, "nothing written")
	cn.noteWrite(rdma.RemoteAddr{Addr: 0x1000, RKey: 7}, 0)
	_, _, ok = cn.takeWrite()
	require.False(t, ok, "an empty write needs no fence")

	cn.noteWrite(rdma.RemoteAddr{Addr: 0x1000, RKey: 7}, 3)
	cn.noteWrite(rdma.RemoteAddr{Addr: 0x2000, RKey: 8}, 1<<20)
	r, n, ok := cn.takeWrite()
	require.True(t, ok)
	require.Equal(t, rdma.RemoteAddr{Addr: 0x2000, RKey: 8}, r, "the last write's remote")
	require.Equal(t, uint64(fenceRead), n)
	_, _, ok = cn.takeWrite()
	require.False(t, ok, "taken once")

	cn.restoreWrite(r, n)
	r2, n2, ok := cn.takeWrite()
	require.True(t, ok)
	require.Equal(t, r, r2)
	require.Equal(t, n, n2)

	cn.noteWrite(rdma.RemoteAddr{Addr: 0x3000, RKey: 9}, 2)
	cn.restoreWrite(r, n)
	r3, n3, _ := cn.takeWrite()
	require.Equal(t, rdma.RemoteAddr{Addr: 0x3000, RKey: 9}, r3, "a newer write wins over a restored fence")
	require.Equal(t, uint64(2), n3)
}

// TestFenceNothingWritten: a fence on queue pairs that wrote nothing posts
// nothing and makes no scratch; a closed transport makes none either.
func TestFenceNothingWritten(t *testing.T) {
	p, _, env := testPath(time.Minute)
	p.conns = []*conn{{}, {}}
	require.NoError(t, p.Fence(context.Background()))
	require.Nil(t, p.t.scratch)

	require.NoError(t, p.t.acquireScratch())
	require.NotNil(t, p.t.scratch)
	p.t.scratch.Release()
	require.NoError(t, p.t.freeScratch())
	require.ErrorIs(t, p.t.acquireScratch(), gxerr.Closed)
	env.Wait()
}
