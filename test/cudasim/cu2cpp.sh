#!/bin/sh
# cu2cpp.sh IN.cu OUT.cpp: a kernel file as C++ for the CUDA simulator. The only rewrite is the
# launch syntax, which no C++ compiler accepts:
#   kernel<<<grid, block, smem, stream>>>(args)  ->  cudasim::launch(kernel, "kernel", grid, block, smem, stream)(args)
# (cudasim/device.h). Lines are kept one for one and #line points at the .cu file, so compiler
# messages, reports and a debugger show the original source.
set -e
in=$1
out=$2
{
  printf '#line 1 "%s"\n' "$in"
  perl -pe 's/\b([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>/cudasim::launch($1, "$1", $2)/g' "$in"
} > "$out.tmp"
if grep -n '<<<' "$out.tmp" >&2; then
  echo "cu2cpp.sh: $in: a launch the rewrite did not recognize (above); keep <<<...>>> on one line" >&2
  rm -f "$out.tmp"
  exit 1
fi
mv "$out.tmp" "$out"
