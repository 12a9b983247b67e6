package tcp

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestSpinConn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	peer := <-accepted
	defer peer.Close()
	c := SpinConn(raw, 200*time.Microsecond)
	defer c.Close()
	require.IsType(t, &spinConn{}, c)
	require.Same(t, raw, SpinConn(raw, 0), "no spin: the conn itself")

	// Data that comes within the spin window and after it.
	for _, delay := range []time.Duration{0, 50 * time.Microsecond, 5 * time.Millisecond} {
		go func() {
			time.Sleep(delay)
			_, _ = peer.Write([]byte("ping"))
		}()
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		require.NoError(t, err)
		require.Equal(t, "ping", string(b))
	}
	// A read of bytes already there allocates nothing (a closure over
	// the Read's locals would allocate each of them).
	_, err = peer.Write(make([]byte, 4096))
	require.NoError(t, err)
	b := make([]byte, 4)
	require.Eventually(t, func() bool { // all 4096 bytes arrived
		rc, err := c.(*spinConn).Conn.(*net.TCPConn).SyscallConn()
		require.NoError(t, err)
		avail := 0
		_ = rc.Control(func(fd uintptr) { avail, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return avail == 4096
	}, 5*time.Second, time.Millisecond)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := io.ReadFull(c, b); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "allocations per spinning Read")
	_, err = io.ReadFull(c, make([]byte, 4096-4*101))
	require.NoError(t, err)
	// Deadlines still bound the wait.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	// The peer's close is EOF.
	require.NoError(t, peer.Close())
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}
