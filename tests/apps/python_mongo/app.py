"""A small order service on MongoDB, instrumented with OpenTelemetry (PyMongo's and Flask's
instrumentations, kiln's stack processor), whose DB calls are known by construction:

- GET /orders/<user>: one find of the user's 15 orders, then one find_one of each order's
  items in a loop (an N+1 of 15, at the line marked N_PLUS_ONE below);
- GET /orders-batched/<user>: the same, its items read in one find with $in (no N+1);
- GET /profile/<user>: the user's document read twice, by two functions (a redundant read).

It is not a server: it drives each route once through Flask's test client and writes the
spans, as OTLP/protobuf encoded by OpenTelemetry's own encoder, to the file given as its
first argument. scripts/record-mongo-spans.sh runs it against FerretDB (a MongoDB wire
server) and keeps the spans in crates/queries/tests/fixtures.
"""

import os
import sys

from flask import Flask
from pymongo import MongoClient

from opentelemetry import trace
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.pymongo import PymongoInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from kiln_otel_stacks import StackSpanProcessor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from otlp_file import FileExporter  # noqa: E402  (tests/apps/otlp_file.py)

ORDERS_PER_USER = 15


MONGO_URL = os.environ.get("MONGO_URL", "mongodb://127.0.0.1:27017/")


def seed():
    # with a client of its own, made before instrumenting: the seeding is not measured
    db = MongoClient(MONGO_URL)["shop"]
    db.users.drop()
    db.orders.drop()
    db.items.drop()
    db.users.insert_many([{"_id": u, "name": f"user {u}"} for u in (1, 2)])
    orders = [{"_id": u * 100 + i, "user_id": u} for u in (1, 2) for i in range(ORDERS_PER_USER)]
    db.orders.insert_many(orders)
    db.items.insert_many([{"order_id": o["_id"], "sku": f"sku-{o['_id']}"} for o in orders])


seed()
exporter = FileExporter(sys.argv[1])
provider = TracerProvider(resource=Resource.create({"service.name": "python-mongo-shop"}))
provider.add_span_processor(StackSpanProcessor())
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
PymongoInstrumentor().instrument(capture_statement=os.environ.get("CAPTURE", "1") == "1")
# made after instrumenting: PyMongo's instrumentation listens to the clients made after it
db = MongoClient(MONGO_URL)["shop"]
app = Flask(__name__)
FlaskInstrumentor().instrument_app(app)


@app.route("/orders/<int:user>")
def orders(user):
    found = list(db.orders.find({"user_id": user}))
    items = []
    for order in found:
        items.append(db.items.find_one({"order_id": order["_id"]}))  # N_PLUS_ONE
    return {"orders": len(found), "items": len(items)}


@app.route("/orders-batched/<int:user>")
def orders_batched(user):
    found = list(db.orders.find({"user_id": user}))
    items = list(db.items.find({"order_id": {"$in": [o["_id"] for o in found]}}))
    return {"orders": len(found), "items": len(items)}


def user_name(user):
    return db.users.find_one({"_id": user})["name"]  # FIRST_READ


def user_greeting(user):
    return "hello " + db.users.find_one({"_id": user})["name"]  # SECOND_READ


@app.route("/profile/<int:user>")
def profile(user):
    return {"name": user_name(user), "greeting": user_greeting(user)}


with app.test_client() as http:
    for user in (1, 2):
        for route in ("orders", "orders-batched", "profile"):
            assert http.get(f"/{route}/{user}").status_code == 200
provider.shutdown()
