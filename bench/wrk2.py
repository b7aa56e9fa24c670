#!/usr/bin/env python3
"""The generator beside wrk2 (issue 35's goal: at least 1.25x wrk2's requests per generator
CPU-second), with wrk in the same rounds, in one run on this machine.

nginx (1 worker, pinned to CPU 0) answers "hello"; each tool runs from CPU 1 with 64
connections and one thread for 10 s, in BENCH_ROUNDS (5) interleaved rounds:

  wrk    wrk -t1 -c64
  wrk2   wrk2 -t1 -c64 -R 10000000   (a rate no generator here reaches: as fast as it can,
                                      with wrk2's pacing and its corrected histogram)
  kiln   kiln run -c 64 -t 1          (closed model)

Reports requests/s and requests per generator CPU-second (user + system, GNU time), medians,
and kiln's ratio to each per round. wrk2 comes from `bash bench/wrk2.sh [SOURCE]`.

Usage: python3 bench/wrk2.py [--quick]   (results: bench/out/wrk2-<time>.json)
"""
import json, os, re, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, TOOLS, measured, sh  # noqa: E402
from load import median, run_kiln, run_wrk, start_nginx, stop  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
CONNS = 64
WRK2 = os.path.join(TOOLS, "bin", "wrk2")


def run_wrk2(url, secs):
    out, cpu, rss, wall = measured(["taskset", "-c", "1", WRK2, "-t1", f"-c{CONNS}", f"-d{secs}s",
                                    "-R", "10000000", url])
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    return dict(requests=requests, cpu_s=cpu, rss_kib=rss, secs=secs)


def main():
    if not os.path.exists(WRK2):
        sys.exit(f"no {WRK2}: bash bench/wrk2.sh [SOURCE] builds it")
    if not shutil.which("wrk") or not os.path.exists("/usr/sbin/nginx"):
        sh(["apt-get", "install", "-y", "-qq", "wrk", "nginx"])
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    tmp = tempfile.mkdtemp(prefix="kiln-bench-nginx-")
    nginx, url = start_nginx(tmp)
    rounds = {"wrk": [], "wrk2": [], "kiln": []}
    try:
        for r in range(ROUNDS):
            rounds["wrk"].append(run_wrk(url, SECS, CONNS))
            rounds["wrk2"].append(run_wrk2(url, SECS))
            rounds["kiln"].append(run_kiln(url, SECS, CONNS))
            row = {t: v[-1]["requests"] / v[-1]["cpu_s"] for t, v in rounds.items()}
            print(f"round {r}: " + "  ".join(f"{t} {x:,.0f} req/CPU-s" for t, x in row.items()), flush=True)
    finally:
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    per_cpu = lambda x: x["requests"] / x["cpu_s"]
    med = {t: {"requests_per_s": median([x["requests"] / x["secs"] for x in v]),
               "requests_per_cpu_s": median([per_cpu(x) for x in v]),
               "max_rss_kib": max(x["rss_kib"] for x in v)} for t, v in rounds.items()}
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip(),
        "connections": CONNS, "seconds": SECS, "rounds": rounds, "median": med,
        "kiln_over": {t: [round(per_cpu(k) / per_cpu(o), 3) for k, o in zip(rounds["kiln"], v)]
                      for t, v in rounds.items() if t != "kiln"},
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, time.strftime("wrk2-%Y%m%d-%H%M%S.json", time.gmtime()))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    for t, m in med.items():
        print(f"{t:5} {m['requests_per_s']:10.0f} req/s {m['requests_per_cpu_s']:10.0f} req/CPU-s "
              f"{m['max_rss_kib'] / 1024:6.1f} MiB")
    k = med["kiln"]["requests_per_cpu_s"]
    print(f"kiln/wrk2 per CPU-second: {k / med['wrk2']['requests_per_cpu_s']:.2f} "
          f"(per round {results['kiln_over']['wrk2']}); kiln/wrk: {k / med['wrk']['requests_per_cpu_s']:.2f}")
    print(f"written {path}")


if __name__ == "__main__":
    main()
