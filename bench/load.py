#!/usr/bin/env python3
"""Load engine benchmark: kiln beside wrk and oha, in one run on this machine.

1. Throughput and cost: each tool loads the same nginx (1 worker, pinned to CPU 0) from CPU 1
   with 32 connections and 1 thread, 10 s, 5 interleaved rounds (BENCH_ROUNDS). Reports
   requests/s and requests per generator CPU-second (user + system, GNU time), medians over
   the rounds, and kiln/wrk per round (this VM's neighbours move both by +-20%).
2. Memory: peak RSS after 10 s; kiln and oha again after a long run (BENCH_LONG_S, 300 s).
3. Accuracy: a target that answers in 2 ms but pauses 100 ms every second. At a steady
   400 requests/s the true distribution is known: p50 2 ms, p99 92 ms, p99.9 101 ms. Each tool
   reports its p99; closed-loop tools under-report it (coordinated omission).

Usage: python3 bench/load.py [--quick]   (results: bench/out/load-<time>.json, table on stdout)
"""
import json, os, re, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, TOOLS, free_port, measured, sh, wait_port, write_results  # noqa: E402,F401
SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))
LONG_S = int(os.environ.get("BENCH_LONG_S", "30" if QUICK else "300"))
TARGET = os.path.join(ROOT, "target", "release", "kiln-target")


def ensure_tools():
    if not shutil.which("wrk") or not os.path.exists("/usr/sbin/nginx"):
        sh(["apt-get", "install", "-y", "-qq", "wrk", "nginx"])
    oha = shutil.which("oha") or os.path.join(TOOLS, "bin", "oha")
    if not os.path.exists(oha):
        sh(["cargo", "install", "--locked", "--root", TOOLS, "oha"])
    sh(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"], cwd=ROOT)
    return oha


def start_nginx(tmp, fds=None):
    """nginx with one worker on CPU 0 answering "hello"; with fds, allowed that many open
    files and a long accept queue (10,000 connections at once: bench/memory.py)."""
    port = free_port()
    many = f"worker_rlimit_nofile {fds};" if fds else ""
    backlog = " backlog=16384" if fds else ""
    conf = f"""daemon off; worker_processes 1; {many} pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections {fds or 4096}; }}
http {{ access_log off; keepalive_requests 1000000;
  client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p; fastcgi_temp_path {tmp}/f;
  uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s;
  server {{ listen 127.0.0.1:{port}{backlog}; location / {{ return 200 "hello\\n"; }} }} }}"""
    with open(f"{tmp}/nginx.conf", "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["taskset", "-c", "0", "/usr/sbin/nginx", "-p", tmp, "-c", f"{tmp}/nginx.conf"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}/"


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_wrk(url, secs, conns=32, extra=()):
    out, cpu, rss, wall = measured(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{secs}s", *extra, url])
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = None
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    if m:
        p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    return dict(requests=requests, cpu_s=cpu, rss_kib=rss, secs=secs, p99_ms=p99)


def run_oha(oha, url, secs, conns=32, extra=()):
    out, cpu, rss, wall = measured(["taskset", "-c", "1", oha, "--no-tui", "--output-format", "json",
                                    "-c", str(conns), "-z", f"{secs}s", *extra, url])
    data = json.loads(out[out.index("{"):])
    requests = sum(data.get("statusCodeDistribution", {}).values())
    p99 = data["latencyPercentiles"]["p99"] * 1e3
    return dict(requests=requests, cpu_s=cpu, rss_kib=rss, secs=secs, p99_ms=p99)


def run_kiln(url, secs, conns=32, extra=(), kiln=KILN):
    out_dir = tempfile.mkdtemp(prefix="kiln-bench-")
    out, cpu, rss, wall = measured(["taskset", "-c", "1", kiln, "run", url, "-c", str(conns), "-t", "1",
                                    "-d", f"{secs}s", "--json", "-q", "--out", f"{out_dir}/run", *extra])
    shutil.rmtree(out_dir, ignore_errors=True)
    data = json.loads(out[out.index("{"):])
    total = data["total"]
    return dict(requests=total["requests"], cpu_s=cpu, rss_kib=rss, secs=secs,
                p99_ms=total["latency"]["p99_us"] / 1e3,
                service_p99_ms=(total["service"] or {}).get("p99_us", 0) / 1e3 if total["service"] else None)


def median(values):
    v = sorted(values)
    return v[len(v) // 2]


def main():
    oha = ensure_tools()
    os.makedirs(OUT, exist_ok=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "machine": f"{os.cpu_count()} CPUs, {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}",
               "tools": {"wrk": subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()[1] if True else "",
                         "oha": subprocess.run([oha, "--version"], capture_output=True, text=True).stdout.strip(),
                         "kiln": subprocess.run([KILN, "--version"], capture_output=True, text=True).stdout.strip()}}
    tmp = tempfile.mkdtemp(prefix="kiln-bench-nginx-")
    nginx, url = start_nginx(tmp)
    try:
        rounds = {"wrk": [], "oha": [], "kiln": []}
        for r in range(ROUNDS):
            rounds["wrk"].append(run_wrk(url, SECS))
            rounds["oha"].append(run_oha(oha, url, SECS))
            rounds["kiln"].append(run_kiln(url, SECS))
        throughput = {}
        for tool, runs in rounds.items():
            throughput[tool] = {
                "requests_per_s": median([x["requests"] / x["secs"] for x in runs]),
                "requests_per_cpu_s": median([x["requests"] / x["cpu_s"] for x in runs]),
                "max_rss_kib_10s": max(x["rss_kib"] for x in runs),
                "rounds": runs,
            }
        results["throughput"] = throughput
        per_cpu = lambda x: x["requests"] / x["cpu_s"]
        results["kiln_over_wrk_per_round"] = [round(per_cpu(k) / per_cpu(w), 3)
                                              for k, w in zip(rounds["kiln"], rounds["wrk"])]
        long_runs = {"kiln": run_kiln(url, LONG_S), "oha": run_oha(oha, url, LONG_S)}
        results["long_run_s"] = LONG_S
        results["long_run_rss_kib"] = {k: v["rss_kib"] for k, v in long_runs.items()}
    finally:
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)

    # Accuracy under a periodic stall.
    port = free_port()
    target = subprocess.Popen(["taskset", "-c", "0", TARGET, "--port", str(port), "--service-ms", "2",
                               "--stall-every-ms", "1000", "--stall-ms", "100"], stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        turl = f"http://127.0.0.1:{port}/"
        secs = max(SECS, 10)
        results["accuracy"] = {
            "expected_p99_ms": 92.0,
            "wrk -c16 (closed)": run_wrk(turl, secs, 16, ["--latency"])["p99_ms"],
            "oha -c16 (closed)": run_oha(oha, turl, secs, 16)["p99_ms"],
            "oha -q400 --latency-correction": run_oha(oha, turl, secs, 16, ["-q", "400", "--latency-correction"])["p99_ms"],
            "kiln -c16 (closed)": run_kiln(turl, secs, 16)["p99_ms"],
            "kiln --rate 400": run_kiln(turl, secs, 16, ["--rate", "400"])["p99_ms"],
        }
    finally:
        stop(target)

    path = write_results("load", results, indent=2)
    t = results["throughput"]
    print(f"\n{results['date']}  {results['machine']}  ({'quick' if QUICK else f'{ROUNDS} rounds of {SECS} s'})")
    print(f"{'tool':<6}{'req/s':>12}{'req/CPU-s':>12}{'RSS 10s':>10}")
    for tool in ("wrk", "oha", "kiln"):
        print(f"{tool:<6}{t[tool]['requests_per_s']:>12.0f}{t[tool]['requests_per_cpu_s']:>12.0f}{t[tool]['max_rss_kib_10s'] / 1024:>9.1f}M")
    k = t["kiln"]["requests_per_cpu_s"]
    print(f"kiln/wrk requests per CPU-second: {k / t['wrk']['requests_per_cpu_s']:.2f}; kiln/oha: {k / t['oha']['requests_per_cpu_s']:.2f}")
    print(f"kiln/wrk per round: {results['kiln_over_wrk_per_round']}")
    print(f"RSS after {LONG_S} s: " + ", ".join(f"{k} {v / 1024:.1f}M" for k, v in results["long_run_rss_kib"].items()))
    print("p99 under a 100 ms/s stall (true p99 92 ms):")
    for name, v in results["accuracy"].items():
        if name != "expected_p99_ms":
            print(f"  {name:<34}{v:>8.1f} ms")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
