#!/bin/sh
# cu2cpp.sh IN.cu OUT.cpp: a kernel file as C++ for the CUDA simulator. Two rewrites:
#   kernel<<<grid, block, smem, stream>>>(args)  ->  cudasim::launch(kernel, "kernel", grid, block, smem, stream)(args)
# (cudasim/device.h): the launch syntax, which no C++ compiler accepts; and
#   #include "kernels/cuda/ptx.cuh"  ->  #include "cudasim/ptx.h"
# the inline PTX, which only a GPU runs, for the simulator's emulation of the same functions.
# Lines are kept one for one and #line points at the .cu file, so compiler messages, reports and
# a debugger show the original source.
set -e
in=$1
out=$2
{
  printf '#line 1 "%s"\n' "$in"
  perl -pe 's/\b([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>/cudasim::launch($1, "$1", $2)/g;
           s{^(\s*#\s*include\s*)"kernels/cuda/ptx\.cuh"}{$1"cudasim/ptx.h"}' "$in"
} > "$out.tmp"
if grep -n '<<<' "$out.tmp" >&2; then
  echo "cu2cpp.sh: $in: a launch the rewrite did not recognize (above); keep <<<...>>> on one line" >&2
  rm -f "$out.tmp"
  exit 1
fi
mv "$out.tmp" "$out"
