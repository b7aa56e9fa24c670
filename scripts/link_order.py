#!/usr/bin/env python3
"""Writes crates/kiln/link-order.txt: the functions of the kiln binary that a load run executes
(start, load, sampler, findings, summary), which the release link places together
(crates/kiln/build.rs passes the file to lld as --symbol-ordering-file).

Why: the kernel maps a binary's code 64 KiB around each page it faults in, and the code a run
executes was spread over 20 MB of .text, so a 64-connection run kept 5 MiB of kiln's code
resident (docs/benchmarks.md, issue 35). Together it is about 2 MiB.

How: the release binary runs under valgrind's callgrind (which names every function executed)
against the release kiln-target, once in the closed model, once in the open one and once on
io_uring (`--io uring`); the
functions named that are symbols of the binary, sorted, are the file. Symbols that later
builds no longer have (renamed, or ThinLTO's `.llvm.N` suffixes of a changed module) are
passed over by lld; run this again when the figure in bench/load.py's memory line grows.

Usage: python3 scripts/link_order.py   (needs valgrind: apt-get install valgrind)
"""
import os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import free_port, wait_port  # noqa: E402
KILN = os.path.join(ROOT, "target", "release", "kiln")
TARGET = os.path.join(ROOT, "target", "release", "kiln-target")
ORDER = os.path.join(ROOT, "crates", "kiln", "link-order.txt")
RUNS = [
    ["-c", "64", "-t", "1", "-d", "3s"],
    ["--rate", "2000", "-c", "16", "-d", "3s", "--json"],
    ["-c", "64", "-t", "1", "-d", "3s", "--io", "uring"],
]


def executed(callgrind_out):
    """Every function name callgrind recorded (fn= and cfn= lines define them)."""
    names = set()
    with open(callgrind_out, errors="replace") as f:
        for line in f:
            m = re.match(r"^c?fn=\(\d+\) (.+)$", line.rstrip("\n"))
            if m:
                names.add(m.group(1))
    return names


def binary_functions():
    out = subprocess.run(["nm", "--defined-only", KILN], check=True, capture_output=True,
                         text=True).stdout
    return {p[2] for p in (l.split() for l in out.splitlines()) if len(p) == 3 and p[1] in "tTwW"}


def main():
    if not shutil.which("valgrind"):
        sys.exit("link_order: valgrind is not installed (apt-get install valgrind)")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"],
                   cwd=ROOT, check=True)
    port = free_port()
    target = subprocess.Popen([TARGET, "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    names = set()
    try:
        wait_port(port)
        with tempfile.TemporaryDirectory() as tmp:
            for i, flags in enumerate(RUNS):
                out = os.path.join(tmp, f"callgrind.{i}")
                subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no",
                                f"--callgrind-out-file={out}", KILN, "run",
                                f"http://127.0.0.1:{port}/", *flags, "--out",
                                os.path.join(tmp, f"run{i}")],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                names |= executed(out)
    finally:
        target.terminate()
        target.wait()
    ordered = sorted(names & binary_functions())
    with open(ORDER, "w") as f:
        f.write("# The functions a kiln run executes, placed together by the release link.\n")
        f.write("# Written by scripts/link_order.py; read by crates/kiln/build.rs.\n")
        f.write("".join(name + "\n" for name in ordered))
    print(f"link_order: {len(ordered)} functions in {os.path.relpath(ORDER, ROOT)}")


if __name__ == "__main__":
    main()
