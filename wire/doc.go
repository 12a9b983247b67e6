// Package wire is gxfer's peer protocol: framed, versioned messages
// between two engines, over any transport that moves whole frames (a unix
// SOCK_SEQPACKET socket with fd passing, from package ipc; a byte stream
// such as TCP through [StreamTransport]). The package knows nothing of
// sockets: it encodes, decodes and validates, and [Conn] reads and writes
// whole frames over a [Transport].
//
// # Trust model
//
// Every byte from a peer is untrusted. Decoders check every length, count,
// enum, reserved field and range with overflow-safe arithmetic and refuse
// anything else with an error matching [ErrMalformed] (never a panic, never
// an out-of-range access; FuzzDecode checks this). Decoding is canonical: a
// frame that decodes re-encodes to the same bytes, so there is exactly one
// encoding of every message. What a decoder cannot know is left to the
// receiver, which must:
//
//   - compare a Hello's PID and UID with the kernel's view of the peer
//     (ipc.Conn.Peer) and refuse a mismatch;
//   - [Verify] every RemoteKey a peer presents (only the owner, holding the
//     secret, can), check that it grants the access ([RemoteKey.Allows]),
//     and [RemoteKey.Check] the requested range before touching memory;
//   - validate descriptors it receives (ipc.MapShared refuses anything
//     but a sealed memfd of sufficient size).
//
// A malformed frame means the peer is broken or hostile: close the
// connection. A request that is well-formed but not allowed (bad
// signature, out of range, stale generation) is answered with a
// Completion or Error status instead.
//
// # Frames
//
// A frame is a fixed 24-byte little-endian [Header] (magic, version, type,
// flags, payload length, fd count, request id) followed by the payload.
// Decoders take the frame limit as a parameter: [MaxFrame] (1 MiB) for
// control traffic, more for the Data frames of the TCP path. The fd count
// says how many descriptors the transport attached to the frame; a
// receiver checks it against what arrived ([Conn.Recv] does) and each type
// fixes it (two for ImportReply, none for the others). Messages with a
// request id (Put, Get, Completion, Error, ImportRequest, ImportReply,
// Data, Cancel) carry it in the header only; the others must leave it 0.
//
// # Versions
//
// The header carries the protocol version of the frame; versions outside
// [MinVersion]..[MaxVersion] are refused with a [*VersionError] (matching
// [ErrVersion]). A connection starts with Hello (dialer) and HelloAck
// (listener), always in the version-1 format: each side states its version
// range and capabilities; [Negotiate] picks the highest common version and
// the common capabilities, [CheckAck] lets the dialer check the answer. A
// listener that finds no common version answers Error{Code:
// StatusVersion} and closes.
//
// # Messages
//
//	Hello / HelloAck   identity (pid, pid namespace, uid, engine id, name), versions, capabilities
//	RemoteKey          a key handed to the peer (see below)
//	Put / Get          move Length bytes to / from the owner's memory named by a RemoteKey;
//	                   the requester's side is either its own exported key (local IPC: the
//	                   owner imports it and moves the data itself) or inline Data frames (TCP)
//	Completion         ends a request with a Status
//	Error              a failed request (or, with request id 0, a failed connection)
//	ImportRequest      "give me an fd for the allocation of this key"
//	ImportReply        the answer, with two fds attached (memfd or DMA-BUF, and its validity flag)
//	Invalidate         the owner freed an allocation: importers drop cached mappings
//	Data               bytes of a Put or Get on a transport without shared memory
//	Bye                orderly close (with why, to a peer with CapByeReason, when the
//	                   application did not close it: a listener making room for another peer)
//	Auth               a step of the cluster-secret challenge-response between Hello and HelloAck
//	Cancel             the requester abandons a Put or Get whose data travels in Data frames
//	                   (sent only to a peer with CapCancel; no reply follows)
//	AppMsg             an application message (at most MaxAppMsg bytes), within the receiver's credit
//	MsgCredit          grants the peer more AppMsg credit: a window at the start, then what was taken
//	                   (both only between peers with CapMessages)
//	MsgRing            instead of the first MsgCredit, on a unix socket between peers with CapMsgRing:
//	                   the window and a memfd holding the ring the peer writes its messages into
//	MsgBell            "look at the message ring": a message for a parked receiver, credit for a waiting sender
//
// # Remote keys
//
// [RemoteKey] is what Buffer.Export returns: the owner's engine id, pid and
// pid namespace, an allocation (AllocID, Generation, memory type, device,
// base address, length, RDMA rkeys), the range of it the key grants, and a
// 16-byte MAC under a per-engine secret ([Sign], [Verify], [Signer]). A
// forged or edited key fails verification at the owner. A key grants its
// signed range only: the owner refuses every request outside it. The key
// Export returns grants the whole allocation; [RemoteKey.Slice] of it
// derives, without the secret, a key granting the narrower range, whose
// holder cannot widen it (the derived MAC is keyed by the root MAC, which
// the narrower key does not carry). The key also carries a view (Offset,
// Len) inside the grant that is not signed; the owner checks requests
// against the view and the view against the grant ([RemoteKey.Check]).
// An RDMA rkey is the exception: the NIC bounds it by its registration
// (the whole allocation), not by the grant.
package wire
