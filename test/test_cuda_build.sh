#!/usr/bin/env bash
# test_cuda_build.sh: the CUDA build compiles with nvcc, without a GPU: the trainer and its tools,
# and test/gpu/test_kernels_gpu.c, for bf16 and for fp16 (`make PRECISION=fp16`); and no kernel on
# a step's path spills registers (test/test_kernel_report.sh, on the ptxas reports the build
# keeps). Where nvcc is not found (set CUDA_HOME) the part says so and counts nothing.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
if [ -z "$(make -s --no-print-directory cuda-config 2> /dev/null | awk '$1 == "NVCC" {print $2}')" ]; then
  echo "note: nvcc not found (set CUDA_HOME): the CUDA build is not checked here"
  cases_summary
  exit 0
fi
build() {  # build NAME MAKE_ARGS...
  local name=$1 log
  shift
  log=$(mktemp)
  if want "$name"; then
    if make -j2 --no-print-directory "$@" > "$log" 2>&1; then ok "$name compiles"
    else bad "$name" "$(grep -m3 -E 'error' "$log") $(tail -2 "$log")"; fi
  fi
  rm -f "$log"
}
build "train_gpt, generate, export_weights (bf16)" train_gpt generate export_weights
build "test_kernels_gpu (bf16)" build/test-gpu/test_kernels_gpu
build "train_gpt and test_kernels_gpu (fp16)" PRECISION=fp16 build/cuda-fp16/train_gpt build/test-gpu-fp16/test_kernels_gpu
# The kernels' ptxas reports these builds left: no register spills on a step's path.
if want spills; then
  out=$(bash test/test_kernel_report.sh 2>&1)
  echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed'
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<< "$out" | tail -1)
  pass=$((pass + ${line%% *}))
  f=${line#* passed, }
  fail=$((fail + ${f%% *}))
fi
cases_summary
[ $fail = 0 ]
