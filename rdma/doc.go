// Package rdma is gxfer's RDMA layer over internal/verbs: devices and ports,
// protection domains, memory regions (host memory with ibv_reg_mr, DMA-BUF
// memory such as Gaudi HBM with ibv_reg_dmabuf_mr after a support probe),
// reliable-connected queue pairs, RDMA write and read, send/recv for small
// control messages, and completion queues.
//
// Availability: libibverbs is loaded at run time. Available reports why RDMA
// cannot be used (the error wraps ErrUnavailable: "libibverbs not installed:
// dlopen ...", or ErrNoDevice: "libibverbs found, 0 devices").
//
// Completions: every work request is signaled. Its 64-bit wr_id is an index
// and a 16-bit generation into the CQ's slot table, which holds the
// request's Completer; the CQ's goroutine polls completions in batches (one
// cgo call per batch) and calls each Completer exactly once, on that
// goroutine, with the Completion. Completers must not block. By default the
// goroutine sleeps on the completion channel's fd through the Go netpoller
// (no OS thread parked in C), re-arms the CQ and drains it; CQConfig.Spin
// adds a polling window before sleeping and CQConfig.BusyPoll never sleeps.
// CQConfig.Manual starts no goroutine at all: the owner calls CQ.Progress
// (UCX-style progress from its own goroutine; QP.Do does it by itself),
// which avoids any goroutine hand-off on the latency path.
//
// Connecting: a QP's Endpoint (QPN, PSN, GID, LID, MTU) and an MR's
// RemoteMR (address, length, rkey) are plain values with a fixed binary
// form; the caller carries them to the peer (the engine does it over its
// wire protocol) and calls QP.Connect with the peer's Endpoint.
//
// Lifetime: every object has an idempotent Close. A PD with open MRs or
// QPs, or a CQ with QPs, refuses to close (ErrBusy); Device.Close closes
// everything created from it in reverse order. QP.Close moves the QP to the
// error state and waits for its outstanding work requests to complete
// (flushed) so that no Completer is lost.
//
// Memory given to Register must not be in the Go heap (use NewBuffer, or
// other mmapped memory) and must stay mapped until the MR is closed.
package rdma
