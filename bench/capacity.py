#!/usr/bin/env python3
"""kiln capacity beside the search users do by hand: the requests and time each spends to
bracket the same capacity to the same precision, in one run on this machine.

The target: kiln-target with 4 workers of 10 ms (at most 400 requests/s; its latency stays
near 10 ms until the rate nears that). The SLO: p99 < 50 ms. The precision: 5%.

  kiln capacity   kiln capacity URL --slo 'p99<50ms' (probe, growth, bisection, the edge again)
  by hand         one open-model run per guess, as a user bisects with wrk2 -R or kiln run
                  --rate: 10 s each after a 2 s warm-up (wrk2's own calibration needs ~10 s),
                  doubling from 100 requests/s until p99 breaks, then halving the interval
                  (arithmetic midpoints) until the broken rate is within 5% of the kept one.
                  The runs are kiln run's, so both sides measure latency the same way; only
                  the search differs.

Reports per round and as medians: the capacity found (the kept end of the bracket), the
bracket, the steps, the requests sent and the wall time; and the ratio by hand / kiln capacity.

Usage: python3 bench/capacity.py [--quick]   (results: bench/out/capacity-<time>.json)
"""
import json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, QUICK, ROOT, free_port, sh, wait_port, write_results  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "3"))
TARGET = os.path.join(ROOT, "target", "release", "kiln-target")
SLO_MS = 50.0
PRECISION = 0.05
HAND_SECS = 10
HAND_WARMUP = 2


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def start_target():
    port = free_port()
    proc = subprocess.Popen([TARGET, "--port", str(port), "--workers", "4", "--service-ms", "10"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}/"


def by_kiln(url, tmp, r):
    out = os.path.join(tmp, f"capacity-{r}")
    start = time.monotonic()
    done = subprocess.run([KILN, "capacity", url, "--slo", f"p99<{SLO_MS:.0f}ms", "--json", "--quiet",
                           "--out", out], capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    v = json.loads(done.stdout)
    return dict(found=v["max_rate"], bracket=[v["max_rate"], v["first_broken_rate"]], steps=len(v["steps"]),
                requests=v["requests_total"], wall_s=wall)


def one_run(url, rate, tmp, n):
    out = os.path.join(tmp, f"hand-{n}")
    done = subprocess.run([KILN, "run", url, "--rate", f"{rate:.1f}", "-d", f"{HAND_SECS}s", "--warmup",
                           f"{HAND_WARMUP}s", "--json", "--quiet", "--out", out], capture_output=True, text=True)
    if done.returncode not in (0, 99):
        raise RuntimeError(done.stderr)
    v = json.loads(done.stdout)
    total = v["total"]
    p99_ms = total["latency"]["p99_us"] / 1000.0
    sent = sum(p["sent"] for p in v["phases"])
    return p99_ms < SLO_MS, sent


def by_hand(url, tmp, r):
    start = time.monotonic()
    lo, hi, rate, runs, sent = None, None, 100.0, 0, 0
    while True:
        runs += 1
        kept, n = one_run(url, rate, tmp, f"{r}-{runs}")
        sent += n
        if kept:
            lo = rate
        else:
            hi = rate
        if hi is None:
            rate *= 2
        elif lo is None:
            rate /= 2
        elif (hi - lo) / lo <= PRECISION:
            break
        else:
            rate = (lo + hi) / 2
    return dict(found=lo, bracket=[lo, hi], steps=runs, requests=sent, wall_s=time.monotonic() - start)


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"], cwd=ROOT)
    target, url = start_target()
    tmp = tempfile.mkdtemp(prefix="kiln-bench-capacity-")
    rounds = {"kiln capacity": [], "by hand": []}
    try:
        for r in range(ROUNDS):
            rounds["kiln capacity"].append(by_kiln(url, tmp, r))
            rounds["by hand"].append(by_hand(url, tmp, r))
            for name, v in rounds.items():
                x = v[-1]
                print(f"round {r} {name:13}: {x['found']:.0f} req/s [{x['bracket'][0]:.0f}, {x['bracket'][1]:.0f}) "
                      f"in {x['steps']} steps, {x['requests']:,} requests, {x['wall_s']:.0f} s", flush=True)
    finally:
        target.terminate()
        target.wait()
        subprocess.run(["rm", "-rf", tmp])
    med = {name: {k: median([x[k] for x in v]) for k in ("found", "steps", "requests", "wall_s")}
           for name, v in rounds.items()}
    ratio = {k: med["by hand"][k] / med["kiln capacity"][k] for k in ("steps", "requests", "wall_s")}
    results = dict(target="kiln-target --workers 4 --service-ms 10 (400 requests/s at most)",
                   slo=f"p99<{SLO_MS:.0f}ms", precision=PRECISION, rounds=rounds, medians=med,
                   by_hand_over_kiln=ratio)
    path = write_results("capacity", results)
    for name, m in med.items():
        print(f"median {name:13}: {m['found']:.0f} req/s in {m['steps']:.0f} steps, {m['requests']:,.0f} requests, "
              f"{m['wall_s']:.0f} s")
    print(f"by hand / kiln capacity: steps x{ratio['steps']:.2f}, requests x{ratio['requests']:.2f}, "
          f"time x{ratio['wall_s']:.2f}   ({path})")


if __name__ == "__main__":
    main()
