#!/usr/bin/env python3
"""Merge benchmark: `kiln merge` of 16 shards x 10 minutes of load seconds.

One real 5 s run (`kiln run --rate 2000` against kiln-target) gives the seconds; each of 16
shard directories gets 600 of them (renumbered, with wall-clock times one second apart and the
shard's index in its plan), about what 16 workers at 2,000 requests/s each record in 10
minutes. Reports the merge's wall time and peak RSS (GNU time), median of 5 (BENCH_ROUNDS).

Usage: python3 bench/merge.py [--quick]   (results: bench/out/merge-<time>.json, a line on stdout)
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, measured, sh  # noqa: E402
from load import TARGET, free_port, median, stop, wait_port  # noqa: E402

SHARDS = 16
SECONDS = 60 if QUICK else 600
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"], cwd=ROOT)
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="kiln-bench-merge-")
    port = free_port()
    target = subprocess.Popen([TARGET, "--port", str(port)], stdout=subprocess.DEVNULL)
    wait_port(port)
    try:
        sh([KILN, "run", f"http://127.0.0.1:{port}/", "--rate", "2000", "-d", "5s", "-q",
            "--json", "--out", f"{tmp}/source"], stdout=subprocess.DEVNULL)
    finally:
        stop(target)
    lines = [json.loads(l) for l in open(f"{tmp}/source/load-seconds.jsonl")]
    seconds = [l["second"] for l in lines if "second" in l and l["second"]["requests"] > 0]
    end = next(l["phase_end"] for l in lines if "phase_end" in l)
    manifest = json.load(open(f"{tmp}/source/run.json"))
    for i in range(SHARDS):
        d = f"{tmp}/shard-{i}"
        os.makedirs(d)
        m = dict(manifest, id=f"shard-{i}")
        m["plan"] = dict(manifest["plan"], shard={"index": i, "count": SHARDS})
        m["parts"] = [p for p in manifest["parts"] if p["kind"] == "load-seconds"]
        json.dump(m, open(f"{d}/run.json", "w"))
        with open(f"{d}/load-seconds.jsonl", "w") as f:
            t0 = seconds[0]["unix_ms"]
            for n in range(SECONDS):
                s = dict(seconds[n % len(seconds)], second=n, unix_ms=t0 + 1000 * n)
                f.write(json.dumps({"second": s}) + "\n")
            f.write(json.dumps({"phase_end": dict(end, duration_us=SECONDS * 1_000_000)}) + "\n")
    size = sum(os.path.getsize(f"{tmp}/shard-{i}/load-seconds.jsonl") for i in range(SHARDS))
    rounds = []
    for r in range(ROUNDS):
        out = f"{tmp}/merged-{r}"
        _, cpu, rss, wall = measured([KILN, "merge", *[f"{tmp}/shard-{i}" for i in range(SHARDS)],
                                      "--out", out, "--json"])
        rounds.append(dict(wall_s=wall, cpu_s=cpu, rss_kib=rss))
    if os.environ.get("BENCH_KEEP"):
        print(f"kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "shards": SHARDS,
              "seconds_each": SECONDS, "input_mib": size / 2**20,
              "requests_per_second_each": seconds[0]["requests"],
              "wall_s": median([r["wall_s"] for r in rounds]),
              "max_rss_mib": max(r["rss_kib"] for r in rounds) / 1024, "rounds": rounds}
    path = os.path.join(OUT, f"merge-{time.strftime('%Y%m%d-%H%M%S')}.json")
    json.dump(result, open(path, "w"), indent=2)
    print(f"{SHARDS} shards x {SECONDS} s ({result['input_mib']:.0f} MiB of seconds): merge "
          f"{result['wall_s']:.2f} s (median of {ROUNDS}), peak RSS {result['max_rss_mib']:.1f} MiB")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
