#!/usr/bin/env python3
"""Does the demo find what it planted every time? (issue 61)

Runs `kiln demo --seconds 30` N times, as its e2e test does (the debug build by default), quiet
or beside the standard noisy neighbour (tests/noisy_neighbour.py), and records for each run
what the planted and the fixed shop's findings were (host findings apart: they are about the
machine), and what the periodic rule saw: its cycles, the share that spiked, the chance, the
usual second's worst latency and the stall's. A run that missed one of the six keeps its run
directories and its seconds' worst latencies (decoded from load-seconds.jsonl's histograms).

Usage: python3 bench/demo_runs.py [--runs N] [--neighbour] [--kiln PATH]
       (results: bench/out/demo-runs-<time>.json, the summary on stdout)
"""
import argparse, base64, json, math, os, shutil, struct, subprocess, sys, tempfile, time, zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, write_results  # noqa: E402

SIX = {"db.n-plus-one", "cpu.exceptions", "cpu.json", "cpu.page-faults",
       "latency.periodic-spikes", "threads.lock-contention"}
HOST = {"cpu.host-busy", "cpu.hypervisor-steal", "load.generator-starved"}


def hist_max_us(encoded):
    """The largest value of an HdrHistogram V2 (compressed, base64) histogram, in its unit."""
    raw = base64.b64decode(encoded)
    length = struct.unpack(">i", raw[4:8])[0]
    body = zlib.decompress(raw[8:8 + length])
    payload, _, sig, lowest, _ = struct.unpack(">iiiqq", body[4:32])
    index, last, i, data = 0, None, 0, body[40:40 + payload]
    while i < len(data):
        v, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        count = (v >> 1) ^ -(v & 1)
        if count < 0:
            index += -count
        else:
            if count:
                last = index
            index += 1
    if last is None:
        return 0
    sub_mag = math.ceil(math.log2(2 * 10 ** sig))
    half = 2 ** sub_mag // 2
    unit = int(math.floor(math.log2(lowest)))
    bucket = (last >> (sub_mag - 1)) - 1
    sub = (last & (half - 1)) + half
    if bucket < 0:
        sub, bucket = sub - half, 0
    return sub << (bucket + unit)


def worst_by_second(run_dir):
    """(wall second mod 60, requests, worst ms) of each measured second."""
    out = []
    with open(os.path.join(run_dir, "load-seconds.jsonl")) as f:
        for line in f:
            s = json.loads(line).get("second")
            if s and s.get("phase") != "warmup":
                out.append((((s["unix_ms"] - 1) // 1000) % 60, s["requests"],
                            hist_max_us(s["latency"]) // 1000))
    return out


def one_run(kiln, keep_dir):
    runs = tempfile.mkdtemp(prefix="kiln-demo-runs-")
    start = time.monotonic()
    proc = subprocess.run([kiln, "demo", "--seconds", "30", "--json", "--runs-dir", runs],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    rec = {"wall_s": round(time.monotonic() - start, 1), "exit": proc.returncode}
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        rec["stderr"] = proc.stderr[-3000:]
        return rec
    for side in ("planted", "fixed"):
        f = out[side]["findings"]
        rules = {x["rule"] for x in f["findings"]}
        rec[side] = {"rules": sorted(rules - HOST), "host": sorted(rules & HOST),
                     "periodic_unjudged": [u for u in f.get("unjudged", [])
                                           if u.get("rule") == "latency.periodic-spikes"]}
    rec["periodic"] = next((x["data"] for x in out["planted"]["findings"]["findings"]
                            if x["rule"] == "latency.periodic-spikes"), None)
    rec["six"] = set(rec["planted"]["rules"]) == SIX
    rec["fixed_none"] = not rec["fixed"]["rules"]
    planted_dir = out["planted"]["dir"]
    if not rec["six"]:
        rec["seconds"] = worst_by_second(planted_dir)
        shutil.copytree(runs, keep_dir, dirs_exist_ok=True)
        rec["kept"] = keep_dir
    shutil.rmtree(runs, ignore_errors=True)
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--neighbour", action="store_true")
    ap.add_argument("--kiln", default=os.path.join(ROOT, "target", "debug", "kiln"))
    args = ap.parse_args()
    neighbour = None
    if args.neighbour:
        neighbour = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "noisy_neighbour.py"),
                                      "--seconds", str(120 * args.runs)])
        time.sleep(3)
    results = []
    try:
        for i in range(args.runs):
            rec = one_run(args.kiln, os.path.join(ROOT, "bench", "out", f"demo-miss-{i}"))
            results.append(rec)
            print(i, rec["wall_s"], "six" if rec.get("six") else f"MISSED {rec.get('planted')}",
                  "fixed none" if rec.get("fixed_none") else f"fixed: {rec.get('fixed')}",
                  rec.get("planted", {}).get("host"), flush=True)
    finally:
        if neighbour:
            neighbour.terminate()
            neighbour.wait()
    per = [r["periodic"] for r in results if r.get("periodic")]
    summary = {
        "runs": len(results), "neighbour": args.neighbour,
        "six": sum(bool(r.get("six")) for r in results),
        "fixed_none": sum(bool(r.get("fixed_none")) for r in results),
        "usual_worst_ms": [min(p["usual_worst_us"] for p in per) // 1000,
                           max(p["usual_worst_us"] for p in per) // 1000] if per else None,
        "stall_worst_ms": [min(p["spike_worst_us"] for p in per) // 1000,
                           max(p["spike_worst_us"] for p in per) // 1000] if per else None,
        "least_hit_share": min((p["hit_share"] for p in per), default=None),
    }
    print(json.dumps(summary))
    print(write_results("demo-runs", {"summary": summary, "runs": results}))


if __name__ == "__main__":
    main()
