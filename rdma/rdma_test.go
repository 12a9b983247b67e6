package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/rdma"
)

// TestAvailable runs everywhere: RDMA is usable, or the reason says why.
func TestAvailable(t *testing.T) {
	err := rdma.Available()
	if err != nil {
		require.ErrorIs(t, err, rdma.ErrUnavailable)
		t.Logf("RDMA unavailable here (tests that need it skip): %v", err)
		return
	}
	names, err := rdma.DeviceNames()
	require.NoError(t, err)
	t.Logf("devices: %v", names)
}

func TestBuffer(t *testing.T) {
	b, err := rdma.NewBuffer(5000)
	require.NoError(t, err)
	require.Len(t, b.Bytes(), 5000)
	assert.Zero(t, uintptr(unsafe.Pointer(&b.Bytes()[0]))%uintptr(os.Getpagesize()))
	b.Bytes()[4999] = 1
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	assert.Nil(t, b.Bytes())
	_, err = rdma.NewBuffer(0)
	assert.ErrorIs(t, err, rdma.ErrInvalid)
}

func TestDeviceAndPorts(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	d := e.d
	assert.NotEmpty(t, d.Name())
	assert.GreaterOrEqual(t, d.Ports(), 1)
	pi, err := d.Port(1)
	require.NoError(t, err)
	assert.Equal(t, rdma.PortActive, pi.State)
	assert.NotZero(t, pi.ActiveMTU.Bytes())
	gids, err := d.GIDs(1)
	require.NoError(t, err)
	require.NotEmpty(t, gids)
	g, err := d.GID(1, gids[0].Index)
	require.NoError(t, err)
	assert.Equal(t, g, gids[0].GID)
	t.Logf("%s port 1: %v, MTU %v (max %v), link %v, LID %d, %d GID slots", d.Name(), pi.State, pi.ActiveMTU, pi.MaxMTU, pi.LinkLayer, pi.LID, pi.GIDTableLen)
	for _, ge := range gids {
		t.Logf("  GID[%d] %v %q on %q", ge.Index, ge.GID, ge.Type, ge.Netdev)
	}
	if strings.HasPrefix(d.Name(), "rxe") {
		assert.Equal(t, rdma.LinkLayerEthernet, pi.LinkLayer)
		assert.Equal(t, "RoCE v2", gids[0].Type)
	}
	_, err = d.Port(0)
	assert.ErrorIs(t, err, rdma.ErrInvalid)
	a := d.Attr()
	assert.Positive(t, a.MaxQP)
}

// TestWriteReadSizes RDMA-writes and RDMA-reads 1 B to 16 MiB between two
// connected QPs and checks every byte.
func TestWriteReadSizes(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	a, _ := e.pair(t)
	const max = 16 << 20
	src, dst, back := e.mem(t, max), e.mem(t, max+4096), e.mem(t, max)
	fill(src.b, 0x5a)
	ctx := testCtx(t)
	for _, n := range []int{1, 2, 7, 64, 4095, 4096, 4097, 65536, 1<<20 + 13, max} {
		off := uint64(n % 4093) // unaligned remote offsets too
		seed := byte(n)
		fill(src.b[:n], seed)
		c, err := a.Do(ctx, rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(0, uint64(n))}, Remote: dst.mr.Remote().At(off)})
		require.NoError(t, err, "write %d", n)
		assert.Equal(t, rdma.OpWrite, c.Op)
		require.True(t, bytes.Equal(src.b[:n], dst.b[off:off+uint64(n)]), "write of %d bytes differs", n)

		clear(back.b[:n])
		_, err = a.Do(ctx, rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{back.mr.Seg(0, uint64(n))}, Remote: dst.mr.Remote().At(off)})
		require.NoError(t, err, "read %d", n)
		require.True(t, bytes.Equal(src.b[:n], back.b[:n]), "read of %d bytes differs", n)
	}
}

// TestBatchedPost posts 100 writes (more than one 64-WC poll batch) in one
// Post call, each with its own completer, to disjoint ranges.
func TestBatchedPost(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	a, _ := e.pairWith(t, rdma.QPConfig{SendCQ: e.cq, GIDIndex: gidIndex(), MaxSend: 128})
	src, dst := e.mem(t, 100*4096), e.mem(t, 100*4096)
	fill(src.b, 1)
	col := newCollector(100)
	wrs := make([]rdma.WR, 100)
	for i := range wrs {
		o := uint64(i * 4096)
		wrs[i] = rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(o, 4096)}, Remote: dst.mr.Remote().At(o), Done: col}
	}
	before := e.cq.Stats()
	n, err := a.Post(wrs)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	for _, c := range col.wait(t, 100) {
		require.NoError(t, c.Err)
	}
	assert.Equal(t, src.b, dst.b)
	st := e.cq.Stats()
	assert.Equal(t, uint64(100), st.Completions-before.Completions)
	assert.Zero(t, st.InFlight)
	requireNoOutstanding(t, a)
	t.Logf("100 completions in %d polls (%d empty), %d events", st.Polls-before.Polls, st.EmptyPolls-before.EmptyPolls, st.Events-before.Events)

	// Queue depth is enforced before anything is posted.
	_, err = a.Post(make([]rdma.WR, 129))
	assert.ErrorIs(t, err, rdma.ErrInvalid) // op 0
	big := make([]rdma.WR, 129)
	for i := range big {
		big[i] = rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(0, 8)}, Remote: dst.mr.Remote().At(0)}
	}
	_, err = a.Post(big)
	assert.ErrorIs(t, err, rdma.ErrQueueFull)
	// Bad segments are refused.
	_, err = a.Post([]rdma.WR{{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(uint64(len(src.b))-4, 8)}}})
	assert.ErrorIs(t, err, rdma.ErrInvalid)
	_, err = a.Post([]rdma.WR{{Op: rdma.OpSend, Inline: true, Local: []rdma.Seg{src.mr.Seg(0, 65)}}})
	assert.ErrorIs(t, err, rdma.ErrInvalid)
}

// TestSendRecv exchanges small control messages: plain, inline, with
// immediate data, and an RDMA write with immediate that consumes a receive.
func TestSendRecv(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	a, b := e.pair(t)
	sbuf, rbuf, wbuf := e.mem(t, 4096), e.mem(t, 4096), e.mem(t, 4096)
	col := newCollector(8)
	var rwrs []rdma.RecvWR
	for i := 0; i < 4; i++ {
		rwrs = append(rwrs, rdma.RecvWR{Local: []rdma.Seg{rbuf.mr.Seg(uint64(i*1024), 1024)}, Done: col})
	}
	n, err := b.PostRecv(rwrs)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	msgs := []string{"hello", "inline control message", "with immediate"}
	for i, m := range msgs {
		copy(sbuf.b[i*256:], m)
	}
	ctx := testCtx(t)
	_, err = a.Do(ctx, rdma.WR{Op: rdma.OpSend, Local: []rdma.Seg{sbuf.mr.Seg(0, uint64(len(msgs[0])))}})
	require.NoError(t, err)
	_, err = a.Do(ctx, rdma.WR{Op: rdma.OpSend, Inline: true, Local: []rdma.Seg{sbuf.mr.Seg(256, uint64(len(msgs[1])))}})
	require.NoError(t, err)
	_, err = a.Do(ctx, rdma.WR{Op: rdma.OpSendImm, Imm: 0xfeedbeef, Local: []rdma.Seg{sbuf.mr.Seg(512, uint64(len(msgs[2])))}})
	require.NoError(t, err)
	copy(sbuf.b[768:], "written")
	_, err = a.Do(ctx, rdma.WR{Op: rdma.OpWriteImm, Imm: 42, Local: []rdma.Seg{sbuf.mr.Seg(768, 7)}, Remote: wbuf.mr.Remote().At(100)})
	require.NoError(t, err)

	got := col.wait(t, 4) // receives complete in order
	for i, m := range msgs {
		require.NoError(t, got[i].Err)
		assert.Equal(t, rdma.OpRecv, got[i].Op)
		assert.Equal(t, uint32(len(m)), got[i].ByteLen)
		assert.Equal(t, m, string(rbuf.b[i*1024:i*1024+len(m)]))
		assert.Equal(t, b.QPN(), got[i].QPN)
	}
	assert.False(t, got[0].HasImm)
	assert.True(t, got[2].HasImm)
	assert.Equal(t, uint32(0xfeedbeef), got[2].Imm)
	assert.True(t, got[3].HasImm)
	assert.Equal(t, uint32(42), got[3].Imm)
	assert.Equal(t, "written", string(wbuf.b[100:107]))

	// DoRecv: the synchronous twin.
	go func() { _, _ = a.Do(ctx, rdma.WR{Op: rdma.OpSend, Local: []rdma.Seg{sbuf.mr.Seg(0, 5)}}) }()
	c, err := b.DoRecv(ctx, rdma.RecvWR{Local: []rdma.Seg{rbuf.mr.Seg(0, 64)}})
	require.NoError(t, err)
	assert.Equal(t, uint32(5), c.ByteLen)

	// A zero-byte message (a pure notification).
	go func() { _, _ = a.Do(ctx, rdma.WR{Op: rdma.OpSend, Local: []rdma.Seg{sbuf.mr.Seg(0, 0)}}) }()
	c, err = b.DoRecv(ctx, rdma.RecvWR{Local: []rdma.Seg{rbuf.mr.Seg(0, 64)}})
	require.NoError(t, err)
	assert.Zero(t, c.ByteLen)
}

// TestErrorStateFlushes forces one QP into the error state: its pending
// receives and a send stuck in RNR retry fail with ErrFlushed, while
// another QP pair on the same CQ keeps working.
func TestErrorStateFlushes(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	a1, _ := e.pair(t) // b1 posts no receives: a1's send waits in RNR retry (RNRRetry 7 = forever)
	a2, b2 := e.pair(t)
	buf := e.mem(t, 1<<16)
	col := newCollector(8)
	_, err := a1.PostRecv([]rdma.RecvWR{
		{Local: []rdma.Seg{buf.mr.Seg(0, 64)}, Done: col},
		{Local: []rdma.Seg{buf.mr.Seg(64, 64)}, Done: col},
	})
	require.NoError(t, err)
	_, err = a1.Post([]rdma.WR{{Op: rdma.OpSend, Local: []rdma.Seg{buf.mr.Seg(128, 16)}, Done: col}})
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 3, a1.Outstanding())

	require.NoError(t, a1.SetError())
	st, err := a1.State()
	require.NoError(t, err)
	assert.Equal(t, rdma.QPStateError, st)
	ops := map[rdma.OpKind]int{}
	for _, c := range col.wait(t, 3) {
		require.ErrorIs(t, c.Err, rdma.ErrFlushed)
		require.ErrorIs(t, c.Err, rdma.ErrCompletion)
		var ce *rdma.CompletionError
		require.ErrorAs(t, c.Err, &ce)
		assert.Equal(t, rdma.StatusFlushed, ce.Status)
		assert.Equal(t, a1.QPN(), c.QPN)
		ops[c.Op]++
	}
	assert.Equal(t, map[rdma.OpKind]int{rdma.OpRecv: 2, rdma.OpSend: 1}, ops)
	requireNoOutstanding(t, a1)

	// The other pair is unaffected.
	fill(buf.b[4096:8192], 9)
	_, err = a2.Do(testCtx(t), rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{buf.mr.Seg(4096, 4096)}, Remote: buf.mr.Remote().At(8192)})
	require.NoError(t, err)
	assert.Equal(t, buf.b[4096:8192], buf.b[8192:12288])
	st2, err := b2.State()
	require.NoError(t, err)
	assert.Equal(t, rdma.QPStateRTS, st2)
}

// TestRemoteAccessError writes past the end of the peer's MR and with a
// wrong rkey: remote access error completions; another pair keeps working.
func TestRemoteAccessError(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	src, dst := e.mem(t, 8192), e.mem(t, 4096)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		remote rdma.RemoteAddr
	}{
		{"past the end", dst.mr.Remote().At(4096 - 8)}, // 16 bytes: 8 outside
		{"before the start", rdma.RemoteAddr{Addr: dst.mr.Addr() - 4096, RKey: dst.mr.RKey()}},
		{"wrong rkey", rdma.RemoteAddr{Addr: dst.mr.Addr(), RKey: dst.mr.RKey() ^ 0x80}},
	} {
		a, b := e.pair(t) // an access error moves both QPs to the error state
		c, err := a.Do(ctx, rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(0, 16)}, Remote: tc.remote})
		require.ErrorIs(t, err, rdma.ErrRemoteAccess, tc.name)
		assert.Equal(t, rdma.StatusRemoteAccess, c.Status, tc.name)
		t.Logf("%s: %v", tc.name, err)
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
	a, _ := e.pair(t)
	_, err := a.Do(ctx, rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{src.mr.Seg(0, 4096)}, Remote: dst.mr.Remote().At(0)})
	require.NoError(t, err)
}

// goroutineState returns the scheduler state ("IO wait", "running", ...)
// of the goroutine whose stack contains fn, or "".
func goroutineState(fn string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			hdr := g[:strings.IndexByte(g, '\n')] // goroutine 7 [IO wait]:
			if i, j := strings.IndexByte(hdr, '['), strings.IndexByte(hdr, ']'); i >= 0 && j > i {
				s := hdr[i+1 : j]
				if k := strings.IndexByte(s, ','); k >= 0 {
					s = s[:k]
				}
				return s
			}
		}
	}
	return ""
}

// TestNetpollerWakeups checks that an idle CQ's goroutine sleeps in the
// netpoller ("IO wait" on the completion channel fd), not in C and not
// polling, and that completions wake it through channel events. Each
// write waits for the goroutine to be asleep first: one still busy with
// the last completion finds the next by its re-poll after arming, without
// an event (which a slow or loaded VM made happen for 17 of 20 writes).
func TestNetpollerWakeups(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{AckEvery: 4})
	a, _ := e.pair(t)
	m := e.mem(t, 8192)
	ctx := testCtx(t)
	asleep := func() bool {
		for range 500 {
			if goroutineState("rdma.(*CQ).wait") == "IO wait" {
				return true
			}
			time.Sleep(time.Millisecond)
		}
		return false
	}
	for i := 0; i < 20; i++ {
		require.True(t, asleep(), "write %d: the CQ goroutine never slept in the netpoller", i)
		_, err := a.Do(ctx, rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(4096)})
		require.NoError(t, err)
	}
	st := e.cq.Stats()
	assert.GreaterOrEqual(t, st.Events, uint64(10), "completions should arrive through channel events: %+v", st)
	assert.GreaterOrEqual(t, st.Arms, st.Events)

	// Idle: the goroutine parks in the netpoller.
	var state string
	for i := 0; i < 100; i++ {
		if state = goroutineState("rdma.(*CQ).wait"); state == "IO wait" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, "IO wait", state, "CQ goroutine should sleep in the netpoller")
	idle := e.cq.Stats()
	time.Sleep(300 * time.Millisecond)
	after := e.cq.Stats()
	assert.LessOrEqual(t, after.Polls-idle.Polls, uint64(4), "an idle CQ must not poll (only the safety-net timeout)")
	t.Logf("after 20 writes: %+v; idle 300ms: %d polls, %d timeouts", st, after.Polls-idle.Polls, after.Timeouts-idle.Timeouts)
}

// TestBusyPoll: no channel, no events, completions still delivered.
func TestBusyPoll(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{BusyPoll: true})
	a, _ := e.pair(t)
	m := e.mem(t, 8192)
	fill(m.b[:4096], 3)
	ctx := testCtx(t)
	for i := 0; i < 20; i++ {
		_, err := a.Do(ctx, rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 4096)}, Remote: m.mr.Remote().At(4096)})
		require.NoError(t, err)
	}
	assert.Equal(t, m.b[:4096], m.b[4096:])
	st := e.cq.Stats()
	assert.True(t, st.BusyPoll)
	assert.Zero(t, st.Events)
	assert.Zero(t, st.Arms)
	assert.Greater(t, st.EmptyPolls, uint64(20))
	assert.Equal(t, "", goroutineState("rdma.(*CQ).wait"))
}

// TestSpinWindow: with a spin window the CQ polls a while before sleeping.
func TestSpinWindow(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{Spin: 2 * time.Millisecond})
	a, _ := e.pair(t)
	m := e.mem(t, 8192)
	ctx := testCtx(t)
	for i := 0; i < 10; i++ {
		_, err := a.Do(ctx, rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(4096)})
		require.NoError(t, err)
	}
	st := e.cq.Stats()
	assert.Equal(t, uint64(10), st.Completions)
	assert.Greater(t, st.EmptyPolls, uint64(0))
}

// TestCloseOrder: a PD with MRs or QPs and a CQ with QPs refuse to close;
// closing in order works and every Close is idempotent.
func TestCloseOrder(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	m := e.mem(t, 4096)
	qp, err := e.pd.NewQP(e.qpConfig())
	require.NoError(t, err)
	assert.ErrorIs(t, e.pd.Close(), rdma.ErrBusy)
	assert.ErrorIs(t, e.cq.Close(), rdma.ErrBusy)
	assert.Equal(t, rdma.Counts{PDs: 1, MRs: 1, CQs: 1, QPs: 1}, e.d.Counts())
	require.NoError(t, qp.Close())
	require.NoError(t, qp.Close())
	require.NoError(t, e.cq.Close())
	require.NoError(t, e.cq.Close())
	assert.ErrorIs(t, e.pd.Close(), rdma.ErrBusy)
	require.NoError(t, m.mr.Close())
	require.NoError(t, e.pd.Close())
	require.NoError(t, e.pd.Close())
	assert.Equal(t, rdma.Counts{}, e.d.Counts())
	_, err = qp.Post([]rdma.WR{{Op: rdma.OpWrite}})
	assert.ErrorIs(t, err, rdma.ErrClosed)
}

// TestCloseReleasesEverything builds a working set (CQs in both modes, QPs
// with pending receives, MRs), then closes only the Device: every Completer
// gets its flush, and verbs objects and file descriptors are back to the
// baseline.
func TestCloseReleasesEverything(t *testing.T) {
	needDevice(t)
	fds := testutil.OpenFDs()
	base := verbs.Live()
	threads := threadCount()

	d, err := rdma.Open(deviceName())
	require.NoError(t, err)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq1, err := d.NewCQ(rdma.CQConfig{})
	require.NoError(t, err)
	cq2, err := d.NewCQ(rdma.CQConfig{BusyPoll: true})
	require.NoError(t, err)
	buf, err := rdma.NewBuffer(1 << 20)
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.Register(buf.Bytes(), 0)
	require.NoError(t, err)
	col := newCollector(64)
	var qps []*rdma.QP
	for i := 0; i < 4; i++ {
		cfg := rdma.QPConfig{SendCQ: cq1, RecvCQ: cq2, GIDIndex: gidIndex()}
		a, err := pd.NewQP(cfg)
		require.NoError(t, err)
		b, err := pd.NewQP(cfg)
		require.NoError(t, err)
		require.NoError(t, a.Connect(b.Endpoint()))
		require.NoError(t, b.Connect(a.Endpoint()))
		_, err = a.PostRecv([]rdma.RecvWR{{Local: []rdma.Seg{mr.Seg(0, 64)}, Done: col}, {Local: []rdma.Seg{mr.Seg(64, 64)}, Done: col}})
		require.NoError(t, err)
		qps = append(qps, a, b)
	}
	_, err = pd.Register(buf.Bytes()[4096:8192], rdma.AccessLocalWrite)
	require.NoError(t, err)
	now := verbs.Live()
	assert.Equal(t, base.QPs+8, now.QPs)
	assert.Equal(t, base.MRs+2, now.MRs)
	assert.Equal(t, base.CQs+2, now.CQs)
	assert.Equal(t, base.Channels+1, now.Channels) // busy-poll CQs have none
	assert.Equal(t, rdma.Counts{PDs: 1, MRs: 2, CQs: 2, QPs: 8}, d.Counts())

	require.NoError(t, d.Close())
	for _, c := range col.wait(t, 8) {
		assert.ErrorIs(t, c.Err, rdma.ErrFlushed)
	}
	assert.Equal(t, base, verbs.Live())
	assert.Equal(t, rdma.Counts{}, d.Counts())
	assert.Empty(t, testutil.LeakedFDs(fds))
	for _, q := range qps {
		require.NoError(t, q.Close())
	}
	require.NoError(t, cq1.Close())
	require.NoError(t, mr.Close())
	require.NoError(t, pd.Close())
	require.NoError(t, d.Close())
	_, err = d.AllocPD()
	assert.ErrorIs(t, err, rdma.ErrClosed)
	_, err = d.NewCQ(rdma.CQConfig{})
	assert.ErrorIs(t, err, rdma.ErrClosed)
	t.Logf("OS threads: %d before, %d after", threads, threadCount())
}

// TestQPCloseWaitsForFlush: QP.Close returns only after every outstanding
// work request's Completer ran.
func TestQPCloseWaitsForFlush(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	qp, err := e.pd.NewQP(e.qpConfig())
	require.NoError(t, err)
	m := e.mem(t, 4096)
	col := newCollector(16)
	wrs := make([]rdma.RecvWR, 16)
	for i := range wrs {
		wrs[i] = rdma.RecvWR{Local: []rdma.Seg{m.mr.Seg(uint64(i*64), 64)}, Done: col}
	}
	_, err = qp.PostRecv(wrs) // legal in INIT
	require.NoError(t, err)
	require.NoError(t, qp.Close())
	require.Len(t, col, 16, "all completers ran before Close returned")
	for _, c := range col.wait(t, 16) {
		assert.ErrorIs(t, c.Err, rdma.ErrFlushed)
	}
}

// TestCompleterPanic: a panicking Completer is recovered and counted.
func TestCompleterPanic(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	a, _ := e.pair(t)
	m := e.mem(t, 4096)
	done := make(chan struct{})
	_, err := a.Post([]rdma.WR{
		{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(64), Done: rdma.CompleterFunc(func(rdma.Completion) { panic("boom") })},
		{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 8)}, Remote: m.mr.Remote().At(128), Done: rdma.CompleterFunc(func(rdma.Completion) { close(done) })},
	})
	require.NoError(t, err)
	<-done
	assert.Equal(t, uint64(1), e.cq.Stats().Panics)
}

func threadCount() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	return -1
}

func TestCompletionErrorIs(t *testing.T) {
	e := &rdma.CompletionError{Op: rdma.OpWrite, Status: rdma.StatusRemoteAccess, QPN: 17}
	assert.ErrorIs(t, e, rdma.ErrRemoteAccess)
	assert.ErrorIs(t, e, rdma.ErrCompletion)
	assert.False(t, errors.Is(e, rdma.ErrFlushed))
	assert.Equal(t, "rdma: RDMA write on QP 17: remote access error (status 10, vendor error 0x0)", e.Error())
}

// TestManualProgress: a Manual CQ has no goroutine; completions arrive only
// through Progress (Do progresses by itself), and QP.Close progresses the
// flushes it waits for.
func TestManualProgress(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{Manual: true})
	a, b := e.pair(t)
	m := e.mem(t, 8192)
	fill(m.b[:4096], 4)
	assert.Equal(t, "", goroutineState("rdma.(*CQ).run"))

	col := newCollector(4)
	_, err := a.Post([]rdma.WR{{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 4096)}, Remote: m.mr.Remote().At(4096), Done: col}})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, col, "nothing is delivered without Progress")
	deadline := time.Now().Add(30 * time.Second)
	for len(col) == 0 && time.Now().Before(deadline) {
		e.cq.Progress()
	}
	require.NoError(t, (<-col).Err)
	assert.Equal(t, m.b[:4096], m.b[4096:])

	_, err = a.Do(testCtx(t), rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{m.mr.Seg(4096, 8)}, Remote: m.mr.Remote().At(0)})
	require.NoError(t, err)

	_, err = b.PostRecv([]rdma.RecvWR{{Local: []rdma.Seg{m.mr.Seg(0, 64)}, Done: col}, {Local: []rdma.Seg{m.mr.Seg(64, 64)}, Done: col}})
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.Len(t, col, 2, "Close progressed the flushes")
	for _, c := range col.wait(t, 2) {
		assert.ErrorIs(t, c.Err, rdma.ErrFlushed)
	}
	st := e.cq.Stats()
	assert.True(t, st.Manual)
	assert.Zero(t, st.Events)

	_, err = e.d.NewCQ(rdma.CQConfig{Manual: true, BusyPoll: true})
	assert.ErrorIs(t, err, rdma.ErrInvalid)
	other := newEnv(t, rdma.CQConfig{})
	assert.Zero(t, other.cq.Progress(), "Progress is a no-op on a CQ with a goroutine")
}

// chainer re-posts from its Completer: the queue entry of a completed work
// request must be free by the time its Completer runs.
type chainer struct {
	qp   *rdma.QP
	wr   rdma.WR
	left int
	errs chan error
}

func (c *chainer) Complete(x rdma.Completion) {
	if x.Err != nil {
		c.errs <- x.Err
		return
	}
	if c.left--; c.left == 0 {
		c.errs <- nil
		return
	}
	if _, err := c.qp.Post([]rdma.WR{c.wr}); err != nil {
		c.errs <- err
	}
}

func TestRepostFromCompleter(t *testing.T) {
	for _, m := range []struct {
		name string
		cfg  rdma.CQConfig
	}{{"event", rdma.CQConfig{}}, {"busy", rdma.CQConfig{BusyPoll: true}}, {"spin", rdma.CQConfig{Spin: time.Millisecond}}} {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, m.cfg)
			cfg := e.qpConfig()
			cfg.MaxSend = 1 // every re-post needs the entry just completed
			a, _ := e.pairWith(t, cfg)
			buf := e.mem(t, 4096)
			c := &chainer{qp: a, left: 50, errs: make(chan error, 1)}
			c.wr = rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{buf.mr.Seg(0, 8)}, Remote: buf.mr.Remote().At(64), Done: c}
			_, err := a.Post([]rdma.WR{c.wr})
			require.NoError(t, err)
			select {
			case err := <-c.errs:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				t.Fatal("timed out")
			}
		})
	}
}

// TestTryProgress: a caller holding the CQ takes its own completions from
// a CQ that has a goroutine (event mode); meanwhile the goroutine parks
// instead of arming (no event per completion), and once the caller
// releases it arms and delivers on events again.
func TestTryProgress(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	a, _ := e.pair(t)
	m := e.mem(t, 8192)
	fill(m.b[:4096], 5)
	wr := rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 4096)}, Remote: m.mr.Remote().At(4096)}
	before := e.cq.Stats()
	const n = 200
	e.cq.Hold()
	for i := 0; i < n; i++ {
		col := newCollector(1)
		w := wr
		w.Done = col
		_, err := a.Post([]rdma.WR{w})
		require.NoError(t, err)
		deadline := time.Now().Add(30 * time.Second)
		for len(col) == 0 && time.Now().Before(deadline) {
			e.cq.TryProgress()
		}
		require.NoError(t, (<-col).Err)
	}
	e.cq.Release()
	assert.Equal(t, m.b[:4096], m.b[4096:])
	st := e.cq.Stats()
	t.Logf("%d writes, each waited for by TryProgress: %+v", n, st)
	assert.Greater(t, st.External-before.External, uint64(n/2), "most completions taken by the caller")
	assert.Less(t, st.Events-before.Events, uint64(n/4), "an event per completion would wake the goroutine for nothing")
	assert.NotZero(t, st.Parks-before.Parks)

	// Released: the goroutine arms and delivers on events again.
	mid := e.cq.Stats()
	for i := 0; i < 10; i++ {
		_, err := a.Do(testCtx(t), wr)
		require.NoError(t, err)
	}
	end := e.cq.Stats()
	assert.NotZero(t, end.Events-mid.Events, "events again once nobody holds: %+v", end)
	assert.Equal(t, mid.External, end.External)
}

// TestHold: what a holder leaves in flight when it releases is delivered
// by the CQ's goroutine, and so is a work request posted by someone else
// while it holds; Release without Hold panics.
func TestHold(t *testing.T) {
	// No safety-net wake-up within the test: only Release and posts wake
	// the goroutine.
	e := newEnv(t, rdma.CQConfig{IdleTimeout: time.Hour})
	a, _ := e.pair(t)
	m := e.mem(t, 8192)
	wr := rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{m.mr.Seg(0, 4096)}, Remote: m.mr.Remote().At(4096)}
	post := func() collector {
		col := newCollector(1)
		w := wr
		w.Done = col
		_, err := a.Post([]rdma.WR{w})
		require.NoError(t, err)
		return col
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	// hold holds the CQ and waits until its goroutine has parked: one
	// write taken by the caller raises the event the armed CQ had asked
	// for, after which the goroutine parks.
	hold := func() {
		parks := e.cq.Stats().Parks
		e.cq.Hold()
		col := post()
		for len(col) == 0 && ctx.Err() == nil {
			e.cq.TryProgress()
		}
		require.NoError(t, (<-col).Err)
		for e.cq.Stats().Parks == parks && ctx.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		require.NoError(t, ctx.Err(), "the CQ's goroutine never parked")
	}
	for _, tc := range []struct {
		name string
		run  func()
	}{
		{"released without polling", func() {
			hold()
			col := post()
			time.Sleep(5 * time.Millisecond)
			assert.Empty(t, col, "delivered while held and not polled: the goroutine did not park")
			e.cq.Release()
			select {
			case c := <-col:
				require.NoError(t, c.Err)
			case <-ctx.Done():
				t.Fatal("a completion left in flight by a holder was never delivered")
			}
		}},
		{"posted by another, then released", func() {
			hold()
			done := make(chan error, 1)
			go func() {
				_, err := a.Do(ctx, wr) // no hold of its own
				done <- err
			}()
			for e.cq.Stats().InFlight == 0 && ctx.Err() == nil {
				time.Sleep(100 * time.Microsecond)
			}
			e.cq.Release() // in flight: the goroutine takes it over
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-ctx.Done():
				t.Fatal("a work request posted while another held the CQ never completed")
			}
		}},
		{"posted after a release with nothing in flight", func() {
			hold()
			e.cq.Release()          // the goroutine stays parked
			_, err := a.Do(ctx, wr) // its post wakes it
			require.NoError(t, err)
		}},
		{"posted by another, delivered by the holder", func() {
			hold()
			done := make(chan error, 1)
			go func() {
				_, err := a.Do(ctx, wr)
				done <- err
			}()
			var err error
		wait:
			for {
				select {
				case err = <-done:
					break wait
				case <-ctx.Done():
					t.Fatal("not delivered by the holder's TryProgress")
				default:
					e.cq.TryProgress()
				}
			}
			e.cq.Release()
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run() })
	}
	assert.Zero(t, e.cq.Stats().InFlight)
	assert.PanicsWithValue(t, "rdma: CQ.Release without Hold", e.cq.Release)
}

// TestTryProgressBusy: TryProgress does not wait for a poller holding the
// CQ (it reports that it did not poll).
func TestTryProgressBusy(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{Manual: true})
	n, polled := e.cq.TryProgress()
	assert.Zero(t, n)
	assert.True(t, polled)
	rdma.HoldCQ(e.cq, func() {
		n, polled := e.cq.TryProgress()
		assert.Zero(t, n)
		assert.False(t, polled)
	})
}

// requireNoOutstanding waits for qp's outstanding count to reach zero. A
// work request stops counting only after its Completer has returned, so
// a test that has just seen the last completion may still read it as
// outstanding for a moment.
func requireNoOutstanding(t *testing.T, qp *rdma.QP) {
	t.Helper()
	require.Eventually(t, func() bool { return qp.Outstanding() == 0 }, 5*time.Second, time.Millisecond,
		"outstanding work requests: %d", qp.Outstanding())
}
