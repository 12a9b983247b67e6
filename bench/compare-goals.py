#!/usr/bin/env python3
"""compare-goals.py OUT: the goal table of bench/compare-all.sh.

Reads what compare-all.sh left in OUT and prints one Markdown table, a row
per goal of issue 20 (and the TCP goals of issue 8), and writes the same
rows to OUT/goals.json:

  OUT/parts.txt            one line per part: NAME STATUS REASON...
                           (STATUS: ran, skipped, failed)
  OUT/ucx/summary.json     bench/ucx-compare.sh's per-repetition figures
  OUT/tcp/summary.json     bench/tcp-compare.sh's
  OUT/rdma.log             bench/rdma-compare.sh's output (per-round lines
                           of testbed/rxe/perf-in-vm.sh)
  OUT/bench-NAME.txt       go test -bench output (-count N): gaudi,
                           idle, memcache; hostcopy: bench/memcpyprobe
                           -engine's lines (Go benchmark format)

Ratios are per repetition (gxfer's figure over the reference's from the
same, interleaved repetition), printed as median [min-max]. A goal
"ratio >= G" is met when the median ratio is >= G ("<= G" likewise). For
memory-bound goals (host copies and puts through shared memory, whose
run-to-run spread on a shared machine is a few percent) it also counts as
met when the median ratio is >= 0.97 G and gxfer's [min-max] overlaps G
times the reference's [min-max]; the row says so.
"""
import json
import os
import re
import statistics
import sys

MEM_SLACK = 0.97


def med(v):
    return statistics.median(v)


def rng(v, f):
    return "%s [%s-%s]" % (f(med(v)), f(min(v)), f(max(v)))


def f2(x):
    return "%.2f" % x


def fnum(x):
    if abs(x) >= 100:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.2f" % x


def size_name(n):
    n = int(n)
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0:
            return "%d %s" % (n // s, unit)
    return "%d B" % n


class Goals:
    def __init__(self):
        self.rows = []

    def add(self, area, goal, gx, ref, value, verdict, note=""):
        self.rows.append({"area": area, "goal": goal, "gxfer": gx, "reference": ref,
                          "measured": value, "verdict": verdict, "note": note})

    def skip(self, area, goal, why):
        self.add(area, goal, "-", "-", "-", "skipped: " + why)

    def ratio(self, area, goal, op, target, gx, ref, unit_fmt=fnum, memory_bound=False, every=False, note=""):
        """gx and ref: per-repetition figures, paired by index; the
        ratio is gx[i] / ref[i]."""
        n = min(len(gx), len(ref))
        gx, ref = gx[:n], ref[:n]
        if n == 0:
            self.skip(area, goal, "no figures")
            return
        ratios = [g / r for g, r in zip(gx, ref) if r > 0]
        if not ratios:
            self.skip(area, goal, "reference figures are zero")
            return
        m = min(ratios) if every and op == ">=" else max(ratios) if every else med(ratios)
        verdict = verdict_of(op, target, m, gx, ref, memory_bound, every)
        self.add(area, goal, rng(gx, unit_fmt), rng(ref, unit_fmt), rng(ratios, f2) + "x", verdict, note)

    def absolute(self, area, goal, op, target, values, unit, note=""):
        if not values:
            self.skip(area, goal, "no figures")
            return
        m = med(values)
        ok = m >= target if op == ">=" else m <= target
        self.add(area, goal, rng(values, fnum) + " " + unit, "goal %s %s" % (fnum(target), unit),
                 rng([v / target for v in values], f2) + "x goal",
                 "met" if ok else "NOT met (median %s %s)" % (fnum(m), unit), note)


def verdict_of(op, target, m, gx, ref, memory_bound, every):
    ok = m >= target if op == ">=" else m <= target
    what = "min" if every and op == ">=" else "max" if every else "median"
    if ok:
        return "met"
    if memory_bound and op == ">=" and not every and m >= MEM_SLACK * target:
        lo, hi = target * min(ref), target * max(ref)
        if max(gx) >= lo and min(gx) <= hi:
            return "met (memory-bound rule: median %.2fx >= %.2f x goal and ranges overlap)" % (m, MEM_SLACK)
    return "NOT met (%s %.2fx)" % (what, m)


def read_parts(out):
    parts = {}
    try:
        for line in open(os.path.join(out, "parts.txt")):
            f = line.rstrip("\n").split(" ", 2)
            if len(f) >= 2:
                parts[f[0]] = (f[1], f[2] if len(f) > 2 else "")
    except OSError:
        pass
    return parts


def part_skip(parts, name):
    """None if part name ran, else why not."""
    st, why = parts.get(name, ("skipped", "not run"))
    if st == "ran":
        return None
    return "%s%s" % ("" if st == "skipped" else st + ": ", why or st)


def part_data(g, out, parts, part, fname, parse, area, goals, empty_why=None):
    """parse(the text of OUT/fname) once part ran. When part did not run
    or fname cannot be read or parsed (or, with empty_why, parses to
    nothing), marks goals skipped and returns None."""
    why = part_skip(parts, part)
    if why is None:
        try:
            with open(os.path.join(out, fname)) as f:
                res = parse(f.read())
            if res or empty_why is None:
                return res
            why = empty_why
        except (OSError, ValueError, KeyError) as e:
            why = "cannot read %s: %s" % (fname, e)
    for goal in goals:
        g.skip(area, goal, why)
    return None


# ---------------------------------------------------------------- unix vs UCX

UNIX_BW_SIZES = [4096, 65536, 1 << 20, 16 << 20]


def unix_goals(g, out, parts):
    area = "unix vs UCX"
    bw_goals = ["put_bw %s >= 1.0x UCX" % size_name(s) for s in UNIX_BW_SIZES]
    lat_goal = "put_lat 8 B p50 <= 1.1x UCX posix"
    summary = part_data(g, out, parts, "ucx", "ucx/summary.json",
                        lambda t: {int(r["size"]): r for r in json.loads(t)}, area, bw_goals + [lat_goal])
    if summary is None:
        return
    for s, goal in zip(UNIX_BW_SIZES, bw_goals):
        r = summary.get(s)
        if r is None:
            g.skip(area, goal, "size not measured (SIZES)")
            continue
        bw = r["ucx_bw_mbs"]
        tl = max(bw, key=lambda t: med(bw[t]))
        g.ratio(area, goal, ">=", 1.0, r["gxfer_bw_mbs"], bw[tl], memory_bound=True,
                note="MB/s; UCX %s (the better median of posix bcopy and cma zcopy)" % tl)
    r = summary.get(8)
    if r is None:
        g.skip(area, lat_goal, "size not measured (SIZES)")
    else:
        g.ratio(area, lat_goal, "<=", 1.1, r["gxfer_lat_p50_us"], r["ucx_lat_p50_us"]["posix"],
                note="us one-way; UCX posix short")


# ---------------------------------------------------------------- tcp vs iperf3

TCP_SIZES = [1 << 20, 16 << 20]


def tcp_goals(g, out, parts):
    area = "tcp vs iperf3/UCX"
    bw_goals = ["put_bw %s >= 1.0x iperf3 (keep the lead)" % size_name(s) for s in TCP_SIZES]
    lat_goal = "put_lat 8 B p50 <= 1.2x UCX tcp (issue 8)"
    summary = part_data(g, out, parts, "tcp", "tcp/summary.json", json.loads, area, bw_goals + [lat_goal])
    if summary is None:
        return
    for s, goal in zip(TCP_SIZES, bw_goals):
        ip = summary["iperf3"].get(str(s))
        gw = summary["gxfer_put_bw"].get(str(s))
        if not ip or not gw:
            g.skip(area, goal, "size not measured")
            continue
        ref = [x["mbs"] for x in ip]
        best = max(gw, key=lambda l: med(gw[l]) / med(ref))
        g.ratio(area, goal, ">=", 1.0, gw[best], ref,
                note="MB/s; gxfer -O %s (best configuration), iperf3 one stream%s"
                % (best.replace("-O ", ""), ", -l 1 MiB (its max: one 1 MiB buffer resent)" if s > 1 << 20 else ""))
    g.ratio(area, lat_goal, "<=", 1.2, summary["gxfer_put_lat_p50_us"], summary["ucx_ucp_put_lat_p50_us"],
            note="us one-way; ucx_perftest ucp_put_lat, UCX_TLS=tcp")


# ---------------------------------------------------------------- rdma vs perftest

ROUND_RE = re.compile(r"^=== round (\d+)")
BW_RE = re.compile(r"^gxfer perf -x rdma -rdma-cq (\S+) -t put_bw .*: ([0-9.eE+-]+|nan|inf) MB/s")
LAT_RE = re.compile(r"^gxfer perf -x rdma -rdma-cq (\S+) -t put_lat .*: median ([0-9.eE+-]+|nan|inf) us, avg ([0-9.eE+-]+|nan|inf) us")


def num(s):
    try:
        x = float(s)
    except ValueError:
        return None
    return x if x > 0 and x != float("inf") else None


def perftest_fields(line):
    f = line.split(":", 1)[1].split() if ":" in line else []
    return [num(x) for x in f]


def parse_rdma(text):
    """Per round: {name: value} as perf-in-vm.sh's res.txt (perftest-bw in
    MB/s, bw-MODE, perftest-lat-typical, floor-lat-typical, lat-MODE-median)."""
    rounds, cur = [], None
    for line in text.splitlines():
        line = line.strip()
        m = ROUND_RE.match(line)
        if m:
            cur = {}
            rounds.append(cur)
            continue
        if cur is None:
            continue
        if line.startswith("ib_write_bw "):
            f = perftest_fields(line)
            if len(f) >= 4 and f[3]:
                cur["perftest-bw"] = f[3] * 1e9 / 8 / 1048576
        elif line.startswith("ib_write_lat ") or line.startswith("rdmafloor "):
            f = perftest_fields(line)
            key = "perftest" if line.startswith("ib_") else "floor"
            if len(f) >= 5 and f[4]:
                cur[key + "-lat-typical"] = f[4]
        elif BW_RE.match(line):
            m = BW_RE.match(line)
            if num(m.group(2)):
                cur["bw-" + m.group(1)] = num(m.group(2))
        elif LAT_RE.match(line):
            m = LAT_RE.match(line)
            if num(m.group(2)):
                cur["lat-%s-median" % m.group(1)] = num(m.group(2))
    return rounds


def paired(rounds, a, b):
    xs, ys = [], []
    for r in rounds:
        if a in r and b in r:
            xs.append(r[a])
            ys.append(r[b])
    return xs, ys


def rdma_goals(g, out, parts):
    area = "rdma vs perftest"
    goals = ["put_bw 64 KiB >= 0.95x ib_write_bw every round (event CQ)",
             "put_lat 8 B <= 1.2x ib_write_lat (event CQ, the default)",
             "put_lat 8 B <= 1.1x ib_write_lat (busy CQ)",
             "put_lat 8 B median <= 1.1x rdmafloor's"]
    rounds = part_data(g, out, parts, "rdma", "rdma.log", parse_rdma, area, goals, "no rounds in rdma.log")
    if rounds is None:
        return
    modes = sorted({k[3:] for r in rounds for k in r if k.startswith("bw-")} |
                   {k[4:-7] for r in rounds for k in r if k.startswith("lat-")})
    x, y = paired(rounds, "bw-event", "perftest-bw")
    if x:
        g.ratio(area, goals[0], ">=", 0.95, x, y, every=True, note="MB/s; %d rounds" % len(x))
    else:
        g.skip(area, goals[0], "no event-mode bandwidth rounds")
    x, y = paired(rounds, "lat-event-median", "perftest-lat-typical")
    if x:
        g.ratio(area, goals[1], "<=", 1.2, x, y, note="us; gxfer median vs t_typical")
    else:
        g.skip(area, goals[1], "no event-mode latency rounds")
    busy = [m for m in ("busy1", "busy") if m in modes]
    done = False
    for m in busy:
        x, y = paired(rounds, "lat-%s-median" % m, "perftest-lat-typical")
        if x:
            g.ratio(area, goals[2].replace("busy CQ", "-rdma-cq " + m), "<=", 1.1, x, y,
                    note="us; gxfer median vs t_typical%s" % (", GOMAXPROCS 1" if m.endswith("1") else ""))
            done = True
    if not done:
        g.skip(area, goals[2], "no busy-mode latency rounds (MODES)")
    best, best_r = None, None
    for m in modes:
        x, y = paired(rounds, "lat-%s-median" % m, "floor-lat-typical")
        if x and (best_r is None or med(x) / med(y) < best_r):
            best, best_r = m, med(x) / med(y)
    if best is None:
        g.skip(area, goals[3], "no rdmafloor rounds")
    else:
        x, y = paired(rounds, "lat-%s-median" % best, "floor-lat-typical")
        g.ratio(area, goals[3], "<=", 1.1, x, y, note="us; -rdma-cq %s (the best mode)" % best)


# ---------------------------------------------------------------- go benchmarks

BENCH_RE = re.compile(r"^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$")


def parse_bench(text):
    """{name without the -GOMAXPROCS suffix: [{unit: value}, ...]}, one
    dict per run (-count)."""
    res = {}
    for line in text.splitlines():
        m = BENCH_RE.match(line.strip())
        if not m:
            continue
        f = m.group(3).split()
        metrics = {}
        for i in range(0, len(f) - 1, 2):
            try:
                metrics[f[i + 1]] = float(f[i])
            except ValueError:
                break
        res.setdefault(m.group(1), []).append(metrics)
    return res


def metric(runs, unit):
    return [r[unit] for r in runs if unit in r]


def bench_runs(g, out, parts, part, area, goals):
    """Loads OUT/bench-PART.txt; on failure marks goals skipped and
    returns None."""
    fname = "bench-%s.txt" % part
    return part_data(g, out, parts, part, fname, parse_bench, area, goals, "no benchmark lines in " + fname)


def engine_goals(g, out, parts):
    area = "engine (Gaudi emulated)"
    models = ("gaudi2", "gaudi3")
    goals = ["%s: overhead per op, batch %d <= %s" % (m, batch, lim) for m in models
             for batch, lim in ((1, "2 us"), (256, "0.5 us"))]
    res = bench_runs(g, out, parts, "gaudi", area, goals)
    if res is not None:
        for i, (m, batch, lim) in enumerate((m, batch, lim) for m in models for batch, lim in ((1, 2000), (256, 500))):
            v = metric(res.get("BenchmarkGaudiOverhead/%s/batch=%d" % (m, batch), []), "overhead-ns/op")
            note = "BenchmarkGaudiOverhead overhead-ns/op (wall minus DMA on the critical path)"
            floor = metric(res.get("BenchmarkGaudiFloor/%s" % m, []), "overhead-ns/op")
            if batch == 1 and floor:
                note += "; the floor under it, no engine (dma BenchmarkGaudiFloor, alternated): %s ns" % rng(floor, fnum)
            g.absolute(area, goals[i], "<=", lim, v, "ns", note=note)
    goals = ["%s: idle engine CPU over 10 s <= 1%% of a core" % m for m in models]
    res = bench_runs(g, out, parts, "idle", area, goals)
    if res is not None:
        for m, goal in zip(models, goals):
            g.absolute(area, goal, "<=", 1.0, metric(res.get("BenchmarkIdleCPU/" + m, []), "cpu-%"), "%",
                       note="BenchmarkIdleCPU cpu-% (getrusage); 1% is this table's reading of 'no core burnt'")
    area = "registration cache"
    goals = ["hit, 100k regions, random <= 120 ns", "hit, 100k regions, hot <= 60 ns"]
    res = bench_runs(g, out, parts, "memcache", area, goals)
    if res is not None:
        for pat, goal, lim in (("random", goals[0], 120), ("hot", goals[1], 60)):
            v = metric(res.get("BenchmarkHit/regions=100k/pattern=%s" % pat, []), "ns/hit")
            g.absolute(area, goal, "<=", lim, v, "ns", note="memcache BenchmarkHit ns/hit")


def hostcopy_goals(g, out, parts):
    area = "host copy 64 MiB"
    goals = ["engine CopySync >= 0.9x memory-copy limit", "unix put >= 0.9x memory-copy limit",
             "engine CopySync >= 1.0x one core's copy", "unix put >= 1.0x one core's copy"]
    res = bench_runs(g, out, parts, "hostcopy", area, goals)
    if res is None:
        return
    # bench/memcpyprobe -engine (best slice per round, both sides alike);
    # engine's BenchmarkHostCopy64MiB (means) if that is what ran.
    runs = res.get("BenchmarkHostCopyVsLimit/size=64MiB") or res.get("BenchmarkHostCopy64MiB", [])
    runs = [r for r in runs if all(k in r for k in ("engine-GB/s", "put-GB/s", "limit-GB/s", "onecore-GB/s"))]
    eng, put = metric(runs, "engine-GB/s"), metric(runs, "put-GB/s")
    lim, one = metric(runs, "limit-GB/s"), metric(runs, "onecore-GB/s")
    note_l = "GB/s; limit: best of 1..N threads of memcpy/copy() (bench/memcpyprobe), interleaved in the same round"
    note_o = "GB/s; one core: the best 1-thread memcpy/copy() figure, interleaved in the same round"
    g.ratio(area, goals[0], ">=", 0.9, eng, lim, memory_bound=True, note=note_l)
    g.ratio(area, goals[1], ">=", 0.9, put, lim, memory_bound=True, note=note_l)
    g.ratio(area, goals[2], ">=", 1.0, eng, one, memory_bound=True, note=note_o)
    g.ratio(area, goals[3], ">=", 1.0, put, one, memory_bound=True, note=note_o)


def cell(s):
    return str(s).replace("|", "/")


def main(argv):
    if len(argv) != 2:
        print("usage: compare-goals.py OUT", file=sys.stderr)
        return 2
    out = argv[1]
    parts = read_parts(out)
    g = Goals()
    unix_goals(g, out, parts)
    tcp_goals(g, out, parts)
    rdma_goals(g, out, parts)
    engine_goals(g, out, parts)
    hostcopy_goals(g, out, parts)
    print("| area | goal | gxfer | reference | ratio or value: median [min-max] | verdict | figures |")
    print("|---|---|---|---|---|---|---|")
    for r in g.rows:
        print("| " + " | ".join(cell(r[k]) for k in ("area", "goal", "gxfer", "reference", "measured", "verdict", "note")) + " |")
    met = sum(1 for r in g.rows if r["verdict"].startswith("met"))
    skipped = sum(1 for r in g.rows if r["verdict"].startswith("skipped"))
    print()
    print("# %d goals: %d met, %d not met, %d skipped" % (len(g.rows), met, len(g.rows) - met - skipped, skipped))
    with open(os.path.join(out, "goals.json"), "w") as f:
        json.dump(g.rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
