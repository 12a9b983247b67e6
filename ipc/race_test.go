//go:build race

package ipc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRaceMessageOrder: what a Conn's sender did before Send is ordered,
// for the race detector, before what the receiver does once Recv has the
// message, as the kernel orders them. sendmsg(2) and recvmsg(2) tell the
// detector nothing by themselves (the syscall package orders read(2) and
// write(2) only): without the Conn's own ordering the receiver's read of
// note races with the sender's write and the test fails with "race
// detected during execution of test".
func TestRaceMessageOrder(t *testing.T) {
	server, client := pair(t, Config{})
	note := make([]byte, 8) // the sender writes it before it sends
	errc := make(chan error, 1)
	go func() {
		note[0] = 1
		errc <- client.Send([]byte("hello"), nil)
	}()
	buf := make([]byte, 64)
	n, fds, err := server.Recv(buf)
	require.NoError(t, err)
	require.Empty(t, fds)
	require.Equal(t, "hello", string(buf[:n]))
	require.Equal(t, byte(1), note[0], "the sender's write before it sent")
	require.NoError(t, <-errc)
}
