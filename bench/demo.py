#!/usr/bin/env python3
"""Demo benchmark: how long `kiln demo` takes on this machine, start to last line.

The issue's budget: under 90 s including the second run. The demo's two loads last 30 s each
by construction (the periodic-stall rule needs 30 seconds), so the figure to watch is the rest:
starting the shop twice, perf's processing of the on- and off-CPU profiles, the traces' wait,
the findings, the reports and the comparison. Each round also checks what the demo is for
(six planted problems named in the first run, none in the second, p99 improved), so a fast
demo that stopped finding things does not pass for a good one. One more round runs with perf
unavailable (PERF pointing nowhere): the demo without profiles.

Usage: python3 bench/demo.py [--quick]   (results: bench/out/demo-<time>.json)
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, sh  # noqa: E402

ROUNDS = 1 if QUICK else 3
LOAD_S = 2 * (3 + 30)  # each run: a 3 s warm-up, 30 s measured
BUDGET_S = 90


def one_demo(env_extra=None):
    tmp = tempfile.mkdtemp(prefix="kiln-bench-demo-")
    env = dict(os.environ, **(env_extra or {}))
    try:
        start = time.monotonic()
        proc = subprocess.run([KILN, "demo", "--json", "--runs-dir", tmp], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, check=False)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.decode("utf-8", "replace")[-3000:])
        out = json.loads(proc.stdout)
        planted = {f["rule"] for f in out["planted"]["findings"]["findings"]}
        fixed = {f["rule"] for f in out["fixed"]["findings"]["findings"]}
        p99 = next(r for r in out["compare"]["rows"] if r["metric"] == "p99")
        return {"wall_s": wall, "planted_findings": sorted(planted),
                "fixed_findings": sorted(fixed), "p99_verdict": p99["verdict"]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    sh(["cargo", "build", "-q", "--release", "-p", "kiln"], cwd=ROOT)
    rounds = [one_demo() for _ in range(ROUNDS)]
    no_perf = one_demo({"PERF": "/nonexistent/perf"})
    walls = [r["wall_s"] for r in rounds]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip(),
        "rounds": rounds, "median_wall_s": statistics.median(walls),
        "max_wall_s": max(walls), "load_s": LOAD_S, "budget_s": BUDGET_S,
        "without_perf": no_perf,
    }
    for i, r in enumerate(rounds, 1):
        print(f"round {i}: {r['wall_s']:.1f} s; planted: {len(r['planted_findings'])} findings "
              f"({', '.join(r['planted_findings'])}); fixed: {len(r['fixed_findings'])}; "
              f"p99 {r['p99_verdict']}")
    print(f"kiln demo: median {result['median_wall_s']:.1f} s, max {result['max_wall_s']:.1f} s "
          f"(of which {LOAD_S} s is load; budget {BUDGET_S} s)")
    print(f"without perf: {no_perf['wall_s']:.1f} s; planted: {', '.join(no_perf['planted_findings'])}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f"demo-{time.strftime('%Y%m%d-%H%M%S')}.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
