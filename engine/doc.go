// Package engine moves bytes between host memory and Gaudi device memory,
// inside one process and between processes and machines.
//
// # Engine
//
// [New] opens an [Engine] over the Gaudi devices it finds (or emulated ones,
// see [Config]) and its RDMA NICs. The engine owns DMA queues per device and
// direction, a worker pool for host copies, a completion actor per device,
// registration caches and the endpoints it dialed or accepted. [Engine.Close]
// ends all of it.
//
// # Buffers
//
// A [Buffer] is memory the engine can move data to and from; a [Slice] is a
// byte range of one, the unit of every transfer:
//
//   - host memory from [Engine.Alloc] with [Host]: page aligned, outside the
//     Go heap, backed by a sealed memfd so that peers on the node can map it;
//   - Gaudi memory from [Engine.Alloc] with [Gaudi](i);
//   - registered caller memory ([Engine.Register]): usable in local copies
//     and as the local side of Put and Get, never exported;
//   - attached memory ([Attachment.Register]): HBM of a device the Habana
//     runtime owns and lends (attached mode).
//
// [Buffer.Free] (or Deregister) ends a buffer: operations in flight keep its
// memory alive until they complete; new ones fail with [ErrFreed]. A
// [Binding] holds its local buffer until it is closed: its Put and Get
// still use the memory after Free or Deregister, which take effect at the
// binding's Close.
//
// # Futures and ownership
//
// Every asynchronous operation ([Engine.Copy], [Batch], [Endpoint.Put],
// [Endpoint.Get], [Endpoint.PutList], [Endpoint.GetList]) returns a
// [Future], which the engine completes. Wait(ctx)
// bounds the wait, not the operation. The buffers an operation uses are the
// engine's while it runs and the caller's again once the future is done
// (Done closed, IsDone true) — with one exception: a future that ended with
// [ErrTimeout] because of its deadline option ([Timeout], [Deadline],
// Config.OpTimeout) resolved at that deadline while the hardware, the NIC or
// the peer may still be reading or writing the memory. The engine keeps that
// memory allocated until they are done (Free is safe), but its content is
// undefined and no signal says when they are done. The ctx of an operation
// bounds its waits (Copy, Put and Get say which): when ctx ends first the
// future resolves with [ErrCanceled] (or ErrTimeout for ctx's deadline)
// once what was already handed to the hardware is finished, so the
// buffers are the caller's again. The Sync variants (CopySync, PutSync,
// GetSync) wait for the future, and when ctx ends first still wait for
// the operation before returning its error (ErrCanceled or ErrTimeout,
// wrapping ctx's error, when the operation itself did not fail). Future.Wait
// returns the same typed errors when its ctx ends first.
//
// # Errors
//
// Failures match typed sentinels with [errors.Is]: [ErrInvalid] (bad
// arguments, resolved at once, nothing submitted), [ErrClosed], [ErrFreed],
// [ErrForeign], [ErrQueueFull], [ErrTimeout], [ErrCanceled],
// [ErrNotSupported], [ErrNoDevice], [ErrNoMemory] (Alloc without room),
// [ErrAborted] and [ErrDevice] (the device), [ErrPanic], [ErrPeer] (a peer failed, went silent for
// Config.PeerTimeout, or refused a request), [ErrUnauthenticated],
// [ErrTooManyPeers]. The error also wraps its cause (an errno, a
// command-submission status, the peer's refusal, ctx's error).
//
// # Endpoints and transports
//
// [Engine.Listen] and [Engine.Dial] connect two engines; each side holds an
// [Endpoint], whose Put copies a local slice into a peer's buffer and Get
// the reverse. [Endpoint.Bind] prepares repeated small transfers between
// two fixed slices. The transport ([TransportKind]) is chosen at Dial:
//
//   - "unix" ([TransportIPC]): peers on one node over a SOCK_SEQPACKET
//     socket (same uid only). A peer's host memory is mapped into this
//     process and copied directly; its Gaudi memory is reached by a request
//     on which the owner performs the DMA from or to a shared scratch
//     buffer of ours.
//   - "tcp" ([TransportTCP]): requests and Data frames on the connection
//     (Config.TCPLanes connections; transfers of 4 MiB or more are split
//     over them). The receiving side lands the bytes (Gaudi memory through
//     host staging and its DMA engine).
//   - RDMA ([TransportRDMA], chosen by Dial "tcp" when both sides have a
//     usable NIC): RC queue pairs, one per NIC both sides have; the TCP
//     connection stays the control channel. A key with an rkey is reached by
//     RDMA writes and reads; a key without one (Gaudi memory the NIC cannot
//     register) by a request on which the owner moves the data with RDMA
//     against a registered region of ours.
//
// # Keys and grants
//
// [Buffer.Export] returns a [RemoteKey]: bytes ([RemoteKey.Bytes]) the
// application hands to the peer, which parses them with [ParseRemoteKey].
// A key is signed by its owner and grants a range of one buffer (all of it
// as exported; [RemoteKey.Slice] narrows it) for reading and writing. The
// owner checks every request against the grant and refuses forged, edited
// or stale keys (the buffer freed). Over "unix" a key granting the whole
// allocation is served by mapping it; a narrower one by the owner. Over
// RDMA the NIC checks its registration, not the grant: an rkey reaches the
// whole allocation (see Buffer.Export). Config.ClusterSecret authenticates
// TCP peers; unix peers are checked by the kernel.
//
// # Completion and ordering
//
// A Put's future completes when the bytes are in the peer's memory as far as
// the transport can tell, and then the local slice is the caller's again:
//
//   - unix, peer host memory mapped here: when this side's copy into the
//     mapping is done (a memmove by the caller or a worker, or a DMA of
//     local Gaudi memory), so the bytes are in the owner's memory; with a
//     narrow grant or into the peer's Gaudi memory: when the owner answers,
//     after its own copy or DMA completed.
//   - tcp: when this side has sent every byte and the owner answered; the
//     owner answers once every byte has landed (read into host memory, or
//     the staging DMA into Gaudi memory completed).
//   - RDMA with an rkey: when the work completion of every write (every
//     slice, on every NIC) came back from the completion queue. On an RC
//     queue pair that means the peer's NIC acknowledged the write; the
//     peer's CPU takes no part and is not told. Local Gaudi memory without a
//     DMA-BUF region is first staged into host chunks, all written before
//     completion. Without an rkey: when the owner answers, after its RDMA
//     reads from our region (and its DMA into its Gaudi memory) completed.
//
// A Get's future completes when the bytes are in the local slice.
//
// Operations are not ordered with respect to each other, on one endpoint or
// across endpoints: Puts may travel as separate goroutines' sends, on other
// TCP lanes, on other NICs' queue pairs (transfers of RDMASliceMin bytes or
// more are sliced over them), through staging, or be served by the owner
// concurrently; copies run on several DMA queues and workers. Neither the
// order in which futures complete nor the order in which the peer sees the
// bytes follows the order of the calls, and the bytes of one transfer need
// not land in address order. A peer that must see A before B needs B
// issued after A's future completed (a flag written last by its own Put),
// or a message (below).
//
// # Messages
//
// [Endpoint.Send] sends a message of at most [MaxMessage] bytes to the peer
// on the endpoint's control connection; the peer takes it with
// [Endpoint.Recv]. Messages of one endpoint arrive in the order of Send
// calls that do not overlap, each once, never lost while both sides live;
// after a failure Recv still returns those that arrived, then the
// endpoint's error. A message is delivered only after every byte of every
// Put on the endpoint whose future completed before Send was called is
// visible in the peer's memory, so "Put, then Send" is a notification the
// peer can act on at once:
//
//   - unix: a Put into mapped peer memory completes when this side's copy
//     into the mapping is done (the bytes are in the owner's memory, the
//     same pages), the others when the owner answered after its copy; the
//     message is written after that, into a shared-memory ring the peer
//     granted (below).
//   - tcp: the owner answered after landing every byte, before the message
//     was sent on the same connection.
//   - RDMA: a write's completion only says the peer's NIC acknowledged it,
//     so Send first fences: each queue pair that posted writes since its
//     last fence performs an RDMA read of a few bytes behind them, and
//     Send waits for it (the responder executes a queue pair's requests in
//     order, and its read of memory does not pass its earlier writes).
//     The fence costs one round trip per queue pair that wrote, and
//     nothing when no Put wrote since the last message. A Put without an
//     rkey completes once the owner answered after its reads, and needs
//     none.
//
// Flow control is by credit: the receiver grants a window (256 messages,
// 4 MiB) and returns it as its application takes messages. A sender whose
// window is spent waits in Send until ctx ends ([ErrTimeout],
// [ErrCanceled]); a receiver never buffers more than its window, and a
// peer that sends beyond it fails the endpoint ([ErrPeer]).
//
// On a unix endpoint the messages do not travel on the socket: each side
// grants its window as a ring in shared memory (a memfd of the window's
// size, 4 MiB and a page by default, passed once), Send writes the
// message into the peer's ring on the caller's goroutine, and Recv takes
// it out on its own. A Recv finding the ring empty polls it for
// [Config.WaitSpin] (20 us by default) before it parks, so a message sent
// to a waiting receiver costs no system call and no wakeup; once parked,
// the receiver is woken by a small frame on the socket, and an idle
// endpoint costs no CPU. Credit returns are written into the ring. The
// receiver checks everything the peer writes there (bounds, record
// headers, credit): a peer that breaks the ring fails the endpoint
// ([ErrPeer]).
package engine
