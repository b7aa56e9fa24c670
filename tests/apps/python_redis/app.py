"""A small cart service on Redis, instrumented with OpenTelemetry (redis-py's and Flask's
instrumentations, kiln's stack processor), whose DB calls are known by construction:

- GET /cart/<user>: the cart's 15 item ids in one LRANGE, then one HGETALL of each item in a
  loop (an N+1 of 15, at the line marked N_PLUS_ONE below);
- GET /cart-piped/<user>: the same, its items read in one pipeline (one round trip, no N+1);
- GET /cart-mget/<user>: the items' prices read in one MGET (no N+1);
- GET /profile/<user>: the user's name read twice, by two functions. redis-py's
  instrumentation records every argument as "?", so the two reads cannot be told to be the
  same values: kiln must not call them redundant.

It is not a server: it drives each route once through Flask's test client and writes the
spans, as OTLP/protobuf encoded by OpenTelemetry's own encoder, to the file given as its
first argument. The test (crates/kiln/tests/e2e/queries_python.rs) runs it against a real
redis-server on loopback.
"""

import os
import sys

import redis
from flask import Flask

from opentelemetry import trace
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from kiln_otel_stacks import StackSpanProcessor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from otlp_file import FileExporter  # noqa: E402  (tests/apps/otlp_file.py)

ITEMS_PER_CART = 15


REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def seed():
    # before instrumenting: the seeding is not measured
    r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    for user in (1, 2):
        r.set(f"user:{user}:name", f"user {user}")
        ids = [user * 100 + i for i in range(ITEMS_PER_CART)]
        r.rpush(f"cart:{user}", *ids)
        for i in ids:
            r.hset(f"item:{i}", mapping={"sku": f"sku-{i}", "price": str(i)})
            r.set(f"price:{i}", str(i))


seed()
exporter = FileExporter(sys.argv[1])
provider = TracerProvider(resource=Resource.create({"service.name": "python-redis-cart"}))
provider.add_span_processor(StackSpanProcessor())
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
RedisInstrumentor().instrument()
db = redis.Redis.from_url(REDIS_URL, decode_responses=True)
app = Flask(__name__)
FlaskInstrumentor().instrument_app(app)


def cart_ids(user):
    return db.lrange(f"cart:{user}", 0, -1)


@app.route("/cart/<int:user>")
def cart(user):
    items = []
    for i in cart_ids(user):
        items.append(db.hgetall(f"item:{i}"))  # N_PLUS_ONE
    return {"items": len(items)}


@app.route("/cart-piped/<int:user>")
def cart_piped(user):
    pipe = db.pipeline(transaction=False)
    for i in cart_ids(user):
        pipe.hgetall(f"item:{i}")
    return {"items": len(pipe.execute())}


@app.route("/cart-mget/<int:user>")
def cart_mget(user):
    prices = db.mget([f"price:{i}" for i in cart_ids(user)])
    return {"items": len(prices)}


def user_name(user):
    return db.get(f"user:{user}:name")  # FIRST_READ


def user_greeting(user):
    return "hello " + db.get(f"user:{user}:name")  # SECOND_READ


@app.route("/profile/<int:user>")
def profile(user):
    return {"name": user_name(user), "greeting": user_greeting(user)}


with app.test_client() as http:
    for user in (1, 2):
        for route in ("cart", "cart-piped", "cart-mget", "profile"):
            assert http.get(f"/{route}/{user}").status_code == 200
provider.shutdown()
