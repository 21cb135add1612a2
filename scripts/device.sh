#!/usr/bin/env bash
# Runs on the GPU machine: the GPU test suite, compute-sanitizer, the bench, ncu profiles,
# A/B timing of two builds and the Python package's tests. `scripts/device.sh --help` lists
# the subcommands, options and environment variables.
#
# The GPU machine gets a copy of the repository and nothing built: build and pack here with
# scripts/device_pack.sh (binaries into devbin/, and for `python` the CuTe headers in .cutlass/
# and the build wheels in .whl/), then carry those paths with the call. See scripts/device_pack.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() {
  cat <<'EOF'
usage: scripts/device.sh [--bin DIR] [--out DIR] [--filter GTEST_FILTER] SUBCOMMAND [ARGS]

Runs on the GPU machine, from the repository root, with the binaries that
scripts/device_pack.sh put in DIR (default devbin: openmla_gpu_tests, openmla_bench,
openmla_demo). Logs and results go to the output folder: --out, else $OUT (set by the
device tool; what is written there comes back, at most 8 files), else /tmp/openmla-out.
Exit status: 0 when every step passed, 1 otherwise.

Subcommands
  suite [GTEST_FILTER]          the GPU test suite (gtest filter: argument, --filter or
                                SUITE_FILTER; default all)                -> gpu_tests.log
  sanitize [TOOL...]            compute-sanitizer --error-exitcode over the GPU suite; TOOL is
                                memcheck (default), racecheck, initcheck, synccheck or all.
                                Every tool runs at once, each in SANITIZE_SHARDS gtest shards.
                                Tests: --filter, else <TOOL>_FILTER (MEMCHECK_FILTER, ...),
                                else SANITIZE_FILTER, else the whole suite (racecheck: all but
                                the big shapes, below)                     -> <tool>.log
  demo                          the demo decode step                       -> demo.log
  bench [FILTER] [-- ARGS]      the bench, JSON and text. FILTER is a case-name substring;
                                several separated by '|' run one after another into one
                                JSON. ARGS go to openmla_bench (--iters, --warmup-ms,
                                --min-part-cost ...)                       -> bench.json, bench.log
  profile CASE [-- ARGS]        ncu of one bench case (--set full, SASS-level stall samples):
                                PROFILE_KERNEL (ncu -k, default 'regex:decode_'),
                                PROFILE_SET (default full), PROFILE_SKIP (launches skipped,
                                default 3), PROFILE_COUNT (launches profiled, default 1),
                                PROFILE_NCU_ARGS (more ncu options). ARGS go to the bench.
                                -> profile.ncu-rep, profile_details.txt, profile_raw.csv,
                                   profile_source.csv
  ab DIR_A DIR_B [FILTER]       A/B of two builds' bench in alternating rounds (A B, B A, ...)
                                in one process per build and case, so the ratio compares runs
                                of one round (the clock drifts with power between rounds).
                                FILTER: bench case substrings separated by '|' (default
                                AB_FILTER, else the three bar cases below). ROUNDS (default 3),
                                AB_ITERS (default 20), AB_MODE=time (bench µs, default) or
                                cycles (ncu gpc__cycles_elapsed.max of AB_KERNEL, default
                                'regex:decode_', median of 3 launches). AB_TEST_FILTER: run each
                                build's GPU tests with this filter first (default: none).
                                -> ab.txt, ab.json
  python                        builds the package here (pip install --no-build-isolation .,
                                CuTe headers from .cutlass/ unless OPENMLA_CUTLASS_INCLUDE_DIR
                                is set, build wheels from .whl/ if present) and runs
                                python/tests                               -> python.log
  all                           suite, memcheck, racecheck, demo, python, bench (full), in that
                                order; ALL_STEPS picks a subset ("suite memcheck racecheck demo
                                python bench"). Racecheck there uses RACECHECK_FILTER, default
                                a subset (below): racecheck over the whole suite is slow.

Options
  --bin DIR      folder with the binaries (default: OPENMLA_BIN, else devbin)
  --out DIR      output folder (default: OUT, else /tmp/openmla-out)
  --filter F     gtest filter for suite and sanitize
  -h, --help     this text

Environment
  STEP_TIMEOUT      seconds each step may run (default 300)
  SANITIZE_TIMEOUT  seconds each sanitizer shard may take (default 400)
  SANITIZE_SHARDS   gtest shards per sanitizer tool, run side by side (default 6)
  The device tool stops a whole call after at most 600 s: split long work across calls.

Defaults that name cases or tests (override them as above)
  ab FILTER:         dense b=128 h_q=128 s_q=2 s_k=16384~ p=64|dense b=128 h_q=16 s_q=1
                     s_k=16384~ p=64|dense b=1 h_q=16 s_q=1 s_k=1024 graph
  sanitize racecheck: tests/gpu/racecheck_default_filter.txt (all but the big shapes)
  all, racecheck:    *DecodeDense*heads_b3_sq2_hq16_*:*DecodeDense*heads_b3_sq2_hq64_*:
                     *DecodeDense*sq_b2_sq67*:*DecodeDense*lengths*:*Sparse*h16*:*Combine*

Examples (device tool `run`, carry ["devbin"]; for python also ".cutlass" and ".whl")
  scripts/device.sh suite
  scripts/device.sh --filter '*Sparse*' sanitize memcheck racecheck
  scripts/device.sh bench 'sparse|graph'
  scripts/device.sh bench graph -- --min-part-cost 2
  scripts/device.sh profile 'dense b=128 h_q=128 s_q=2 s_k=16384~ p=64'
  PROFILE_KERNEL='regex:decode|schedule|combine' PROFILE_SET=basic PROFILE_COUNT=3 \
    scripts/device.sh profile 'b=1 h_q=16 s_q=1 s_k=1024 graph'
  ROUNDS=4 scripts/device.sh ab devbin devbin_alt 'h_q=128 s_q=2 s_k=16384~'
  AB_MODE=cycles scripts/device.sh ab devbin devbin_alt
  ALL_STEPS="suite memcheck bench" scripts/device.sh all
EOF
}

BIN="${OPENMLA_BIN:-devbin}"
OUT_DIR="${OUT:-/tmp/openmla-out}"
GTEST_FILTER_OPT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="${2:?--bin needs a folder}"; shift 2 ;;
    --out) OUT_DIR="${2:?--out needs a folder}"; shift 2 ;;
    --filter) GTEST_FILTER_OPT="${2:?--filter needs a gtest filter}"; shift 2 ;;
    -h|--help|help) usage; exit 0 ;;
    -*) echo "device.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
SUBCOMMAND="$1"; shift
case "$SUBCOMMAND" in suite|sanitize|demo|bench|profile|ab|python|all) ;;
  *) echo "device.sh: unknown subcommand '$SUBCOMMAND' (see --help)" >&2; exit 2 ;;
esac

STEP_TIMEOUT="${STEP_TIMEOUT:-300}"
SANITIZE_TIMEOUT="${SANITIZE_TIMEOUT:-400}"
DEFAULT_AB_FILTER="dense b=128 h_q=128 s_q=2 s_k=16384~ p=64|dense b=128 h_q=16 s_q=1 s_k=16384~ p=64|dense b=1 h_q=16 s_q=1 s_k=1024 graph"
# racecheck takes minutes per test on the big shapes (batch-invariance sweeps, b = 32768, s_q = 213 and
# 4096 prefill, a million KV rows, the FP8 field prompts): they run the same kernels as the small cases.
# The filter that leaves them out is shared with CTest (tests/CMakeLists.txt).
DEFAULT_RACECHECK_FILTER="$(head -n 1 tests/gpu/racecheck_default_filter.txt)"
DEFAULT_ALL_RACECHECK_FILTER="*DecodeDense*heads_b3_sq2_hq16_*:*DecodeDense*heads_b3_sq2_hq64_*:*DecodeDense*sq_b2_sq67*:*DecodeDense*lengths*:*Sparse*h16*:*Combine*"
SCRATCH="${TMPDIR:-/tmp}/openmla-device.$$"
FAILED=()

# ---- preamble: output folder, cuBLAS on the library path (the bench links it), the GPU ----
mkdir -p "$OUT_DIR" "$SCRATCH"
trap 'rm -rf "$SCRATCH"' EXIT
cublas=$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)
if [ -n "$cublas" ]; then
  LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; export LD_LIBRARY_PATH
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null ||
  echo "device.sh: nvidia-smi gave no answer"
if [ "$SUBCOMMAND" = ab ]; then echo "device.sh ab: output to $OUT_DIR"
else echo "device.sh $SUBCOMMAND: binaries from $BIN/, output to $OUT_DIR"; fi

# ---- helpers ----
note_rc() {  # note_rc NAME RC: print the step's exit status and remember failures
  echo "$1 rc=$2"
  [ "$2" -eq 0 ] || FAILED+=("$1")
}
need_bin() {  # need_bin DIR NAME: the binary must have been packed
  [ -x "$1/$2" ] && return 0
  echo "device.sh: $1/$2 not found: build and pack with scripts/device_pack.sh, carry '$1'" >&2
  return 1
}
gtest_filter_args() {  # gtest_filter_args FILTER: prints --gtest_filter=FILTER when one is set
  [ -n "$1" ] && printf -- '--gtest_filter=%s\n' "$1"
  return 0
}

# ---- subcommands ----
run_suite() {  # run_suite [FILTER]
  need_bin "$BIN" openmla_gpu_tests || { FAILED+=(suite); return; }
  local filter="${1:-${GTEST_FILTER_OPT:-${SUITE_FILTER:-}}}"
  local args; mapfile -t args < <(gtest_filter_args "$filter")
  timeout "$STEP_TIMEOUT" "$BIN/openmla_gpu_tests" --gtest_brief=1 "${args[@]}" > "$OUT_DIR/gpu_tests.log" 2>&1
  note_rc "suite${filter:+ ($filter)}" $?
  grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" "$OUT_DIR/gpu_tests.log" | head -12
}

run_sanitize() {  # run_sanitize TOOL...: every tool at once, each in SANITIZE_SHARDS gtest shards
  need_bin "$BIN" openmla_gpu_tests || { FAILED+=(sanitize); return; }
  command -v compute-sanitizer >/dev/null || { echo "device.sh: compute-sanitizer not on PATH" >&2; FAILED+=(sanitize); return; }
  local tools=("$@"); [ ${#tools[@]} -gt 0 ] || tools=(memcheck)
  [ "${tools[*]}" = all ] && tools=(memcheck racecheck initcheck synccheck)
  local shards="${SANITIZE_SHARDS:-6}" tool i started=()
  for tool in "${tools[@]}"; do
    case "$tool" in memcheck|racecheck|initcheck|synccheck) ;; *)
      echo "device.sh: unknown sanitizer tool '$tool' (memcheck, racecheck, initcheck, synccheck, all)" >&2
      FAILED+=("$tool"); continue ;;
    esac
    local var; var="$(echo "$tool" | tr '[:lower:]' '[:upper:]')_FILTER"
    local fallback="${SANITIZE_FILTER:--*ProvokesApiError*}"  # tests/CMakeLists.txt: the tools report those
    [ "$tool" = racecheck ] && fallback="${SANITIZE_FILTER:-$DEFAULT_RACECHECK_FILTER}"
    local filter="${GTEST_FILTER_OPT:-${!var:-$fallback}}"
    local args; mapfile -t args < <(gtest_filter_args "$filter")
    echo "$tool: $shards shards${filter:+, filter $filter}"
    for i in $(seq 0 $((shards - 1))); do
      # One line per test (no --gtest_brief): a shard cut by the timeout shows where it was.
      ( GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$SANITIZE_TIMEOUT" \
          compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
          "$BIN/openmla_gpu_tests" "${args[@]}" > "$SCRATCH/$tool.$i.log" 2>&1
        echo $? > "$SCRATCH/$tool.$i.rc" ) &
    done
    started+=("$tool")
  done
  wait
  for tool in "${started[@]}"; do
    local rc=0 passed=0 errors=0 shard_rc
    : > "$OUT_DIR/$tool.log"
    for i in $(seq 0 $((shards - 1))); do
      shard_rc=$(cat "$SCRATCH/$tool.$i.rc" 2>/dev/null || echo 1)
      [ "$shard_rc" -eq 0 ] || rc=$shard_rc
      { echo "==== $tool shard $i of $shards: rc=$shard_rc"; cat "$SCRATCH/$tool.$i.log"; } >> "$OUT_DIR/$tool.log"
      passed=$((passed + $(grep -oE '^\[  PASSED  \] [0-9]+' "$SCRATCH/$tool.$i.log" | grep -oE '[0-9]+$' || echo 0)))
      errors=$((errors + $(grep -oE '(ERROR SUMMARY: |RACECHECK SUMMARY: )[0-9]+' "$SCRATCH/$tool.$i.log" | grep -oE '[0-9]+$' || echo 0)))
    done
    note_rc "$tool${GTEST_FILTER_OPT:+ ($GTEST_FILTER_OPT)}" "$rc"
    echo "  $tool: $passed tests passed, $errors errors or hazards ($OUT_DIR/$tool.log)"
  done
}

run_demo() {
  need_bin "$BIN" openmla_demo || { FAILED+=(demo); return; }
  timeout 60 "$BIN/openmla_demo" > "$OUT_DIR/demo.log" 2>&1
  note_rc demo $?
  tail -3 "$OUT_DIR/demo.log"
}

merge_bench_json() {  # merge_bench_json OUT.json IN.json...: one header, every run's cases
  python3 - "$@" <<'PY'
import json, sys
out, parts = sys.argv[1], sys.argv[2:]
merged = None
for path in parts:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        continue
    if merged is None:
        merged = data
    else:
        merged["cases"].extend(data.get("cases", []))
if merged is not None:
    with open(out, "w") as f:
        json.dump(merged, f, indent=1)
PY
}

run_bench() {  # run_bench [FILTER] [-- BENCH ARGS]
  need_bin "$BIN" openmla_bench || { FAILED+=(bench); return; }
  local filters=""
  if [ $# -gt 0 ] && [ "$1" != "--" ]; then filters="$1"; shift; fi
  [ "${1:-}" = "--" ] && shift
  local parts=() list i=0 rc_all=0 f
  IFS='|' read -ra list <<< "$filters"
  [ ${#list[@]} -gt 0 ] || list=("")
  : > "$OUT_DIR/bench.log"
  for f in "${list[@]}"; do
    i=$((i + 1))
    local filter_args=(); [ -n "$f" ] && filter_args=(--filter "$f")
    timeout "$STEP_TIMEOUT" "$BIN/openmla_bench" "${filter_args[@]}" --json "$SCRATCH/bench_$i.json" "$@" \
      >> "$OUT_DIR/bench.log" 2>&1 || rc_all=$?
    parts+=("$SCRATCH/bench_$i.json")
  done
  merge_bench_json "$OUT_DIR/bench.json" "${parts[@]}"
  note_rc "bench${filters:+ ($filters)}" "$rc_all"
  grep -E "^device|^dense|^sparse" "$OUT_DIR/bench.log"
}

run_profile() {  # run_profile CASE [-- BENCH ARGS]
  need_bin "$BIN" openmla_bench || { FAILED+=(profile); return; }
  if [ $# -eq 0 ] || [ "$1" = "--" ]; then
    echo "device.sh profile: needs a bench case filter (see --help)" >&2; FAILED+=(profile); return
  fi
  local case_filter="$1"; shift
  [ "${1:-}" = "--" ] && shift
  command -v ncu >/dev/null || { echo "device.sh: ncu not on PATH" >&2; FAILED+=(profile); return; }
  local extra=(); read -ra extra <<< "${PROFILE_NCU_ARGS:-}"
  local rep="$OUT_DIR/profile"
  # --clock-control none: the device machine's clocks are left as they are.
  timeout "$STEP_TIMEOUT" ncu --clock-control none --set "${PROFILE_SET:-full}" --import-source no \
    --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg \
    -k "${PROFILE_KERNEL:-regex:decode_}" --launch-skip "${PROFILE_SKIP:-3}" --launch-count "${PROFILE_COUNT:-1}" \
    "${extra[@]}" -f -o "$rep" "$BIN/openmla_bench" --filter "$case_filter" --iters 20 "$@" > "$SCRATCH/ncu.run" 2>&1
  note_rc "profile ($case_filter)" $?
  tail -3 "$SCRATCH/ncu.run"
  [ -f "$rep.ncu-rep" ] || return
  ncu -i "$rep.ncu-rep" --page details > "$OUT_DIR/profile_details.txt" 2>&1
  ncu -i "$rep.ncu-rep" --page raw --csv > "$OUT_DIR/profile_raw.csv" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT_DIR/profile_source.csv" 2>&1
  grep -E "^  [a-z_].*\(|Duration|Throughput|Hit Rate|Warp Cycles Per Issued|Issue Slots Busy|Tensor|Executed Ipc|sm__cycles_active" \
    "$OUT_DIR/profile_details.txt" | cut -c1-140 | head -40
}

run_ab() {  # run_ab DIR_A DIR_B [FILTER]
  [ $# -ge 2 ] || { echo "device.sh ab: needs two binary folders (see --help)" >&2; FAILED+=(ab); return; }
  local dir_a="$1" dir_b="$2" filters="${3:-${AB_FILTER:-$DEFAULT_AB_FILTER}}"
  local mode="${AB_MODE:-time}" rounds="${ROUNDS:-3}" iters="${AB_ITERS:-20}"
  if ! need_bin "$dir_a" openmla_bench || ! need_bin "$dir_b" openmla_bench; then FAILED+=(ab); return; fi
  case "$mode" in time) ;; cycles) command -v ncu >/dev/null || { echo "device.sh: ncu not on PATH" >&2; FAILED+=(ab); return; } ;;
    *) echo "device.sh ab: AB_MODE is time or cycles, got '$mode'" >&2; FAILED+=(ab); return ;;
  esac
  local d cases c r
  if [ -n "${AB_TEST_FILTER:-}" ]; then
    for d in "$dir_a" "$dir_b"; do
      need_bin "$d" openmla_gpu_tests || { FAILED+=("ab tests $d"); continue; }
      # One line per test, so a hang shows which test it was.
      timeout "$STEP_TIMEOUT" "$d/openmla_gpu_tests" --gtest_filter="$AB_TEST_FILTER" > "$SCRATCH/tests.log" 2>&1
      note_rc "ab tests $d ($AB_TEST_FILTER)" $?
      grep -E "^\[  (PASSED|FAILED)" "$SCRATCH/tests.log" | head -3
      tail -1 "$SCRATCH/tests.log" | cut -c1-150
    done
  fi
  IFS='|' read -ra cases <<< "$filters"
  local records="$SCRATCH/ab_records.tsv"; : > "$records"
  for r in $(seq "$rounds"); do
    local order=("$dir_a" "$dir_b")
    [ $((r % 2)) -eq 0 ] && order=("$dir_b" "$dir_a")
    for d in "${order[@]}"; do
      for c in "${cases[@]}"; do
        local tag; tag=$(printf '%s' "$d-$c-$r" | tr -c 'A-Za-z0-9' '_')
        if [ "$mode" = time ]; then
          timeout 120 "$d/openmla_bench" --filter "$c" --iters "$iters" --json "$SCRATCH/$tag.json" > "$SCRATCH/$tag.log" 2>&1 ||
            echo "ab: $d '$c' round $r rc=$?"
          python3 - "$SCRATCH/$tag.json" "$r" "$d" >> "$records" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(0)
for case in data.get("cases", []):
    print(f"{sys.argv[2]}\t{sys.argv[3]}\t{case['case']}\t{case['us']}\t{case.get('sm_mhz', 0)}")
PY
        else
          timeout 180 ncu --clock-control none --metrics gpc__cycles_elapsed.max \
            -k "${AB_KERNEL:-regex:decode_}" --launch-skip 2 --launch-count 3 --csv \
            "$d/openmla_bench" --filter "$c" --iters 20 > "$SCRATCH/$tag.csv" 2> "$SCRATCH/$tag.err" ||
            echo "ab: ncu $d '$c' round $r rc=$?"
          python3 - "$SCRATCH/$tag.csv" "$r" "$d" "$c" >> "$records" <<'PY'
import csv, statistics, sys
rows = [row for row in csv.reader(open(sys.argv[1])) if len(row) > 10]
if rows:
    header, data = rows[0], rows[1:]
    name, value = header.index("Metric Name"), header.index("Metric Value")
    cycles = [float(row[value].replace(",", "")) for row in data if row[name] == "gpc__cycles_elapsed.max"]
    if cycles:
        print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{statistics.median(cycles)}\t0")
PY
        fi
      done
    done
  done
  python3 - "$records" "$dir_a" "$dir_b" "$mode" "$OUT_DIR/ab.json" > "$OUT_DIR/ab.txt" <<'PY'
import collections, json, statistics, sys
records, dir_a, dir_b, mode, json_out = sys.argv[1:6]
unit = "us" if mode == "time" else "cycles"
values = collections.defaultdict(dict)  # (case, round) -> {dir: value}
for line in open(records):
    rnd, d, case, value, _ = line.rstrip("\n").split("\t")
    values[(case, int(rnd))][d] = float(value)
cases = list(dict.fromkeys(case for case, _ in values))  # in the order first run
summary = []
print(f"A = {dir_a}, B = {dir_b}; {unit}, lower is better; ratio = B / A within a round")
for case in cases:
    rounds = sorted(r for c, r in values if c == case)
    a = [values[(case, r)].get(dir_a) for r in rounds]
    b = [values[(case, r)].get(dir_b) for r in rounds]
    ratios = [y / x for x, y in zip(a, b) if x and y]
    row = {"case": case, "unit": unit, "a": a, "b": b, "ratios": ratios,
           "median_ratio": statistics.median(ratios) if ratios else None}
    summary.append(row)
    fmt = lambda v: "-" if v is None else (f"{v:.2f}" if unit == "us" else f"{v:,.0f}")
    print(f"{case}")
    print(f"  A {' '.join(fmt(v) for v in a)}")
    print(f"  B {' '.join(fmt(v) for v in b)}")
    print(f"  B/A {' '.join(f'{x:.3f}' for x in ratios)}"
          + (f"  median {row['median_ratio']:.3f}" if ratios else "  (no pair)"))
json.dump({"a": dir_a, "b": dir_b, "mode": mode, "cases": summary}, open(json_out, "w"), indent=1)
PY
  note_rc "ab ($mode, $rounds rounds)" $?
  cat "$OUT_DIR/ab.txt"
}

run_python() {
  local log="$OUT_DIR/python.log"; : > "$log"
  if [ -z "${OPENMLA_CUTLASS_INCLUDE_DIR:-}" ] && [ -f .cutlass/cute/tensor.hpp ]; then
    export OPENMLA_CUTLASS_INCLUDE_DIR="$PWD/.cutlass"
  fi
  local rc=0
  if [ -d .whl ]; then  # scikit-build-core / nanobind at the versions pyproject.toml names (the machine is offline)
    python3 -m pip install --no-index --find-links .whl scikit-build-core nanobind >> "$log" 2>&1 || rc=$?
  fi
  [ "$rc" -eq 0 ] && { CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" timeout "$STEP_TIMEOUT" \
      python3 -m pip install --no-build-isolation --no-deps . >> "$log" 2>&1 || rc=$?; }
  note_rc "python: pip install" "$rc"
  [ "$rc" -eq 0 ] || { tail -20 "$log"; return; }
  # From /tmp, so `import openmla` finds the installed package, not python/openmla.
  local repo="$PWD"
  (cd /tmp && timeout "$STEP_TIMEOUT" python3 -m pytest -q -p no:cacheprovider "$repo/python/tests" >> "$log" 2>&1)
  rc=$?
  [ "$rc" -eq 5 ] && echo "device.sh: pytest ran no test" >> "$log"
  note_rc "python: pytest" "$rc"
  tail -3 "$log"
}

run_all() {
  local steps=(); read -ra steps <<< "${ALL_STEPS:-suite memcheck racecheck demo python bench}"
  local step
  for step in "${steps[@]}"; do
    case "$step" in
      suite) run_suite ;;
      memcheck) MEMCHECK_FILTER="${MEMCHECK_FILTER:-}" run_sanitize memcheck ;;
      racecheck) RACECHECK_FILTER="${RACECHECK_FILTER:-$DEFAULT_ALL_RACECHECK_FILTER}" run_sanitize racecheck ;;
      initcheck|synccheck) run_sanitize "$step" ;;
      demo) run_demo ;;
      python) run_python ;;
      bench) run_bench ;;
      *) echo "device.sh all: unknown step '$step'" >&2; FAILED+=("$step") ;;
    esac
  done
}

case "$SUBCOMMAND" in
  suite) run_suite "$@" ;;
  sanitize) run_sanitize "$@" ;;
  demo) run_demo ;;
  bench) run_bench "$@" ;;
  profile) run_profile "$@" ;;
  ab) run_ab "$@" ;;
  python) run_python ;;
  all) run_all ;;
esac

if [ ${#FAILED[@]} -gt 0 ]; then
  echo "device.sh $SUBCOMMAND: FAILED: ${FAILED[*]}"
  exit 1
fi
echo "device.sh $SUBCOMMAND: all steps passed"
