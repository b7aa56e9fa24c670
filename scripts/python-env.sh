#!/usr/bin/env bash
# The Python environment the query analyzer's end-to-end tests run their instrumented app in
# (and the Kubernetes manifest validator the k8s test runs):
# Flask, psycopg and redis-py under the OpenTelemetry SDK, grpcio for the gRPC tests, and
# kiln's own span processor (agents/python). Made once in target/pyenv (inside the repo,
# removed by cargo clean); made again when this script or the requirements change.
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir=target/pyenv
stamp="$env_dir/.kiln-stamp"
want="$(cat scripts/python-env.sh scripts/python-requirements.txt agents/python/pyproject.toml agents/python/kiln_otel_stacks/*.py | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$env_dir"
python3 -m venv "$env_dir"
"$env_dir/bin/pip" install -q --disable-pip-version-check -r scripts/python-requirements.txt
"$env_dir/bin/pip" install -q --disable-pip-version-check --no-deps ./agents/python
echo "$want" > "$stamp"
