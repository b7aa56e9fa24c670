#!/usr/bin/env python3
"""Sampler cost: `kiln watch` beside `pidstat` (sysstat) watching a process with 500 threads.

Two targets, each a Python process with 500 threads: one whose threads block forever (a pool
at rest; thread count is what a per-thread sampler pays for) and one whose threads each wake
10 times a second (every thread runs in every interval, so none can be skipped). Each tool samples it once a second for BENCH_WATCH_S (30) s,
reading every thread: `kiln watch --pid P` (host CPU split, process, all threads, sockets and
kernel counters) and `pidstat -u -w -t -p P 1 N` (CPU and context switches per thread). CPU
(user + system) and peak RSS from GNU time; each tool also runs twice as long, and the
difference is its steady cost per second (start-up and the final report left out). The goal
in issue 4 is under 1% of one core.

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

# Idle: every thread blocks forever (a thread pool at rest). Waking: every thread wakes
# WAKES_PER_S times a second (a busy pool: each thread runs in every interval).
WAKES_PER_S = 10
TARGETS = {
    "idle": f"""
import threading, time
ev = threading.Event()
for _ in range({THREADS}):
    threading.Thread(target=ev.wait, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
""",
    "waking": f"""
import threading, time
def wake():
    while True:
        time.sleep({1 / WAKES_PER_S})
for _ in range({THREADS}):
    threading.Thread(target=wake, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
""",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    if not shutil.which("pidstat"):
        sh(["apt-get", "install", "-y", "-qq", "sysstat"])
    results = {}
    for kind, code in TARGETS.items():
        target = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        target.stdout.readline()
        pid = str(target.pid)
        try:
            for name, make_cmd in (
                ("kiln watch", lambda secs: [KILN, "watch", "--pid", pid, "-d", f"{secs}s", "--out",
                                             os.path.join(tempfile.mkdtemp(), "watch")]),
                ("pidstat -u -w -t", lambda secs: ["pidstat", "-u", "-w", "-t", "-p", pid, "1", str(secs)]),
            ):
                # Two lengths: the difference is the steady cost of one more second, without
                # start-up (kiln opens every thread's files once) and the last report.
                _, cpu, rss, wall = measured(make_cmd(SECS))
                _, cpu2, rss2, wall2 = measured(make_cmd(2 * SECS))
                steady = 100 * (cpu2 - cpu) / (wall2 - wall)
                key = f"{name}, {kind} threads"
                results[key] = {"cpu_s": cpu, "cpu_pct_of_core": 100 * cpu / wall, "max_rss_kib": rss,
                                "wall_s": wall, "cpu_s_twice_as_long": cpu2, "wall_s_twice_as_long": wall2,
                                "steady_cpu_pct_of_core": steady}
                print(f"{key:32} cpu {cpu:6.2f} s over {wall:5.1f} s = {100 * cpu / wall:5.2f}% of a core, "
                      f"steady {steady:5.2f}%, rss {rss / 1024:6.1f} MiB")
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
