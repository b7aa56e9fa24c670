#!/usr/bin/env python3
"""Hedging benchmark: what `kiln run --hedge` costs the generator, at the same rate as the
same run without it, in one run on this machine.

Two kiln-target replicas (CPU 0) answer at once, except 3% of requests, drawn independently,
which take 20 ms more (`--slow-permille 30 --slow-ms 20`). kiln (CPU 1, 1 thread) offers
RATE requests/s for 10 s (open model): without hedging to the first replica; with
`--hedge 5ms --replica` and with `--hedge p95 --replica` to both. 5 interleaved rounds
(BENCH_ROUNDS). Reports requests per generator CPU-second (user + system, GNU time; a request
is the user's request, its second copy included in its cost), second copies per request,
p99 with hedging and of the first copies alone, and peak RSS; medians over the rounds.

Usage: python3 bench/hedge.py [--quick]   (results: bench/out/hedge-<time>.json, table on stdout)
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, measured, sh  # noqa: E402
from load import TARGET, free_port, median, stop, wait_port  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
RATE = int(os.environ.get("BENCH_RATE", "5000"))


def start_target():
    port = free_port()
    proc = subprocess.Popen(["taskset", "-c", "0", TARGET, "--port", str(port), "--slow-permille", "30",
                             "--slow-ms", "20"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}/"


def run(url, extra):
    out_dir = tempfile.mkdtemp(prefix="kiln-bench-")
    out, cpu, rss, _ = measured(["taskset", "-c", "1", KILN, "run", url, "--rate", str(RATE), "-c", "64",
                                 "-t", "1", "-d", f"{SECS}s", "--json", "-q", "--out", f"{out_dir}/run", *extra])
    shutil.rmtree(out_dir, ignore_errors=True)
    data = json.loads(out[out.index("{"):])
    total, hedging = data["total"], data.get("hedging")
    return dict(requests=total["requests"], cpu_s=cpu, rss_kib=rss, secs=SECS,
                unsent=total["unsent"], p99_ms=total["latency"]["p99_us"] / 1e3,
                first_copy_p99_ms=hedging["first_copy"]["p99_us"] / 1e3 if hedging else None,
                extra=hedging["extra_share"] if hedging else 0.0)


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"], cwd=ROOT)
    os.makedirs(OUT, exist_ok=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "rate": RATE, "machine": f"{os.cpu_count()} CPUs",
               "kiln": subprocess.run([KILN, "--version"], capture_output=True, text=True).stdout.strip()}
    (a, url_a), (b, url_b) = start_target(), start_target()
    variants = {
        "without --hedge": [],
        "--hedge 5ms --replica": ["--hedge", "5ms", "--replica", url_b],
        "--hedge p95 --replica": ["--hedge", "p95", "--replica", url_b],
    }
    try:
        runs = {name: [] for name in variants}
        for _ in range(ROUNDS):
            for name, extra in variants.items():
                runs[name].append(run(url_a, extra))
    finally:
        stop(a)
        stop(b)
    table = {}
    for name, rs in runs.items():
        table[name] = {
            "requests_per_cpu_s": median([x["requests"] / x["cpu_s"] for x in rs]),
            "extra": median([x["extra"] for x in rs]),
            "p99_ms": median([x["p99_ms"] for x in rs]),
            "first_copy_p99_ms": median([x["first_copy_p99_ms"] or x["p99_ms"] for x in rs]),
            "max_rss_kib": max(x["rss_kib"] for x in rs),
            "unsent": sum(x["unsent"] for x in rs),
            "rounds": rs,
        }
    base = table["without --hedge"]["requests_per_cpu_s"]
    for name in variants:
        table[name]["per_cpu_over_unhedged"] = table[name]["requests_per_cpu_s"] / base
    results["variants"] = table
    path = os.path.join(OUT, f"hedge-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n{results['date']}  ({'quick' if QUICK else f'{ROUNDS} rounds of {SECS} s'} at {RATE}/s)")
    print(f"{'run':<24}{'req/CPU-s':>11}{'ratio':>7}{'extra':>7}{'p99':>9}{'first p99':>11}{'RSS':>8}")
    for name, t in table.items():
        print(f"{name:<24}{t['requests_per_cpu_s']:>11.0f}{t['per_cpu_over_unhedged']:>7.2f}"
              f"{100 * t['extra']:>6.1f}%{t['p99_ms']:>7.1f}ms{t['first_copy_p99_ms']:>9.1f}ms"
              f"{t['max_rss_kib'] / 1024:>7.1f}M")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
