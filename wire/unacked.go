package wire

import "golang.org/x/sys/unix"

// Unacked reports how many bytes written to s's TCP socket its peer has
// not acknowledged yet, and false when s is not over a TCP socket or the
// kernel would not say. Linux answers SIOCOUTQ on a TCP socket with
// write_seq - snd_una (tcp_ioctl, net/ipv4/tcp.c): the bytes not sent
// plus those sent but not acknowledged.
//
// A TCP socket closed while bytes of its peer are unread is reset, and
// the reset drops what it had not sent yet; once Unacked is zero, all
// that was written is in the peer's receive queue, which a reset leaves
// for the peer to read (tcp_recvmsg_locked reads queued data before it
// reports sk_err). A unix stream socket needs no such wait: what was
// written is in the peer's queue already.
func (s *StreamTransport) Unacked() (int, bool) {
	if s.rc == nil || s.c.LocalAddr().Network() != "tcp" {
		return 0, false
	}
	n, errno := 0, error(nil)
	if err := s.rc.Control(func(fd uintptr) {
		n, errno = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	}); err != nil || errno != nil {
		return 0, false
	}
	return n, true
}
