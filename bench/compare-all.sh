#!/usr/bin/env bash
# compare-all.sh: every comparison issue 20's goals are judged by, in one
# command, and one table of the goals:
#
#   part      what runs                                         needs
#   ucx       bench/ucx-compare.sh: unix transport vs           ucx_perftest, taskset
#             ucx_perftest posix/cma (put_bw, put_lat)
#   tcp       bench/tcp-compare.sh: tcp between two network     root, ip, iperf3, ucx_perftest
#             namespaces vs iperf3 and ucx_perftest over tcp
#             (and nuttcp, a second bandwidth reference, when
#             installed or installable)
#   rdma      bench/rdma-compare.sh: rdma on Soft-RoCE in the   the VM testbed (testbed/rxe):
#             QEMU VM vs ib_write_bw/ib_write_lat, rdmafloor    qemu and a built VM, or RDMA=1
#   gaudi     engine BenchmarkGaudiOverhead (gaudi2 and gaudi3 models, batch 1 and 256),
#             alternated with dma BenchmarkGaudiFloor (the floor under batch 1)
#   idle      engine BenchmarkIdleCPU (gaudi2 and gaudi3 models, 10 s per repetition each)
#   memcache  memcache BenchmarkHit, 100k regions
#   hostcopy  bench/memcpyprobe -engine: engine CopySync and a unix put
#             of 64 MiB against the memory-copy limit (best of 1..N
#             threads of memcpy/copy()) and one core's copy, interleaved
#             slice by slice in the same run, best slice of each per
#             repetition (HOSTCOPY_SLICES)
#
# Each part runs REPS repetitions (the scripts' REPS/ROUNDS, go test
# -count), interleaved within the part as its script does. A part that
# cannot run here (tool missing with INSTALL=0, not root, no VM) is
# skipped and the table says why; a part that fails is reported as failed
# and the others still run. Every part's own table is printed as it
# finishes; then bench/compare-goals.py prints the goal table: a row per
# goal with gxfer's and the reference's figures and the per-repetition
# ratio, median [min-max], and met / NOT met (for memory-bound goals a
# median within 0.97 of the goal whose ranges overlap counts as met, and
# the row says so). Raw outputs and goals.json stay in $OUT.
#
# Usage: bash bench/compare-all.sh          (about 10 minutes on an idle
#        machine without the VM; rdma adds 5-10 minutes)
#        QUICK=1 bash bench/compare-all.sh  (one short repetition of each)
# Environment:
#   REPS=5 (QUICK: 1)       repetitions of every part
#   PARTS="ucx tcp rdma gaudi idle memcache hostcopy"
#   INSTALL=1               let the scripts apt-get install missing tools
#                           (0: skip the part instead)
#   RDMA=auto               auto: run when qemu-system-x86_64 and a built
#                           VM ($RXEVM_DIR/out, default /tmp/gxfer-rxevm)
#                           are there; 1: always (builds the VM); 0: never
#   UCX_SIZES, UCX_RUN_SEC  ucx-compare.sh's SIZES and RUN_SEC
#   TCP_RUN_SEC, TCP_IPERF_SEC, TCP_UCX_ITERS, TCP_WINDOWS
#   RDMA_MODES="event busy busy1", RDMA_GTIME
#   BENCHTIME_GAUDI=1s BENCHTIME_MEMCACHE=1s HOSTCOPY_SLICES=20
#   OUT=dir, GXFER_BIN=path (as the scripts)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
	REPS=${REPS:-1}
	UCX_RUN_SEC=${UCX_RUN_SEC:-0.05}
	TCP_RUN_SEC=${TCP_RUN_SEC:-0.2}
	TCP_IPERF_SEC=${TCP_IPERF_SEC:-1}
	TCP_UCX_ITERS=${TCP_UCX_ITERS:-2000}
	TCP_WINDOWS=${TCP_WINDOWS:-"4"}
	RDMA_GTIME=${RDMA_GTIME:-1s}
	BENCHTIME_GAUDI=${BENCHTIME_GAUDI:-100x}
	BENCHTIME_MEMCACHE=${BENCHTIME_MEMCACHE:-100000x}
	HOSTCOPY_SLICES=${HOSTCOPY_SLICES:-4}
fi
REPS=${REPS:-5}
PARTS=${PARTS:-"ucx tcp rdma gaudi idle memcache hostcopy"}
INSTALL=${INSTALL:-1}
RDMA=${RDMA:-auto}
RXEVM_DIR=${RXEVM_DIR:-/tmp/gxfer-rxevm}
BENCHTIME_GAUDI=${BENCHTIME_GAUDI:-1s}
BENCHTIME_MEMCACHE=${BENCHTIME_MEMCACHE:-1s}
HOSTCOPY_SLICES=${HOSTCOPY_SLICES:-20}
OUT=${OUT:-$(mktemp -d /tmp/compare-all.XXXXXX)}
mkdir -p "$OUT"
: >"$OUT/parts.txt"

die() { echo "compare-all: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 not found"
command -v go >/dev/null || die "go not found"

# mark PART STATUS REASON: one line of $OUT/parts.txt, read by compare-goals.py.
mark() {
	echo "$1 $2 ${3:-}" >>"$OUT/parts.txt"
	[ "$2" = ran ] || echo "## $1: $2${3:+: $3}"
}

want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# missing TOOL...: the tools not in PATH.
missing() {
	local t m=""
	for t in "$@"; do command -v "$t" >/dev/null || m="$m $t"; done
	echo "${m# }"
}

# can_install: INSTALL=1 and apt-get usable (root or sudo).
can_install() { [ "$INSTALL" = 1 ] && command -v apt-get >/dev/null && { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; }; }

# run_script PART LOG SCRIPT-ENV...: runs a comparison script with env,
# its table to stdout and $OUT/LOG; marks the part.
run_script() {
	local part=$1 log=$2
	shift 2
	echo
	echo "## $part: $*"
	if env "$@" 2>"$OUT/$part.err" | tee "$OUT/$log"; then
		mark "$part" ran
	else
		tail -5 "$OUT/$part.err" | sed 's/^/#   /'
		mark "$part" failed "see $OUT/$part.err"
	fi
}

loadavg() { cut -d' ' -f1 /proc/loadavg; }
echo "# compare-all: $(date -u +%FT%TZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), load average $(loadavg)"
echo "# REPS=$REPS QUICK=$QUICK PARTS=\"$PARTS\"; raw outputs in $OUT"
if [ "$(awk '{print ($1 > 0.5)}' /proc/loadavg)" = 1 ]; then
	echo "# WARNING: the machine is busy (load average $(loadavg)): the figures will be noisy"
fi

# One gxfer binary for every script.
if [ -z "${GXFER_BIN:-}" ] && { want ucx || want tcp; }; then
	echo "# building gxfer" >&2
	(cd "$repo" && go build -o "$OUT/gxfer-bin" ./cmd/gxfer) || die "go build ./cmd/gxfer failed"
	GXFER_BIN=$OUT/gxfer-bin
	GXFER_FROM="go build of $repo at $(cd "$repo" && git describe --always --dirty 2>/dev/null || echo '?')"
	export GXFER_FROM
fi

# ------------------------------------------------------------ ucx
if want ucx; then
	m=$(missing taskset)
	[ -n "$m" ] || can_install || m=$(missing ucx_perftest)
	if [ -n "$m" ]; then
		mark ucx skipped "not installed: $m"
	else
		run_script ucx ucx.log REPS="$REPS" OUT="$OUT/ucx" GXFER_BIN="$GXFER_BIN" \
			${UCX_SIZES:+SIZES="$UCX_SIZES"} ${UCX_RUN_SEC:+RUN_SEC="$UCX_RUN_SEC"} bash "$here/ucx-compare.sh"
	fi
fi

# ------------------------------------------------------------ tcp
if want tcp; then
	m=$(missing taskset ip)
	[ -n "$m" ] || can_install || m=$(missing iperf3 ucx_perftest)
	if [ "$(id -u)" -ne 0 ]; then
		mark tcp skipped "needs root (network namespaces)"
	elif [ -n "$m" ]; then
		mark tcp skipped "not installed: $m"
	else
		# nuttcp is a second reference only: without it (and no
		# installing), the part runs without that table.
		nut=1
		[ -z "$(missing nuttcp)" ] || can_install || nut=0
		run_script tcp tcp.log REPS="$REPS" OUT="$OUT/tcp" GXFER_BIN="$GXFER_BIN" NUTTCP="$nut" \
			${TCP_RUN_SEC:+RUN_SEC="$TCP_RUN_SEC"} ${TCP_IPERF_SEC:+IPERF_SEC="$TCP_IPERF_SEC"} \
			${TCP_UCX_ITERS:+UCX_ITERS="$TCP_UCX_ITERS"} ${TCP_WINDOWS:+WINDOWS="$TCP_WINDOWS"} bash "$here/tcp-compare.sh"
	fi
fi

# ------------------------------------------------------------ rdma
if want rdma; then
	why=""
	case $RDMA in
	0) why="RDMA=0" ;;
	1) ;;
	*)
		if ! command -v qemu-system-x86_64 >/dev/null; then
			why="no VM testbed: qemu-system-x86_64 not installed (RDMA=1 installs it and builds the VM, testbed/rxe/make-vm.sh)"
		elif [ ! -f "$RXEVM_DIR/out/initramfs.img" ]; then
			why="no VM testbed: $RXEVM_DIR/out has no built VM (RDMA=1 builds it, testbed/rxe/make-vm.sh)"
		elif [ "$(id -u)" -ne 0 ]; then
			why="the VM testbed needs root"
		fi
		;;
	esac
	if [ -n "$why" ]; then
		mark rdma skipped "$why"
	else
		run_script rdma rdma.log ROUNDS="$REPS" MODES="${RDMA_MODES:-event busy busy1}" RXEVM_DIR="$RXEVM_DIR" \
			${RDMA_GTIME:+GTIME="$RDMA_GTIME"} bash "$here/rdma-compare.sh"
	fi
fi

# ------------------------------------------------------------ go benchmarks
# testbin PART PKG: builds PKG's test binary once, as $OUT/PKG.test
# (errors in $OUT/PART.err); fails when it cannot.
testbin() {
	local bin
	bin="$OUT/$(basename "$2").test"
	[ -x "$bin" ] || (cd "$repo" && go test -c -o "$bin" "./$2") >>"$OUT/$1.err" 2>&1
}
# benchrun PKG BENCH BENCHTIME COUNT: PKG's benchmarks from its test
# binary, run in PKG's directory as go test runs them.
benchrun() {
	(cd "$repo/$1" && "$OUT/$(basename "$1").test" -test.run '^$' -test.bench "$2" -test.benchtime "$3" -test.count "$4")
}
# gobench PART PKG BENCH BENCHTIME: go test -bench in PKG, REPS runs
# (-count), output in $OUT/bench-PART.txt; the test binary is built once
# per package.
gobench() {
	local part=$1 pkg=$2 bench=$3 bt=$4
	echo
	echo "## $part: go test -run '^\$' -bench '$bench' -benchtime $bt -count $REPS ./$pkg/"
	testbin "$part" "$pkg" ||
		{ tail -5 "$OUT/$part.err" | sed 's/^/#   /'; mark "$part" failed "go test -c ./$pkg failed (see $OUT/$part.err)"; return; }
	if benchrun "$pkg" "$bench" "$bt" "$REPS" >"$OUT/bench-$part.txt" 2>"$OUT/$part.err"; then
		grep -E '^Benchmark' "$OUT/bench-$part.txt"
		mark "$part" ran
	else
		tail -5 "$OUT/bench-$part.txt" "$OUT/$part.err" | sed 's/^/#   /'
		mark "$part" failed "see $OUT/bench-$part.txt"
	fi
}
# gaudi: the engine's overhead and the floor under it (dma
# BenchmarkGaudiFloor: the binding and the emulator alone), alternated
# repetition by repetition.
if want gaudi; then
	echo
	echo "## gaudi: go test -run '^\$' -bench GaudiOverhead (engine) and GaudiFloor (dma) -benchtime $BENCHTIME_GAUDI, alternated, $REPS repetitions"
	gerr=
	testbin gaudi engine && testbin gaudi dma || gerr="go test -c failed (see $OUT/gaudi.err)"
	: >"$OUT/bench-gaudi.txt"
	for ((r = 1; r <= REPS && ${#gerr} == 0; r++)); do
		benchrun engine '^BenchmarkGaudiOverhead$/^gaudi[23]$/^batch=(1|256)$' "$BENCHTIME_GAUDI" 1 >>"$OUT/bench-gaudi.txt" 2>>"$OUT/gaudi.err" &&
			benchrun dma '^BenchmarkGaudiFloor$' "$BENCHTIME_GAUDI" 1 >>"$OUT/bench-gaudi.txt" 2>>"$OUT/gaudi.err" ||
			gerr="see $OUT/bench-gaudi.txt and $OUT/gaudi.err"
	done
	if [ -z "$gerr" ]; then
		grep -E '^Benchmark' "$OUT/bench-gaudi.txt"
		mark gaudi ran
	else
		tail -5 "$OUT/bench-gaudi.txt" "$OUT/gaudi.err" | sed 's/^/#   /'
		mark gaudi failed "$gerr"
	fi
fi
want idle && gobench idle engine '^BenchmarkIdleCPU$' 1x
want memcache && gobench memcache memcache '^BenchmarkHit$/^regions=100k$' "$BENCHTIME_MEMCACHE"
if want hostcopy; then
	echo
	echo "## hostcopy: bench/memcpyprobe -engine -size 64MiB -reps $REPS -slices $HOSTCOPY_SLICES"
	if (cd "$repo" && go build -o "$OUT/memcpyprobe" ./bench/memcpyprobe) >"$OUT/hostcopy.err" 2>&1 &&
		"$OUT/memcpyprobe" -engine -size 64MiB -reps "$REPS" -slices "$HOSTCOPY_SLICES" >"$OUT/bench-hostcopy.txt" 2>>"$OUT/hostcopy.err"; then
		cat "$OUT/bench-hostcopy.txt"
		mark hostcopy ran
	else
		tail -5 "$OUT/hostcopy.err" | sed 's/^/#   /'
		mark hostcopy failed "see $OUT/hostcopy.err"
	fi
fi

echo
echo "## goals (issue 20; tcp: issue 8), $REPS repetition(s); load average at end $(loadavg)"
python3 "$here/compare-goals.py" "$OUT"
