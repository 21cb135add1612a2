#!/usr/bin/env bash
# Installs what the Python package's tests need, if missing; safe to re-run.
#   pip: torch (CPU machines get PyPI's default build), nanobind==2.9.2 (builds
#   openmla._C inside ./build), pytest, numpy, matplotlib (bench/plot.py and its test).
# `pip install .` itself needs none of these beforehand (pyproject.toml lists its
# build requirements); this is for the build-tree variant that scripts/test.sh uses.
set -euo pipefail
PY="${PYTHON:-python3}"
NANOBIND_VERSION="2.9.2"

pip_install() {
  "$PY" -m pip install -q "$@" || "$PY" -m pip install -q --break-system-packages "$@"
}

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "setup_python: installing torch>=2.4 with pip"
  pip_install "torch>=2.4"
fi
need=()
"$PY" -c "import nanobind" 2>/dev/null || need+=("nanobind==${NANOBIND_VERSION}")
"$PY" -c "import pytest" 2>/dev/null || need+=("pytest>=7")
"$PY" -c "import numpy" 2>/dev/null || need+=(numpy)
"$PY" -c "import matplotlib" 2>/dev/null || need+=(matplotlib)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup_python: installing ${need[*]} with pip"
  pip_install "${need[@]}"
fi
echo "setup_python: ok (torch $("$PY" -c 'import torch; print(torch.__version__)'), nanobind $("$PY" -c 'import nanobind; print(nanobind.__version__)'))"
