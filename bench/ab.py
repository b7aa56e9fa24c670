#!/usr/bin/env python3
"""The cost of a change to the load engine: kiln at BASE beside kiln at HEAD, in one run.

Both are built in release (BASE from a git worktree, into the same target directory so the
dependencies are built once) and load the same nginx (1 worker, pinned to CPU 0) from CPU 1,
1 thread, 32 keep-alive connections, for SECS seconds, in interleaved rounds. Reports
requests/s and requests per generator CPU-second (user + system, GNU time), medians, and
HEAD/BASE per CPU-second per round: a change that costs nothing stays within the rounds'
spread.

Usage: python3 bench/ab.py BASE [--rounds N] [--secs S] [--base-binary PATH] [--http2]
       (--base-binary: BASE's release kiln, built before, instead of building it again)
       (--http2: both over h2c, one stream per connection, as bench/http2.py's first row)
       (results: bench/out/ab-<time>.json, a table on stdout)
"""
import argparse, json, os, shutil, subprocess, tempfile, time

from common import OUT, ROOT, sh
from load import median, run_kiln, start_nginx, stop
import http2


def build(rev):
    """The release kiln at `rev` (HEAD: the working tree), copied out of the target dir."""
    os.makedirs(os.path.join(ROOT, "target", "ab"), exist_ok=True)
    built = os.path.join(ROOT, "target", "release", "kiln")
    if rev == "HEAD":
        sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
        dest = os.path.join(ROOT, "target", "ab", "kiln-HEAD")
    else:
        tree = tempfile.mkdtemp(prefix="kiln-ab-")
        sh(["git", "worktree", "add", "-q", "--detach", tree, rev], cwd=ROOT)
        try:
            env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
            sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=tree, env=env)
        finally:
            sh(["git", "worktree", "remove", "--force", tree], cwd=ROOT)
        dest = os.path.join(ROOT, "target", "ab", f"kiln-{rev}")
    shutil.copy(built, dest)
    return dest


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--secs", type=int, default=10)
    p.add_argument("--base-binary")
    p.add_argument("--http2", action="store_true")
    args = p.parse_args()
    base_rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    head_rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    base = args.base_binary or build(base_rev)
    binaries = {"base": base, "head": build("HEAD")}
    tmp = tempfile.mkdtemp(prefix="kiln-ab-nginx-")
    if args.http2:
        nginx, _, url = http2.start_nginx(tmp)
    else:
        nginx, url = start_nginx(tmp)
    extra = ["--http2"] if args.http2 else []
    rounds = {"base": [], "head": []}
    try:
        for _ in range(args.rounds):
            for side in ("base", "head"):
                rounds[side].append(run_kiln(url, args.secs, extra=extra, kiln=binaries[side]))
    finally:
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    per_cpu = lambda x: x["requests"] / x["cpu_s"]
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "base": base_rev, "head": head_rev, "secs": args.secs, "http2": args.http2,
        "sides": {side: {"requests_per_s": median([x["requests"] / x["secs"] for x in runs]),
                         "requests_per_cpu_s": median([per_cpu(x) for x in runs]),
                         "rounds": runs} for side, runs in rounds.items()},
        "head_over_base_per_cpu_s": [per_cpu(h) / per_cpu(b)
                                     for b, h in zip(rounds["base"], rounds["head"])],
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, time.strftime("ab-%Y%m%d-%H%M%S.json", time.gmtime()))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    for side in ("base", "head"):
        s = results["sides"][side]
        rev = base_rev if side == "base" else head_rev
        print(f"{side:<5} {rev:<10} {s['requests_per_s']:>10,.0f} req/s  "
              f"{s['requests_per_cpu_s']:>10,.0f} req per CPU-second")
    ratios = results["head_over_base_per_cpu_s"]
    print("head/base per CPU-second: median %.3f; per round %s" % (
        median(ratios), ", ".join("%.3f" % r for r in ratios)))
    print(f"written {path}")


if __name__ == "__main__":
    main()
