"""A small shop on PostgreSQL, instrumented with OpenTelemetry, whose DB calls are known by
construction (kiln's query-analyzer tests):

- GET /authors : one query for the authors, then one query per author for their books
                 (an N+1 of exactly N_AUTHORS queries, from the line marked N+1 LOOP);
- GET /bulk    : the same data in one JOIN;
- GET /settings: one identical query REPEATS times (marked REPEATED);
- GET /report  : one query that takes 600 ms in the server (pg_sleep, marked SLOW);
- GET /flush   : exports the finished spans now.

Environment: DATABASE_URL (libpq conninfo), PORT, N_AUTHORS, REPEATS, and the SDK's own
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.
"""

import os

import psycopg
from flask import Flask, jsonify
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from kiln_otel_stacks import StackSpanProcessor

DSN = os.environ["DATABASE_URL"]
N_AUTHORS = int(os.environ.get("N_AUTHORS", "12"))
REPEATS = int(os.environ.get("REPEATS", "4"))


def seed():
    # before instrumenting: the seeding is not what the tests measure
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS books, authors, settings")
        conn.execute("CREATE TABLE authors (id int PRIMARY KEY, name text NOT NULL)")
        conn.execute("CREATE TABLE books (id serial PRIMARY KEY, author_id int REFERENCES authors, title text)")
        conn.execute("CREATE TABLE settings (name text PRIMARY KEY, value text)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO authors VALUES (%s, %s)", [(i, f"author {i}") for i in range(N_AUTHORS)])
            cur.executemany(
                "INSERT INTO books (author_id, title) VALUES (%s, %s)",
                [(i, f"book {i}.{j}") for i in range(N_AUTHORS) for j in range(2)],
            )
        conn.execute("INSERT INTO settings VALUES ('currency', 'EUR')")


seed()

provider = TracerProvider(resource=Resource.create({"service.name": "python-shop"}))
provider.add_span_processor(StackSpanProcessor())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))
trace.set_tracer_provider(provider)
PsycopgInstrumentor().instrument(capture_parameters=True)

app = Flask(__name__)
FlaskInstrumentor().instrument_app(app)
conn = psycopg.connect(DSN, autocommit=True)


@app.get("/authors")
def authors():
    cur = conn.cursor()
    cur.execute("SELECT id, name FROM authors ORDER BY id")
    result = []
    for author_id, name in cur.fetchall():
        cur.execute("SELECT title FROM books WHERE author_id = %s ORDER BY id", (author_id,))  # N+1 LOOP
        result.append({"name": name, "books": [t for (t,) in cur.fetchall()]})
    return jsonify(result)


@app.get("/bulk")
def bulk():
    cur = conn.cursor()
    cur.execute(
        "SELECT a.id, a.name, b.title FROM authors a JOIN books b ON b.author_id = a.id ORDER BY a.id, b.id"
    )
    result = {}
    for author_id, name, title in cur.fetchall():
        result.setdefault(author_id, {"name": name, "books": []})["books"].append(title)
    return jsonify(list(result.values()))


@app.get("/settings")
def settings():
    cur = conn.cursor()
    values = []
    for _ in range(REPEATS):
        cur.execute("SELECT value FROM settings WHERE name = 'currency'")  # REPEATED
        values.append(cur.fetchone()[0])
    return jsonify(values)


@app.get("/report")
def report():
    cur = conn.cursor()
    cur.execute("SELECT pg_sleep(0.6), count(*) FROM books")  # SLOW
    return jsonify(cur.fetchone()[1])


@app.get("/flush")
def flush():
    return jsonify(provider.force_flush())


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ["PORT"]), threaded=False)
