#!/usr/bin/env bash
# Builds the Python package openmla (its _C binding) for this machine's python3 from python/src, linked
# against a prebuilt libopenmla.a (the kernels, built elsewhere with the same CUDA version): about 30 s
# instead of a full kernel build. Meant for the GPU machine, whose Python differs from the build machine's.
# usage: bash bench/build_python_module.sh LIBOPENMLA_A OUTDIR    (then PYTHONPATH=OUTDIR)
set -euo pipefail
LIB=$(realpath "$1"); OUTDIR=$(realpath -m "$2"); ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d); mkdir -p "$OUTDIR/openmla"
cat > "$WORK/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.24)
project(openmla_python_only LANGUAGES CXX)
find_package(CUDAToolkit REQUIRED)
find_package(Python 3.9 COMPONENTS Interpreter Development.Module REQUIRED)
execute_process(COMMAND "\${Python_EXECUTABLE}" -m nanobind --cmake_dir
                OUTPUT_VARIABLE nanobind_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
find_package(nanobind CONFIG REQUIRED)
nanobind_add_module(_C STABLE_ABI NB_STATIC ${ROOT}/python/src/module.cpp ${ROOT}/python/src/tensor_args.cpp
                    ${ROOT}/python/src/prepared_calls.cpp)
set_target_properties(_C PROPERTIES CXX_STANDARD 20 LIBRARY_OUTPUT_DIRECTORY ${OUTDIR}/openmla)
target_include_directories(_C PRIVATE ${ROOT}/include ${ROOT}/src)
target_link_libraries(_C PRIVATE ${LIB} CUDA::cudart_static)
CMAKE
cmake -S "$WORK" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > "$WORK/configure.log"
cmake --build "$WORK/build" -j "$(nproc)" > "$WORK/build.log" || { tail -30 "$WORK/build.log"; exit 1; }
cp "$ROOT"/python/openmla/*.py "$OUTDIR/openmla/"
echo "openmla built in $OUTDIR"
