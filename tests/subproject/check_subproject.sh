#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# OpenMLA consumed as a subproject (tests/subproject/CMakeLists.txt):
#  1. add_subdirectory, parent build type Debug: configure only (targets, build type).
#  2. FetchContent, no parent build type, the kernel families off, GoogleTest
#     unfindable: configure, build everything the consumer gets, check that no
#     OpenMLA test/bench/demo binary was made, run the consumer.
#  3. OPENMLA_ENABLE_FP16=OFF: no fp16_* object, and the dense dispatch compiles.
# Usage: check_subproject.sh <openmla build dir> <openmla source dir>
set -euo pipefail
build_dir="$1"; source_dir="$2"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt"; }
args=(-G Ninja -DOPENMLA_SOURCE_DIR="$source_dir" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
      -DCMAKE_CUDA_COMPILER="$(cache CMAKE_CUDA_COMPILER)"
      -DOPENMLA_CUTLASS_INCLUDE_DIR="$(cache OPENMLA_CUTLASS_INCLUDE_DIR)")
# Reuse the parent build's compiler launcher (ccache) when it has one.
for launcher in CMAKE_CUDA_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER; do
  value="$(cache "$launcher")"
  [ -n "$value" ] && args+=("-D$launcher=$value")
done

echo "== add_subdirectory, CMAKE_BUILD_TYPE=Debug (configure only)"
cmake -S "$source_dir/tests/subproject" -B "$scratch/sub" "${args[@]}" -DCONSUME_WITH=add_subdirectory \
      -DCMAKE_BUILD_TYPE=Debug >"$scratch/sub.log" 2>&1 || { cat "$scratch/sub.log"; exit 1; }
grep -q "^CMAKE_BUILD_TYPE:STRING=Debug$" "$scratch/sub/CMakeCache.txt" ||
  { echo "the parent's CMAKE_BUILD_TYPE=Debug did not survive"; exit 1; }

echo "== FetchContent, no build type, kernel families off (configure, build, run)"
cmake -S "$source_dir/tests/subproject" -B "$scratch/fetch" "${args[@]}" -DCONSUME_WITH=fetchcontent \
      -DOPENMLA_ENABLE_DENSE_DECODE=OFF -DOPENMLA_ENABLE_SPARSE_DECODE=OFF -DOPENMLA_ENABLE_SPARSE_PREFILL=OFF \
      >"$scratch/fetch.log" 2>&1 ||
  { cat "$scratch/fetch.log"; exit 1; }
if grep -q "^CMAKE_BUILD_TYPE:STRING=." "$scratch/fetch/CMakeCache.txt"; then
  echo "OpenMLA set a CMAKE_BUILD_TYPE the parent left empty"; exit 1
fi
cmake --build "$scratch/fetch" >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
grep -E "^\[[0-9]+/[0-9]+\] (Building|Linking)" "$scratch/build.log" | sed 's/^/  /'
extra="$(find "$scratch/fetch" -type f -executable -name 'openmla_*' -not -name '*.so*')"
if [ -n "$extra" ]; then
  echo "OpenMLA as a subproject built more than the library:"; echo "$extra"; exit 1
fi
"$scratch/fetch/consumer"

# OPENMLA_ENABLE_FP16=OFF: the dense dispatch compiles without the fp16 instantiations
# (its stand-ins name the kernel templates, so a rename must reach them too).
echo "== FP16 off: compile the dense dispatch"
cmake -S "$source_dir/tests/subproject" -B "$scratch/nofp16" "${args[@]}" -DCONSUME_WITH=add_subdirectory \
      -DOPENMLA_ENABLE_FP16=OFF -DOPENMLA_ENABLE_SPARSE_DECODE=OFF -DOPENMLA_ENABLE_SPARSE_PREFILL=OFF \
      >"$scratch/nofp16.log" 2>&1 ||
  { cat "$scratch/nofp16.log"; exit 1; }
if ninja -C "$scratch/nofp16" -t targets all | grep -q '/fp16_[^/]*\.cu\.o:'; then
  echo "OPENMLA_ENABLE_FP16=OFF still compiles fp16_* instantiations"; exit 1
fi
dispatch="$(ninja -C "$scratch/nofp16" -t targets all | sed -n 's#^\(.*decode_dense/launch\.cu\.o\): .*#\1#p')"
[ -n "$dispatch" ] || { echo "no decode_dense/launch.cu object to compile"; exit 1; }
ninja -C "$scratch/nofp16" "$dispatch" >"$scratch/nofp16_build.log" 2>&1 || { cat "$scratch/nofp16_build.log"; exit 1; }
echo "subproject: ok"
