#!/usr/bin/env python3
"""Findings benchmark: how long kiln takes to judge a large run record.

The record (written by crates/findings/examples/synthetic_record.rs): 10 minutes of load at
10,000 requests/s (each second's latencies in its HDR histograms, a stall at every 10th
wall-clock second), a resource sample per second, a profile of 100,000 samples over 4,000
stacks, and a DB analysis with 40 findings (the analysis of the spans themselves is measured by
bench/queries.py: findings read queries.json, not the spans). `kiln findings --rejudge` reads
every part and runs every rule, the periodic-spike rule's 200-shuffle permutation test
included. No other tool judges a run record, so the figure stands alone against the issue's
budget (2 s).

Reports wall time, CPU seconds and peak RSS, the median of ROUNDS runs.
Usage: python3 bench/findings.py [--quick]   (results: bench/out/findings-<time>.json)
"""
import json, os, shutil, statistics, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, measured, sh  # noqa: E402

SECONDS = 60 if QUICK else 600
RATE = 10000
ROUNDS = 3 if QUICK else 7


def main():
    sh(["cargo", "build", "-q", "--release", "-p", "kiln"], cwd=ROOT)
    sh(["cargo", "build", "-q", "--release", "-p", "kiln-findings", "--example",
        "synthetic_record"], cwd=ROOT)
    example = os.path.join(ROOT, "target", "release", "examples", "synthetic_record")
    tmp = tempfile.mkdtemp(prefix="kiln-bench-findings-")
    try:
        record = os.path.join(tmp, "run")
        sh([example, record, str(SECONDS), str(RATE)], stdout=subprocess_devnull())
        size = sum(os.path.getsize(os.path.join(record, f)) for f in os.listdir(record))
        rounds = []
        for _ in range(ROUNDS):
            out, cpu, rss, wall = measured([KILN, "findings", record, "--rejudge", "--json"])
            rounds.append((wall, cpu, rss))
            findings = json.loads(out)
        wall = statistics.median(r[0] for r in rounds)
        cpu = statistics.median(r[1] for r in rounds)
        rss = max(r[2] for r in rounds)
        result = {
            "date": time.strftime("%Y-%m-%d"), "seconds": SECONDS, "rate": RATE,
            "record_bytes": size, "rounds": ROUNDS, "wall_s": wall, "cpu_s": cpu,
            "max_rss_kib": rss, "findings": len(findings["findings"]),
            "rules": [f["rule"] for f in findings["findings"][:5]],
        }
        print(f"record: {SECONDS} s at {RATE}/s, {size / 1e6:.1f} MB on disk")
        print(f"kiln findings --rejudge: {wall:.3f} s wall, {cpu:.3f} s CPU, "
              f"{rss / 1024:.1f} MiB peak RSS (median of {ROUNDS}; budget 2 s)")
        print(f"{result['findings']} findings, first: {', '.join(result['rules'])}")
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, f"findings-{time.strftime('%Y%m%d-%H%M%S')}.json"), "w") as f:
            json.dump(result, f, indent=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def subprocess_devnull():
    return open(os.devnull, "w")


if __name__ == "__main__":
    main()
