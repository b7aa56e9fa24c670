#!/usr/bin/env bash
# The whole test suite, runnable on a fresh Debian machine: installs what the tests need
# (nginx for the real-server test, perf for the profiler, a JDK, Node.js and Go for the profiles
# of other runtimes, PostgreSQL, Chromium and a Python environment for the query analyzer,
# nftables for a lossy loopback, Prometheus for the metrics export),
# then format, lint and every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing+=(nginx)
perf --version >/dev/null 2>&1 || missing+=(linux-perf)
command -v javac >/dev/null 2>&1 && command -v jcmd >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v go >/dev/null 2>&1 || missing+=(golang-go)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
# the query analyzer's end-to-end tests: a real PostgreSQL, and Chromium for the HTML report
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# Redis commands as redis-py's instrumentation records them, against a real server
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
# the retransmits finding's test: packet loss on a network namespace's own loopback
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# the terminal test: kiln on a terminal of 80 and 200 columns
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
# --export's tests: a real Prometheus taking remote write (its default service not started)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}"
  # policy-rc.d 101: install the package without starting its default service.
  printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
  as_root chmod +x /usr/sbin/policy-rc.d
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
  as_root rm -f /usr/sbin/policy-rc.d
fi

# Flask, psycopg and the OpenTelemetry SDK for the instrumented test app (target/pyenv), the
# OpenTelemetry Java agent with the PostgreSQL driver (target/m2), the Spring Boot shop's
# libraries (target/spring-shop/lib), and kiln's Go execution-trace reader
# (golang.org/x/exp/trace from the Go module proxy) beside the kiln binary the tests run, where
# kiln looks for it. Fetched while the workspace compiles: fetching mostly waits on the
# network, compiling keeps both cores busy (about 1.5 minutes saved on a fresh machine).
setup_log="$(mktemp)"
(
  bash scripts/python-env.sh
  bash scripts/java-agent.sh
  bash scripts/spring-shop.sh
  mkdir -p target/debug
  # the Go target of the runtime tests, built once into the build cache they use (a cold
  # build takes ~16 s, which the first tests paid inside their turn, two at once); the trace
  # reader into the same cache, so that Go's standard library is compiled once (with a cache
  # of its own, 12 s of CPU more beside the test build)
  export GOCACHE="$PWD/target/go-build-cache"
  GO111MODULE=off GOFLAGS= go build -o target/go-build-cache/go_cache tests/apps/go_cache/main.go
  # grpc-go's interop service with reflection, the gRPC tests' second server (its modules
  # from the Go module proxy)
  (cd tests/apps/go_grpc && go build -o ../../../target/go-build-cache/go_grpc .)
  # an OpenTelemetry Collector (OTLP receiver, remote-write exporter) for --export otlp's
  # test: ~140 CPU-s on a fresh machine, while the workspace compiles
  (cd tests/apps/otelcol && go build -o ../../../target/go-build-cache/otelcol .)
  cd tools/kiln-go-trace && go build -o ../../target/debug/kiln-go-trace .
) >"$setup_log" 2>&1 &
setup_pid=$!
trap 'kill "$setup_pid" 2>/dev/null || true' EXIT

# A fresh checkout gains nothing from incremental caches but their disk space (gigabytes).
export CARGO_INCREMENTAL=0
cargo fmt --all -- --check
# no module of a crate imports another that imports it back
python3 scripts/module-cycles.py
# Lint and test in one compile: clippy's driver builds the workspace's own crates for the
# tests as rustc does, with clippy's lints, and -D warnings fails the build on any warning,
# rustc's or clippy's (dependencies are built by plain rustc, their lints capped as always).
# A separate `cargo clippy` pass compiled every crate a second time: five minutes on 2 cores.
RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)" || {
  echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2
  exit 1
}
export RUSTC_WORKSPACE_WRAPPER
export RUSTFLAGS="-D warnings"
cargo test --workspace --locked --no-run
cargo test -p kiln --locked --no-run --test e2e
if ! wait "$setup_pid"; then
  cat "$setup_log" >&2
  echo "test.sh: preparing the tests' environment failed (above)" >&2
  exit 1
fi
cat "$setup_log"
status=0
# The end-to-end binary with a libtest thread per test (more than it has): every test waits for
# its turn at once, and the turns (crates/kiln/tests/e2e/common) give the machine to one kind at
# a time in as few batches as they can. libtest says "has been running for over 60 seconds" of
# tests that are still waiting for their turn.
cargo test -p kiln --locked --no-fail-fast --test e2e -- --test-threads=256 || status=$?
# every other test binary of the workspace, one after another as cargo runs them
cargo test --workspace --locked --no-fail-fast || status=$?
exit "$status"
