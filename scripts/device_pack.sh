#!/usr/bin/env bash
# Runs HERE (the build machine), before a call of the device tool: builds OpenMLA and packs
# what scripts/device.sh needs on the GPU machine into git-ignored folders of the repository
# root, which the call then carries. The device tool sends the checkout the session started
# in (not a helper's worktree), so run this in that checkout, or pack into it with --root.
#
#   devbin/   openmla_gpu_tests, openmla_bench, openmla_demo (--dest for another name, e.g.
#             devbin_alt for `scripts/device.sh ab devbin devbin_alt`)
#   .cutlass/ the CuTe / CUTLASS headers (--python: the package is built there, offline)
#   .whl/     scikit-build-core and nanobind wheels at pyproject.toml's pins (--python)
#
# usage: scripts/device_pack.sh [--dest DIR] [--build-dir DIR] [--no-build] [--python]
#                               [--root DIR] [-- CMAKE ARGS]
#   --dest DIR       folder for the binaries, relative to the root (default devbin)
#   --build-dir DIR  build tree to take the binaries from (default ./build); with --no-build it
#                    may be another worktree's, e.g. the base commit's for an A/B
#   --no-build       do not run scripts/build.sh; only copy
#   --python         also pack .cutlass/ and .whl/ (needs pip and the network here, once)
#   --root DIR       repository root to pack into (default: this script's checkout)
#   CMAKE ARGS       passed to scripts/build.sh (e.g. the ccache launchers)
#
# Then, with the device tool: run(command="scripts/device.sh all", carry=["devbin", ".cutlass",
# ".whl"]) or run(command="scripts/device.sh suite", carry=["devbin"]). Carried paths and the
# working tree together travel at most 64 MiB: this script prints what it packed and its size.
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCE_ROOT="$PWD"
ROOT="$PWD"
DEST=devbin
BUILD_DIR=build
BUILD=1
PYTHON_PACK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) DEST="${2:?--dest needs a folder}"; shift 2 ;;
    --build-dir) BUILD_DIR="${2:?--build-dir needs a folder}"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --python) PYTHON_PACK=1; shift ;;
    --root) ROOT="$(cd "${2:?--root needs a folder}" && pwd)"; shift 2 ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "device_pack.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$BUILD" = 1 ]; then
  [ "$BUILD_DIR" = build ] || { echo "device_pack.sh: scripts/build.sh builds ./build; use --no-build with --build-dir" >&2; exit 2; }
  scripts/build.sh "$@"
fi
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$SOURCE_ROOT/$BUILD_DIR" ;; esac

binaries=(tests/openmla_gpu_tests bench/openmla_bench examples/openmla_demo)
mkdir -p "$ROOT/$DEST"
for b in "${binaries[@]}"; do
  [ -x "$BUILD_DIR/$b" ] || { echo "device_pack.sh: $BUILD_DIR/$b not built" >&2; exit 1; }
  cp "$BUILD_DIR/$b" "$ROOT/$DEST/"
done
carry=("$DEST")

if [ "$PYTHON_PACK" = 1 ]; then
  cutlass_dir="${OPENMLA_CUTLASS_INCLUDE_DIR:-}"
  [ -n "$cutlass_dir" ] || cutlass_dir=$(sed -n 's/^OPENMLA_CUTLASS_INCLUDE_DIR:PATH=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
  [ -f "$cutlass_dir/cute/tensor.hpp" ] || { echo "device_pack.sh: CuTe headers not found (set OPENMLA_CUTLASS_INCLUDE_DIR)" >&2; exit 1; }
  rm -rf "$ROOT/.cutlass" && mkdir -p "$ROOT/.cutlass"
  cp -r "$cutlass_dir/cute" "$cutlass_dir/cutlass" "$ROOT/.cutlass/"
  # The build requirements pyproject.toml pins, less nvidia-cutlass (its headers are .cutlass/).
  mapfile -t pins < <(grep -o '"[a-z-]*==[0-9.]*"' "$SOURCE_ROOT/pyproject.toml" | tr -d '"' | grep -v '^nvidia-cutlass==')
  mkdir -p "$ROOT/.whl"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$ROOT/.whl" "${pins[@]}"
  carry+=(.cutlass .whl)
fi

total=$(du -scm "${carry[@]/#/$ROOT/}" | tail -1 | cut -f1)
du -sh "${carry[@]/#/$ROOT/}"
printf 'device_pack.sh: carry ['; printf '"%s", ' "${carry[@]}" | sed 's/, $//'; printf '] (%s MiB; the call carries at most 64 MiB with the working tree)\n' "$total"
[ "$total" -lt 60 ] || echo "device_pack.sh: WARNING: ${total} MiB is close to or over the 64 MiB limit" >&2
