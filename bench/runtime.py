#!/usr/bin/env python3
"""Runtime insights benchmark: what kiln's runtime layer costs, on a real JVM.

1. The default layer (hsperfdata read every 10 ms, a record a second): the CPU of kiln's own
   `kiln-runtime` thread over a `kiln watch` of a JVM that collects garbage many times a
   second (tests/apps/java_gc/GcPattern), from the scheduler's per-thread runtime
   (schedstat, ns). Goal: under 0.5% of one core. The target pays nothing: kiln reads a file
   the JVM writes anyway.
2. `--runtime deep` (a thread dump every 2 s over the attach socket): the same JVM serving
   HTTP at a fixed rate (open model), loaded with and without it, interleaved rounds;
   throughput, p99 and p99.9 side by side, and the dumps' own cost as kiln measured it (round
   trip, and the JVM's safepoint time during each dump).

Usage: python3 bench/runtime.py [--quick]   (results: bench/out/runtime-<time>.json, table on stdout)
"""
import json, os, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, sh  # noqa: E402
from load import free_port, median, stop, wait_port  # noqa: E402

WATCH_SECS = 10 if QUICK else 30
LOAD_SECS = 5 if QUICK else 15
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "3"))
RATE = 2000


def compile_gc_pattern(tmp):
    sh(["javac", "-d", tmp, os.path.join(ROOT, "tests/apps/java_gc/GcPattern.java")])
    return tmp


def start_jvm(classes, period_ms, secs, port):
    # nodelay: the JDK server answers in two writes, which Nagle and delayed ACKs hold 40 ms
    proc = subprocess.Popen(["java", "-Xmx256m", "-Xmn16m", "-XX:+UseG1GC",
                             "-Dsun.net.httpserver.nodelay=true", "-cp", classes,
                             "GcPattern", str(period_ms), str(secs), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def thread_cpu_s(pid, name):
    """CPU seconds of the thread of `pid` called `name`, None if none: the scheduler's own
    runtime in nanoseconds (schedstat), not the 10 ms ticks of stat, which charge a whole tick
    to a thread that wakes a hundred times a second whenever a tick lands on it."""
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"{base}/{tid}/comm") as f:
                if f.read().strip() != name:
                    continue
            with open(f"{base}/{tid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e9
        except OSError:
            return None
    return None


def default_layer(classes):
    port = free_port()
    jvm = start_jvm(classes, 250, WATCH_SECS + 20, port)
    try:
        with tempfile.TemporaryDirectory() as out:
            kiln = subprocess.Popen([KILN, "watch", "--pid", str(jvm.pid), "-d", f"{WATCH_SECS}s",
                                     "--out", f"{out}/w"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            last = None
            while kiln.poll() is None:
                seen = thread_cpu_s(kiln.pid, "kiln-runtime")
                last = seen if seen is not None else last
                time.sleep(0.1)
            with open(f"{out}/w/runtime-seconds.jsonl") as f:
                seconds = [json.loads(line) for line in f]
    finally:
        stop(jvm)
    pauses = sum(s["jvm"]["gc_pauses"] for s in seconds)
    return {"watch_s": WATCH_SECS, "runtime_thread_cpu_s": last,
            "share_of_a_core": (last or 0) / WATCH_SECS, "gc_pauses_seen": pauses,
            "seconds_recorded": len(seconds)}


def load_once(url, port, deep):
    with tempfile.TemporaryDirectory() as out:
        args = [KILN, "run", url, "-R", str(RATE), "-c", "64", "--warmup", "3s", "-d", f"{LOAD_SECS}s",
                "--watch-port", str(port), "--json", "--quiet", "--out", f"{out}/r"]
        if deep:
            args += ["--runtime", "deep"]
        run = json.loads(subprocess.run(args, check=False, capture_output=True).stdout)
    lat = run["phases"][-1]["latency"]
    threads = (run.get("runtime") or {}).get("threads") or {}
    return {"throughput_rps": run["phases"][-1]["throughput_rps"], "p99_us": lat["p99_us"],
            "p999_us": lat["p99_9_us"], "dumps": threads.get("dumps"),
            "dump_ms": threads.get("took_ms_mean"), "dump_safepoint_ms": threads.get("safepoint_ms_mean")}


def deep_effect(classes):
    port = free_port()
    # no explicit collections: what moves the tail is the dumps, not the pattern
    jvm = start_jvm(classes, 10_000_000, 2 * ROUNDS * (LOAD_SECS + 10) + 60, port)
    url = f"http://127.0.0.1:{port}/"
    rounds = {"default": [], "deep": []}
    try:
        for _ in range(ROUNDS):
            for mode in ("default", "deep"):
                rounds[mode].append(load_once(url, port, mode == "deep"))
    finally:
        stop(jvm)
    summary = {}
    for mode, runs in rounds.items():
        summary[mode] = {k: median([r[k] for r in runs]) for k in ("throughput_rps", "p99_us", "p999_us")}
    summary["deep"]["dump_ms"] = median([r["dump_ms"] for r in rounds["deep"]])
    summary["deep"]["dump_safepoint_ms"] = median([r["dump_safepoint_ms"] or 0 for r in rounds["deep"]])
    summary["deep"]["dumps_per_run"] = median([r["dumps"] for r in rounds["deep"]])
    return summary, rounds


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        classes = compile_gc_pattern(tmp)
        default = default_layer(classes)
        deep, rounds = deep_effect(classes)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                        capture_output=True, text=True).stdout.strip(),
               "java": java, "default_layer": default, "deep": deep, "rounds": rounds,
               "rate": RATE, "load_secs": LOAD_SECS}
    path = os.path.join(OUT, time.strftime("runtime-%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"Default layer: kiln-runtime thread {default['runtime_thread_cpu_s']} CPU-s over "
          f"{default['watch_s']} s = {100 * default['share_of_a_core']:.3f}% of a core "
          f"({default['gc_pauses_seen']} GC pauses seen, {default['seconds_recorded']} seconds)")
    print(f"{'':10} {'req/s':>9} {'p99':>9} {'p99.9':>9}")
    for mode in ("default", "deep"):
        d = deep[mode]
        print(f"{mode:10} {d['throughput_rps']:9.0f} {d['p99_us'] / 1000:8.2f}ms {d['p999_us'] / 1000:8.2f}ms")
    print(f"deep: {deep['deep']['dumps_per_run']} dumps a run, {deep['deep']['dump_ms']:.1f} ms each "
          f"(round trip), {deep['deep']['dump_safepoint_ms']:.2f} ms at safepoints each")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
