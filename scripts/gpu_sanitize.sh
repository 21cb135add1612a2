#!/usr/bin/env bash
# The GPU suite under compute-sanitizer's four tools (memcheck, racecheck,
# initcheck, synccheck), one run per tool; exits non-zero if any tool reports
# an error or the suite fails under it. Logs go to $OUT/<tool>.log and each
# tool's summary line is printed.
#   scripts/gpu_sanitize.sh                         # all four tools, build/tests/openmla_gpu_tests
#   scripts/gpu_sanitize.sh racecheck initcheck     # some tools
#   OPENMLA_GPU_TESTS=devbin/openmla_gpu_tests scripts/gpu_sanitize.sh memcheck   # a carried binary
#   GTEST_FILTER='DecodeDense*' scripts/gpu_sanitize.sh                            # a subset
# Env: OUT (log folder, default /tmp/openmla-sanitize), OPENMLA_SANITIZE_TIMEOUT
# (seconds per tool, default none). The same runs are CTest tests:
#   ctest --test-dir build -L compute_sanitizer --output-on-failure
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
BIN="${OPENMLA_GPU_TESTS:-build/tests/openmla_gpu_tests}"
OUT="${OUT:-/tmp/openmla-sanitize}"; mkdir -p "$OUT"
limit=()
[ -n "${OPENMLA_SANITIZE_TIMEOUT:-}" ] && limit=(timeout "$OPENMLA_SANITIZE_TIMEOUT")
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
status=0
for tool in "${tools[@]}"; do
  start=$(date +%s)
  rc=0
  "${limit[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" --gtest_brief=1 > "$OUT/$tool.log" 2>&1 ||
    rc=$?
  [ "$rc" -ne 0 ] && status=1
  echo "$tool: exit $rc after $(( $(date +%s) - start )) s; $(grep -E 'SUMMARY' "$OUT/$tool.log" | tail -1)"
  grep -E "^\[  (PASSED|FAILED)" "$OUT/$tool.log" | head -5
done
exit "$status"
