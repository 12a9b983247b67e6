#!/bin/sh
# bench-in-vm.sh - runs INSIDE the rxe VM (bench-compare.sh copies it in with
# the rdma test binary). Rounds interleave perftest and gxfer so that both
# see the same conditions (the host may be shared); ratios are computed per
# round, and the summary prints their medians.
# env: ROUNDS, BENCHTIME, BW_ITERS, LAT_ITERS (bench-compare.sh sets them).
set -u
ROUNDS=${ROUNDS:-3} BENCHTIME=${BENCHTIME:-2s} BW_ITERS=${BW_ITERS:-2000} LAT_ITERS=${LAT_ITERS:-2000}
echo "kernel $(uname -r), $(nproc) vCPU (TCG), device rxe0, GID 0; $ROUNDS rounds, go benchtime $BENCHTIME"

pair() { # tool args...: server in the background, client via 127.0.0.1; prints the result line
	t=$1; shift
	$t -d rxe0 -x 0 -F "$@" >/tmp/srv.txt 2>&1 &
	sleep 1
	timeout 300 $t -d rxe0 -x 0 -F "$@" 127.0.0.1 >/tmp/cli.txt 2>&1 || { cat /tmp/cli.txt /tmp/srv.txt >&2; exit 1; }
	wait
	grep -A1 -E '^ #bytes' /tmp/cli.txt | tail -1
}
gobench() { # regex
	./rdma.test -test.run '^$' -test.bench "$1" -test.benchtime "$BENCHTIME" -test.count 1 >/tmp/go1.txt 2>&1 ||
		{ cat /tmp/go1.txt >&2; exit 1; }
	grep -E '^Benchmark' /tmp/go1.txt
}
# metric UNIT ROUND: "round name value" lines from Go benchmark output
metric() { awk -v r="$2" -v u="$1" '{ for (i = 2; i <= NF; i++) if ($i == u) { n = $1; sub(/-[0-9]+$/, "", n); print r, n, $(i-1) } }'; }

: >/tmp/res.txt
r=1
while [ "$r" -le "$ROUNDS" ]; do
	echo "=== round $r"
	bw=$(pair ib_write_bw -s 65536 -n "$BW_ITERS" --report_gbits) || exit 1
	echo "ib_write_bw -s 65536 -n $BW_ITERS:$bw"
	echo "$r perftest-bw $(echo "$bw" | awk '{print $4}')" >>/tmp/res.txt
	gobench 'WriteBandwidth/./(event|busy|manual)' | tee /tmp/g.txt
	metric Gb/s "$r" </tmp/g.txt >>/tmp/res.txt
	lat=$(pair ib_write_lat -s 8 -n "$LAT_ITERS") || exit 1
	echo "ib_write_lat -s 8 -n $LAT_ITERS:$lat"
	echo "$lat" | awk -v r="$r" '{print r, "perftest-lat-typical", $5; print r, "perftest-lat-avg", $6}' >>/tmp/res.txt
	gobench 'Write(PingPong|Latency)/./(event|busy|manual)' | tee /tmp/g.txt
	{ metric us/half-rtt "$r" </tmp/g.txt; metric us/half-rtt-p50 "$r" </tmp/g.txt | sed 's/ \([^ ]*\) / \1@p50 /'
	  metric us/write "$r" </tmp/g.txt; } >>/tmp/res.txt
	r=$((r + 1))
done

echo "=== summary: medians over the valid rounds; ratios per round (rxe0 under TCG: compare ratios, not absolute values)"
# res.txt: "round name value". perftest under TCG sometimes prints inf/nan
# (see the testbed notes): such rounds are left out.
awk '
function median(a, n,   i, j, t) {
	if (n == 0) return -1
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function ok(x) { return x ~ /^[0-9]+(\.[0-9]+)?$/ && x + 0 > 0 }
function med(name,   r, k, x) { k = 0; for (r = 1; r <= R; r++) if (ok(v[r, name])) x[++k] = v[r, name]; return median(x, k) }
function row(n, base, unit, label,   r, k, x, q, m) {
	k = 0
	for (r = 1; r <= R; r++) if (ok(v[r, n]) && ok(v[r, base])) { x[++k] = v[r, n]; q[k] = v[r, n] / v[r, base] }
	m = n; sub(/^Benchmark[A-Za-z]+\//, "", m)
	printf "  gxfer %-26s %8.3f %s  ratio %.2fx %s (%d rounds)\n", m, median(x, k), unit, median(q, k), label, k
}
{ v[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++N] = $2 } if ($1 > R) R = $1 }
END {
	printf "RDMA write bandwidth, 64 KiB: ib_write_bw BW average %.3f Gb/s\n", med("perftest-bw")
	for (i = 1; i <= N; i++) if (order[i] ~ /^BenchmarkWriteBandwidth/) row(order[i], "perftest-bw", "Gb/s", "ib_write_bw")
	printf "RDMA write latency, 8 B, half round trip: ib_write_lat t_typical %.2f us, t_avg %.2f us\n", med("perftest-lat-typical"), med("perftest-lat-avg")
	for (i = 1; i <= N; i++) if (order[i] ~ /^BenchmarkWritePingPong/ && order[i] !~ /@p50$/) {
		row(order[i] "@p50", "perftest-lat-typical", "us  ", "ib_write_lat t_typical (medians)")
		row(order[i], "perftest-lat-avg", "us  ", "ib_write_lat t_avg (means)")
	}
	print "gxfer, one 8 B write at a time, post to Completion (a full round trip plus the completion path):"
	for (i = 1; i <= N; i++) if (order[i] ~ /^BenchmarkWriteLatency/) {
		m = order[i]; sub(/^BenchmarkWriteLatency\//, "", m)
		printf "  %-10s %8.2f us\n", m, med(order[i])
	}
}' /tmp/res.txt
