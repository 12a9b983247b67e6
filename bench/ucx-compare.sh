#!/usr/bin/env bash
# ucx-compare.sh: gxfer perf over ipc against UCX's ucx_perftest on this
# machine, measured the same way (reference/perf-anchors.md sections 3-4
# and 8):
#
#   * UCT layer put_lat and put_bw between two processes, server pinned to
#     core 0 and client to core 1 with taskset, as ucx_perftest's method:
#       put_lat: -x posix -d memory (layout short for 8 B, bcopy above) and
#                -x cma -d memory -D zcopy
#       put_bw:  -x posix -d memory -D bcopy and -x cma -d memory -D zcopy
#     latency is the p50 one-way (RTT/2), bandwidth the "overall" MB/s
#     (MB = 2^20 bytes); both reuse the same buffer every iteration.
#   * gxfer perf -server / gxfer perf -x unix:SOCK -t put_lat,put_bw, the
#     same sizes, the same pinning, host memory at both ends, JSON output.
#     Between host buffers gxfer's put_bw, like UCT's, runs its puts back
#     to back, and one put means the same on both sides: one call that
#     copies the message into the peer's mapped memory and returns with it
#     there, complete and visible to the peer (gxfer: Put of a held engine
#     Binding, which also checks that the peer's buffer is still exported;
#     UCT posix: uct_ep_put_bcopy, a memcpy into the peer's segment, and
#     ucx_perftest reads the clock after each put, gxfer about every 1 MiB or
#     1024 puts); both end with a flush (UCT posix: a store fence). The
#     message rate (msg/s) counts those puts. put_lat times every round
#     trip, both reading the clock once per round.
#   * sizes 8, 4K, 64K, 1M, 16M; REPS (default 3) repetitions, the A/B
#     runs interleaved (the order alternates between repetitions), and
#     medians over the repetitions.
#
# It installs ucx-utils from Debian if ucx_perftest is missing (apt-get),
# builds gxfer once with go build, and prints one comparison table. Raw
# outputs are kept in $OUT (default: a new directory under /tmp).
#
# Usage: bench/ucx-compare.sh            (about 1-2 minutes on an idle machine)
# Environment: REPS=3 RUN_SEC=0.3 CORE_SERVER=0 CORE_CLIENT=1 OUT=dir
#              GXFER_WINDOW=1 (gxfer put_bw -O) SIZES="8 4096 65536 1048576 16777216"
#              GXFER_BIN=path: use this gxfer binary instead of building one
#              (to compare engine versions side by side)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
REPS=${REPS:-3}
RUN_SEC=${RUN_SEC:-0.3}
CORE_SERVER=${CORE_SERVER:-0}
CORE_CLIENT=${CORE_CLIENT:-1}
GXFER_WINDOW=${GXFER_WINDOW:-1}
SIZES=${SIZES:-"8 4096 65536 1048576 16777216"}
OUT=${OUT:-$(mktemp -d /tmp/ucx-compare.XXXXXX)}
mkdir -p "$OUT"

die() { echo "ucx-compare: $*" >&2; exit 1; }

. "$here/compare-lib.sh"
need_tools taskset python3 go
check_cores
command -v ucx_perftest >/dev/null || apt_install ucx-utils
gxfer_binary

exec python3 - "$OUT" "$REPS" "$RUN_SEC" "$CORE_SERVER" "$CORE_CLIENT" "$GXFER_WINDOW" "$SIZES" <<'PY'
import json, os, random, statistics, subprocess, sys, time

out, reps, run_sec, core_s, core_c, window, sizes = sys.argv[1:8]
reps, run_sec, window = int(reps), float(run_sec), int(window)
sizes = [int(s) for s in sizes.split()]
gxfer = os.path.join(out, "gxfer")
ucx_ver = subprocess.run(["ucx_info", "-v"], capture_output=True, text=True).stdout.strip().splitlines()
ucx_ver = ucx_ver[0].lstrip("# ").replace("Version ", "UCX ") if ucx_ver else "UCX ?"

# Rough time per iteration (us) of each UCX configuration on this kind of
# machine (perf-anchors.md): -n is chosen so that a run lasts about
# RUN_SEC; a ping-pong iteration is a round trip (2x one-way).
est_us = {
    ("put_lat", "posix"): {8: 0.33, 4096: 0.42, 65536: 3.6, 1 << 20: 90, 16 << 20: 2600},
    ("put_lat", "cma"):   {8: 1.8, 4096: 1.9, 65536: 7.8, 1 << 20: 94, 16 << 20: 2900},
    ("put_bw", "posix"):  {8: 0.025, 4096: 0.12, 65536: 2.4, 1 << 20: 55, 16 << 20: 1550},
    ("put_bw", "cma"):    {8: 1.5, 4096: 1.9, 65536: 6.0, 1 << 20: 75, 16 << 20: 1460},
}

def iters(test, tl, size):
    us = est_us[(test, tl)].get(size) or est_us[(test, tl)][min(est_us[(test, tl)], key=lambda s: abs(s - size))]
    n = int(run_sec * 1e6 / us)
    return max(20, min(n, 20_000_000))

def layout(test, tl, size):
    if tl == "cma":
        return "zcopy"
    return "short" if (test == "put_lat" and size <= 8) else "bcopy"

def listening(port):
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            p = l.split()
            if p[3] == "0A" and int(p[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False

def reap(proc, timeout):
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # this one process, by its pid
        proc.wait()

port = 20000 + random.randrange(10000)  # below the ephemeral ports (32768-)
log_n = 0

def save(name, text):
    global log_n
    log_n += 1
    with open(os.path.join(out, "%03d-%s.txt" % (log_n, name)), "w") as f:
        f.write(text)

def run_ucx(test, tl, size):
    global port
    port += 1
    n = iters(test, tl, size)
    w = min(max(n // 10, 1), 10000)
    # A port another socket holds (an ephemeral one, a TIME_WAIT) fails
    # the server's bind: it is tried again on the next port.
    for attempt in range(5):
        srv = subprocess.Popen(["taskset", "-c", core_s, "ucx_perftest", "-p", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t0 = time.time()
        while not listening(port) and srv.poll() is None and time.time() - t0 <= 10:
            time.sleep(0.01)
        if listening(port):
            break
        why = srv.stdout.read() if srv.poll() is not None else "timeout"
        reap(srv, 10)
        if "Address already in use" not in why or attempt == 4:
            raise RuntimeError("ucx_perftest server did not start: " + why)
        port += 1
    try:
        cmd = ["taskset", "-c", core_c, "ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size),
               "-n", str(n), "-w", str(w), "-f", "-x", tl, "-d", "memory", "-D", layout(test, tl, size)]
        cl = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        reap(srv, 10)
    save("ucx-%s-%s-%d" % (test, tl, size), " ".join(cmd) + "\n" + cl.stdout + cl.stderr + "\n--- server\n" + srv.stdout.read())
    if cl.returncode != 0:
        raise RuntimeError("ucx_perftest failed (%s): %s" % (" ".join(cmd), cl.stderr.strip()[-500:]))
    for line in reversed(cl.stdout.splitlines()):
        f = line.replace("Final:", "").split()
        if len(f) == 8:
            try:
                v = [float(x) for x in f]
            except ValueError:
                continue
            return {"p50_us": v[1], "bw_mbs": v[5], "msg_s": v[7], "n": int(v[0])}
    raise RuntimeError("cannot parse ucx_perftest output:\n" + cl.stdout)

def warmup_for(size):
    return 10000 if size <= 4096 else 2000 if size <= 65536 else 50 if size <= 1 << 20 else 5

def run_gxfer(size):
    sock = os.path.join(out, "gx.sock")
    for f in (sock, sock + ".ctl"):
        if os.path.exists(f):
            os.remove(f)  # left by a server that did not exit cleanly
    srv = subprocess.Popen(["taskset", "-c", core_s, gxfer, "perf", "-server", "-x", "unix:" + sock, "-once", "-devices", "none"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.time()
        # The control socket is created last: once it exists, the server listens.
        while not os.path.exists(sock + ".ctl"):
            if srv.poll() is not None:
                raise RuntimeError("gxfer server exited: " + srv.stdout.read())
            if time.time() - t0 > 10:
                raise RuntimeError("gxfer server did not start within 10s")
            time.sleep(0.01)
        cmd = ["taskset", "-c", core_c, gxfer, "perf", "-devices", "none", "-x", "unix:" + sock,
               "-t", "put_lat,put_bw", "-s", str(size), "-time", "%gs" % run_sec, "-w", str(warmup_for(size)),
               "-O", str(window), "-json"]
        cl = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        reap(srv, 10)
    save("gxfer-%d" % size, " ".join(cmd) + "\n" + cl.stdout + cl.stderr + "\n--- server\n" + srv.stdout.read())
    if cl.returncode != 0:
        raise RuntimeError("gxfer perf failed (%s): %s" % (" ".join(cmd), cl.stderr.strip()))
    rep = json.loads(cl.stdout)
    res = {r["test"]: r for r in rep["results"]}
    for r in res.values():
        if not r["verified"]:
            raise RuntimeError("gxfer result not verified: %s" % r)
    return {"p50_us": res["put_lat"]["latency"]["median_us"], "bw_mbs": res["put_bw"]["bandwidth_mb_s"],
            "msg_s": res["put_bw"]["msg_rate"], "op": res["put_bw"].get("op", "?"),
            "env": rep["env"], "peer_env": rep.get("peer_env")}

def loadavg():
    return open("/proc/loadavg").read().split()[0]

print("# ucx-compare: gxfer perf (ipc) vs %s ucx_perftest, UCT layer; server on core %s, client on core %s (taskset)" % (ucx_ver, core_s, core_c))
print("# gxfer binary: %s" % os.environ.get("GXFER_FROM", "?"))
print("# %d repetitions, A/B interleaved; about %.2fs per run; raw outputs in %s; load average at start %s" % (reps, run_sec, out, loadavg()))
if float(loadavg()) > 0.5:
    print("# WARNING: the machine is busy (load average %s): both tools spin on their cores, so other work makes the numbers noisy; rerun on an idle machine or raise REPS" % loadavg())
sys.stdout.flush()

ucx = {}   # (test, tl, size) -> [runs]
gx = {}    # size -> [runs]
env = None
start = time.time()
for rep in range(reps):
    for size in sizes:
        jobs = [("ucx", "put_lat", "posix"), ("ucx", "put_bw", "posix"), ("ucx", "put_lat", "cma"), ("ucx", "put_bw", "cma")]
        # A/B interleaved: gxfer goes first in odd repetitions, in the
        # middle of UCX's runs in even ones.
        jobs.insert(0 if rep % 2 else 2, ("gxfer", None, None))
        for kind, test, tl in jobs:
            if kind == "ucx":
                ucx.setdefault((test, tl, size), []).append(run_ucx(test, tl, size))
            else:
                g = run_gxfer(size)
                env = env or g
                gx.setdefault(size, []).append(g)
    print("# repetition %d/%d done (%.0fs)" % (rep + 1, reps, time.time() - start), file=sys.stderr)

def med(v):
    return statistics.median(v)

def fmt_range(v, f):
    return "%s [%s-%s]" % (f(med(v)), f(min(v)), f(max(v)))

mbs = lambda x: "%.0f" % x
mmsg = lambda x: "%.3g" % (x / 1e6)
us = lambda x: "%.3f" % x if x < 10 else "%.1f" % x

def size_name(n):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0:
            return "%d%s" % (n // s, unit)
    return "%dB" % n

summary = []
print()
print("# put_bw: UCX best of posix bcopy and cma zcopy (the better median), overall MB/s (MB = 2^20 B); gxfer put_bw -O %d, host -> peer host (back-to-back puts through a Binding)" % window)
print("# one put (put_bw msg/s): gxfer: %s" % env["op"])
print("#   UCX posix: one uct_ep_put_bcopy call (memcpy into the peer's mapped segment, returns UCS_OK: complete, visible to the peer), then ucx_perftest's clock read; the run ends with uct_iface_flush (a store fence); cma: one uct_ep_put_zcopy (process_vm_writev)")
print("# put_lat: p50 one-way latency (round trip / 2), UCX best of posix (short at 8 B, bcopy above) and cma zcopy; gxfer put_lat ping-pong")
print("# cells: median [min-max] over %d runs; ratio = gxfer / UCX on medians (bandwidth: higher is better; latency: lower is better)" % reps)
hdr = ("size", "UCX put_bw MB/s", "(tl)", "gxfer put_bw MB/s", "bw ratio", "UCX Mmsg/s", "gxfer Mmsg/s",
       "UCX put_lat p50 us", "(tl)", "gxfer put_lat p50 us", "lat ratio")
rows = [hdr]
goals = []
for size in sizes:
    bw = {tl: [r["bw_mbs"] for r in ucx[("put_bw", tl, size)]] for tl in ("posix", "cma")}
    lat = {tl: [r["p50_us"] for r in ucx[("put_lat", tl, size)]] for tl in ("posix", "cma")}
    btl = max(bw, key=lambda t: med(bw[t]))
    ltl = min(lat, key=lambda t: med(lat[t]))
    gbw = [g["bw_mbs"] for g in gx[size]]
    umsg = [r["msg_s"] for r in ucx[("put_bw", btl, size)]]
    gmsg = [g["msg_s"] for g in gx[size]]
    glat = [g["p50_us"] for g in gx[size]]
    bw_ratio = med(gbw) / med(bw[btl])
    lat_ratio = med(glat) / med(lat[ltl])
    rows.append((size_name(size), fmt_range(bw[btl], mbs), btl, fmt_range(gbw, mbs), "%.2f" % bw_ratio,
                 mmsg(med(umsg)), mmsg(med(gmsg)), fmt_range(lat[ltl], us), ltl, fmt_range(glat, us), "%.2f" % lat_ratio))
    summary.append({"size": size, "ucx_bw_mbs": {t: bw[t] for t in bw}, "ucx_lat_p50_us": {t: lat[t] for t in lat},
                    "gxfer_bw_mbs": gbw, "gxfer_lat_p50_us": glat, "bw_ratio": bw_ratio, "lat_ratio": lat_ratio,
                    "ucx_msg_s": umsg, "gxfer_msg_s": gmsg})
    if size >= 4096:
        goals.append(("put_bw %s >= UCX" % size_name(size), bw_ratio >= 1.0))
    if size == 8:
        goals.append(("put_lat 8B <= 1.1x UCX", lat_ratio <= 1.1))
widths = [max(len(r[i]) for r in rows) for i in range(len(hdr))]
for r in rows:
    print("  ".join(c.rjust(widths[i]) for i, c in enumerate(r)))
print()
for name, ok in goals:
    print("# goal %-24s %s" % (name + ":", "met" if ok else "NOT met"))
e = env["env"]
print("# gxfer: %s, GOMAXPROCS %s (client, CPUs %s) / %s (server, CPUs %s), clock %s, devices none (host memory only, nothing emulated)"
      % (e["go_version"], e["gomaxprocs"], e.get("affinity"), env["peer_env"]["gomaxprocs"], env["peer_env"].get("affinity"), e.get("clock")))
print("# load average at end %s; total %.0fs" % (loadavg(), time.time() - start))
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
PY
