#!/usr/bin/env bash
# Builds wrk2 (Gil Tene's constant-throughput wrk, the open-model tool kiln's generator is
# compared with) into bench/.tools/bin/wrk2. It is in no package registry: from a checkout
# of github.com/giltene/wrk2 given as the argument (a path or URL git can clone), else from
# GitHub.
#   bash bench/wrk2.sh [SOURCE]
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$PWD/bench/.tools/bin/wrk2"
[ -x "$dest" ] && exit 0
src="${1:-https://github.com/giltene/wrk2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/wrk2"
make -C "$work/wrk2" -j2 >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
mkdir -p "$(dirname "$dest")"
cp "$work/wrk2/wrk" "$dest"
echo "wrk2 built: $dest ($(git -C "$work/wrk2" rev-parse --short HEAD))"
