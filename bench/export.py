#!/usr/bin/env python3
"""Metrics export benchmark: kiln --export prometheus=URL beside k6's Prometheus remote-write
output (-o experimental-prometheus-rw), both into one real Prometheus (Debian's, remote-write
receiver and native histograms on), in one run on this machine.

The target (tests/targets' kiln-target, pinned to CPU 0) answers in 1 ms and stalls 100 ms
each second: a p99 near 90 ms that an exported distribution must place. Each tool runs from
CPU 1 at the same 1,000 requests/s for 20 s, with and without its export:

  cpu       the tool's CPU (user + system, GNU time) with the export, less without it: what
            sending the run costs
  p99       the p99 Prometheus computes from what the tool sent (histogram_quantile over the
            run's native histogram; k6's default gauges: its p(99) gauge at the end) beside
            the tool's own p99 for the same run
  series    the series the run left in Prometheus

k6 is built from source with `go install` (the Go module proxy) into bench/.tools. Rounds
interleave the tools (BENCH_ROUNDS, 3; --quick: 1 round of 5 s); medians are reported.

Usage: python3 bench/export.py [--quick]   (results: bench/out/export-<time>.json, table on stdout)
"""
import json, os, shutil, subprocess, sys, tempfile, time, urllib.parse, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, QUICK, ROOT, TOOLS, free_port, measured, sh, wait_port, write_results  # noqa: E402
from load import median, stop  # noqa: E402

SECS = 5 if QUICK else 20
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "3"))
RATE = 1000
K6_VERSION = "v1.4.2"
TARGET = os.path.join(ROOT, "target", "release", "kiln-target")

K6_SCRIPT = """
import http from 'k6/http';
export const options = {
  scenarios: { load: { executor: 'constant-arrival-rate', rate: %(rate)d, timeUnit: '1s',
    duration: '%(secs)ds', preAllocatedVUs: 150, maxVUs: 400 } },
  summaryTrendStats: ['avg', 'med', 'p(90)', 'p(99)', 'max'],
};
export default function () { http.get('%(url)s'); }
"""


def ensure_tools():
    if not shutil.which("prometheus"):
        sh(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"])
    k6 = shutil.which("k6") or os.path.join(TOOLS, "bin", "k6")
    if not os.path.exists(k6):
        env = dict(os.environ, GOBIN=os.path.join(TOOLS, "bin"))
        sh(["go", "install", f"go.k6.io/k6@{K6_VERSION}"], env=env)
    sh(["cargo", "build", "--release", "-q", "-p", "kiln", "-p", "kiln-targets"], cwd=ROOT)
    return k6


def start_prometheus(tmp):
    port = free_port()
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 15s\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml",
                             f"--storage.tsdb.path={tmp}/data", f"--web.listen-address=127.0.0.1:{port}",
                             "--web.enable-remote-write-receiver", "--enable-feature=native-histograms"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    time.sleep(1)
    return proc, port


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=20) as r:
        return json.load(r)["data"]["result"]


def number(port, expr):
    result = query(port, expr)
    return float(result[0]["value"][1]) if result else None


def start_target():
    port = free_port()
    proc = subprocess.Popen(["taskset", "-c", "0", TARGET, "--port", str(port), "--service-ms", "1",
                             "--stall-every-ms", "1000", "--stall-ms", "100"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}/"


def run_kiln(url, prom, run_id, export):
    out_dir = tempfile.mkdtemp(prefix="kiln-bench-export-")
    flags = ["--export", f"prometheus=http://127.0.0.1:{prom}/api/v1/write"] if export else []
    out, cpu, rss, _ = measured(["taskset", "-c", "1", KILN, "run", url, "--rate", str(RATE), "-t", "1",
                                 "-d", f"{SECS}s", "--json", "-q", "--out", f"{out_dir}/{run_id}", *flags])
    shutil.rmtree(out_dir, ignore_errors=True)
    total = json.loads(out[out.index("{"):])["total"]
    result = dict(cpu_s=cpu, rss_kib=rss, requests=total["requests"], own_p99_ms=total["latency"]["p99_us"] / 1e3)
    if export:
        sel = f'{{run="{run_id}"}}'
        result["prom_p99_ms"] = 1e3 * number(prom, f"histogram_quantile(0.99, sum({'kiln_request_duration_seconds' + sel}))")
        result["prom_requests"] = number(prom, f"sum(kiln_requests_total{sel})")
        result["series"] = number(prom, f"count({{run=\"{run_id}\"}})")
    return result


def run_k6(k6, url, prom, run_id, mode):
    """mode: None (no output), 'native' (trends as native histograms), 'gauges' (k6's default:
    each trend's stats as gauges, p(99) among them)."""
    tmp = tempfile.mkdtemp(prefix="kiln-bench-k6-")
    script = os.path.join(tmp, "script.js")
    with open(script, "w") as f:
        f.write(K6_SCRIPT % dict(rate=RATE, secs=SECS, url=url))
    summary = os.path.join(tmp, "summary.json")
    env = dict(os.environ, K6_PROMETHEUS_RW_SERVER_URL=f"http://127.0.0.1:{prom}/api/v1/write",
               K6_PROMETHEUS_RW_PUSH_INTERVAL="1s", GOMAXPROCS="1")
    flags = []
    if mode:
        flags = ["-o", "experimental-prometheus-rw", "--tag", f"testid={run_id}"]
        if mode == "native":
            env["K6_PROMETHEUS_RW_TREND_AS_NATIVE_HISTOGRAM"] = "true"
        else:
            env["K6_PROMETHEUS_RW_TREND_STATS"] = "p(99)"
    cmd = ["taskset", "-c", "1", k6, "run", "-q", "--summary-export", summary, *flags, script]
    out, cpu, rss, _ = measured(cmd, env=env)
    with open(summary) as f:
        metrics = json.load(f)["metrics"]
    shutil.rmtree(tmp, ignore_errors=True)
    result = dict(cpu_s=cpu, rss_kib=rss, requests=int(metrics["http_reqs"]["count"]),
                  own_p99_ms=metrics["http_req_duration"]["p(99)"])
    if mode:
        sel = f'{{testid="{run_id}"}}'
        if mode == "native":
            expr = f"histogram_quantile(0.99, sum(k6_http_req_duration_seconds{sel}))"
            result["prom_p99_ms"] = 1e3 * number(prom, expr)
        else:
            # the gauge as last sent: k6's p(99) over the run so far, in seconds
            result["prom_p99_ms"] = 1e3 * number(prom, f"max(last_over_time(k6_http_req_duration_p99{sel}[10m]))")
        result["prom_requests"] = number(prom, f"sum(last_over_time(k6_http_reqs_total{sel}[10m]))")
        result["series"] = number(prom, f"count({{testid=\"{run_id}\"}})")
    return result


def main():
    k6 = ensure_tools()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": QUICK,
               "rate": RATE, "secs": SECS, "rounds": ROUNDS,
               "tools": {"kiln": subprocess.run([KILN, "--version"], capture_output=True, text=True).stdout.strip(),
                         "k6": subprocess.run([k6, "version"], capture_output=True, text=True).stdout.split("\n")[0],
                         "prometheus": subprocess.run(["prometheus", "--version"], capture_output=True,
                                                      text=True).stdout.split("\n")[0]}}
    tmp = tempfile.mkdtemp(prefix="kiln-bench-prom-")
    prom, prom_port = start_prometheus(tmp)
    target, url = start_target()
    runs = {k: [] for k in ["kiln", "kiln+export", "k6", "k6+native", "k6+gauges"]}
    try:
        for r in range(ROUNDS):
            runs["kiln"].append(run_kiln(url, prom_port, f"kiln-plain-{r}", False))
            runs["kiln+export"].append(run_kiln(url, prom_port, f"kiln-export-{r}", True))
            runs["k6"].append(run_k6(k6, url, prom_port, f"k6-plain-{r}", None))
            runs["k6+native"].append(run_k6(k6, url, prom_port, f"k6-native-{r}", "native"))
            runs["k6+gauges"].append(run_k6(k6, url, prom_port, f"k6-gauges-{r}", "gauges"))
    finally:
        stop(target)
        stop(prom)
        shutil.rmtree(tmp, ignore_errors=True)
    results["runs"] = runs
    summary = {}
    for name, rs in runs.items():
        s = {k: median([r[k] for r in rs]) for k in rs[0] if rs[0][k] is not None}
        if "prom_p99_ms" in s:
            s["p99_error_pct"] = median([100 * abs(r["prom_p99_ms"] - r["own_p99_ms"]) / r["own_p99_ms"] for r in rs])
        summary[name] = s
    for tool in ["kiln", "k6"]:
        for mode in ["export", "native", "gauges"]:
            name = f"{tool}+{mode}"
            if name in summary:
                summary[name]["export_cpu_s"] = summary[name]["cpu_s"] - summary[tool]["cpu_s"]
    results["summary"] = summary
    path = write_results("export", results)
    print(f"{'run':12} {'requests':>9} {'CPU s':>7} {'export CPU s':>13} {'own p99':>9} {'Prom p99':>9} {'error':>7} {'series':>7}")
    for name, s in summary.items():
        print(f"{name:12} {s['requests']:>9.0f} {s['cpu_s']:>7.2f} {s.get('export_cpu_s', 0):>13.3f} "
              f"{s['own_p99_ms']:>8.1f}ms {s.get('prom_p99_ms', 0):>8.1f}ms {s.get('p99_error_pct', 0):>6.2f}% "
              f"{s.get('series', 0):>7.0f}")
    print(path)


if __name__ == "__main__":
    main()
