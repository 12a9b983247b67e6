#!/usr/bin/env bash
# testbed/rxe/ci.sh - gxfer's RDMA CI, for .ci/run to call (root, Debian 12).
#
#  1. installs the host packages it needs (apt, only those missing);
#  2. checks internal/verbs' ABI declarations against <infiniband/verbs.h>
#     (go test -tags verbsabi ./internal/verbs/abicheck/) and that the verbs
#     and rdma packages build without cgo;
#  3. for each kernel (Debian 6.1 with vgem; 6.12 bookworm-backports with
#     udmabuf): builds the Soft-RoCE QEMU VM (cached under $RXEVM_DIR) and
#     runs the internal/verbs and rdma tests inside it, for real on rxe0,
#     with -race, plus every benchmark once (so they cannot rot), then the
#     engine's RDMA endpoint tests (go test -run RDMA ./engine/; on the
#     stable kernel also -run TestEndpointSuite/rdma), then
#     gxfer perf's rdma client/server tests and the rdma example
#     (go test -run RDMA ./cmd/gxfer/ ./examples/rdma/).
# Tests inside the VM must not skip for lack of a device or of the expected
# DMA-BUF exporter (GXFER_REQUIRE_RDMA, GXFER_REQUIRE_DMABUF_EXPORTER).
# Exits non-zero on any failure. Logs: $RXEVM_DIR/ci-<kernel>.log.
#
# env: RXEVM_DIR   VM build cache and logs (default /tmp/gxfer-rxevm)
#      GXFER_CI_KERNELS  kernels to test (default "stable backports")
#      GXFER_CI_RACE     1 (default): go test -race in the VM; 0: without
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=$PWD/testbed/rxe
export PATH="$PATH:/usr/local/go/bin"
export RXEVM_DIR=${RXEVM_DIR:-/tmp/gxfer-rxevm}
mkdir -p "$RXEVM_DIR"
t0=$(date +%s)
step() { printf '=== [rxe-ci %4ds] %s\n' $(($(date +%s) - t0)) "$*"; }

step "host packages"
need=()
for p in qemu-system-x86 busybox-static kmod cpio xz-utils zstd libibverbs-dev gcc libc6-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	echo "apt-get install ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

step "ABI: internal/verbs/abi.h against <infiniband/verbs.h>; builds without cgo"
go vet -tags verbsabi ./internal/verbs/... ./rdma/...
go test -count=1 -tags verbsabi ./internal/verbs/abicheck/
CGO_ENABLED=0 go build ./internal/verbs/ ./rdma/

race=-race
[ "${GXFER_CI_RACE:-1}" = 1 ] || race=
# vmtest WHAT LOG SHOW TAIL ARGS...: go test ARGS inside the VM of $out,
# verbose, output in LOG; prints LOG's lines matching SHOW and, on failure,
# its last TAIL lines, then exits with go test's status.
vmtest() {
	what=$1 log=$2 show=$3 lines=$4
	shift 4
	step "$what in the VM (log: $log)"
	rc=0
	go test -count=1 -p 1 $race -timeout 15m -exec "$HERE/go-exec-in-vm.sh" -v "$@" >"$log" 2>&1 || rc=$?
	grep -E "$show" "$log" || true
	if [ $rc != 0 ]; then
		echo "rxe-ci: $what failed on the $k kernel (status $rc); last $lines lines of $log:"
		tail -"$lines" "$log"
		exit $rc
	fi
}
failures='^(--- (FAIL|SKIP)|ok |FAIL|panic:)|    --- (FAIL|SKIP)|WARNING: DATA RACE'
results='^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:)|    --- (FAIL|SKIP)|WARNING: DATA RACE'
for k in ${GXFER_CI_KERNELS:-stable backports}; do
	case $k in
	stable) out=$RXEVM_DIR/out exporter=vgem ;;
	backports) out=$RXEVM_DIR/out-bpo exporter=udmabuf ;;
	*) echo "rxe-ci: unknown kernel $k" >&2; exit 2 ;;
	esac
	step "VM, $k kernel ($out)"
	RXEVM_KERNEL=$k RXEVM_OUT=$out RXEVM_SKIP_APT=1 "$HERE/make-vm.sh"
	export RXEVM_OUT=$out GXFER_REQUIRE_RDMA=1 GXFER_REQUIRE_DMABUF_EXPORTER=$exporter
	vmtest "tests, kernel $(cat "$out/kernel-version")," "$RXEVM_DIR/ci-$k.log" \
		"$failures|DMABufSupport|RegisterDMABuf" 60 \
		-bench . -benchtime 1x ./internal/verbs/ ./rdma/
	# The engine's RDMA endpoints (two engines, or a re-executed peer
	# process, on rxe0): only the RDMA tests (and benchmarks, once), the
	# rest runs on the host.
	vmtest "engine RDMA tests" "$RXEVM_DIR/ci-$k-engine.log" "$results" 80 \
		-run 'RDMA' -bench 'RDMA' -benchtime 1x ./engine/
	# The endpoint suite over RDMA (every case the other transports run;
	# -run 'RDMA' above does not reach a subtest): on the stable kernel
	# only, for time (about 8 minutes here under TCG). Two race-built
	# engines with lists of every memory pair need more than 1G.
	if [ "$k" = stable ]; then
		RXEVM_MEM=3G RXEVM_TIMEOUT=1800 \
			vmtest "engine endpoint suite over RDMA" "$RXEVM_DIR/ci-$k-suite.log" "$results" 80 \
			-timeout 28m -run 'TestEndpointSuite/rdma' ./engine/
	fi
	# Two NICs per side (-n veth2: rxe0 and rxe2 reach rxe1 and rxe3):
	# transfers sliced over both.
	RXEVM_NETDEV=veth2 GXFER_RDMA_NICS=rxe0,rxe2/rxe1,rxe3 GXFER_REQUIRE_NICS=1 \
		vmtest "RDMA tests over two NICs" "$RXEVM_DIR/ci-$k-nics.log" "$results|work requests per NIC" 80 \
		-run 'TestRDMANICs|TestRunRDMA' ./engine/ ./examples/rdma/
	# gxfer perf over rdma: a client and a server (two engines in one test
	# process) on rxe0, tiny sizes and -time; plus the -x rdma usage errors;
	# the examples/rdma program; and bench/rdmafloor's ping-pong.
	vmtest "gxfer perf -x rdma tests" "$RXEVM_DIR/ci-$k-perf.log" \
		"$results|rdma_test.go:[0-9]+: (put|get)_" 80 \
		-run 'RDMA' ./cmd/gxfer/ ./examples/rdma/ ./bench/rdmafloor/
done
step "RDMA CI passed"
