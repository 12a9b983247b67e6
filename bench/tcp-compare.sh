#!/usr/bin/env bash
# tcp-compare.sh: gxfer perf over tcp against iperf3 and ucx_perftest,
# between two network namespaces joined by a veth pair, in the same run
# (issue 8's performance targets):
#
#   * the script creates namespaces A and B (names with this shell's pid,
#     veth addresses 10.214.77.1 in A and 10.214.77.2 in B, /24), and
#     removes them on exit (trap); only those addresses are used.
#   * every server runs in A pinned to core CORE_SERVER, every client in B
#     pinned to core CORE_CLIENT (taskset), as ucx-compare.sh does.
#   * bandwidth: iperf3 single stream (iperf3 -c A -t IPERF_SEC -l SIZE,
#     receiver's figure; iperf3 3.12 caps -l at 1 MiB, so the 16 MiB row's
#     iperf3 runs with -l 1M, its largest buffer, and says so) against
#     gxfer perf put_bw, host memory at both
#     ends (-devices none), SIZE 1 MiB and 16 MiB; gxfer with -O 1 and -O 4
#     outstanding Puts (WINDOWS) over its default 2 connections (transfers
#     of 4 MiB and more are split over them), and, with LANES1=1 (default),
#     at the largest window over one connection (-tcp-lanes 1), the
#     like-for-like figure against iperf3's single stream. All are shown;
#     the goal line uses the best configuration's median and says which.
#     MB = 2^20 bytes (as gxfer), Gbit = 10^9 bits (as iperf3).
#   * with NUTTCP=1 (default), a second reference beside the goal's:
#     nuttcp -l SIZE -T IPERF_SEC (its one-shot server, --nofork -1, in A),
#     which writes SIZE bytes per call from one SIZE buffer, so that at
#     16 MiB its source is as large as gxfer's (iperf3 resends 1 MiB).
#     Shown in its own table; the goals stay against iperf3.
#   * with FLOOR=1 (default), the floor of the same exchange in Go:
#     bench/tcpfloor (built here) -s SIZE -O <largest window> -time
#     IPERF_SEC, gxfer's puts (1 MiB frames behind a header, one
#     completion per put, one source and one destination buffer) over one
#     plain Go socket, server in A and client in B as the others. Shown in
#     its own table with its CPU per put: what gxfer adds to what any Go
#     program pays here. Not a goal.
#   * latency, 8 bytes: gxfer perf put_lat (ping-pong: the client Puts into
#     the server's buffer, the server polls its memory and Puts back;
#     round trip / 2) against ucx_perftest's TCP put latency. In this UCX
#     version the UCT-level test (ucx_perftest -t put_lat -x tcp) fails
#     ("does not support operation put short/bcopy"; zcopy "Cannot use"),
#     so the UCP-level test is used, which runs over UCT tcp:
#       A: UCX_TLS=tcp UCX_NET_DEVICES=<veth in A> ucx_perftest -t ucp_put_lat
#       B: UCX_TLS=tcp UCX_NET_DEVICES=<veth in B> ucx_perftest <addr A> -t ucp_put_lat -s 8 -n 20000
#     and the 50.0%ile column of its Final line (one-way latency, us).
#   * REPS repetitions (default 3), the tools' order rotating between
#     repetitions; medians [min-max] over the repetitions; one table of the
#     ratios against the goals: gxfer put_bw / iperf3 >= 0.9 at 1 MiB and
#     16 MiB, gxfer put_lat / ucx p50 <= 1.2 at 8 B.
#
# Needs root (namespaces). Installs missing Debian packages iperf3,
# ucx-utils and nuttcp (NUTTCP=1) with apt-get, builds gxfer once with go build. Raw outputs are
# kept in $OUT (default: a new directory under /tmp).
#
# Usage: sudo bench/tcp-compare.sh          (about 30 s per repetition)
# Environment: REPS=3 RUN_SEC=1 IPERF_SEC=3 CORE_SERVER=0 CORE_CLIENT=1
#              WINDOWS="1 4" (gxfer put_bw -O values) LANES1=1 UCX_ITERS=20000 NUTTCP=1 FLOOR=1
#              OUT=dir  GXFER_BIN=path (use this gxfer binary, no build)
#              GXFER_FLAGS="..." (extra flags for both gxfer ends, e.g.
#              "-tcp-spin 20us")
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
REPS=${REPS:-3}
RUN_SEC=${RUN_SEC:-1}
IPERF_SEC=${IPERF_SEC:-3}
CORE_SERVER=${CORE_SERVER:-0}
CORE_CLIENT=${CORE_CLIENT:-1}
WINDOWS=${WINDOWS:-"1 4"}
LANES1=${LANES1:-1}
NUTTCP=${NUTTCP:-1}
FLOOR=${FLOOR:-1}
UCX_ITERS=${UCX_ITERS:-20000}
GXFER_FLAGS=${GXFER_FLAGS:-}
OUT=${OUT:-$(mktemp -d /tmp/tcp-compare.XXXXXX)}
mkdir -p "$OUT"

die() { echo "tcp-compare: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (it creates network namespaces): run it with sudo"
. "$here/compare-lib.sh"
need_tools taskset python3 go ip
check_cores
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ucx_perftest >/dev/null || need+=(ucx-utils)
[ "$NUTTCP" = 1 ] && ! command -v nuttcp >/dev/null && need+=(nuttcp)
apt_install ${need[@]+"${need[@]}"}
gxfer_binary
if [ "$FLOOR" = 1 ]; then
	(cd "$repo" && go build -o "$OUT/tcpfloor" ./bench/tcpfloor) || die "go build of bench/tcpfloor failed"
fi

# The namespaces and the veth pair: names of at most 15 bytes, with this
# shell's pid so that concurrent runs do not collide.
NS_A="gxtcA$$"
NS_B="gxtcB$$"
VETH_A="gxtca$$"
VETH_B="gxtcb$$"
ADDR_A=10.214.77.1
ADDR_B=10.214.77.2
cleanup() {
	ip netns del "$NS_A" 2>/dev/null || true
	ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$NS_A" || die "cannot create a network namespace (ip netns add)"
ip netns add "$NS_B"
ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
for x in "$NS_A $VETH_A" "$NS_A lo" "$NS_B $VETH_B" "$NS_B lo"; do
	set -- $x
	ip -n "$1" link set "$2" up
done
if command -v ping >/dev/null; then
	ip netns exec "$NS_B" ping -c 1 -W 2 "$ADDR_A" >/dev/null || die "namespace B cannot reach $ADDR_A over the veth pair"
fi
MTU=$(ip -n "$NS_A" -o link show "$VETH_A" | sed -n 's/.* mtu \([0-9]*\).*/\1/p')

python3 - "$OUT" "$REPS" "$RUN_SEC" "$IPERF_SEC" "$CORE_SERVER" "$CORE_CLIENT" "$WINDOWS" "$UCX_ITERS" \
	"$NS_A" "$NS_B" "$VETH_A" "$VETH_B" "$ADDR_A" "$ADDR_B" "$MTU" "$GXFER_FLAGS" "$LANES1" "$NUTTCP" "$FLOOR" <<'PY'
import json, os, random, statistics, subprocess, sys, time

(out, reps, run_sec, iperf_sec, core_s, core_c, windows, ucx_iters,
 ns_a, ns_b, veth_a, veth_b, addr_a, addr_b, mtu, gx_flags, lanes1, nuttcp, floor) = sys.argv[1:20]
reps, run_sec, iperf_sec, ucx_iters = int(reps), float(run_sec), int(iperf_sec), int(ucx_iters)
windows = [int(w) for w in windows.split()]
# gxfer put_bw configurations: (label, flags)
configs = [("-O %d" % w, ["-O", str(w)]) for w in windows]
if lanes1 == "1":
    configs.append(("-O %d 1 conn" % max(windows), ["-O", str(max(windows)), "-tcp-lanes", "1"]))
gx_flags = gx_flags.split()
gxfer = os.path.join(out, "gxfer")
SIZES = [1 << 20, 16 << 20]
MiB = float(1 << 20)

def tool_version(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout + r.stderr).strip().splitlines()[0]
    except Exception:
        return "?"
ucx_ver = tool_version(["ucx_info", "-v"]).lstrip("# ").replace("Version ", "UCX ")
iperf_ver = tool_version(["iperf3", "--version"])

def in_a(*cmd):
    return ["ip", "netns", "exec", ns_a, "taskset", "-c", core_s] + list(cmd)

def in_b(*cmd):
    return ["ip", "netns", "exec", ns_b, "taskset", "-c", core_c] + list(cmd)

port = 20000 + random.randrange(20000)
log_n = 0

def save(name, text):
    global log_n
    log_n += 1
    with open(os.path.join(out, "%03d-%s.txt" % (log_n, name)), "w") as f:
        f.write(text)

def listening(pid, port):
    # /proc/PID/net/tcp shows the sockets of PID's network namespace.
    for f in ("/proc/%d/net/tcp" % pid, "/proc/%d/net/tcp6" % pid):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            p = l.split()
            if p[3] == "0A" and int(p[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False

def start(cmd, port, what):
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    while not listening(srv.pid, port):
        if srv.poll() is not None:
            raise RuntimeError("%s server exited: %s" % (what, srv.stdout.read()))
        if time.time() - t0 > 10:
            srv.kill()
            raise RuntimeError("%s server did not listen on port %d within 10s" % (what, port))
        time.sleep(0.01)
    return srv

def stop(srv, timeout=10, term=False):
    # Only the servers this script started, by their pid.
    if term and srv.poll() is None:
        srv.terminate()
    try:
        srv.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()
    return srv.stdout.read()

def client_run(srv, cmd, name, timeout):
    """Runs the client cmd against the server srv (started here), stops
    the server, saves both outputs as name and returns the client's
    CompletedProcess."""
    try:
        cl = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        sout = stop(srv)
    save(name, " ".join(cmd) + "\n" + cl.stdout + cl.stderr + "\n--- server\n" + sout)
    return cl

IPERF_MAX_L = 1 << 20  # iperf3: "block size too large (maximum = 1048576 bytes)"

def run_iperf(size):
    global port
    port += 1
    size = min(size, IPERF_MAX_L)
    srv = start(in_a("iperf3", "-s", "-1", "-B", addr_a, "-p", str(port)), port, "iperf3")
    cmd = in_b("iperf3", "-c", addr_a, "-p", str(port), "-t", str(iperf_sec), "-l", str(size), "-J")
    cl = client_run(srv, cmd, "iperf3-%d" % size, iperf_sec + 60)
    if cl.returncode != 0:
        raise RuntimeError("iperf3 failed (%s): %s" % (" ".join(cmd), cl.stderr.strip()[-500:]))
    bps = json.loads(cl.stdout)["end"]["sum_received"]["bits_per_second"]
    return {"gbits": bps / 1e9, "mbs": bps / 8 / MiB}

def run_nuttcp(size):
    """nuttcp -l size for iperf_sec s: its report's megabytes (2^20 bytes)
    over its real_seconds."""
    global port
    port += 2  # control port, data port
    srv = start(in_a("nuttcp", "--nofork", "-1", "-P", str(port), "-p", str(port + 1)), port, "nuttcp")
    cmd = in_b("nuttcp", "-P", str(port), "-p", str(port + 1), "-l", str(size), "-T", str(iperf_sec), "-fparse", addr_a)
    cl = client_run(srv, cmd, "nuttcp-%d" % size, iperf_sec + 60)
    kv = dict(f.split("=", 1) for f in cl.stdout.split() if "=" in f)
    if cl.returncode != 0 or "megabytes" not in kv or "real_seconds" not in kv:
        raise RuntimeError("nuttcp failed (%s): %s" % (" ".join(cmd), (cl.stdout + cl.stderr).strip()[-500:]))
    return float(kv["megabytes"]) / float(kv["real_seconds"])

def run_floor(size):
    """bench/tcpfloor -s size at the largest window for iperf_sec s: its
    MB/s (2^20 bytes) and CPU per put."""
    global port
    port += 1
    tf = os.path.join(out, "tcpfloor")
    srv = start(in_a(tf, "-server", "-addr", "%s:%d" % (addr_a, port)), port, "tcpfloor")
    cmd = in_b(tf, "-addr", "%s:%d" % (addr_a, port), "-s", str(size), "-O", str(max(windows)), "-time", "%ds" % iperf_sec)
    cl = client_run(srv, cmd, "tcpfloor-%d" % size, iperf_sec + 60)
    if cl.returncode != 0:
        raise RuntimeError("tcpfloor failed (%s): %s" % (" ".join(cmd), (cl.stdout + cl.stderr).strip()[-500:]))
    r = json.loads(cl.stdout)
    if not r["verified"]:
        raise RuntimeError("tcpfloor result not verified: %s" % r)
    return {"mbs": r["bandwidth_mb_s"], "cpu": r["cpu"]}

def gx_client(args, name):
    cmd = in_b(gxfer, "perf", "-devices", "none", "-x", "tcp:%s:%d" % (addr_a, port), "-json", *gx_flags, *args)
    cl = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    save(name, " ".join(cmd) + "\n" + cl.stdout + cl.stderr)
    if cl.returncode != 0:
        raise RuntimeError("gxfer perf failed (%s): %s" % (" ".join(cmd), cl.stderr.strip()))
    rep = json.loads(cl.stdout)
    if rep["params"]["transport"] != "tcp":
        raise RuntimeError("gxfer ran over %s, not tcp" % rep["params"]["transport"])
    for r in rep["results"]:
        if not r["verified"] or r["transport"] != "tcp":
            raise RuntimeError("gxfer result not verified or not over tcp: %s" % r)
    return rep

def run_gxfer():
    """One server (in A) for the repetition's gxfer clients: put_bw at each
    window, put_lat at 8 B."""
    global port
    port += 1
    srv = start(in_a(gxfer, "perf", "-server", "-x", "tcp:%s:%d" % (addr_a, port), "-devices", "none", *gx_flags), port, "gxfer")
    res = {"bw": {}, "lat": None}
    try:
        for label, flags in configs:
            rep = gx_client(["-t", "put_bw", "-s", ",".join(str(s) for s in SIZES), "-time", "%gs" % run_sec, "-w", "20"] + flags,
                            "gxfer-put_bw" + "".join(flags).replace("-", "_"))
            if "notes" not in res:
                res["env"], res["peer_env"], res["notes"] = rep["env"], rep.get("peer_env"), rep["notes"]
            for r in rep["results"]:
                res["bw"][(label, r["size"])] = r["bandwidth_mb_s"]
                if r.get("cpu"):  # the client's CPU per put (binaries from session 36 on)
                    res.setdefault("cpu", {})[(label, r["size"])] = r["cpu"]
        rep = gx_client(["-t", "put_lat", "-s", "8", "-time", "%gs" % run_sec, "-w", "2000"], "gxfer-put_lat-8")
        res["lat"] = rep["results"][0]["latency"]["median_us"]
    finally:
        save("gxfer-server", stop(srv, term=True))
    return res

def run_ucx():
    global port
    port += 1
    env_a = ["env", "UCX_TLS=tcp", "UCX_NET_DEVICES=" + veth_a]
    env_b = ["env", "UCX_TLS=tcp", "UCX_NET_DEVICES=" + veth_b]
    srv = start(["ip", "netns", "exec", ns_a] + env_a + ["taskset", "-c", core_s, "ucx_perftest", "-p", str(port), "-t", "ucp_put_lat"],
                port, "ucx_perftest")
    cmd = ["ip", "netns", "exec", ns_b] + env_b + ["taskset", "-c", core_c, "ucx_perftest", addr_a, "-p", str(port),
                                                     "-t", "ucp_put_lat", "-s", "8", "-n", str(ucx_iters)]
    cl = client_run(srv, cmd, "ucx-ucp_put_lat-8", 300)
    if cl.returncode != 0:
        raise RuntimeError("ucx_perftest failed (%s): %s" % (" ".join(cmd), cl.stderr.strip()[-500:]))
    for line in reversed(cl.stdout.splitlines()):
        if not line.startswith("Final:"):
            continue
        f = line.replace("Final:", "").split()
        if len(f) == 8:
            return float(f[1])
    raise RuntimeError("cannot parse ucx_perftest output:\n" + cl.stdout)

def loadavg():
    return open("/proc/loadavg").read().split()[0]

print("# tcp-compare: gxfer perf over tcp vs %s (single stream) and %s ucp_put_lat over tcp" % (iperf_ver, ucx_ver))
print("# veth pair %s (%s, netns %s) <-> %s (%s, netns %s), mtu %s; servers in %s on core %s, clients in %s on core %s (taskset)"
      % (veth_a, addr_a, ns_a, veth_b, addr_b, ns_b, mtu, ns_a, core_s, ns_b, core_c))
print("# gxfer binary: %s%s" % (os.environ.get("GXFER_FROM", "?"), (" | flags " + " ".join(gx_flags)) if gx_flags else ""))
print("# %d repetitions, tools' order rotating; raw outputs in %s; load average at start %s" % (reps, out, loadavg()))
if float(loadavg()) > 0.5:
    print("# WARNING: the machine is busy (load average %s): the numbers will be noisy; rerun on an idle machine or raise REPS" % loadavg())
sys.stdout.flush()

iperf = {}   # size -> [runs]
gx = []      # [runs]
ucx = []     # [p50 us]
nut = {}     # size -> [MB/s]
flo = {}     # size -> [{"mbs", "cpu"}]
start_t = time.time()
for rep in range(reps):
    jobs = ["iperf", "gxfer", "ucx"] + (["nuttcp"] if nuttcp == "1" else []) + (["floor"] if floor == "1" else [])
    jobs = jobs[rep % len(jobs):] + jobs[:rep % len(jobs)]
    for j in jobs:
        if j == "iperf":
            for s in SIZES:
                iperf.setdefault(s, []).append(run_iperf(s))
        elif j == "nuttcp":
            for s in SIZES:
                nut.setdefault(s, []).append(run_nuttcp(s))
        elif j == "floor":
            for s in SIZES:
                flo.setdefault(s, []).append(run_floor(s))
        elif j == "gxfer":
            gx.append(run_gxfer())
        else:
            ucx.append(run_ucx())
    print("# repetition %d/%d done (%.0fs)" % (rep + 1, reps, time.time() - start_t), file=sys.stderr)

med = statistics.median
def rng(v, f):
    return "%s [%s-%s]" % (f(med(v)), f(min(v)), f(max(v)))
f0 = lambda x: "%.0f" % x
f2 = lambda x: "%.2f" % x
f1 = lambda x: "%.1f" % x if x >= 10 else "%.2f" % x

def size_name(n):
    return "%dMiB" % (n >> 20) if n >= 1 << 20 else "%dB" % n

def table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(widths[i]) for i, c in enumerate(r)))

print()
print("# bandwidth, host memory both ends: iperf3 -c -t %d -l SIZE (one stream, receiver) vs gxfer perf put_bw -s SIZE -O W -time %gs"
      % (iperf_sec, run_sec))
print("# gxfer columns: -O W over the endpoint's 2 connections (default); '1 conn': -tcp-lanes 1, one TCP connection like iperf3's stream")
print("# cells: median [min-max] over %d runs; MB/s with MB = 2^20 bytes, Gbit/s with Gbit = 10^9 bits" % reps)
labels = [c[0] for c in configs]
rows = [("size", "iperf3 Gbit/s", "iperf3 MB/s") + tuple("gxfer %s MB/s" % l for l in labels) + tuple("ratio %s" % l for l in labels)]
summary = {"iperf3": {}, "gxfer_put_bw": {}, "gxfer_put_lat_p50_us": [g["lat"] for g in gx], "ucx_ucp_put_lat_p50_us": ucx}
goals = []
for s in SIZES:
    ip_g = [r["gbits"] for r in iperf[s]]
    ip_m = [r["mbs"] for r in iperf[s]]
    gw = {l: [g["bw"][(l, s)] for g in gx] for l in labels}
    ratios = {l: med(gw[l]) / med(ip_m) for l in labels}
    label = size_name(s) if s <= IPERF_MAX_L else "%s (iperf3 -l %s, its max)" % (size_name(s), size_name(IPERF_MAX_L))
    rows.append((label, rng(ip_g, f2), rng(ip_m, f0)) + tuple(rng(gw[l], f0) for l in labels) + tuple("%.2f" % ratios[l] for l in labels))
    best = max(labels, key=lambda l: ratios[l])
    worst = min(labels, key=lambda l: ratios[l])
    goals.append(("put_bw %s / iperf3 >= 0.9" % size_name(s), ratios[best], ratios[best] >= 0.9,
                  "gxfer %s, the best configuration (worst: %s, %.2f)" % (best, worst, ratios[worst])))
    summary["iperf3"][s] = iperf[s]
    summary["gxfer_put_bw"][s] = {l: gw[l] for l in labels}
table(rows)
if any(s > IPERF_MAX_L for s in SIZES):
    print("# above %s: iperf3 resends one %s buffer, which stays in cache; gxfer's put reads all SIZE bytes of its source"
          % (size_name(IPERF_MAX_L), size_name(IPERF_MAX_L)))
if all(g.get("cpu") for g in gx):
    print()
    print("# gxfer client's CPU per put (this process, every thread: getrusage), median over the runs: user / system us, and cores busy")
    crows = [("size",) + tuple("gxfer %s" % l for l in labels)]
    for s in SIZES:
        cells = []
        for l in labels:
            cs = [g["cpu"][(l, s)] for g in gx if (l, s) in g["cpu"]]
            cells.append("%.1f / %.1f (%.2f)" % (med([c["user_us"] for c in cs]), med([c["sys_us"] for c in cs]),
                                                 med([c["cores"] for c in cs])) if cs else "-")
        crows.append((size_name(s),) + tuple(cells))
    table(crows)
if nut:
    print()
    print("# second reference (not a goal): nuttcp -l SIZE -T %d, one write of SIZE bytes per call from one SIZE buffer; MB/s, median [min-max]" % iperf_sec)
    nrows = [("size", "nuttcp MB/s", "gxfer best MB/s", "ratio")]
    for s in SIZES:
        bl = max(labels, key=lambda l: med([g["bw"][(l, s)] for g in gx]))
        gb = [g["bw"][(bl, s)] for g in gx]
        nrows.append((size_name(s), rng(nut[s], f0), "%s (%s)" % (rng(gb, f0), bl), "%.2f" % (med(gb) / med(nut[s]))))
    table(nrows)
    summary["nuttcp"] = nut
if flo:
    w = max(windows)
    print()
    print("# floor (not a goal): bench/tcpfloor -s SIZE -O %d -time %d, the same puts over one plain Go socket (1 MiB frames behind a header,"
          " a completion per put); gxfer at -O %d over one connection, as the floor. CPU: the client's user / system us per put" % (w, iperf_sec, w))
    like = "-O %d 1 conn" % w if lanes1 == "1" else "-O %d" % w
    frows = [("size", "floor MB/s", "gxfer %s MB/s" % like, "ratio", "floor cpu us", "gxfer cpu us")]
    for s in SIZES:
        fm = [r["mbs"] for r in flo[s]]
        gb = [g["bw"][(like, s)] for g in gx]
        fc = [r["cpu"] for r in flo[s] if r["cpu"]]
        gc = [g["cpu"][(like, s)] for g in gx if (like, s) in g.get("cpu", {})]
        cpu = lambda cs: "%.1f / %.1f" % (med([c["user_us"] for c in cs]), med([c["sys_us"] for c in cs])) if cs else "-"
        frows.append((size_name(s), rng(fm, f0), rng(gb, f0), "%.2f" % (med(gb) / med(fm)), cpu(fc), cpu(gc)))
    table(frows)
    summary["tcpfloor"] = flo

print()
print("# latency, 8 B: p50 one-way (round trip / 2), us; gxfer perf put_lat -s 8 -time %gs vs ucx_perftest -t ucp_put_lat -s 8 -n %d (UCX_TLS=tcp)"
      % (run_sec, ucx_iters))
gl = [g["lat"] for g in gx]
lat_ratio = med(gl) / med(ucx)
table([("size", "ucx ucp_put_lat p50 us", "gxfer put_lat p50 us", "ratio"),
       ("8B", rng(ucx, f1), rng(gl, f1), "%.2f" % lat_ratio)])
goals.append(("put_lat 8B / ucx p50 <= 1.2", lat_ratio, lat_ratio <= 1.2, "gxfer put_lat vs ucx ucp_put_lat"))

print()
print("# goals (ratios of medians)")
table([("goal", "ratio", "met", "compared")] + [(n, "%.2f" % r, "yes" if ok else "NO", c) for n, r, ok, c in goals])
e, pe = gx[0]["env"], gx[0]["peer_env"] or {}
print("# gxfer: %s, GOMAXPROCS %s (client, CPUs %s) / %s (server, CPUs %s), devices none (host memory only, nothing emulated)"
      % (e["go_version"], e["gomaxprocs"], e.get("affinity"), pe.get("gomaxprocs"), pe.get("affinity")))
for n in gx[0].get("notes", []):
    if n.startswith("tcp:"):
        print("# gxfer " + n)
print("# load average at end %s; total %.0fs" % (loadavg(), time.time() - start_t))
summary["goals"] = [{"goal": n, "ratio": r, "met": ok, "compared": c} for n, r, ok, c in goals]
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1, default=str)
PY
