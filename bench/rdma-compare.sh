#!/usr/bin/env bash
# rdma-compare.sh - gxfer perf over rdma against perftest on the same
# Soft-RoCE device (rxe0, GID 0) in the same QEMU VM boot (testbed/rxe):
#   gxfer perf -x rdma:... -t put_bw -s 64K   vs  ib_write_bw -s 65536   (goal: >= 0.95x)
#   gxfer perf -x rdma:... -t put_lat -s 8    vs  ib_write_lat -s 8      (goal: <= 1.1x)
# Client and server are two gxfer processes in the VM (control channel on
# 127.0.0.1, data by RDMA on rxe0), in each -rdma-cq mode of $MODES. The
# latency test also runs bench/rdmafloor, ib_write_lat's loop in Go over
# the verbs binding alone: what any Go program pays here.
# The work is done by testbed/rxe/perf-in-vm.sh, which prints per-round
# figures and a summary of median ratios. Under QEMU TCG the absolute
# numbers are software numbers; the ratios are what count.
# usage: bash bench/rdma-compare.sh   (root: it boots the VM; ~2-4 min)
# env: ROUNDS (default 3), BW_ITERS, LAT_ITERS (perftest -n, default 2000),
#   GTIME (gxfer -time, default 3s), WINDOW (gxfer put_bw -O, default 128),
#   MODES (default "event spin busy busy1"; a 1 suffix: GOMAXPROCS=1),
#   TESTS (default "bw lat"), RXEVM_OUT, RXEVM_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
TB=$PWD/testbed/rxe
export PATH=$PATH:/usr/local/go/bin
export RXEVM_DIR=${RXEVM_DIR:-/tmp/gxfer-rxevm}
"$TB/make-vm.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
go build -o "$T/gxfer" ./cmd/gxfer
go build -o "$T/rdmafloor" ./bench/rdmafloor
"$TB/run-in-vm.sh" -t 2400 -f "$T/gxfer" -f "$T/rdmafloor" -f "$TB/perf-in-vm.sh" \
	env ROUNDS="${ROUNDS:-3}" BW_ITERS="${BW_ITERS:-2000}" LAT_ITERS="${LAT_ITERS:-2000}" \
	GTIME="${GTIME:-3s}" WINDOW="${WINDOW:-128}" MODES="${MODES:-event spin busy busy1}" TESTS="${TESTS:-bw lat}" LATPIN="${LATPIN:-1}" sh ./perf-in-vm.sh
