#!/usr/bin/env python3
"""kiln's resident memory under load (issue 35), beside wrk, in one run on this machine.

1. 64 connections, one generator thread, 10 s against nginx (1 worker on CPU 0, the tool on
   CPU 1): peak RSS from GNU time (the whole process: start, load, findings and summary), and
   requests per generator CPU-second, BENCH_ROUNDS interleaved rounds (5; 1 with --quick).
   With KILN_BASELINE=path, that kiln binary runs in the same rounds (e.g. one linked with
   KILN_LINK_ORDER=0, to see what the release link's function order saves).
2. 10,000 connections, open model at 5,000 requests/s for 10 s: kiln's peak RSS, and per
   connection both the whole (peak / 10,000) and the margin over the 64-connection run.

Usage: python3 bench/memory.py [--quick]   (results: bench/out/memory-<time>.json)
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, QUICK, ROOT, interleaved, measured, sh, write_results  # noqa: E402
from load import start_nginx, stop  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
MANY = 10_000
FDS = 20_000  # this machine's hard limit; 10,000 connections need about 10,050


def with_fds(cmd):
    """cmd with FDS open files allowed (bash's ulimit, then exec: GNU time sees cmd)."""
    return ["bash", "-c", f"ulimit -n {FDS} && exec \"$@\"", "bash", *cmd]


def kiln_run(kiln, url, flags, tmp):
    out_dir = tempfile.mkdtemp(dir=tmp)
    out, cpu, rss, _ = measured(with_fds(["taskset", "-c", "1", kiln, "run", url, *flags,
                                          "-d", f"{SECS}s", "--json", "-q",
                                          "--out", os.path.join(out_dir, "r")]))
    total = json.loads(out[out.index("{"):])["total"]
    return dict(requests=total["requests"], failed=total["failed"], cpu_s=cpu, rss_kib=rss)


def wrk_run(url):
    out, cpu, rss, _ = measured(["taskset", "-c", "1", "wrk", "-t1", "-c64", f"-d{SECS}s", url])
    requests = int(next(l for l in out.splitlines() if "requests in" in l).split()[0])
    return dict(requests=requests, failed=0, cpu_s=cpu, rss_kib=rss)


def link_order_found():
    """How many of crates/kiln/link-order.txt's functions the release binary has: those it
    lacks (renamed since, or a changed module's ThinLTO suffix) lie elsewhere in .text, and
    scripts/link_order.py writes the file again."""
    with open(os.path.join(ROOT, "crates", "kiln", "link-order.txt")) as f:
        order = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    nm = subprocess.run(["nm", "--defined-only", KILN], capture_output=True, text=True).stdout
    symbols = {p[2] for p in (l.split() for l in nm.splitlines()) if len(p) == 3}
    return sum(name in symbols for name in order), len(order)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    if not shutil.which("wrk") or not os.path.exists("/usr/sbin/nginx"):
        sh(["apt-get", "install", "-y", "-qq", "wrk", "nginx"])
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    tools = {"kiln": lambda url, tmp: kiln_run(KILN, url, ["-c", "64", "-t", "1"], tmp),
             "wrk": lambda url, tmp: wrk_run(url)}
    baseline = os.environ.get("KILN_BASELINE")
    if baseline:
        tools["kiln-baseline"] = lambda url, tmp: kiln_run(baseline, url, ["-c", "64", "-t", "1"], tmp)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    found, ordered = link_order_found()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
               "secs": SECS, "rounds": ROUNDS, "link_order_found": found, "link_order": ordered}
    with tempfile.TemporaryDirectory() as tmp:
        nginx, url = start_nginx(tmp, fds=FDS)
        try:
            runs = interleaved(tools, ROUNDS, url, tmp)
            results["c64"] = {name: {
                "peak_rss_kib_median": median([r["rss_kib"] for r in rs]),
                "peak_rss_kib_max": max(r["rss_kib"] for r in rs),
                "requests_per_cpu_s_median": median([r["requests"] / r["cpu_s"] for r in rs]),
            } for name, rs in runs.items()}
            many = kiln_run(KILN, url, ["--rate", "5000", "-c", str(MANY), "-t", "1"], tmp)
            c64 = results["c64"]["kiln"]["peak_rss_kib_median"]
            results["c10000"] = dict(many, kib_per_connection=many["rss_kib"] / MANY,
                                     kib_per_connection_over_c64=(many["rss_kib"] - c64) / (MANY - 64))
        finally:
            stop(nginx)
    path = write_results("memory", results)
    print(f"{'tool':<14}{'peak RSS':>10}{'max':>9}{'req/CPU-s':>12}   64 connections, {ROUNDS} rounds")
    for name, r in results["c64"].items():
        print(f"{name:<14}{r['peak_rss_kib_median'] / 1024:>9.1f}M{r['peak_rss_kib_max'] / 1024:>8.1f}M"
              f"{r['requests_per_cpu_s_median']:>12.0f}")
    m = results["c10000"]
    print(f"kiln at {MANY} connections, 5000/s: peak {m['rss_kib'] / 1024:.1f}M, "
          f"{m['kib_per_connection']:.2f} KiB per connection "
          f"({m['kib_per_connection_over_c64']:.2f} over the 64-connection run), "
          f"{m['requests']} requests, {m['failed']} failed")
    print(f"link order: {found} of {ordered} functions found in the binary")
    print(path)


if __name__ == "__main__":
    main()
