#!/usr/bin/env python3
"""HTTP/2 benchmark: kiln --http2 beside h2load (nghttp2's load tool), and kiln's HTTP/1.1
fast path beside wrk on the same server, in one run on this machine.

nginx (1 worker, pinned to CPU 0) answers "hello" on two ports: one HTTP/1.1, one h2c (HTTP/2
by prior knowledge). Each tool runs from CPU 1 with 32 connections, 1 thread, 10 s, 5
interleaved rounds (BENCH_ROUNDS): over HTTP/2 with one request in flight per connection
(h2load -m 1, kiln --http2) and with ten (h2load -m 10, kiln --http2 --http2-streams 10).
Reports requests/s and requests per generator CPU-second (user + system, GNU time), medians
over the rounds, and peak RSS.

Usage: python3 bench/http2.py [--quick]   (results: bench/out/http2-<time>.json, table on stdout)
"""
import json, os, re, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, measured, sh  # noqa: E402
from load import free_port, median, run_kiln, run_wrk, stop, wait_port  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "5"))


def ensure_tools():
    if not shutil.which("h2load"):
        sh(["apt-get", "install", "-y", "-qq", "nghttp2-client"])
    if not shutil.which("wrk") or not os.path.exists("/usr/sbin/nginx"):
        sh(["apt-get", "install", "-y", "-qq", "wrk", "nginx"])
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)


def start_nginx(tmp):
    h1, h2 = free_port(), free_port()
    conf = f"""daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000; http2_max_requests 1000000;
  client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p; fastcgi_temp_path {tmp}/f;
  uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s;
  server {{ listen 127.0.0.1:{h1}; location / {{ return 200 "hello\\n"; }} }}
  server {{ listen 127.0.0.1:{h2} http2; location / {{ return 200 "hello\\n"; }} }} }}"""
    with open(f"{tmp}/nginx.conf", "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["taskset", "-c", "0", "/usr/sbin/nginx", "-p", tmp, "-c", f"{tmp}/nginx.conf"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(h1)
    wait_port(h2)
    return proc, f"http://127.0.0.1:{h1}/", f"http://127.0.0.1:{h2}/"


def run_h2load(url, secs, conns=32, streams=1):
    out, cpu, rss, wall = measured(["taskset", "-c", "1", "h2load", "-c", str(conns), "-t", "1",
                                    "-m", str(streams), "-D", str(secs), url])
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded", out)
    if not m:
        raise RuntimeError(f"h2load said:\n{out[-2000:]}")
    return dict(requests=int(m.group(4)), cpu_s=cpu, rss_kib=rss, secs=secs)


def main():
    ensure_tools()
    os.makedirs(OUT, exist_ok=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "machine": f"{os.cpu_count()} CPUs",
               "tools": {"h2load": subprocess.run(["h2load", "--version"], capture_output=True, text=True).stdout.strip(),
                         "kiln": subprocess.run([KILN, "--version"], capture_output=True, text=True).stdout.strip()}}
    tmp = tempfile.mkdtemp(prefix="kiln-bench-nginx-")
    nginx, h1_url, h2_url = start_nginx(tmp)
    try:
        runs = {"h2load (h2c)": [], "kiln --http2 (h2c)": [],
                "h2load -m 10 (h2c)": [], "kiln -p 10 (h2c)": [],
                "wrk (HTTP/1.1)": [], "kiln (HTTP/1.1)": []}
        for _ in range(ROUNDS):
            runs["h2load (h2c)"].append(run_h2load(h2_url, SECS))
            runs["kiln --http2 (h2c)"].append(run_kiln(h2_url, SECS, extra=["--http2"]))
            runs["h2load -m 10 (h2c)"].append(run_h2load(h2_url, SECS, streams=10))
            runs["kiln -p 10 (h2c)"].append(
                run_kiln(h2_url, SECS, extra=["--http2", "--http2-streams", "10"]))
            runs["wrk (HTTP/1.1)"].append(run_wrk(h1_url, SECS))
            runs["kiln (HTTP/1.1)"].append(run_kiln(h1_url, SECS))
    finally:
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    table = {}
    for tool, rs in runs.items():
        table[tool] = {
            "requests_per_s": median([x["requests"] / x["secs"] for x in rs]),
            "requests_per_cpu_s": median([x["requests"] / x["cpu_s"] for x in rs]),
            "max_rss_kib": max(x["rss_kib"] for x in rs),
            "rounds": rs,
        }
    results["tools_measured"] = table
    per_cpu = lambda t: table[t]["requests_per_cpu_s"]
    results["kiln_h2_over_h2load"] = per_cpu("kiln --http2 (h2c)") / per_cpu("h2load (h2c)")
    results["kiln_h2_streams_over_h2load_m10"] = (per_cpu("kiln -p 10 (h2c)")
                                                  / per_cpu("h2load -m 10 (h2c)"))
    results["kiln_h1_over_wrk"] = per_cpu("kiln (HTTP/1.1)") / per_cpu("wrk (HTTP/1.1)")
    path = os.path.join(OUT, f"http2-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n{results['date']}  ({'quick' if QUICK else f'{ROUNDS} rounds of {SECS} s'})")
    print(f"{'tool':<22}{'req/s':>10}{'req/CPU-s':>12}{'RSS':>9}")
    for tool, t in table.items():
        print(f"{tool:<22}{t['requests_per_s']:>10.0f}{t['requests_per_cpu_s']:>12.0f}{t['max_rss_kib'] / 1024:>8.1f}M")
    print(f"kiln/h2load per CPU-second (HTTP/2): {results['kiln_h2_over_h2load']:.2f}")
    print(f"kiln -p 10 / h2load -m 10 per CPU-second: "
          f"{results['kiln_h2_streams_over_h2load_m10']:.2f}")
    print(f"kiln/wrk per CPU-second (HTTP/1.1): {results['kiln_h1_over_wrk']:.2f}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
