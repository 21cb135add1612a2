#!/usr/bin/env bash
# Installs everything OpenMLA needs on a fresh Debian machine; safe to re-run.
#   apt: cmake, ninja, g++, GoogleTest      pip: nvidia-cutlass==4.2.0.0 (CuTe headers)
# The CUDA 13 toolkit (nvcc) must already be installed (it is not an apt package here).
set -euo pipefail

CUTLASS_VERSION="4.2.0.0"
APT_PACKAGES=(cmake ninja-build g++ libgtest-dev python3-pip)

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} (of ${APT_PACKAGES[*]}) with apt"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if ! python3 -m pip show nvidia-cutlass 2>/dev/null | grep -q "^Version: ${CUTLASS_VERSION}$"; then
  echo "setup: installing nvidia-cutlass==${CUTLASS_VERSION} (CuTe/CUTLASS headers) with pip"
  python3 -m pip install -q --no-deps "nvidia-cutlass==${CUTLASS_VERSION}" ||
    python3 -m pip install -q --no-deps --break-system-packages "nvidia-cutlass==${CUTLASS_VERSION}"
fi

if ! command -v nvcc >/dev/null; then
  for dir in /usr/local/cuda/bin /usr/local/cuda-13/bin; do
    [ -x "$dir/nvcc" ] && export PATH="$dir:$PATH" && break
  done
fi
command -v nvcc >/dev/null || { echo "setup: nvcc (CUDA 13 toolkit) not found; install the CUDA toolkit first" >&2; exit 1; }
echo "setup: ok ($(nvcc --version | tail -1), $(cmake --version | head -1))"
