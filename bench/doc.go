// Package bench holds gxfer's workload definitions and report formats,
// shared by benchmarks and by the gxfer perf command.
//
// A Test is a named transfer between two memory types over a transport
// ("h2d": host to Gaudi over "local"). Tests and transports live in a
// registry keyed by name; transports that later issues add (rdma, tcp) are
// registered as unavailable with the reason, so that tools can say why.
//
// Run measures tests at message sizes, in the spirit of ucx_perftest:
// a number of iterations or a duration per size, a warm-up, a window of
// outstanding submissions and a batch of copies per submission. Buffers
// are allocated once per (test, size) and reused across iterations; the
// destination is verified after each measurement, so no number is ever
// reported for a copy that did not move the bytes.
//
// Latency is the round trip of one copy (submit to observed completion)
// when one copy is in flight, and the time per copy otherwise. Bandwidth
// is bytes moved over wall time, in MB/s with MB = 2^20 bytes. A Report
// is written as text tables, JSON, CSV, the Go benchmark format (for
// benchstat) or a plot (SVG or PNG, gonum.org/v1/plot).
//
// Peer tests run over the ipc transport (a unix socket and shared memfds,
// same host) against a perf server in another process, like ucx_perftest's
// client and server: Listen and Server.Serve on one side, DialPeer on the
// other, and the tests put_lat (a ping-pong polled in host memory, latency
// = round trip / 2), put_bw, get_lat and get_bw. The two sides agree on
// buffers over a control socket next to the engine socket (PATH.ctl), one
// JSON object per line; the server serves one client at a time. The
// harness times operations with the TSC where it is invariant (as
// ucx_perftest does), since a clock read of the monotonic clock costs
// about as much as a small Put. Params.Clock (gxfer perf -clock) forces
// the TSC where the CPU does not report it invariant but two calibrations
// agree (perftest always uses it; in a TCG VM a monotonic read costs
// 3.6 us), or the monotonic clock.
//
// Every result names its device and whether it is the emulator
// (dma/hlsim); a peer test names the peer's device too.
package bench
