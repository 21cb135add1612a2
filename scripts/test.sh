#!/usr/bin/env bash
# README command (b): set up, build and run the tests. Without a GPU only the
# label `cpu` runs; with one, pass `gpu` (or `all`) as the first argument.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
label="${1:-cpu}"
if [ "$label" = "all" ]; then
  ctest --test-dir build --output-on-failure -j "$(nproc)"
else
  ctest --test-dir build --output-on-failure -j "$(nproc)" -L "$label"
fi
