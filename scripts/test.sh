#!/usr/bin/env bash
# The whole test suite, runnable on a fresh Debian machine: installs what the tests need
# (nginx for the real-server test, perf for the profiler, a JDK, Node.js and Go for the profiles
# of other runtimes, PostgreSQL, Chromium and a Python environment for the query analyzer,
# nftables for a lossy loopback),
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
# The end-to-end binary first (it needs nearly every crate: 3 of the build's 3.7 quiet minutes);
# its path from cargo's JSON, since the binary runs while cargo builds the rest.
e2e="$(cargo test -p kiln --locked --no-run --test e2e --message-format=json-render-diagnostics |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "e2e" and m["executable"]:
        print(m["executable"])')"
[ -x "$e2e" ] || { echo "test.sh: no e2e test binary from cargo" >&2; exit 1; }
if ! wait "$setup_pid"; then
  cat "$setup_log" >&2
  echo "test.sh: preparing the tests' environment failed (above)" >&2
  exit 1
fi
cat "$setup_log"
# The rest of the workspace's tests compile at idle priority (SCHED_IDLE: a CPU the tests leave
# idle, nothing they ask for) while the e2e tests that share the machine run: those leave about
# a core idle (a whole fresh build, 450 CPU-s, fit beside them in 420 s and slowed them by 2%).
build_log="$(mktemp)"
chrt --idle 0 cargo test --workspace --locked --no-run >"$build_log" 2>&1 &
build_pid=$!
trap 'kill "$setup_pid" "$build_pid" 2>/dev/null || true' EXIT
status=0
# The e2e binary in two passes, with a libtest thread per test (more than it has): every test
# waits for its turn at once, and the turns (crates/kiln/tests/e2e/common) give the machine to
# one kind at a time in as few batches as they can. First every kind that shares the machine
# (beside the build above), then the `alone` tests, with nothing else running: turns.txt lists
# which they are, and an `alone` test in the first pass fails, saying to list it. libtest says
# "has been running for over 60 seconds" of tests still waiting for their turn.
alone=($(awk '$2 == "alone" { print $3 }' crates/kiln/tests/e2e/turns.txt))
[ ${#alone[@]} -gt 0 ] || { echo "test.sh: turns.txt lists no alone test" >&2; exit 1; }
(cd crates/kiln && KILN_TEST_PASS=shared "$e2e" --test-threads=256 --exact \
  $(printf -- '--skip %s ' "${alone[@]}")) || status=$?
if ! wait "$build_pid"; then
  cat "$build_log" >&2
  echo "test.sh: building the workspace's tests failed (above)" >&2
  exit 1
fi
cat "$build_log"
(cd crates/kiln && "$e2e" --test-threads=256 --exact "${alone[@]}") || status=$?
# every other test binary of the workspace, one after another as cargo runs them
cargo test --workspace --locked --no-fail-fast || status=$?
exit "$status"
