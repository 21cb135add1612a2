#!/usr/bin/env bash
# README command (b): set up, build and run the tests. Without a GPU only the
# label `cpu` runs; with one, pass `gpu` (or `all`) as the first argument.
# The C++ suites run under ctest, the Python package's under pytest
# (python/tests, against openmla._C built in ./build: the library compiles once).
# `all` leaves out the compute-sanitizer entries (label sanitize): `ctest -L sanitize`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup_python.sh
scripts/build.sh -DOPENMLA_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v "${PYTHON:-python3}")"
label="${1:-cpu}"
if [ "$label" = "all" ]; then
  ctest --test-dir build --output-on-failure -j "$(nproc)" -LE sanitize  # sanitizers: ctest -L sanitize
  markers=()
else
  ctest --test-dir build --output-on-failure -j "$(nproc)" -L "$label"
  if [ "$label" = "gpu" ]; then markers=(-m gpu); else markers=(-m "not gpu"); fi
fi

# pytest exits 5 when it ran no test: that must fail too.
status=0
PYTHONPATH="$PWD/build/python" "${PYTHON:-python3}" -m pytest python/tests -q -p no:cacheprovider "${markers[@]}" ||
  status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest ran no test" >&2
  exit 1
fi
exit "$status"
