#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The stable ABI for real: build openmla._C with one CPython minor version
# (3.12) and load it with another (3.13). Exits 77 (CTest: skipped) only when
# the two interpreters are missing (pyenv: /root/.pyenv/versions/3.12.*, 3.13.*).
# Usage: check_abi3.sh <openmla build dir> <openmla source dir> <version>
set -euo pipefail
build_dir="$1"; source_dir="$2"; version="$3"
pyenv_root="${PYENV_ROOT:-/root/.pyenv}"

find_python() {  # newest pyenv CPython <minor>, else python<minor> on PATH
  local found
  found="$(ls -d "$pyenv_root"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -1 || true)"
  [ -z "$found" ] && found="$(command -v "python$1" || true)"
  echo "$found"
}
build_python="$(find_python 3.12)"; load_python="$(find_python 3.13)"
if [ -z "$build_python" ] || [ -z "$load_python" ]; then
  echo "SKIPPED: the abi3 check needs CPython 3.12 and 3.13 (got '${build_python:-none}', '${load_python:-none}')"
  exit 77
fi
[ -f "$build_dir/libopenmla.a" ] || { echo "no $build_dir/libopenmla.a: build OpenMLA first"; exit 1; }

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt"; }
# nanobind's CMake files do not depend on the Python version: take the build's.
nanobind_dir="$(cache NB_DIR)/cmake"
[ -f "$nanobind_dir/nanobind-config.cmake" ] ||
  nanobind_dir="$("$build_python" -m nanobind --cmake_dir 2>/dev/null || true)"
args=(-G Ninja -DOPENMLA_SOURCE_DIR="$source_dir" -DOPENMLA_BUILD_DIR="$build_dir" -DOPENMLA_VERSION="$version"
      -DPython_EXECUTABLE="$build_python" -Dnanobind_DIR="$nanobind_dir" -DCMAKE_BUILD_TYPE=Release)
launcher="$(cache CMAKE_CXX_COMPILER_LAUNCHER)"
[ -n "$launcher" ] && args+=("-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher")

echo "== build openmla._C with $("$build_python" -V)"
cmake -S "$source_dir/tests/abi3" -B "$scratch/build" "${args[@]}" >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; exit 1; }
grep "openmla._C is" "$scratch/configure.log" || true
cmake --build "$scratch/build" >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
module="$(ls "$scratch"/build/python/openmla/_C*.so)"
echo "built $(basename "$module")"
case "$(basename "$module")" in
  _C.abi3.so) ;;
  *) echo "expected _C.abi3.so (stable ABI), got $(basename "$module")"; exit 1 ;;
esac

echo "== load it with $("$load_python" -V)"
# The module alone (the package's __init__ imports torch, which 3.13 may lack here).
"$load_python" - "$module" <<'PY'
import importlib.machinery, importlib.util, sys
path = sys.argv[1]
loader = importlib.machinery.ExtensionFileLoader("_C", path)
spec = importlib.util.spec_from_file_location("_C", path, loader=loader)
module = importlib.util.module_from_spec(spec)
loader.exec_module(module)
assert module.HEAD_DIM_QK == 576 and module.HEAD_DIM_V == 512, (module.HEAD_DIM_QK, module.HEAD_DIM_V)
print(f"imported {path.rsplit('/', 1)[-1]} on CPython {sys.version.split()[0]}: HEAD_DIM_QK = {module.HEAD_DIM_QK}")
PY
echo "abi3: ok"
