#!/usr/bin/env bash
# Records the spans of tests/apps/python_mongo (PyMongo's OpenTelemetry instrumentation) into
# crates/queries/tests/fixtures, against FerretDB (a MongoDB wire-protocol server, built from
# the Go module proxy, on SQLite) on loopback. Not run by the test suite: no mongod installs
# here (Debian has none, PyPI's need the internet), so the tests read the recorded spans.
# Run it again after changing the app; it needs go and python3, and takes about 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$PWD/target/mongo-recording"
mkdir -p "$work/data"
if [ ! -x "$work/bin/ferretdb" ]; then
  # the module as published lacks the build/version/version.txt its build embeds: built from
  # a copy with it
  src="$(go mod download -json github.com/FerretDB/FerretDB@v1.24.2 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  rm -rf "$work/src" && cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
  echo v1.24.2 >"$work/src/build/version/version.txt"
  (cd "$work/src" && go build -o "$work/bin/ferretdb" ./cmd/ferretdb)
fi
[ -x "$work/env/bin/python" ] || {
  python3 -m venv "$work/env"
  "$work/env/bin/pip" install -q pymongo==4.20.1 flask==3.1.3 opentelemetry-sdk==1.45.1 \
    opentelemetry-exporter-otlp-proto-common==1.45.1 opentelemetry-instrumentation-flask==0.66b1 \
    opentelemetry-instrumentation-pymongo==0.66b1 ./agents/python
}
port=27917
rm -rf "$work/data" && mkdir -p "$work/data"
"$work/bin/ferretdb" --handler=sqlite --sqlite-url="file:$work/data/" \
  --listen-addr="127.0.0.1:$port" --telemetry=disable --log-level=error \
  --debug-addr=- >"$work/ferretdb.log" 2>&1 &
ferret=$!
trap 'kill $ferret 2>/dev/null || true' EXIT
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done
out=crates/queries/tests/fixtures
mkdir -p "$out"
# statements with their values (capture_statement=True), and without (the default: the
# command name alone)
MONGO_URL="mongodb://127.0.0.1:$port/" CAPTURE=1 \
  "$work/env/bin/python" tests/apps/python_mongo/app.py "$out/pymongo-statements.otlp.pb"
MONGO_URL="mongodb://127.0.0.1:$port/" CAPTURE=0 \
  "$work/env/bin/python" tests/apps/python_mongo/app.py "$out/pymongo-commands.otlp.pb"
ls -l "$out"/pymongo-*.otlp.pb
