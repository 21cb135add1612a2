#!/usr/bin/env bash
# Install the built tree into a scratch prefix and build a find_package consumer against it.
set -euo pipefail
build_dir="$1"; source_dir="$2"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
# The shared library carries an SONAME libopenmla.so.<major>.<minor>, and version.h is installed.
shared="$(find "$scratch/prefix" -name 'libopenmla.so' | head -1)"
soname="$(readelf -d "$shared" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[[ "$soname" =~ ^libopenmla\.so\.[0-9]+\.[0-9]+$ ]] || { echo "libopenmla.so: SONAME '$soname'"; exit 1; }
[ -f "$scratch/prefix/include/openmla/version.h" ] || { echo "openmla/version.h not installed"; exit 1; }
cmake -S "$source_dir/tests/install" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/build" >/dev/null
"$scratch/build/consumer"
