package verbs_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/internal/verbs"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// device skips the test unless a verbs device exists, and returns its name.
func device(t *testing.T) string {
	t.Helper()
	names, err := verbs.DeviceNames()
	if err != nil {
		require.ErrorIs(t, err, verbs.ErrUnavailable)
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" { // CI, in the Soft-RoCE VM
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but: %v", err)
		}
		t.Skipf("needs an RDMA device: %v", err)
	}
	if n := os.Getenv("GXFER_RDMA_DEVICE"); n != "" {
		return n
	}
	return names[0]
}

// TestAvailability runs everywhere: either libibverbs works, or the error
// says why and wraps ErrUnavailable.
func TestAvailability(t *testing.T) {
	err := verbs.Load()
	if err != nil {
		require.ErrorIs(t, err, verbs.ErrUnavailable)
		assert.Contains(t, err.Error(), "libibverbs not installed")
		t.Logf("unavailable: %v", err)
		return
	}
	names, err := verbs.DeviceNames()
	if err != nil {
		require.ErrorIs(t, err, verbs.ErrNoDevice)
		require.ErrorIs(t, err, verbs.ErrUnavailable)
		assert.Contains(t, err.Error(), "libibverbs found, 0 devices")
		t.Logf("no device: %v", err)
		return
	}
	t.Logf("devices: %v", names)
	assert.NotEmpty(t, names)
}

// TestUnavailableLibrary re-executes the test binary with a library name
// that cannot be loaded: every entry point must report ErrUnavailable with
// dlopen's reason, and nothing may crash.
func TestUnavailableLibrary(t *testing.T) {
	if !verbs.Built {
		t.Skip("built without cgo")
	}
	if os.Getenv("GXFER_VERBS_CHILD") == "unavailable" {
		err := verbs.Load()
		require.ErrorIs(t, err, verbs.ErrUnavailable)
		require.Contains(t, err.Error(), "dlopen /nonexistent/libibverbs.so.1")
		_, err = verbs.DeviceNames()
		require.ErrorIs(t, err, verbs.ErrUnavailable)
		_, err = verbs.Open("")
		require.ErrorIs(t, err, verbs.ErrUnavailable)
		require.False(t, verbs.HaveDmabufMR())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableLibrary$", "-test.v")
	cmd.Env = append(os.Environ(), "GXFER_VERBS_CHILD=unavailable", verbs.LibraryEnv+"=/nonexistent/libibverbs.so.1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestUnavailableLibrary")
}

func sysfs(t *testing.T, dev string, rel string) string {
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, rel))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// TestQueryAgainstSysfs checks device, port and GID queries against what
// the kernel shows in sysfs, an independent source.
func TestQueryAgainstSysfs(t *testing.T) {
	name := device(t)
	c, err := verbs.Open(name)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	assert.Equal(t, name, c.Name())
	assert.Positive(t, c.NumCompVectors())

	da, err := c.QueryDevice()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, int(da.PhysPortCnt), 1)
	assert.Positive(t, da.MaxQP)
	assert.Positive(t, da.MaxCQE)
	assert.Positive(t, da.MaxMR)
	assert.Positive(t, da.MaxSGE)
	guid := strings.ReplaceAll(sysfs(t, name, "node_guid"), ":", "")
	assert.Equal(t, guid, fmt.Sprintf("%016x", da.NodeGUID), "node_guid")

	pa, err := c.QueryPort(1)
	require.NoError(t, err)
	state := sysfs(t, name, "ports/1/state") // "4: ACTIVE"
	assert.Equal(t, state, strconv.Itoa(int(pa.State))+": "+pa.State.String())
	assert.NotZero(t, pa.ActiveMTU.Bytes())
	assert.Positive(t, pa.GIDTableLen)
	ll := sysfs(t, name, "ports/1/link_layer")
	assert.Equal(t, ll, pa.LinkLayer.String())
	t.Logf("%s: fw %q ports %d max_qp %d max_cqe %d; port 1 %v mtu %v/%v %v gids %d",
		name, da.FWVer, da.PhysPortCnt, da.MaxQP, da.MaxCQE, pa.State, pa.ActiveMTU, pa.MaxMTU, pa.LinkLayer, pa.GIDTableLen)

	g, err := c.QueryGID(1, 0)
	require.NoError(t, err)
	assert.Equal(t, sysfs(t, name, "ports/1/gids/0"), g.String())
	assert.False(t, g.IsZero())

	_, err = c.QueryPort(99)
	assert.Error(t, err)

	require.NoError(t, c.Close())
	_, err = c.QueryDevice()
	assert.ErrorIs(t, err, verbs.ErrClosed)
}

func mmap(t *testing.T, n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// TestPDAndMR registers and deregisters memory and checks the live counts.
func TestPDAndMR(t *testing.T) {
	name := device(t)
	base := verbs.Live()
	c, err := verbs.Open(name)
	require.NoError(t, err)
	pd, err := c.AllocPD()
	require.NoError(t, err)
	b := mmap(t, 1<<20)
	mr, err := pd.RegMR(addr(b), uint64(len(b)), uint64(addr(b)), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	assert.Equal(t, uint64(addr(b)), mr.Addr())
	assert.Equal(t, uint64(len(b)), mr.Len())
	assert.NotZero(t, mr.RKey())
	now := verbs.Live()
	assert.Equal(t, base.MRs+1, now.MRs)
	assert.Equal(t, base.PDs+1, now.PDs)
	assert.Equal(t, base.Contexts+1, now.Contexts)

	// Remote write without local write is invalid (IB spec): EINVAL.
	_, err = pd.RegMR(addr(b), 4096, uint64(addr(b)), verbs.AccessRemoteWrite)
	assert.ErrorIs(t, err, syscall.EINVAL)

	require.NoError(t, mr.Close())
	require.NoError(t, mr.Close())
	require.NoError(t, pd.Close())
	require.NoError(t, pd.Close())
	require.NoError(t, c.Close())
	assert.Equal(t, base, verbs.Live())
}

// TestDmabufProbe runs the fd -1 probe. Soft-RoCE has no dma-buf MR
// support: the answer must be "not supported", with EOPNOTSUPP.
func TestDmabufProbe(t *testing.T) {
	name := device(t)
	c, err := verbs.Open(name)
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	err = pd.ProbeDmabufMR()
	t.Logf("%s: libibverbs has ibv_reg_dmabuf_mr: %v; probe: %v", name, verbs.HaveDmabufMR(), err)
	if strings.HasPrefix(name, "rxe") {
		require.ErrorIs(t, err, verbs.ErrNotSupported)
		require.ErrorIs(t, err, syscall.EOPNOTSUPP)
	}
}

// pair is two RC QPs on one device, connected to each other.
type pair struct {
	c      *verbs.Context
	pd     *verbs.PD
	ch     *verbs.CompChannel
	cq     *verbs.CQ
	a, b   *verbs.QP
	mr     *verbs.MR
	buf    []byte
	closed bool
}

func newPair(t *testing.T, name string) *pair {
	p := &pair{}
	var err error
	p.c, err = verbs.Open(name)
	require.NoError(t, err)
	p.pd, err = p.c.AllocPD()
	require.NoError(t, err)
	p.ch, err = p.c.CreateCompChannel()
	require.NoError(t, err)
	p.cq, err = p.c.CreateCQ(256, p.ch, 0, 16)
	require.NoError(t, err)
	for _, q := range []**verbs.QP{&p.a, &p.b} {
		*q, err = p.pd.CreateQP(verbs.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
		require.NoError(t, err)
		require.NoError(t, (*q).Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
			AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	}
	p.buf = mmap(t, 1<<16)
	p.mr, err = p.pd.RegMR(addr(p.buf), uint64(len(p.buf)), uint64(addr(p.buf)), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	t.Cleanup(func() { p.close(t) })
	return p
}

func (p *pair) connect(t *testing.T) {
	gid, err := p.c.QueryGID(1, 0)
	require.NoError(t, err)
	pa, err := p.c.QueryPort(1)
	require.NoError(t, err)
	for _, x := range [][2]*verbs.QP{{p.a, p.b}, {p.b, p.a}} {
		q, peer := x[0], x[1]
		require.NoError(t, q.Modify(&verbs.QPAttr{
			State: verbs.QPSRTR, PathMTU: pa.ActiveMTU, DestQPN: peer.QPN(), RQPSN: 100, MaxDestRDAtomic: 1, MinRNRTimer: 12,
			AH: verbs.AHAttr{IsGlobal: true, DGID: gid, HopLimit: 1, PortNum: 1},
		}, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRDAtomic|verbs.QPAttrMinRNRTimer))
		require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 100, MaxRDAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRDAtomic))
	}
}

func (p *pair) close(t *testing.T) {
	if p.closed {
		return
	}
	p.closed = true
	// Reverse order of creation.
	assert.NoError(t, p.mr.Close())
	assert.NoError(t, p.b.Close())
	assert.NoError(t, p.a.Close())
	assert.NoError(t, p.cq.Close())
	assert.NoError(t, p.ch.Close())
	assert.NoError(t, p.pd.Close())
	assert.NoError(t, p.c.Close())
}

// pollN polls until n completions arrived (bounded by a deadline).
func pollN(t *testing.T, cq *verbs.CQ, n int) []verbs.WC {
	var got []verbs.WC
	wc := make([]verbs.WC, 8)
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n {
		k, err := cq.Poll(wc)
		require.NoError(t, err)
		got = append(got, wc[:k]...)
		if k == 0 {
			require.True(t, time.Now().Before(deadline), "timed out with %d/%d completions", len(got), n)
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// TestFlushedChain posts a chain of receives in one call to a QP in INIT,
// moves it to ERR and polls the flushed completions back in batches.
func TestFlushedChain(t *testing.T) {
	p := newPair(t, device(t))
	base := uint64(addr(p.buf))
	wrs := make([]verbs.RecvWR, 20)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{ID: uint64(1000 + i), SGE: []verbs.SGE{{Addr: base + uint64(i)*64, Length: 64, LKey: p.mr.LKey()}}}
	}
	n, err := p.a.PostRecv(wrs)
	require.NoError(t, err)
	require.Equal(t, 20, n)
	st, err := p.a.Query(verbs.QPAttrState)
	require.NoError(t, err)
	require.Equal(t, verbs.QPSInit, st.State)
	require.NoError(t, p.a.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	got := pollN(t, p.cq, 20)
	for i, w := range got {
		assert.Equal(t, uint64(1000+i), w.ID)
		assert.Equal(t, verbs.WCWRFlushErr, w.Status, w.Status.String())
		assert.Equal(t, p.a.QPN(), w.QPNum)
	}
	// Too many SGEs for the QP: EINVAL before anything is posted.
	_, err = p.a.PostRecv([]verbs.RecvWR{{ID: 1, SGE: make([]verbs.SGE, 3)}})
	assert.ErrorIs(t, err, syscall.EINVAL)
}

// TestLoopbackOps does RDMA write, read, send and write-with-immediate
// between two QPs, and waits for one of the completions through the
// completion channel (blocking read: the fd is still blocking here).
func TestLoopbackOps(t *testing.T) {
	p := newPair(t, device(t))
	p.connect(t)
	base := uint64(addr(p.buf))
	lkey, rkey := p.mr.LKey(), p.mr.RKey()
	for i := 0; i < 4096; i++ {
		p.buf[i] = byte(i * 7)
	}
	require.NoError(t, p.cq.ReqNotify(false))

	// Receives on b for the send and the write-with-immediate.
	_, err := p.b.PostRecv([]verbs.RecvWR{
		{ID: 10, SGE: []verbs.SGE{{Addr: base + 32768, Length: 256, LKey: lkey}}},
		{ID: 11, SGE: []verbs.SGE{{Addr: base + 33024, Length: 256, LKey: lkey}}},
	})
	require.NoError(t, err)
	// One chain: write 4 KiB to offset 8192, read it back to 16384, send
	// 100 bytes (two SGEs), write 16 bytes with immediate.
	n, err := p.a.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGE: []verbs.SGE{{Addr: base, Length: 4096, LKey: lkey}}, RemoteAddr: base + 8192, RKey: rkey},
		{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled | verbs.SendFence, SGE: []verbs.SGE{{Addr: base + 16384, Length: 4096, LKey: lkey}}, RemoteAddr: base + 8192, RKey: rkey},
		{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGE: []verbs.SGE{{Addr: base, Length: 60, LKey: lkey}, {Addr: base + 60, Length: 40, LKey: lkey}}},
		{ID: 4, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xA1B2C3D4, SGE: []verbs.SGE{{Addr: base, Length: 16, LKey: lkey}}, RemoteAddr: base + 40960, RKey: rkey},
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)

	cq, err := p.ch.GetCQEvent() // blocks until the first completion
	require.NoError(t, err)
	require.Same(t, p.cq, cq)
	p.cq.Ack(1)

	got := map[uint64]verbs.WC{}
	for _, w := range pollN(t, p.cq, 6) {
		got[w.ID] = w
		assert.Equal(t, verbs.WCSuccess, w.Status, "wr %d: %v", w.ID, w.Status)
	}
	assert.Equal(t, verbs.WCRDMAWrite, got[1].Opcode)
	assert.Equal(t, verbs.WCRDMARead, got[2].Opcode)
	assert.Equal(t, verbs.WCSend, got[3].Opcode)
	assert.Equal(t, verbs.WCRecv, got[10].Opcode)
	assert.Equal(t, uint32(100), got[10].ByteLen)
	assert.Equal(t, p.b.QPN(), got[10].QPNum)
	assert.Equal(t, verbs.WCRecvRDMAWithImm, got[11].Opcode)
	assert.NotZero(t, got[11].Flags&verbs.WCWithImm)
	assert.Equal(t, uint32(0xA1B2C3D4), got[11].Imm)

	assert.Equal(t, p.buf[:4096], p.buf[8192:8192+4096])
	assert.Equal(t, p.buf[:4096], p.buf[16384:16384+4096])
	assert.Equal(t, p.buf[:100], p.buf[32768:32768+100])
	assert.Equal(t, p.buf[:16], p.buf[40960:40960+16])
}

// TestLiveCountsBalance checks that everything the tests above created was
// destroyed.
func TestLiveCountsBalance(t *testing.T) {
	device(t)
	assert.Equal(t, verbs.Counts{}, verbs.Live())
}

func TestErrorsUnwrap(t *testing.T) {
	e := &verbs.Error{Op: "ibv_reg_dmabuf_mr", Errno: syscall.EOPNOTSUPP}
	assert.ErrorIs(t, e, verbs.ErrNotSupported)
	assert.ErrorIs(t, e, syscall.EOPNOTSUPP)
	e2 := &verbs.Error{Op: "ibv_post_send", Errno: syscall.ENOMEM}
	assert.False(t, errors.Is(e2, verbs.ErrNotSupported))
	assert.Equal(t, "verbs: ibv_post_send: cannot allocate memory", e2.Error())
}
