#!/usr/bin/env bash
# The OpenTelemetry Java agent, its span-stacktrace extension and the PostgreSQL JDBC driver,
# for the query analyzer's Java test, and log4j2 (with the LMAX disruptor of its async loggers) and Jackson for the findings' Java tests, and HdrHistogram (its HistogramLogProcessor reads latency.hlog in a test), fetched from Maven Central into target/m2 (inside the
# repo; cargo clean removes it). Prints nothing; the jars' paths are fixed below.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD/target/m2"
central="https://repo.maven.apache.org/maven2"

# A jar straight from Maven Central, checked against the SHA-1 Central publishes beside it. Ten
# `mvn dependency:get` took about 30 s of CPU on a fresh machine (a JVM and Maven each), beside
# the test build; a failed fetch (a machine that reaches Central only through a Maven mirror)
# falls back to mvn, which reads its settings.
fetch() {
  local jar="$repo/$1" url="$central/$1"
  mkdir -p "$(dirname "$jar")"
  curl -fsS --retry 2 -o "$jar.part" "$url" && curl -fsS --retry 2 -o "$jar.sha1" "$url.sha1" \
    && [ "$(sha1sum "$jar.part" | cut -d' ' -f1)" = "$(cut -c1-40 "$jar.sha1")" ] \
    && mv "$jar.part" "$jar" || { rm -f "$jar.part" "$jar.sha1"; return 1; }
}

for artifact in \
  io.opentelemetry.javaagent:opentelemetry-javaagent:2.33.1 \
  io.opentelemetry.contrib:opentelemetry-span-stacktrace:1.51.0-alpha \
  org.postgresql:postgresql:42.7.8 \
  org.apache.logging.log4j:log4j-api:2.24.3 \
  org.apache.logging.log4j:log4j-core:2.24.3 \
  com.lmax:disruptor:3.4.4 \
  org.hdrhistogram:HdrHistogram:2.2.2 \
  com.fasterxml.jackson.core:jackson-core:2.17.2 \
  com.fasterxml.jackson.core:jackson-databind:2.17.2 \
  com.fasterxml.jackson.core:jackson-annotations:2.17.2; do
  IFS=: read -r group name version <<<"$artifact"
  path="${group//.//}/$name/$version/$name-$version.jar"
  jar="$repo/$path"
  [ -f "$jar" ] || fetch "$path" \
    || mvn -q -B dependency:get -Dartifact="$artifact" -Dtransitive=false -Dmaven.repo.local="$repo" >/dev/null
  [ -f "$jar" ] || { echo "java-agent.sh: $artifact was not fetched" >&2; exit 1; }
done
