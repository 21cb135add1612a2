#!/usr/bin/env bash
# The GPU suite under all four compute-sanitizer tools (memcheck, racecheck,
# initcheck, synccheck), one after another; exits non-zero if any reports.
# Needs the normal build (scripts/build.sh); run on the GPU machine:
#   scripts/gpu_sanitize.sh                     # the whole suite, every tool
#   scripts/gpu_sanitize.sh racecheck           # one tool
#   GTEST_FILTER='DecodeDense*' scripts/gpu_sanitize.sh
# The same runs are CTest tests: ctest --test-dir build -L gpu_sanitize
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
status=0
for tool in "${tools[@]}"; do
  echo "=== compute-sanitizer --tool $tool ==="
  start=$(date +%s)
  rc=0
  compute-sanitizer --tool "$tool" --error-exitcode 1 build/tests/openmla_gpu_tests || rc=$?
  [ "$rc" -ne 0 ] && status=1
  echo "=== $tool: exit $rc after $(( $(date +%s) - start )) s ==="
done
exit "$status"
