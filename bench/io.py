#!/usr/bin/env python3
"""kiln's two I/O paths (`--io epoll`, `--io uring`) beside wrk and wrk2, in one run on this
machine (issue 35).

1. Cost: nginx (1 worker, pinned to CPU 0) answers "hello"; each generator runs from CPU 1
   with 64 connections and one thread for 10 s, in BENCH_ROUNDS (5) interleaved rounds:
   wrk -t1 -c64; wrk2 -t1 -c64 -R 10000000 (as fast as it can, when bench/.tools/bin/wrk2
   is built: `bash bench/wrk2.sh [SOURCE]`); kiln run -c 64 -t 1 --io epoll; the same with
   --io uring. Requests/s, requests per generator CPU-second (user + system, GNU time) and
   peak RSS, medians, and uring/epoll per round.
2. Memory at 10,000 connections: open model at 5,000 requests/s for 10 s, on each path:
   peak RSS and KiB per connection.
3. The latency truth on each path: a target answering in 2 ms that pauses 100 ms every
   second, at 500 requests/s: 10% of arrivals wait 0-100 ms more, so the true p99 is
   2 + 90 = 92 ms.

Usage: python3 bench/io.py [--quick]   (results: bench/out/io-<time>.json)
"""
import json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, QUICK, ROOT, free_port, interleaved, measured, wait_port, write_results  # noqa: E402
from load import TARGET, ensure_tools, median, run_kiln, run_wrk, start_nginx, stop  # noqa: E402
from memory import FDS, with_fds  # noqa: E402
from wrk2 import WRK2, run_wrk2  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
CONNS = 64
MANY = 10_000


def run_many(url, io):
    """kiln at 10,000 connections, open model, 5,000/s on one thread."""
    out_dir = tempfile.mkdtemp(prefix="kiln-bench-")
    out, cpu, rss, _ = measured(with_fds(["taskset", "-c", "1", KILN, "run", url, "--rate", "5000",
                                          "-c", str(MANY), "-t", "1", "-d", f"{SECS}s", "--io", io,
                                          "--json", "-q", "--out", f"{out_dir}/run"]))
    total = json.loads(out[out.index("{"):])["total"]
    return dict(requests=total["requests"], failed=total["failed"], rss_kib=rss,
                kib_per_connection=rss / MANY)


def main():
    ensure_tools()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
               "secs": SECS, "rounds": ROUNDS, "kernel": os.uname().release}
    tools = {"wrk": lambda url: run_wrk(url, SECS, CONNS),
             "kiln --io epoll": lambda url: run_kiln(url, SECS, CONNS, ["--io", "epoll"]),
             "kiln --io uring": lambda url: run_kiln(url, SECS, CONNS, ["--io", "uring"])}
    if os.path.exists(WRK2):
        tools["wrk2"] = lambda url: run_wrk2(url, SECS)
    with tempfile.TemporaryDirectory() as tmp:
        nginx, url = start_nginx(tmp, fds=FDS)
        try:
            runs = interleaved(tools, ROUNDS, url)
            per_cpu = lambda r: r["requests"] / r["cpu_s"]
            results["c64"] = {name: {
                "requests_per_s": median([r["requests"] / r["secs"] for r in rs]),
                "requests_per_cpu_s": median([per_cpu(r) for r in rs]),
                "peak_rss_kib": median([r["rss_kib"] for r in rs]),
                "rounds": rs,
            } for name, rs in runs.items()}
            results["uring_over_epoll_per_round"] = [
                round(per_cpu(u) / per_cpu(e), 3)
                for u, e in zip(runs["kiln --io uring"], runs["kiln --io epoll"])]
            results["c10000"] = {io: run_many(url, io) for io in ("epoll", "uring")}
        finally:
            stop(nginx)

    port = free_port()
    target = subprocess.Popen(["taskset", "-c", "0", TARGET, "--port", str(port), "--service-ms", "2",
                               "--stall-every-ms", "1000", "--stall-ms", "100"],
                              stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        turl = f"http://127.0.0.1:{port}/"
        results["stall_p99_ms"] = {"expected": 92.0, **{
            io: run_kiln(turl, max(SECS, 10), 16, ["--rate", "500", "--io", io])["p99_ms"]
            for io in ("epoll", "uring")}}
    finally:
        stop(target)

    path = write_results("io", results)
    c64 = results["c64"]
    print(f"{results['date']} {commit}, {CONNS} connections, one thread, {ROUNDS} rounds of {SECS} s")
    print(f"{'generator':<18}{'req/s':>10}{'req/CPU-s':>12}{'peak RSS':>10}")
    for name, r in c64.items():
        print(f"{name:<18}{r['requests_per_s']:>10.0f}{r['requests_per_cpu_s']:>12.0f}"
              f"{r['peak_rss_kib'] / 1024:>9.1f}M")
    uring = c64["kiln --io uring"]["requests_per_cpu_s"]
    for name in ("kiln --io epoll", "wrk", "wrk2"):
        if name in c64:
            print(f"kiln --io uring / {name}: {uring / c64[name]['requests_per_cpu_s']:.3f}")
    print(f"uring/epoll per round: {results['uring_over_epoll_per_round']}")
    for io, m in results["c10000"].items():
        print(f"{MANY} connections at 5000/s, {io}: peak {m['rss_kib'] / 1024:.1f}M, "
              f"{m['kib_per_connection']:.2f} KiB per connection, {m['requests']} requests, "
              f"{m['failed']} failed")
    s = results["stall_p99_ms"]
    print(f"p99 under a 100 ms/s stall at 500/s (true 92 ms): epoll {s['epoll']:.1f} ms, "
          f"uring {s['uring']:.1f} ms")
    print(path)


if __name__ == "__main__":
    main()
