#!/usr/bin/env python3
"""What profiling a JVM costs it: async-profiler against perf with the perf map, and --alloc.

The target is tests/apps/java_alloc/AllocShop.java (80 KiB allocated and a little CPU per
request, on the JDK's HTTP server with two workers), warmed for 15 s first. kiln (release)
loads it with 4 connections, 1 thread, 10 s a run, in interleaved rounds (BENCH_ROUNDS,
default 5) of:

  plain        no profiler
  perf         --profile --async-profiler off   (perf at 99 Hz with the JVM's perf map)
  async        --profile                        (async-profiler in the JVM, CPU at 99 Hz)
  alloc        --alloc                          (async-profiler's allocation samples, 512 KiB)
  offcpu       --off-cpu                        (perf's context switches, and async-profiler's
                                                 lock waits and wall clock, 20 ms a thread)

Reports the target's requests/s and p50 (medians) and each against plain. The library comes
from `kiln setup async-profiler --dir target/async-profiler`.

Usage: python3 bench/jvm_profile.py   (results: bench/out/jvm-profile-<time>.json)
"""
import json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, ROOT, sh  # noqa: E402
from load import free_port, wait_port, median  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
LIBRARY = os.path.join(ROOT, "target", "async-profiler", "libasyncProfiler.so")


def kiln_run(url, pid, extra, secs):
    out = subprocess.run([KILN, "run", url, "-c", "4", "-t", "1", "-d", f"{secs}s", "--json", "-q",
                          "--out", os.path.join(tempfile.mkdtemp(), "run")]
                         + (["--watch-pid", str(pid)] if extra else []) + extra,
                         check=True, capture_output=True).stdout
    total = json.loads(out)["total"]
    return {"rps": total["throughput_rps"], "p50_us": total["latency"]["p50_us"]}


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    if not os.path.exists(LIBRARY):
        sh([KILN, "setup", "async-profiler", "--dir", os.path.dirname(LIBRARY)])
    tmp = tempfile.mkdtemp(prefix="kiln-jvm-profile-")
    sh(["javac", "-d", tmp, os.path.join(ROOT, "tests/apps/java_alloc/AllocShop.java")])
    port = free_port()
    app = subprocess.Popen(["java", "-XX:+PreserveFramePointer", "-Dsun.net.httpserver.nodelay=true",
                            "-cp", tmp, "AllocShop", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    variants = {
        "plain": [],
        "perf": ["--profile", "--async-profiler", "off"],
        "async": ["--profile", "--async-profiler", LIBRARY],
        "alloc": ["--alloc", "--async-profiler", LIBRARY],
        "offcpu": ["--off-cpu", "--async-profiler", LIBRARY],
    }
    rows = {name: [] for name in variants}
    try:
        wait_port(port)
        kiln_run(url, app.pid, [], 15)  # the JIT's warm-up
        for r in range(ROUNDS):
            for name, extra in variants.items():
                row = kiln_run(url, app.pid, extra, 10)
                rows[name].append(row)
                print(f"round {r} {name:6} {row['rps']:9.0f} req/s  p50 {row['p50_us']} us", flush=True)
    finally:
        app.kill()
    med = {n: {k: median([x[k] for x in v]) for k in ("rps", "p50_us")} for n, v in rows.items()}
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip(),
        "rounds": rows, "median": med,
        "against_plain": {n: {"rps": m["rps"] / med["plain"]["rps"],
                              "p50": m["p50_us"] / med["plain"]["p50_us"]} for n, m in med.items()},
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, time.strftime("jvm-profile-%Y%m%d-%H%M%S.json", time.gmtime()))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    for n, m in med.items():
        a = results["against_plain"][n]
        print(f"{n:6} {m['rps']:9.0f} req/s ({a['rps']:.3f}x)  p50 {m['p50_us']} us ({a['p50']:.3f}x)")
    print(f"written {path}")


if __name__ == "__main__":
    main()
