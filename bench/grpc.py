#!/usr/bin/env python3
"""gRPC benchmark: kiln beside ghz (the gRPC load tool, github.com/bojand/ghz), unary calls
to grpc-go's interop service (tests/apps/go_grpc, pinned to CPU 0 with GOMAXPROCS 1), each
tool from CPU 1 on one thread, in one run on this machine:

  rate      the same 2,000 calls/s for 10 s: each tool's CPU per call (user + system, GNU
            time), its latency percentiles, and its peak RSS at 10 s and at 30 s (memory flat
            with run length)
  closed    32 connections, one call in flight on each, as fast as the server answers: calls
            per generator CPU-second; beside it kiln's own HTTP/2 requests per CPU-second
            against nginx's h2c on the same 32 connections (gRPC rides kiln's h2 path)

Rounds interleave the tools (BENCH_ROUNDS, 5; --quick: 1 round of 3 s); medians are reported.

Usage: python3 bench/grpc.py [--quick]   (results: bench/out/grpc-<time>.json, table on stdout)
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, QUICK, ROOT, free_port, interleaved, measured, sh, write_results  # noqa: E402
from load import median, run_kiln, stop  # noqa: E402
from http2 import start_nginx  # noqa: E402

SECS = 3 if QUICK else 10
LONG_SECS = 6 if QUICK else 30
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
RATE = 2000
CONNS = 32
GO_CACHE = os.path.join(ROOT, "target", "go-build-cache")
SERVER = os.path.join(GO_CACHE, "go_grpc")
GHZ = os.path.join(ROOT, "bench", ".tools", "ghz")
GHZ_VERSION = "v0.120.0"  # the newest the module proxy serves (its version list stops at v0.93.0)
PROTO = os.path.join(ROOT, "tests", "apps", "go_grpc", "testing.proto")
METHOD = "grpc.testing.TestService/UnaryCall"
MESSAGE = '{"response_size": 16}'


def ensure_tools():
    env = dict(os.environ, GOCACHE=GO_CACHE)
    sh(["go", "build", "-o", SERVER, "."], cwd=os.path.join(ROOT, "tests", "apps", "go_grpc"), env=env)
    if not os.path.exists(GHZ):
        env["GOBIN"] = os.path.dirname(GHZ)
        sh(["go", "install", f"github.com/bojand/ghz/cmd/ghz@{GHZ_VERSION}"], env=env)
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)


def start_server():
    port = free_port()
    proc = subprocess.Popen(["taskset", "-c", "0", SERVER, "-port", str(port), "-procs", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on"):
        raise RuntimeError(f"go_grpc said {line!r}")
    return proc, f"127.0.0.1:{port}"


def run_ghz(addr, secs, rate=None):
    """ghz with one call in flight per connection (-c = --connections), on one CPU."""
    flags = ["--insecure", "--proto", PROTO, "--call", METHOD, "-d", MESSAGE, "-z", f"{secs}s",
             "--cpus", "1", "-O", "json"]
    if rate:
        flags += ["--rps", str(rate), "-c", "50", "--connections", "50"]
    else:
        flags += ["-c", str(CONNS), "--connections", str(CONNS)]
    out, cpu, rss, _ = measured(["taskset", "-c", "1", GHZ, *flags, addr])
    data = json.loads(out[out.index("{"):])
    ok = data.get("statusCodeDistribution", {}).get("OK", 0)
    lat = {d["percentage"]: d["latency"] / 1e6 for d in data.get("latencyDistribution") or []}
    return dict(requests=ok, all_calls=data["count"], cpu_s=cpu, rss_kib=rss, secs=secs,
                p50_ms=lat.get(50), p99_ms=lat.get(99))


def run_kiln_grpc(addr, secs, rate=None):
    extra = ["--proto", PROTO, "-b", MESSAGE]
    if rate:
        extra += ["--rate", str(rate)]
    r = run_kiln(f"grpc://{addr}/{METHOD}", secs, conns=CONNS, extra=extra)
    return r


def per_call_us(runs):
    return median([x["cpu_s"] / x["requests"] * 1e6 for x in runs])


def main():
    ensure_tools()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "machine": f"{os.cpu_count()} CPUs",
               "tools": {"ghz": subprocess.run([GHZ, "--version"], capture_output=True, text=True).stdout.strip(),
                         "kiln": subprocess.run([KILN, "--version"], capture_output=True, text=True).stdout.strip()}}
    server, addr = start_server()
    tmp = tempfile.mkdtemp(prefix="kiln-bench-nginx-")
    nginx, _, h2_url = start_nginx(tmp)
    try:
        rate = interleaved({"ghz": lambda: run_ghz(addr, SECS, RATE),
                            "kiln": lambda: run_kiln_grpc(addr, SECS, RATE)}, ROUNDS)
        long = interleaved({"ghz": lambda: run_ghz(addr, LONG_SECS, RATE),
                            "kiln": lambda: run_kiln_grpc(addr, LONG_SECS, RATE)}, 1)
        closed = interleaved({"ghz": lambda: run_ghz(addr, SECS),
                              "kiln gRPC": lambda: run_kiln_grpc(addr, SECS),
                              "kiln --http2 (nginx h2c)": lambda: run_kiln(h2_url, SECS, conns=CONNS,
                                                                            extra=["--http2"])}, ROUNDS)
    finally:
        stop(server)
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    results["rate"] = {tool: {"calls_per_s": median([x["requests"] / x["secs"] for x in rs]),
                              "cpu_us_per_call": per_call_us(rs),
                              "p99_ms": median([x["p99_ms"] for x in rs]),
                              "max_rss_kib": max(x["rss_kib"] for x in rs),
                              "max_rss_kib_long": long[tool][0]["rss_kib"],
                              "rounds": rs, "long": long[tool]}
                       for tool, rs in rate.items()}
    results["closed"] = {tool: {"calls_per_s": median([x["requests"] / x["secs"] for x in rs]),
                                "calls_per_cpu_s": median([x["requests"] / x["cpu_s"] for x in rs]),
                                "max_rss_kib": max(x["rss_kib"] for x in rs), "rounds": rs}
                         for tool, rs in closed.items()}
    r, c = results["rate"], results["closed"]
    results["kiln_cpu_per_call_over_ghz_at_rate"] = r["kiln"]["cpu_us_per_call"] / r["ghz"]["cpu_us_per_call"]
    results["kiln_over_ghz_per_cpu_s_closed"] = c["kiln gRPC"]["calls_per_cpu_s"] / c["ghz"]["calls_per_cpu_s"]
    results["kiln_grpc_over_kiln_h2"] = (c["kiln gRPC"]["calls_per_cpu_s"]
                                         / c["kiln --http2 (nginx h2c)"]["calls_per_cpu_s"])
    path = write_results("grpc", results, indent=2)
    print(f"\n{results['date']}  ({'quick' if QUICK else f'{ROUNDS} rounds of {SECS} s'})")
    print(f"at {RATE} calls/s       calls/s  CPU us/call  p99 ms  RSS {SECS}s  RSS {LONG_SECS}s")
    for tool, t in r.items():
        print(f"  {tool:<18}{t['calls_per_s']:>8.0f}{t['cpu_us_per_call']:>13.1f}{t['p99_ms']:>8.2f}"
              f"{t['max_rss_kib'] / 1024:>8.1f}M{t['max_rss_kib_long'] / 1024:>8.1f}M")
    print(f"closed, {CONNS} connections     calls/s  calls/CPU-s  RSS")
    for tool, t in c.items():
        print(f"  {tool:<26}{t['calls_per_s']:>8.0f}{t['calls_per_cpu_s']:>13.0f}{t['max_rss_kib'] / 1024:>6.1f}M")
    print(f"kiln / ghz CPU per call at {RATE}/s: {results['kiln_cpu_per_call_over_ghz_at_rate']:.2f}")
    print(f"kiln / ghz calls per CPU-second, closed: {results['kiln_over_ghz_per_cpu_s_closed']:.2f}")
    print(f"kiln gRPC / kiln HTTP/2 per CPU-second: {results['kiln_grpc_over_kiln_h2']:.2f}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
