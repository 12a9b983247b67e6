#!/usr/bin/env bash
# bench-compare.sh - gxfer's rdma package against perftest on the same
# Soft-RoCE device (rxe0, GID 0) in the same VM boot:
#   RDMA write bandwidth at 64 KiB:  BenchmarkWriteBandwidth  vs ib_write_bw -s 65536
#   8-byte RDMA write latency:       BenchmarkWritePingPong   vs ib_write_lat -s 8
#     (both: half of a write ping-pong round trip, each side spinning on memory)
#   plus BenchmarkWriteLatency: one write at a time through the completion path.
# Each gxfer benchmark runs in the CQ modes event (sleep on the completion
# channel via the netpoller), busy (busy-poll goroutine) and manual (the
# caller progresses the CQ, as perftest polls its own). Several rounds each
# run perftest and then gxfer (bench-in-vm.sh); ratios are per round and the
# summary prints their medians, since the host may be shared with other jobs.
# Under QEMU TCG these are software numbers; only the ratios mean something.
# usage: testbed/rxe/bench-compare.sh
# env: ROUNDS (default 3), BENCHTIME (go -test.benchtime, default 2s),
#   BW_ITERS (ib_write_bw -n, default 2000), LAT_ITERS (ib_write_lat -n,
#   default 2000), RXEVM_OUT (which VM build, default $RXEVM_DIR/out), RXEVM_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=$PWD/testbed/rxe
export PATH=$PATH:/usr/local/go/bin
export RXEVM_DIR=${RXEVM_DIR:-/tmp/gxfer-rxevm}
"$HERE/make-vm.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
go test -c -o "$T/rdma.test" ./rdma/
"$HERE/run-in-vm.sh" -t 2400 -f "$T/rdma.test" -f "$HERE/bench-in-vm.sh" \
	env ROUNDS="${ROUNDS:-3}" BENCHTIME="${BENCHTIME:-2s}" BW_ITERS="${BW_ITERS:-2000}" \
	LAT_ITERS="${LAT_ITERS:-2000}" sh ./bench-in-vm.sh
