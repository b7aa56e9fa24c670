#!/usr/bin/env python3
"""Plans benchmark: what a scenario costs per generator CPU-second, beside k6 and wrk+Lua.

The scenario, in each tool: POST /login with a templated JSON body, read the token from its
JSON answer, GET /orders/<random id> with `Authorization: Bearer <token>`, GET /cart. nginx
(1 worker, pinned to CPU 0) answers each path with a fixed body; each tool runs on CPU 1
with 32 VUs or connections (1 thread), closed model, 10 s, rounds interleaved
(BENCH_ROUNDS, 3). Reported: requests per generator CPU-second (user + system, GNU time)
for kiln on one plain URL, kiln running the plan, k6 running the same scenario in
JavaScript, and wrk running it in Lua; and the issue's ratio, plain / plan (goal <= 1.5).

k6 is built from source with `go install` (the Go module proxy) into bench/.tools.

Memory: the same plan fed from a CSV of 10 rows and from one of BENCH_DATA_MB (1024) MB,
in sequential and random order, and with 32 and 2,000 VUs: kiln's peak RSS (GNU time)
must not grow with the file or much with the VUs.

Usage: python3 bench/plans.py [--quick]   (results: bench/out/plans-<time>.json)
"""
import json, os, re, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, TOOLS, measured, sh  # noqa: E402
from load import free_port, median, stop, wait_port  # noqa: E402

SECS = 3 if QUICK else 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "3"))
VUS = 32
K6_VERSION = "v1.4.2"
DATA_MB = int(os.environ.get("BENCH_DATA_MB", "64" if QUICK else "1024"))

DATA_PLAN = """
base_url: {base}
data:
  users: {{file: {csv}, order: {order}}}
scenarios:
  - name: shopper
    data: users
    steps:
      - url: /orders/{{{{id}}}}?u={{{{user}}}}
load:
  vus: {vus}
  duration: {secs}s
"""

PLAN = """
base_url: {base}
scenarios:
  - name: shopper
    steps:
      - name: login
        method: POST
        url: /login
        json: {{user: "u{{{{$vu}}}}", password: "pw"}}
        extract:
          token: {{json: $.token}}
      - name: order
        url: /orders/{{{{$randomInt(1,1000)}}}}
        headers:
          Authorization: Bearer {{{{token}}}}
      - name: cart
        url: /cart
load:
  vus: {vus}
  duration: {secs}s
"""

K6_SCRIPT = """
import http from 'k6/http';
export const options = { discardResponseBodies: false };
export default function () {
  const login = http.post(`${__ENV.BASE}/login`, JSON.stringify({user: `u${__VU}`, password: 'pw'}),
                          {headers: {'Content-Type': 'application/json'}});
  const token = login.json('token');
  http.get(`${__ENV.BASE}/orders/${Math.floor(Math.random() * 1000) + 1}`,
           {headers: {Authorization: `Bearer ${token}`}});
  http.get(`${__ENV.BASE}/cart`);
}
"""

# wrk's Lua: each connection's requests cycle login -> order -> cart; the login's answer
# gives the token. wrk has one script state per thread, so the token is shared by the
# thread's connections (a simplification in wrk's favour).
WRK_LUA = """
local step, token = 0, "none"
request = function()
  step = step % 3 + 1
  if step == 1 then
    return wrk.format("POST", "/login", {["Content-Type"] = "application/json"},
                      '{"user":"u' .. math.random(1, 32) .. '","password":"pw"}')
  elseif step == 2 then
    return wrk.format("GET", "/orders/" .. math.random(1, 1000), {["Authorization"] = "Bearer " .. token})
  else
    return wrk.format("GET", "/cart")
  end
end
response = function(status, headers, body)
  local t = body:match('"token":"([^"]+)"')
  if t then token = t end
end
"""


def ensure_tools():
    if not shutil.which("wrk") or not os.path.exists("/usr/sbin/nginx"):
        sh(["apt-get", "install", "-y", "-qq", "wrk", "nginx"])
    k6 = shutil.which("k6") or os.path.join(TOOLS, "bin", "k6")
    if not os.path.exists(k6):
        env = dict(os.environ, GOBIN=os.path.join(TOOLS, "bin"))
        sh(["go", "install", f"go.k6.io/k6@{K6_VERSION}"], env=env)
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    return k6


def start_nginx(tmp):
    port = free_port()
    conf = f"""daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p; fastcgi_temp_path {tmp}/f;
  uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s;
  server {{ listen 127.0.0.1:{port};
    location = /login {{ default_type application/json; return 200 '{{"token":"t-7f3a9c","user":"u1"}}'; }}
    location /orders/ {{ default_type application/json; return 200 '{{"order":1,"items":[1,2,3]}}'; }}
    location = /cart {{ default_type application/json; return 200 '{{"items":3}}'; }}
    location / {{ return 200 "hello\\n"; }} }} }}"""
    with open(f"{tmp}/nginx.conf", "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["taskset", "-c", "0", "/usr/sbin/nginx", "-p", tmp, "-c", f"{tmp}/nginx.conf"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}"


def kiln_json(out):
    return json.loads(out[out.index("{"):])


def run_kiln_plain(base, tmp):
    out, cpu, rss, _ = measured(["taskset", "-c", "1", KILN, "run", f"{base}/orders/1", "-c", str(VUS), "-t", "1",
                                 "-d", f"{SECS}s", "--json", "-q", "--out", tempfile.mkdtemp(dir=tmp) + "/run"])
    return dict(requests=kiln_json(out)["total"]["requests"], cpu_s=cpu, rss_kib=rss)


def run_kiln_plan(base, tmp):
    plan = os.path.join(tmp, "plan.yaml")
    with open(plan, "w") as f:
        f.write(PLAN.format(base=base, vus=VUS, secs=SECS))
    out, cpu, rss, _ = measured(["taskset", "-c", "1", KILN, "run", plan, "-t", "1", "--json", "-q",
                                 "--out", tempfile.mkdtemp(dir=tmp) + "/run"])
    total = kiln_json(out)["total"]
    failed = total["failed"]
    if failed:
        raise RuntimeError(f"kiln's plan had {failed} failed requests")
    return dict(requests=total["requests"], cpu_s=cpu, rss_kib=rss, iterations=total["iterations"])


def run_k6(k6, base, tmp):
    script = os.path.join(tmp, "scenario.js")
    with open(script, "w") as f:
        f.write(K6_SCRIPT)
    summary = os.path.join(tmp, "k6-summary.json")
    out, cpu, rss, _ = measured(["taskset", "-c", "1", "env", "GOMAXPROCS=1", f"BASE={base}", k6, "run", "-q",
                                 "--no-color", "--vus", str(VUS), "--duration", f"{SECS}s",
                                 "--summary-export", summary, script])
    with open(summary) as f:
        data = json.load(f)
    return dict(requests=int(data["metrics"]["http_reqs"]["count"]), cpu_s=cpu, rss_kib=rss)


def run_wrk_lua(base, tmp):
    script = os.path.join(tmp, "scenario.lua")
    with open(script, "w") as f:
        f.write(WRK_LUA)
    out, cpu, rss, _ = measured(["taskset", "-c", "1", "wrk", "-t1", f"-c{VUS}", f"-d{SECS}s", "-s", script, base + "/"])
    return dict(requests=int(re.search(r"(\d+) requests in", out).group(1)), cpu_s=cpu, rss_kib=rss)


def write_csv(path, megabytes):
    """user,id rows of about 100 bytes, written in 1 MiB blocks."""
    row = 0
    with open(path, "w") as f:
        f.write("user,id\n")
        block = []
        size = 0
        while size < megabytes << 20:
            line = f"user-{row:012d}-{'x' * 70},{row % 1000 + 1}\n"
            block.append(line)
            size += len(line)
            row += 1
            if len(block) == 10_000:
                f.write("".join(block))
                block = []
        f.write("".join(block))
    return row


def run_kiln_data(base, tmp, csv, order, vus):
    plan = os.path.join(tmp, "data-plan.yaml")
    with open(plan, "w") as f:
        f.write(DATA_PLAN.format(base=base, csv=csv, order=order, vus=vus, secs=SECS))
    out, cpu, rss, _ = measured(["taskset", "-c", "1", KILN, "run", plan, "-t", "1", "--json", "-q",
                                 "--out", tempfile.mkdtemp(dir=tmp) + "/run"])
    total = kiln_json(out)["total"]
    return dict(requests=total["requests"], cpu_s=cpu, rss_kib=rss, failed=total["failed"])


def main():
    k6 = ensure_tools()
    os.makedirs(OUT, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "quick": QUICK,
               "rounds": ROUNDS, "secs": SECS, "vus": VUS,
               "tools": {"k6": subprocess.run([k6, "version"], capture_output=True, text=True).stdout.split("\n")[0],
                         "wrk": subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()[1],
                         "kiln": subprocess.run([KILN, "--version"], capture_output=True, text=True).stdout.strip()}}
    tmp = tempfile.mkdtemp(prefix="kiln-bench-plans-")
    nginx, base = start_nginx(tmp)
    runs = {"kiln plain URL": [], "kiln plan": [], "k6 scenario": [], "wrk + Lua scenario": []}
    try:
        for _ in range(ROUNDS):
            runs["kiln plain URL"].append(run_kiln_plain(base, tmp))
            runs["kiln plan"].append(run_kiln_plan(base, tmp))
            runs["k6 scenario"].append(run_k6(k6, base, tmp))
            runs["wrk + Lua scenario"].append(run_wrk_lua(base, tmp))
        small = os.path.join(tmp, "small.csv")
        with open(small, "w") as f:
            f.write("user,id\n" + "".join(f"u{i},{i}\n" for i in range(10)))
        large = os.path.join(tmp, "large.csv")
        rows = write_csv(large, DATA_MB)
        memory = {}
        for label, csv, order, vus in [("10 rows, sequential, 32 VUs", small, "sequential", VUS),
                                       (f"{DATA_MB} MB ({rows} rows), sequential, 32 VUs", large, "sequential", VUS),
                                       (f"{DATA_MB} MB, random, 32 VUs", large, "random", VUS),
                                       ("10 rows, sequential, 2000 VUs", small, "sequential", 2000),
                                       (f"{DATA_MB} MB, sequential, 2000 VUs", large, "sequential", 2000)]:
            memory[label] = run_kiln_data(base, tmp, csv, order, vus)
        results["memory"] = memory
    finally:
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    per_cpu = lambda r: r["requests"] / r["cpu_s"]
    summary = {name: {"requests_per_s": median([r["requests"] / SECS for r in rs]),
                      "requests_per_cpu_s": median([per_cpu(r) for r in rs]),
                      "max_rss_kib": max(r["rss_kib"] for r in rs), "rounds": rs}
               for name, rs in runs.items()}
    results["tools_runs"] = summary
    results["plain_over_plan_per_round"] = [round(per_cpu(a) / per_cpu(b), 3)
                                            for a, b in zip(runs["kiln plain URL"], runs["kiln plan"])]
    results["plan_over_k6_per_round"] = [round(per_cpu(a) / per_cpu(b), 3)
                                         for a, b in zip(runs["kiln plan"], runs["k6 scenario"])]
    path = os.path.join(OUT, f"plans-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n{results['date']}  commit {commit}  ({ROUNDS} rounds of {SECS} s, {VUS} VUs, 1 thread)")
    print(f"{'':<22}{'req/s':>10}{'req/CPU-s':>12}{'max RSS':>10}")
    for name, s in summary.items():
        print(f"{name:<22}{s['requests_per_s']:>10.0f}{s['requests_per_cpu_s']:>12.0f}{s['max_rss_kib'] / 1024:>9.1f}M")
    print(f"plain / plan per CPU-second, per round: {results['plain_over_plan_per_round']} (goal <= 1.5)")
    print(f"kiln plan / k6 per CPU-second, per round: {results['plan_over_k6_per_round']}")
    print("kiln peak RSS by data file and VUs:")
    for label, r in results["memory"].items():
        print(f"  {label:<44}{r['rss_kib'] / 1024:>8.1f}M  {r['requests'] / SECS:>9.0f} req/s  failed {r['failed']}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
