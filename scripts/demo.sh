#!/usr/bin/env bash
# README command (a): set up, build and run the demo decode step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/examples/openmla_demo
