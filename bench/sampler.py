#!/usr/bin/env python3
"""Sampler cost: `kiln watch` beside `pidstat` (sysstat) watching a process with 500 threads.

The target is a Python process whose 500 threads block forever (thread count is what a
per-thread sampler pays for). Each tool samples it once a second for BENCH_WATCH_S (30) s,
reading every thread: `kiln watch --pid P` (host CPU split, process, all threads, sockets and
kernel counters) and `pidstat -u -w -t -p P 1 N` (CPU and context switches per thread). CPU
(user + system) and peak RSS from GNU time; the goal in issue 4 is under 1% of one core.

Usage: python3 bench/sampler.py   (results: bench/out/sampler-<time>.json)
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import measured, sh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
KILN = os.path.join(ROOT, "target", "release", "kiln")
SECS = int(os.environ.get("BENCH_WATCH_S", "30"))
THREADS = 500

TARGET = f"""
import threading, time
ev = threading.Event()
for _ in range({THREADS}):
    threading.Thread(target=ev.wait, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    if not shutil.which("pidstat"):
        sh(["apt-get", "install", "-y", "-qq", "sysstat"])
    target = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE)
    target.stdout.readline()
    pid = str(target.pid)
    results = {}
    try:
        for name, cmd in (
            ("kiln watch", [KILN, "watch", "--pid", pid, "-d", f"{SECS}s", "--out",
                            os.path.join(tempfile.mkdtemp(), "watch")]),
            ("pidstat -u -w -t", ["pidstat", "-u", "-w", "-t", "-p", pid, "1", str(SECS)]),
        ):
            _, cpu, rss, wall = measured(cmd)
            results[name] = {"cpu_s": cpu, "cpu_pct_of_core": 100 * cpu / wall, "max_rss_kib": rss, "wall_s": wall}
            print(f"{name:18} cpu {cpu:6.2f} s over {wall:5.1f} s = {100 * cpu / wall:5.2f}% of a core, rss {rss / 1024:6.1f} MiB")
    finally:
        target.kill()
    report = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "threads": THREADS + 1,
              "seconds": SECS, "tools": results}
    path = os.path.join(OUT, f"sampler-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
