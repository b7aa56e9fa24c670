#!/usr/bin/env python3
"""Profile pipeline benchmark: perf script text -> collapsed stacks -> SVG flame graph.

A system-wide perf recording of a busy machine (kiln loading a CPU-burning target for 20 s at
997 Hz, DWARF-free frame-pointer stacks) is turned into `perf script` text and repeated to
BENCH_PERF_MB (default 300) MB. Each tool then turns that file into collapsed stacks and an
SVG, in one run on this machine, 2 interleaved rounds:

  kiln      kiln profile import big.txt      (collapse + SVG + speedscope + summary, one process)
  inferno   inferno-collapse-perf big.txt | inferno-flamegraph > out.svg   (its own CLI)
  perl      stackcollapse-perf.pl big.txt > out.folded   (FlameGraph; needs FLAMEGRAPH_DIR, and
            flamegraph.pl there for the SVG stage; skipped when absent)

Reports wall time, CPU (user + system, wait4, children included) and peak RSS; the collapsed
stacks of kiln and inferno are checked to be the same.

Overhead: a CPU-bound target (kiln-target, 200 us of CPU per request) under a closed load of
8 connections for 10 s, with and without `--watch-port --profile` (99 Hz, DWARF stacks), 2
interleaved rounds: the target's throughput and p50 with the profile against without.

Usage: python3 bench/profile.py [--quick]   (results: bench/out/profile-<time>.json)
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, TOOLS, measured, sh  # noqa: E402,F401
TARGET_MB = int(os.environ.get("BENCH_PERF_MB", "30" if QUICK else "300"))
ROUNDS = 1 if QUICK else 2
TARGET = os.path.join(ROOT, "target", "release", "kiln-target")
FLAMEGRAPH_DIR = os.environ.get("FLAMEGRAPH_DIR", os.path.join(TOOLS, "FlameGraph"))


def ensure_tools():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"], cwd=ROOT)
    inferno = os.path.join(TOOLS, "bin", "inferno-collapse-perf")
    if not os.path.exists(inferno):
        sh(["cargo", "install", "--locked", "--root", TOOLS, "inferno"])
    return os.path.join(TOOLS, "bin")


def make_input(tmp):
    """A perf script text of a loaded machine, repeated to TARGET_MB."""
    target = subprocess.Popen([TARGET, "--port", "18431", "--cpu-us", "200"], stdout=subprocess.PIPE)
    target.stdout.readline()
    data = os.path.join(tmp, "perf.data")
    load = subprocess.Popen([KILN, "run", "http://127.0.0.1:18431/", "-c", "8", "-d", "22s", "-q",
                             "--out", os.path.join(tmp, "load")], stdout=subprocess.DEVNULL)
    time.sleep(1)
    sh(["perf", "record", "-a", "-g", "-F", "997", "-o", data, "--", "sleep", "20"],
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load.wait()
    target.kill()
    one = os.path.join(tmp, "one.txt")
    with open(one, "w") as f:
        sh(["perf", "script", "-i", data, "-F", "comm,pid,tid,time,event,ip,sym,dso", "--no-inline"],
           stdout=f, stderr=subprocess.DEVNULL)
    size = os.path.getsize(one)
    big = os.path.join(tmp, "big.txt")
    with open(big, "wb") as out, open(one, "rb") as src:
        chunk = src.read()
        for _ in range(max(1, TARGET_MB * 1024 * 1024 // size)):
            out.write(chunk)
    return big


def folded_of(path):
    """Collapsed stacks, with vDSO frames unmarked as kiln does (inferno marks them kernel)."""
    counts = {}
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            stack = stack.rstrip()  # inferno may leave a space after a nameless frame
            frames = [fr[:-4] if fr.startswith("__vdso_") and fr.endswith("_[k]") else fr
                      for fr in stack.split(";")]
            stack = ";".join(frames)
            counts[stack] = counts.get(stack, 0) + int(n)
    return counts


def overhead():
    """Throughput and p50 of a CPU-bound target with and without kiln's profilers attached
    (on-CPU at 99 Hz; off-CPU, every context switch)."""
    port = 18432
    target = subprocess.Popen([TARGET, "--port", str(port), "--cpu-us", "200"], stdout=subprocess.PIPE)
    target.stdout.readline()
    rows = {"plain": [], "profiled": [], "off-cpu": []}
    try:
        for r in range(ROUNDS):
            for name, extra in (("plain", []), ("profiled", ["--watch-port", str(port), "--profile"]),
                                ("off-cpu", ["--watch-port", str(port), "--off-cpu"])):
                out = subprocess.run([KILN, "run", f"http://127.0.0.1:{port}/", "-c", "8", "-t", "1",
                                      "-d", "5s" if QUICK else "10s", "--json", "-q", "--out",
                                      os.path.join(tempfile.mkdtemp(), "run")] + extra,
                                     check=True, capture_output=True).stdout
                total = json.loads(out)["total"]
                rows[name].append({"rps": total["throughput_rps"], "p50_us": total["latency"]["p50_us"]})
                print(f"overhead round {r} {name:9} {total['throughput_rps']:8.0f} req/s  p50 {total['latency']['p50_us']} us")
    finally:
        target.kill()
    med = {n: {k: sorted(x[k] for x in v)[len(v) // 2] for k in v[0]} for n, v in rows.items()}
    return {"median": med, "throughput_ratio": med["profiled"]["rps"] / med["plain"]["rps"],
            "p50_ratio": med["profiled"]["p50_us"] / med["plain"]["p50_us"],
            "off_cpu_throughput_ratio": med["off-cpu"]["rps"] / med["plain"]["rps"],
            "off_cpu_p50_ratio": med["off-cpu"]["p50_us"] / med["plain"]["p50_us"]}


def main():
    os.makedirs(OUT, exist_ok=True)
    bindir = ensure_tools()
    tmp = tempfile.mkdtemp(prefix="kiln-bench-profile-")
    big = make_input(tmp)
    mb = os.path.getsize(big) / 1024 / 1024
    print(f"input: {mb:.0f} MB of perf script text")
    perl_collapse = os.path.join(FLAMEGRAPH_DIR, "stackcollapse-perf.pl")
    perl_graph = os.path.join(FLAMEGRAPH_DIR, "flamegraph.pl")
    # Same options everywhere: kernel frames annotated, as kiln does.
    tools = {
        "kiln": lambda r: [KILN, "profile", "import", big, "--out", os.path.join(tmp, f"kiln-{r}")],
        "inferno": lambda r: ["sh", "-c", f"{bindir}/inferno-collapse-perf --all {big} > {tmp}/inferno-{r}.folded"
                                          f" && {bindir}/inferno-flamegraph {tmp}/inferno-{r}.folded > {tmp}/inferno-{r}.svg"],
    }
    if os.path.exists(perl_collapse):
        graph = f" && perl {perl_graph} {tmp}/perl-{{r}}.folded > {tmp}/perl-{{r}}.svg" if os.path.exists(perl_graph) else ""
        tools["perl"] = lambda r: ["sh", "-c", f"perl {perl_collapse} --kernel {big} > {tmp}/perl-{r}.folded" + graph.format(r=r)]
    results = {name: [] for name in tools}
    for r in range(ROUNDS):
        for name, cmd in tools.items():
            _, cpu, rss, wall = measured(cmd(r))
            results[name].append({"wall_s": wall, "cpu_s": cpu, "max_rss_kib": rss})
            print(f"round {r} {name:8} wall {wall:7.2f} s  cpu {cpu:7.2f} s  rss {rss / 1024:7.1f} MiB")
    kiln_folded = folded_of(os.path.join(tmp, "kiln-0", "profile.folded"))
    inferno_folded = folded_of(os.path.join(tmp, "inferno-0.folded"))
    same = kiln_folded == inferno_folded
    differing = [k for k in set(kiln_folded) | set(inferno_folded) if kiln_folded.get(k) != inferno_folded.get(k)]
    for k in differing[:3]:
        print(f"differs: kiln {kiln_folded.get(k)} inferno {inferno_folded.get(k)}: {k[:200]}")
    summary = {name: {k: sorted(x[k] for x in runs)[len(runs) // 2] for k in runs[0]} for name, runs in results.items()}
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "input_mb": mb, "rounds": ROUNDS,
              "overhead": overhead(),
              "perl_svg": os.path.exists(perl_graph), "same_stacks_kiln_inferno": same,
              "stacks_differing": len(differing), "stacks": len(kiln_folded),
              "samples": sum(kiln_folded.values()), "median": summary}
    path = os.path.join(OUT, f"profile-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    base = summary["kiln"]
    for name, s in summary.items():
        if name != "kiln":
            print(f"{name}/kiln: wall {s['wall_s'] / base['wall_s']:.2f}x  cpu {s['cpu_s'] / base['cpu_s']:.2f}x  "
                  f"rss {s['max_rss_kib'] / base['max_rss_kib']:.2f}x")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
