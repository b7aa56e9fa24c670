#!/usr/bin/env bash
# Records the spans of tests/apps/python_mongo (PyMongo's OpenTelemetry instrumentation) and
# tests/apps/java_mongo (the MongoDB Java driver under the OpenTelemetry Java agent) into
# crates/queries/tests/fixtures, against FerretDB (a MongoDB wire-protocol server, built from
# the Go module proxy, on SQLite) on loopback. Not run by the test suite: no mongod installs
# here (Debian has none, PyPI's need the internet), so the tests read the recorded spans.
# Run it again after changing an app; it needs go, python3, a JDK and maven (and builds kiln
# for its OTLP receiver), and takes about 3 minutes.
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
# The Java agent's Mongo instrumentation (its statements JSON, values "?"), received by kiln
bash scripts/java-agent.sh
m2="$PWD/target/m2"
jars=""
for name in mongodb-driver-sync mongodb-driver-core bson bson-record-codec; do
  group=org.mongodb version=5.7.1
  jar="$m2/${group//.//}/$name/$version/$name-$version.jar"
  [ -f "$jar" ] || mvn -q -B dependency:get -Dartifact="$group:$name:$version" -Dtransitive=false \
    -Dmaven.repo.local="$m2" >/dev/null
  jars="$jars:$jar"
done
jars="${jars#:}"
rm -rf "$work/java-classes" "$work/java-run"
javac -cp "$jars" -d "$work/java-classes" tests/apps/java_mongo/MongoShop.java
cargo build -q --bin kiln
receiver=4319
target/debug/kiln queries --listen "127.0.0.1:$receiver" --out "$work/java-run" >"$work/receiver.log" 2>&1 &
kiln_pid=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$receiver") 2>/dev/null && break; sleep 0.2; done
agent="$m2/io/opentelemetry/javaagent/opentelemetry-javaagent/2.33.1/opentelemetry-javaagent-2.33.1.jar"
extension="$m2/io/opentelemetry/contrib/opentelemetry-span-stacktrace/1.51.0-alpha/opentelemetry-span-stacktrace-1.51.0-alpha.jar"
java -javaagent:"$agent" -Dotel.javaagent.extensions="$extension" \
  -Dotel.java.experimental.span-stacktrace.min.duration=0 \
  -Dotel.instrumentation.java-http-client.enabled=false \
  -Dotel.instrumentation.http-url-connection.enabled=false \
  -Dotel.exporter.otlp.protocol=http/protobuf -Dotel.metrics.exporter=none \
  -Dotel.logs.exporter=none -Dotel.bsp.schedule.delay=100 -Dotel.javaagent.logging=none \
  -Dotel.service.name=java-mongo-shop \
  -Dotel.exporter.otlp.traces.endpoint="http://127.0.0.1:$receiver/v1/traces" \
  -cp "$work/java-classes:$jars" MongoShop "mongodb://127.0.0.1:$port/"
sleep 1
kill -INT "$kiln_pid"
wait "$kiln_pid" || true
cp "$work/java-run/spans.otlp.delimited.pb.gz" "$out/java-mongo.otlp.delimited.pb.gz"
ls -l "$out"
