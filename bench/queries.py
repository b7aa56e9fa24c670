#!/usr/bin/env python3
"""Query analyzer benchmark: OTLP span ingest + SQL fingerprinting, and the DB stack trie of
one huge request.

Workloads, generated here as OTLP/JSON lines (what the Collector's file exporter writes):
  many     REQUESTS requests of a Java service (stacks in the span-stacktrace processor's form,
           ~20 frames): 1 list query + 12 N+1 calls + 2 other statements with literal values,
           so every statement text is different and must be fingerprinted.
  one      one request with 90,000 DB calls from 40 call sites (Atlassian's CSV export).

Tools, in one run on this machine:
  kiln            kiln queries FILE   (ingest, fingerprints, findings, trie, HTML, speedscope)
  pt-query-digest the same statements as a MySQL slow log (Percona Toolkit's fingerprinting and
                  grouping, what DBAs use to group queries); skipped when not installed
  perf-sentinel   the same DB calls in its own event JSON (its batch mode reads no OTLP; files of
                  40,000 events, under its 16 MiB limit), when its binary is in bench/.tools/bin
                  (cargo install perf-sentinel --version 0.7.8 --root bench/.tools); skipped otherwise

Reports CPU seconds (user + system), wall time and peak RSS; spans per CPU-second.
Usage: python3 bench/queries.py [--quick]   (results: bench/out/queries-<time>.json)
       python3 bench/queries.py --baseline OLD_KILN   the "many" file only, OLD_KILN and this
                      kiln interleaved, three rounds (a before/after of a change, on one file in
                      one run, since this VM's speed drifts between runs)
"""
import json, os, random, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KILN, OUT, QUICK, ROOT, TOOLS, measured, sh  # noqa: E402,F401
REQUESTS = 3000 if QUICK else 30000
ONE_REQUEST_CALLS = 90000

FRAMEWORK = [
    "org.apache.tomcat.util.threads.TaskThread$WrappingRunnable.run(TaskThread.java:61)",
    "java.base/java.util.concurrent.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:635)",
    "org.apache.catalina.core.StandardWrapperValve.invoke(StandardWrapperValve.java:197)",
    "org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:885)",
    "org.springframework.web.servlet.DispatcherServlet.doDispatch(DispatcherServlet.java:1089)",
    "org.springframework.web.method.support.InvocableHandlerMethod.invokeForRequest(InvocableHandlerMethod.java:150)",
]
DRIVER = [
    "org.postgresql.jdbc.PgPreparedStatement.executeQuery(PgPreparedStatement.java:134)",
    "com.zaxxer.hikari.pool.HikariProxyPreparedStatement.executeQuery(HikariProxyPreparedStatement.java)",
    "io.opentelemetry.javaagent.instrumentation.jdbc.JdbcAdviceScope.end(JdbcAdviceScope.java:106)",
]


def stack(app_frames):
    # leaf first, as Java prints
    frames = list(reversed(DRIVER)) + list(reversed(app_frames)) + list(reversed(FRAMEWORK))
    return "".join(f"\tat {f}\n" for f in frames)


def attr(k, v):
    if isinstance(v, int):
        return {"key": k, "value": {"intValue": str(v)}}
    return {"key": k, "value": {"stringValue": v}}


def span(trace, sid, parent, name, kind, start, end, attrs):
    return {"traceId": f"{trace:032x}", "spanId": f"{sid:016x}",
            "parentSpanId": f"{parent:016x}" if parent else "", "name": name, "kind": kind,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end), "attributes": attrs}


def document(spans):
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [attr("service.name", "shop"), attr("telemetry.sdk.language", "java")]},
        "scopeSpans": [{"scope": {"name": "io.opentelemetry.jdbc"}, "spans": spans}]}]},
        separators=(",", ":"))


def db(trace, sid, parent, t, sql, frames):
    return span(trace, sid, parent, sql.split(" ")[0], 3, t, t + 400_000,
                [attr("db.system", "postgresql"), attr("db.statement", sql),
                 attr("code.stacktrace", stack(frames)), attr("thread.name", "http-nio-8080-exec-1")])


def sentinel_event(trace, sid, parent, t, sql):
    """The same DB call in perf-sentinel's native event format (it reads OTLP only as a daemon)."""
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 10**9)) + f".{(t // 1000) % 10**6:06d}Z"
    return {"timestamp": ts, "trace_id": f"{trace:032x}", "span_id": f"{sid:016x}",
            "parent_span_id": f"{parent:016x}", "service": "shop", "type": "sql",
            "operation": sql.split(" ")[0], "target": sql, "duration_us": 400,
            "source": {"endpoint": "/orders/{id}", "method": "GET"}}


def write_many(path, slowlog, events_path):
    rnd = random.Random(7)
    spans_total = 0
    t = 1_700_000_000_000_000_000
    batch = []
    events = []
    with open(path, "w") as out, open(slowlog, "w") as log:
        for r in range(REQUESTS):
            trace = (r + 1) << 32
            root = 1
            spans = [span(trace, root, 0, "GET /orders/{id}", 2, t, t + 20_000_000,
                          [attr("http.request.method", "GET"), attr("http.route", "/orders/{id}")])]
            handler = ["com.shop.web.OrderController.show(OrderController.java:42)",
                       "com.shop.service.OrderService.load(OrderService.java:88)"]
            order = rnd.randrange(10**6)
            sqls = [(f"SELECT id, product_id, qty FROM order_lines WHERE order_id = {order}", handler)]
            for i in range(12):
                sqls.append((f"SELECT name, price FROM products WHERE id = {rnd.randrange(10**6)}",
                             handler + ["com.shop.service.OrderService.products(OrderService.java:97)"]))
            sqls.append((f"SELECT * FROM customers WHERE id = {rnd.randrange(10**5)} AND region = 'eu-{rnd.randrange(9)}'",
                         handler + ["com.shop.service.CustomerService.get(CustomerService.java:31)"]))
            sqls.append((f"UPDATE orders SET viewed_at = now() WHERE id = {order}",
                         handler + ["com.shop.service.OrderService.touch(OrderService.java:120)"]))
            for i, (sql, frames) in enumerate(sqls):
                spans.append(db(trace, root + 1 + i, root, t + 1_000_000 * (i + 1), sql, frames))
                events.append(sentinel_event(trace, root + 1 + i, root, t + 1_000_000 * (i + 1), sql))
                log.write(f"# Time: 2026-11-22T10:00:00.000000Z\n# Query_time: 0.000400  Lock_time: 0.000000 "
                          f"Rows_sent: 1  Rows_examined: 1\nSET timestamp=1700000000;\n{sql};\n")
            spans_total += len(spans)
            batch.extend(spans)
            t += 30_000_000
            if len(batch) >= 500:
                out.write(document(batch) + "\n")
                batch = []
        if batch:
            out.write(document(batch) + "\n")
    # perf-sentinel refuses files over 16 MiB: chunks of 40,000 events
    paths = []
    for n in range(0, len(events), 40000):
        paths.append(f"{events_path}.{n // 40000}")
        with open(paths[-1], "w") as f:
            json.dump(events[n:n + 40000], f)
    return spans_total, paths


def write_one(path):
    rnd = random.Random(11)
    trace, root, t = 99, 1, 1_700_000_000_000_000_000
    sites = []
    for s in range(40):
        depth = 3 + s % 5
        sites.append([f"com.jira.export.Layer{d}.step{s % (d + 2)}(Layer{d}.java:{10 + d * 7 + s})" for d in range(depth)])
    batch = [span(trace, root, 0, "GET /export/csv", 2, t, t + 60_000_000_000,
                  [attr("http.request.method", "GET"), attr("http.route", "/export/csv")])]
    weights = [1.0 / (i + 1) for i in range(40)]
    with open(path, "w") as out:
        for i in range(ONE_REQUEST_CALLS):
            s = rnd.choices(range(40), weights)[0]
            sql = f"SELECT * FROM issue_field_{s % 7} WHERE issue_id = {rnd.randrange(10**6)}"
            batch.append(db(trace, root + 1 + i, root, t + 600_000 * i, sql, sites[s]))
            if len(batch) >= 1000:
                out.write(document(batch) + "\n")
                batch = []
        if batch:
            out.write(document(batch) + "\n")
    return ONE_REQUEST_CALLS + 1


def run_kiln(path, tmp, name):
    out_dir = os.path.join(tmp, name)
    output, cpu, rss, wall = measured([KILN, "queries", path, "--json", "--out", out_dir])
    report = json.loads(output[output.index("{"):])
    return {"cpu_s": cpu, "wall_s": wall, "rss_mib": rss / 1024,
            "findings": len(report["analysis"]["findings"]),
            "db_calls": report["analysis"]["db_calls"], "cost_ms": report["cost_ms"]}


def baseline(old_kiln):
    """The "many" workload with `old_kiln` and this kiln, interleaved, three rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        many = os.path.join(tmp, "many.jsonl")
        spans, _ = write_many(many, os.path.join(tmp, "slow.log"), os.path.join(tmp, "events.json"))
        for round_ in range(1, 4):
            for name, binary in (("before", old_kiln), ("after", KILN)):
                out_dir = os.path.join(tmp, f"{name}-{round_}")
                _, cpu, rss, _ = measured([binary, "queries", many, "--json", "--out", out_dir])
                print(f"round {round_} {name}: {cpu:.2f} CPU-s, {spans / cpu:.0f} spans/CPU-s, "
                      f"RSS {rss / 1024:.0f} MiB", flush=True)


def main():
    sh(["cargo", "build", "--release", "-q", "-p", "kiln"], cwd=ROOT)
    if "--baseline" in sys.argv:
        return baseline(sys.argv[sys.argv.index("--baseline") + 1])
    os.makedirs(OUT, exist_ok=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": QUICK, "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        many, slowlog, one, events = (os.path.join(tmp, n) for n in ("many.jsonl", "slow.log", "one.jsonl", "events.json"))
        spans, event_files = write_many(many, slowlog, events)
        statements = REQUESTS * 15
        results["many"] = {"spans": spans, "statements": statements,
                           "file_mib": os.path.getsize(many) / 2**20}
        k = run_kiln(many, tmp, "many")
        k["spans_per_cpu_s"] = spans / k["cpu_s"]
        results["many"]["kiln"] = k
        cost = k["cost_ms"]
        k["ingest_and_fingerprint_spans_per_s"] = spans / ((cost["read"] + cost["analysis"]) / 1000)
        print(f"many: {spans} spans ({results['many']['file_mib']:.0f} MiB): kiln {k['cpu_s']:.2f} CPU-s, "
              f"{k['spans_per_cpu_s']:.0f} spans/CPU-s, RSS {k['rss_mib']:.0f} MiB, {k['findings']} findings; "
              f"stages (ms) {cost}: read + analysis = {k['ingest_and_fingerprint_spans_per_s']:.0f} spans/s")
        if shutil.which("pt-query-digest"):
            _, cpu, rss, wall = measured(["pt-query-digest", "--limit", "100%", slowlog])
            results["many"]["pt_query_digest"] = {"cpu_s": cpu, "wall_s": wall, "rss_mib": rss / 1024,
                                                  "statements_per_cpu_s": statements / cpu}
            print(f"      pt-query-digest on the same {statements} statements: {cpu:.2f} CPU-s "
                  f"({statements / cpu:.0f}/CPU-s), RSS {rss / 1024:.0f} MiB; kiln "
                  f"{statements / k['cpu_s'] / (statements / cpu):.1f}x per CPU-second (kiln also reads spans and stacks)")
        sentinel = os.path.join(TOOLS, "bin", "perf-sentinel")
        if os.path.exists(sentinel):
            try:
                db_calls = statements
                cpu = wall = rss = 0
                for chunk in event_files:
                    _, c, r, w = measured([sentinel, "analyze", "--input", chunk, "--format", "json"])
                    cpu, wall, rss = cpu + c, wall + w, max(rss, r)
                results["many"]["perf_sentinel"] = {"cpu_s": cpu, "wall_s": wall, "rss_mib": rss / 1024,
                                                    "db_calls_per_cpu_s": db_calls / cpu}
                print(f"      perf-sentinel on the same {db_calls} DB calls (its own event JSON, no stacks): "
                      f"{cpu:.2f} CPU-s ({db_calls / cpu:.0f}/CPU-s), RSS {rss / 1024:.0f} MiB; kiln "
                      f"{cpu / k['cpu_s']:.1f}x less CPU")
            except RuntimeError as e:
                results["many"]["perf_sentinel"] = {"error": str(e)[-300:]}
                print(f"      perf-sentinel failed: {str(e)[-300:]}")
        spans_one = write_one(one)
        k = run_kiln(one, tmp, "one")
        results["one_request"] = {"spans": spans_one, "file_mib": os.path.getsize(one) / 2**20, "kiln": k}
        print(f"one request, {ONE_REQUEST_CALLS} DB calls ({results['one_request']['file_mib']:.0f} MiB): "
              f"kiln {k['wall_s']:.2f} s wall, {k['cpu_s']:.2f} CPU-s (ingest + analysis + trie + HTML), "
              f"RSS {k['rss_mib']:.0f} MiB; stages (ms) {k['cost_ms']}")
    path = os.path.join(OUT, time.strftime("queries-%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
