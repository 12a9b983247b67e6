package rdma_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/rdma"
)

// The two-process test re-executes the test binary as a peer. They swap
// Endpoint and RemoteMR in their binary form (hex lines over the child's
// stdin/stdout: what the engine will carry over its wire protocol), connect,
// and the parent RDMA-reads the child's memory, RDMA-writes into it and
// sends it a control message.
const (
	childEnv  = "GXFER_RDMA_TEST_CHILD"
	childSize = 1 << 20
	childMsg  = "parent done"
)

func TestTwoProcesses(t *testing.T) {
	needDevice(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = in.Close()
		err := cmd.Wait()
		require.NoError(t, err, "child: %s", stderr.String())
	}()
	lines := bufio.NewScanner(out)
	expect := func(prefix string) string {
		t.Helper()
		require.True(t, lines.Scan(), "child ended early: %v %s", lines.Err(), stderr.String())
		l := lines.Text()
		require.True(t, strings.HasPrefix(l, prefix+" ") || l == prefix, "child said %q, want %s", l, prefix)
		return strings.TrimPrefix(strings.TrimPrefix(l, prefix), " ")
	}

	e := newEnv(t, rdma.CQConfig{})
	qp, err := e.pd.NewQP(e.qpConfig())
	require.NoError(t, err)
	local := e.mem(t, childSize)

	peer, err := parseEndpoint(expect("EP"))
	require.NoError(t, err)
	var peerMR rdma.RemoteMR
	_, err = fmt.Sscanf(expect("MR"), "%d %d %d", &peerMR.RKey, &peerMR.Addr, &peerMR.Len)
	require.NoError(t, err)
	require.Equal(t, uint64(childSize), peerMR.Len)
	_, err = fmt.Fprintf(in, "EP %s\n", formatEndpoint(qp.Endpoint()))
	require.NoError(t, err)
	require.NoError(t, qp.Connect(peer))
	expect("READY")

	ctx := testCtx(t)
	half := uint64(childSize / 2)
	_, err = qp.Do(ctx, rdma.WR{Op: rdma.OpRead, Local: []rdma.Seg{local.mr.Seg(0, half)}, Remote: peerMR.At(0)})
	require.NoError(t, err)
	want := make([]byte, half)
	fill(want, 0xC1)
	require.True(t, bytes.Equal(want, local.b[:half]), "RDMA read from the child process differs")

	fill(local.b[half:], 0x7E)
	_, err = qp.Do(ctx, rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{local.mr.Seg(half, half)}, Remote: peerMR.At(half)})
	require.NoError(t, err)
	copy(local.b, childMsg)
	_, err = qp.Do(ctx, rdma.WR{Op: rdma.OpSend, Local: []rdma.Seg{local.mr.Seg(0, uint64(len(childMsg)))}})
	require.NoError(t, err)
	expect("OK")
}

// syncBuffer is the child's stderr: written by exec's copier goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// formatEndpoint and parseEndpoint pass a queue pair's endpoint between
// the two test processes as text (gxfer itself sends wire.RDMAConnect).
func formatEndpoint(e rdma.Endpoint) string {
	return fmt.Sprintf("%d %d %d %d %s", e.QPN, e.PSN, e.LID, e.MTU, hex.EncodeToString(e.GID[:]))
}

func parseEndpoint(s string) (rdma.Endpoint, error) {
	var e rdma.Endpoint
	var gid string
	if _, err := fmt.Sscanf(s, "%d %d %d %d %s", &e.QPN, &e.PSN, &e.LID, &e.MTU, &gid); err != nil {
		return e, err
	}
	g, err := hex.DecodeString(gid)
	if err != nil || len(g) != len(e.GID) {
		return e, fmt.Errorf("GID %q", gid)
	}
	copy(e.GID[:], g)
	return e, e.Validate()
}

// childMain is the peer process.
func childMain() int {
	if err := child(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		fmt.Println("FAIL", err)
		return 1
	}
	return 0
}

func child(stdin io.Reader, stdout io.Writer) (err error) {
	buf, err := rdma.NewBuffer(childSize + 4096) // unmapped after d.Close
	if err != nil {
		return err
	}
	defer buf.Close()
	d, err := rdma.Open(deviceName())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	pd, err := d.AllocPD()
	if err != nil {
		return err
	}
	cq, err := d.NewCQ(rdma.CQConfig{})
	if err != nil {
		return err
	}
	qp, err := pd.NewQP(rdma.QPConfig{SendCQ: cq, GIDIndex: gidIndex()})
	if err != nil {
		return err
	}
	b := buf.Bytes()
	fill(b[:childSize/2], 0xC1)
	mr, err := pd.Register(b, 0)
	if err != nil {
		return err
	}
	got := make(chan rdma.Completion, 1)
	if _, err := qp.PostRecv([]rdma.RecvWR{{Local: []rdma.Seg{mr.Seg(childSize, 64)}, Done: collector(got)}}); err != nil {
		return err
	}
	full := mr.Remote()
	full.Len = childSize // the message area stays private
	fmt.Fprintf(stdout, "EP %s\nMR %d %d %d\n", formatEndpoint(qp.Endpoint()), full.RKey, full.Addr, full.Len)

	lines := bufio.NewScanner(stdin)
	if !lines.Scan() {
		return fmt.Errorf("no endpoint from the parent: %v", lines.Err())
	}
	peer, err := parseEndpoint(strings.TrimPrefix(lines.Text(), "EP "))
	if err != nil {
		return err
	}
	if err := qp.Connect(peer); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "READY")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var c rdma.Completion
	select {
	case c = <-got:
	case <-ctx.Done():
		return errors.New("no message from the parent")
	}
	if c.Err != nil {
		return c.Err
	}
	if msg := string(b[childSize : childSize+int(c.ByteLen)]); msg != childMsg {
		return fmt.Errorf("message %q", msg)
	}
	want := make([]byte, childSize/2)
	fill(want, 0x7E)
	if !bytes.Equal(want, b[childSize/2:childSize]) {
		return errors.New("the parent's RDMA write did not land")
	}
	fmt.Fprintln(stdout, "OK")
	return nil
}
