#!/usr/bin/env bash
# The fast tier, for every change: format, lint, and every test that starts no target, runtime
# or browser (the libraries' unit tests and fixture tests). The end-to-end tests
# (crates/kiln/tests/e2e, which need what scripts/test.sh installs) are left to the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
# no module of a crate imports another that imports it back
python3 scripts/module-cycles.py
cargo clippy --workspace --all-targets --locked -- -D warnings
# the end-to-end binary is no default test target (crates/kiln/Cargo.toml), so --all-targets
# leaves it out
cargo clippy -p kiln --test e2e --locked -- -D warnings
cargo test --workspace --locked --lib --bins \
  --test check --test har --test analysis --test fingerprint_golden --test readers_fuzz \
  --test statistics --test records_of_v1 --test many_shards --test corpus
