#!/usr/bin/env python3
"""Report and compare benchmark: the size of report.html for a large run, how fast Chromium
shows it, and how long `kiln compare` takes on two such runs.

The record (crates/findings/examples/synthetic_record.rs): 10 minutes at 10,000 requests/s
(per-second HDR histograms), a resource sample per second, a profile of 100,000 samples over
4,000 stacks, and the DB stack trie of 1,000,000 calls (2,000 stacks). The issue's budget:
under 5 MB, rendered by Chromium in under 2 s. kiln's page says when it is ready
(`data-ready-ms`: from the start of navigation to the last chart and the flame graph drawn);
the Chromium wall time is given beside that of an empty page (the browser's own start).
`kiln compare` of two such records: 2,000 two-level bootstrap resamples over 2 x 600 seconds
of per-second histograms (no other tool compares run records with intervals; benchstat
compares benchmark lines, not latency distributions).

Usage: python3 bench/report.py [--quick]   (results: bench/out/report-<time>.json)
"""
import json, os, re, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, measured, sh  # noqa: E402

SECONDS = 60 if QUICK else 600
RATE = 10000
ROUNDS = 3 if QUICK else 7
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--window-size=1300,900", "--dump-dom"]


def chromium(page):
    started = time.monotonic()
    dom = subprocess.run(CHROMIUM + ["file://" + page], capture_output=True, text=True).stdout
    return time.monotonic() - started, dom


def main():
    sh(["cargo", "build", "-q", "--release", "-p", "kiln"], cwd=ROOT)
    sh(["cargo", "build", "-q", "--release", "-p", "kiln-findings", "--example",
        "synthetic_record"], cwd=ROOT)
    example = os.path.join(ROOT, "target", "release", "examples", "synthetic_record")
    tmp = tempfile.mkdtemp(prefix="kiln-bench-report-")
    try:
        record = os.path.join(tmp, "run")
        sh([example, record, str(SECONDS), str(RATE)], stdout=subprocess.DEVNULL)
        builds = []
        for _ in range(ROUNDS):
            _, cpu, rss, wall = measured([KILN, "report", record, "--html"])
            builds.append((wall, cpu, rss))
        other = os.path.join(tmp, "other")
        sh([example, other, str(SECONDS), str(RATE)], stdout=subprocess.DEVNULL)
        compares = []
        for _ in range(ROUNDS):
            _, cpu, rss, wall = measured([KILN, "compare", record, other, "--json"])
            compares.append((wall, cpu, rss))
        page = os.path.join(record, "report.html")
        size = os.path.getsize(page)
        empty = os.path.join(tmp, "empty.html")
        with open(empty, "w") as f:
            f.write("<!doctype html><html><body>x</body></html>")
        ready, walls, empty_walls, charts = [], [], [], None
        for _ in range(ROUNDS):
            wall, dom = chromium(page)
            walls.append(wall)
            ready.append(int(re.search(r'data-ready-ms="(\d+)"', dom).group(1)))
            charts = int(re.search(r'data-charts="(\d+)"', dom).group(1))
            empty_walls.append(chromium(empty)[0])
        result = {
            "date": time.strftime("%Y-%m-%d"), "seconds": SECONDS, "rate": RATE,
            "report_bytes": size, "rounds": ROUNDS,
            "build_wall_s": statistics.median(b[0] for b in builds),
            "build_cpu_s": statistics.median(b[1] for b in builds),
            "build_max_rss_kib": max(b[2] for b in builds),
            "ready_ms": statistics.median(ready),
            "chromium_wall_s": statistics.median(walls),
            "chromium_empty_page_wall_s": statistics.median(empty_walls),
            "charts": charts,
            "compare_wall_s": statistics.median(c[0] for c in compares),
            "compare_cpu_s": statistics.median(c[1] for c in compares),
            "compare_max_rss_kib": max(c[2] for c in compares),
        }
        print(f"record: {SECONDS} s at {RATE}/s, 100,000 profile samples, a DB trie of 1M calls")
        print(f"report.html: {size / 1e6:.2f} MB (budget 5 MB); built in {result['build_wall_s']:.3f} s, "
              f"{result['build_max_rss_kib'] / 1024:.1f} MiB peak RSS")
        print(f"Chromium: ready {result['ready_ms']} ms after navigation (budget 2 s); "
              f"{result['chromium_wall_s']:.2f} s wall vs {result['chromium_empty_page_wall_s']:.2f} s "
              f"for an empty page; {charts} charts (median of {ROUNDS})")
        print(f"kiln compare (2,000 resamples): {result['compare_wall_s']:.2f} s wall, "
              f"{result['compare_cpu_s']:.2f} s CPU, {result['compare_max_rss_kib'] / 1024:.0f} MiB peak RSS")
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, f"report-{time.strftime('%Y%m%d-%H%M%S')}.json"), "w") as f:
            json.dump(result, f, indent=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
