#!/usr/bin/env bash
# CUDA compiler launcher for the library's objects (CMakeLists.txt, OPENMLA_WGMMA_GUARD): runs the
# compile and fails it when ptxas reports that it serialised a kernel's WGMMA (info C7515). Why: that
# happens when a register a product in flight accumulates into is written before the wait; the build
# still succeeds and the kernel runs 1.3-1.66x slower (session 28: the pair kernels), which CI, without a
# GPU, cannot otherwise see.
set -u
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
status=$?
cat "$log" >&2
# C7515 is the reason seen here; ptxas names others (register resources, ...) with the same sentence.
if grep -q -e "C7515" -e "wgmma.mma_async instructions are serialized" "$log"; then
  echo "error: ptxas serialised WGMMA in the kernel(s) above. For C7515: a non-WGMMA instruction writes an" \
       "accumulator register between a product's issue and its wait; move the write after the wait" \
       "(docs/kernels/wgmma_pitfalls.md). Configure with -DOPENMLA_WGMMA_GUARD=OFF to" \
       "build anyway." >&2
  exit 1
fi
exit "$status"
