package ipc

import (
	"errors"
	"fmt"
	"os"
)

// Sentinel errors. Match them with [errors.Is].
var (
	// ErrClosed: the listener, connection, mapping or cache is closed. It
	// also matches os.ErrClosed and net.ErrClosed.
	ErrClosed = os.ErrClosed
	// ErrInvalid: a bad argument (empty or abstract socket path, size <= 0,
	// MaxFDsPerMsg out of range, empty frame...). It also matches
	// os.ErrInvalid.
	ErrInvalid = fmt.Errorf("ipc: invalid argument: %w", os.ErrInvalid)
	// ErrPeerRefused: the peer's credentials (SO_PEERCRED) are not
	// allowed; the connection was closed. See [PeerRefusedError].
	ErrPeerRefused = errors.New("ipc: peer refused")
	// ErrTooManyFDs: a received message carried more descriptors than
	// Config.MaxFDsPerMsg (the kernel truncated the control data:
	// MSG_CTRUNC, or the count exceeds the limit), or Send was given more
	// than the limit. Every descriptor that did arrive was closed.
	ErrTooManyFDs = errors.New("ipc: too many file descriptors in one message")
	// ErrTruncated: a received message was larger than the buffer given to
	// Recv (MSG_TRUNC); it was dropped and its descriptors closed.
	ErrTruncated = errors.New("ipc: message larger than the receive buffer")
	// ErrNotMemfd: MapShared was given a descriptor that is not a memfd
	// sealed against shrinking (a peer could truncate such a file under
	// the mapping and crash this process with SIGBUS).
	ErrNotMemfd = errors.New("ipc: not a sealed memfd")
	// ErrTooSmall: MapShared was asked to map more than the file holds.
	ErrTooSmall = errors.New("ipc: shared file smaller than requested")
	// ErrStale: HandleCache.Get asked for an older generation than the
	// one cached (the key is stale), or the entry was invalidated, purged
	// or replaced by a newer generation while it was being imported.
	ErrStale = errors.New("ipc: stale handle")
)

// PeerRefusedError reports a peer whose credentials are not allowed. It
// matches ErrPeerRefused.
type PeerRefusedError struct {
	Peer   Cred   // the kernel's view of the peer (SO_PEERCRED)
	Side   string // "accept" or "dial"
	Reason string
}

func (e *PeerRefusedError) Error() string {
	return fmt.Sprintf("ipc: %s: peer pid %d uid %d gid %d refused: %s", e.Side, e.Peer.PID, e.Peer.UID, e.Peer.GID, e.Reason)
}

// Is makes a PeerRefusedError match ErrPeerRefused.
func (e *PeerRefusedError) Is(target error) bool { return target == ErrPeerRefused }
