"""A gRPC service as grpcio serves it, for kiln's gRPC tests: shop.v1.Orders (orders.proto
beside this file), its messages read and written by hand (no generated code, so the test
needs no protoc), with latency and failures known by construction.

  Get   answers the order it was asked for (field 1, the id, echoed); with --stall-every-ms
        and --stall-ms, a call that arrives in the first --stall-ms of each period waits for
        the period's stall to end (a lock held on the wall clock), as kiln-target's HTTP stall
  Fail  every --fail-every-th call ends with UNAVAILABLE ("asked to fail"), the others OK
  List  with --dsn (PostgreSQL, psycopg): the first 10 orders, then each one's lines with a
        statement of its own (an N+1: 11 statements a call); with --fixed, every order's lines
        in one statement (2 a call). Run under `opentelemetry-instrument`, the stock gRPC and
        psycopg instrumentations make the server span and the DB spans.

Prints "listening on PORT" once serving; on SIGTERM prints the calls it answered, by method
and status, as one JSON line, and exits.

  python3 orders.py --port 0 [--stall-every-ms 1000 --stall-ms 100] [--fail-every 10]
                    [--dsn postgresql://... [--fixed]]
"""

import argparse
import json
import signal
import sys
import threading
import time
from concurrent import futures

import grpc


def read_string_field(message, wanted):
    """The first string (length-delimited) field numbered `wanted` of a protobuf message."""
    i = 0
    while i < len(message):
        key, i = varint(message, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(message, i)
        elif wire == 2:
            n, i = varint(message, i)
            if field == wanted:
                return message[i : i + n].decode()
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return ""


def varint(data, i):
    value = shift = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def order(order_id):
    """shop.v1.Order { id = 1 } encoded."""
    raw = order_id.encode()
    return bytes([0x0A, len(raw)]) + raw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--stall-every-ms", type=int, default=0)
    ap.add_argument("--stall-ms", type=int, default=0)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--dsn", default="")
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    counts = {}
    counts_lock = threading.Lock()
    started = time.monotonic()
    fail_calls = [0]

    def count(method, status):
        with counts_lock:
            key = f"{method} {status}"
            counts[key] = counts.get(key, 0) + 1

    def stall_wait():
        if not (args.stall_every_ms and args.stall_ms):
            return
        into = ((time.monotonic() - started) * 1000) % args.stall_every_ms
        if into < args.stall_ms:
            time.sleep((args.stall_ms - into) / 1000)

    def get(request, context):
        stall_wait()
        count("Get", "OK")
        return order(read_string_field(request, 1))

    def fail(request, context):
        with counts_lock:
            fail_calls[0] += 1
            n = fail_calls[0]
        if args.fail_every and n % args.fail_every == 0:
            count("Fail", "UNAVAILABLE")
            context.abort(grpc.StatusCode.UNAVAILABLE, "asked to fail")
        count("Fail", "OK")
        return order(read_string_field(request, 1))

    local = threading.local()

    def connection():
        if not hasattr(local, "db"):
            import psycopg

            local.db = psycopg.connect(args.dsn, autocommit=True)
        return local.db

    def list_orders(request, context):
        db = connection()
        ids = [row[0] for row in db.execute("SELECT id FROM orders ORDER BY id LIMIT 10")]
        if args.fixed:
            db.execute("SELECT order_id, sku FROM order_lines WHERE order_id = ANY(%s)", (ids,)).fetchall()
        else:
            for order_id in ids:
                db.execute("SELECT sku FROM order_lines WHERE order_id = %s", (order_id,)).fetchall()
        count("List", "OK")
        return order(",".join(str(i) for i in ids))

    handlers = {
        "Get": grpc.unary_unary_rpc_method_handler(get),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "List": grpc.unary_unary_rpc_method_handler(list_orders),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("shop.v1.Orders", handlers),)
    )
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    print(f"listening on {port}", flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(0.2):
        pass
    server.stop(grace=1).wait()
    with counts_lock:
        print(json.dumps(counts), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
