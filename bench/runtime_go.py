#!/usr/bin/env python3
"""What reading a Go target costs it: tests/apps/go_cache (a 60 MB cache rebuilt every 2 s, so
the collector runs often) under 2,000 requests/s (open model, 64 connections, 3 s warm-up,
10 s measured), in interleaved rounds of four ways of running it:

- plain: started by this script, loaded by kiln, not watched;
- gctrace: started by kiln (`--spawn`: GODEBUG=gctrace=1, a line on stderr per GC cycle);
- expvar: started by this script, watched (`--watch-port`: /debug/vars read once a second,
  each read a short stop-the-world in the target);
- deep: as expvar, with `--runtime deep` (a goroutine dump every 2 s: a stop-the-world for the
  dump's length; and execution traces of 3 s back to back, read by tools/kiln-go-trace).

Throughput, p99 and p99.9 side by side (medians over the rounds), the GC cycles kiln saw, the
goroutine dumps' round trip, and the traced mark assist.

Usage: python3 bench/runtime_go.py [--quick]   (results: bench/out/runtime-go-<time>.json)
"""
import json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, sh  # noqa: E402
from load import free_port, median, stop, wait_port  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "3"))
LOAD_SECS = 5 if QUICK else 10
RATE = 2000
MODES = ("plain", "gctrace", "expvar", "deep")


def build(tmp):
    binary = os.path.join(tmp, "go_cache")
    sh(["go", "build", "-o", binary, os.path.join(ROOT, "tests/apps/go_cache/main.go")],
       env={**os.environ, "GO111MODULE": "off", "GOFLAGS": ""})
    return binary


def once(binary, mode, tmp):
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    target_cmd = [binary, str(port), os.path.join(tmp, "truth.json"), "background", "2"]
    args = [KILN, "run", url, "-R", str(RATE), "-c", "64", "--warmup", "3s",
            "-d", f"{LOAD_SECS}s", "--json", "--quiet", "--out", os.path.join(tmp, f"r-{mode}-{port}")]
    target = None
    if mode == "gctrace":
        args += ["--spawn", " ".join(target_cmd)]
    else:
        target = subprocess.Popen(target_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port)
        if mode != "plain":
            args += ["--watch-port", str(port)]
        if mode == "deep":
            args += ["--runtime", "deep"]
    try:
        run = json.loads(subprocess.run(args, check=False, capture_output=True).stdout)
    finally:
        if target:
            stop(target)
    lat = run["phases"][-1]["latency"]
    runtime = run.get("runtime") or {}
    return {"throughput_rps": run["phases"][-1]["throughput_rps"], "p99_us": lat["p99_us"],
            "p999_us": lat["p99_9_us"], "gc_cycles": (runtime.get("go") or {}).get("gc_cycles"),
            "dump_ms": (runtime.get("threads") or {}).get("took_ms_mean"),
            "traced_assist_ms": (runtime.get("go_assist") or {}).get("assist_ms")}


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    # the execution traces' reader, where kiln looks for it: beside the binary
    sh(["go", "build", "-o", os.path.join(os.path.dirname(KILN), "kiln-go-trace"), "."],
       cwd=os.path.join(ROOT, "tools", "kiln-go-trace"))
    os.makedirs(OUT, exist_ok=True)
    rounds = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        binary = build(tmp)
        for _ in range(ROUNDS):
            for mode in MODES:
                rounds[mode].append(once(binary, mode, tmp))
    summary = {}
    for mode, runs in rounds.items():
        summary[mode] = {k: median([r[k] for r in runs]) for k in ("throughput_rps", "p99_us", "p999_us")}
        cycles = [r["gc_cycles"] for r in runs if r["gc_cycles"] is not None]
        dumps = [r["dump_ms"] for r in runs if r["dump_ms"] is not None]
        assist = [r["traced_assist_ms"] for r in runs if r.get("traced_assist_ms") is not None]
        summary[mode]["gc_cycles"] = median(cycles) if cycles else None
        summary[mode]["dump_ms"] = median(dumps) if dumps else None
        summary[mode]["traced_assist_ms"] = median(assist) if assist else None
    go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                        capture_output=True, text=True).stdout.strip(),
               "go": go, "rate": RATE, "load_secs": LOAD_SECS, "summary": summary, "rounds": rounds}
    path = os.path.join(OUT, time.strftime("runtime-go-%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"{'':8} {'req/s':>8} {'p99':>9} {'p99.9':>9} {'GC cycles':>10} {'dump':>8} {'assist':>9}")
    for mode in MODES:
        s = summary[mode]
        dump = f"{s['dump_ms']:.1f}ms" if s["dump_ms"] is not None else "-"
        cycles = s["gc_cycles"] if s["gc_cycles"] is not None else "-"
        assist = f"{s['traced_assist_ms']:.0f}ms" if s["traced_assist_ms"] is not None else "-"
        print(f"{mode:8} {s['throughput_rps']:8.0f} {s['p99_us'] / 1000:8.2f}ms "
              f"{s['p999_us'] / 1000:8.2f}ms {cycles:>10} {dump:>8} {assist:>9}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
