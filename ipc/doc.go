// Package ipc connects gxfer engines on one node: a unix-socket control
// channel with credential checks and fd passing, shared host memory
// (memfd), and the IPC handle cache that makes an importer map each peer
// allocation once.
//
// # Control channel
//
// [Listen] and [Dial] make AF_UNIX SOCK_SEQPACKET connections: message
// boundaries are kept, so each message is one wire frame, and descriptors
// travel with it (SCM_RIGHTS) in the same sendmsg. The socket file is mode
// 0600 before the socket listens; descriptors are close-on-exec; blocking
// calls wait in the Go netpoller and Close unblocks them. Both sides read
// the peer's credentials from the kernel (SO_PEERCRED) and refuse a peer
// whose uid is neither theirs nor in Config.AllowUIDs ([ErrPeerRefused]).
// [Conn] implements wire.Transport; the peer protocol itself is package
// wire.
//
// # Trust model
//
// A peer that passed the uid check is still untrusted: every byte it sends
// and every descriptor it passes may be hostile. [Conn.Recv] wraps every
// received descriptor in an *fd.FD at once, checks MSG_TRUNC and
// MSG_CTRUNC on every receive and the descriptor count against
// Config.MaxFDsPerMsg, and on any error closes every descriptor that
// arrived. [MapShared] maps only regular files sealed against shrinking
// (memfds), of at least the requested size, so a peer cannot make this
// process fault by truncating the file; [NewShared] seals its memfds the
// same way for the benefit of its peers. Frame contents are validated by
// package wire; the pid a peer claims in its Hello must be compared with
// [Conn.Peer].
//
// # Shared memory
//
// [NewShared] creates host memory that can be passed to a peer: a sealed
// memfd mapped MAP_SHARED (page aligned, outside the Go heap). The peer
// maps the descriptor it receives with [MapShared]; both then see the same
// pages.
//
// # IPC handle cache
//
// An importer that maps a peer's memory for every operation pays a round
// trip, an mmap and a munmap each time. [HandleCache] keeps imports keyed
// by (peer, allocation id, generation), reference counted, within
// MaxRegions and MaxBytes (LRU over unreferenced entries). It learns that
// an allocation is gone from the exporter (wire.Invalidate, from which it
// drops the entry: [HandleCache.Invalidate]), from a newer generation of
// the same allocation id (the exporter reused it), or from the peer going
// away ([HandleCache.PurgePeer]); in-use entries are released at their last
// Put, never while referenced. It is generic over what an import produces
// (a *Mapping for host memory; later a registered DMA-BUF), and follows
// UCX's CUDA IPC cache while avoiding the unbounded growth its users
// reported for years.
package ipc
