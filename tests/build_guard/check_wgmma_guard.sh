#!/usr/bin/env bash
# Checks cmake/wgmma_serialization_guard.sh with stand-in compilers: it fails a compile whose ptxas
# output reports serialised WGMMA (C7515, or the same sentence under another code), passes other
# ptxas info through, and keeps the compiler's own exit status.
set -u
guard="$1"
fails=0
expect() {  # name, wanted status, stand-in compiler (a bash snippet)
  local name="$1" want="$2" snippet="$3" err status
  err=$("$guard" bash -c "$snippet" 2>&1 >/dev/null)
  status=$?
  if [ "$status" -ne "$want" ]; then
    echo "FAIL $name: exit $status, expected $want; stderr: $err"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
serialised="ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers"
other_reason="ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources"
injected="ptxas info    : (C7519) warpgroup.arrive is injected in around line 3042 by compiler"
expect "C7515 fails the compile" 1 "echo '$serialised' >&2"
expect "another serialisation reason fails it" 1 "echo '$other_reason' >&2"
expect "injected arrive passes" 0 "echo '$injected' >&2"
expect "clean compile passes" 0 "true"
expect "compiler failure keeps its status" 3 "echo 'error: something' >&2; exit 3"
# The compiler's messages still reach stderr, and the guard names the problem.
out=$("$guard" bash -c "echo '$serialised' >&2" 2>&1)
case "$out" in
  *C7515*"serialised WGMMA"*) echo "ok   messages passed through" ;;
  *) echo "FAIL messages: $out"; fails=$((fails + 1)) ;;
esac
exit "$fails"
