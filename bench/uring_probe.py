#!/usr/bin/env python3
"""What io_uring saves a load generator on this kernel, measured apart from kiln (issue 35):
bench/uring_probe (a closed HTTP/1.1 loop, 64 connections, one thread) on four kinds of I/O,
beside kiln and wrk, against nginx (1 worker pinned to CPU 0), each from CPU 1, in
BENCH_ROUNDS (5) interleaved rounds of 10 s:

  epoll        level-triggered epoll, one send and one recv a request (kiln's syscalls today)
  uring        a send and a receive submitted per request, one io_uring_enter a loop turn
  uring-defer  the same with SINGLE_ISSUER | DEFER_TASKRUN
  uring-multi  the same, one multishot receive per connection into a provided-buffer ring

Reports requests per CPU-second (user + system, GNU time), medians.

Usage: python3 bench/uring_probe.py [--quick]   (results: bench/out/uring-probe-<time>.json)
"""
import json, os, re, statistics, sys, tempfile, time, shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import OUT, QUICK, ROOT, measured, sh  # noqa: E402
from load import run_kiln, run_wrk, start_nginx, stop  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
CONNS = 64
PROBE_DIR = os.path.join(ROOT, "bench", "uring_probe")
PROBE = os.path.join(PROBE_DIR, "target", "release", "uring-probe")
MODES = ["epoll", "uring", "uring-defer", "uring-multi"]


def main():
    sh(["cargo", "build", "--release", "-q"], cwd=PROBE_DIR)
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    tmp = tempfile.mkdtemp(prefix="kiln-bench-nginx-")
    nginx, url = start_nginx(tmp)
    hostport = url.split("//")[1].rstrip("/")
    rounds = {m: [] for m in MODES + ["kiln", "wrk"]}
    try:
        for r in range(ROUNDS):
            for mode in MODES:
                out, cpu, _, _ = measured(["taskset", "-c", "1", PROBE, mode, hostport, "/",
                                           str(CONNS), str(SECS)])
                rounds[mode].append(int(re.search(r"requests (\d+)", out).group(1)) / cpu)
            k = run_kiln(url, SECS, CONNS)
            rounds["kiln"].append(k["requests"] / k["cpu_s"])
            w = run_wrk(url, SECS, CONNS)
            rounds["wrk"].append(w["requests"] / w["cpu_s"])
            print(f"round {r}: " + "  ".join(f"{m} {v[-1]:,.0f}" for m, v in rounds.items()),
                  flush=True)
    finally:
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {m: statistics.median(v) for m, v in rounds.items()}
    for m, v in med.items():
        print(f"{m:12} {v:10,.0f} requests per CPU-second  {v / med['epoll']:.3f}x epoll  "
              f"{v / med['wrk']:.3f}x wrk")
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"uring-probe-{time.strftime('%Y%m%dT%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump({"rounds": rounds, "median_per_cpu_s": med, "secs": SECS,
                   "connections": CONNS}, f, indent=1)
    print(path)


if __name__ == "__main__":
    main()
