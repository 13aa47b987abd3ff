#!/usr/bin/env bash
# test_kernel_report.sh: no CUDA kernel on a training step's path spills registers, and the
# kernel report's machine-code flags (below) fire where they must. The CUDA
# build keeps ptxas's resource report beside each kernel object (Makefile: OBJ.ptxas), for the
# bf16 build (build/cuda) and the fp16 one (build/cuda-fp16); scripts/kernel_report.py
# --check-spills reads them, so this costs no compile. Planted: the attention log with one fused
# kernel given spill stores must fail and name it; spills in the simple attention path (off the
# step's path) must not. Without nvcc there are no logs and nothing to check.
# Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CHECK="python3 scripts/kernel_report.py --check-spills"

for build in build/cuda build/cuda-fp16; do
  logs=("$build"/kernels/cuda/*.o.ptxas)
  if [ ! -e "${logs[0]}" ]; then
    echo "note: no ptxas logs in $build/kernels/cuda (its CUDA build has not run: no nvcc?)"
    continue
  fi
  if out=$($CHECK "${logs[@]}" 2>&1); then
    ok "$build: $(grep -c '^ok' <<< "$out") kernel files, no register spills on the step's path"
  else
    bad "$build" "$(grep '^FAIL' <<< "$out" | head -3)"
  fi
done

log=build/cuda/kernels/cuda/attention.o.ptxas
if [ -e "$log" ]; then
  # The first fused forward kernel's report with 8 bytes of spill stores.
  perl -0pe 's/(Compiling entry function \x27\S*attn_fwd_kernel\S*\x27.*?\n.*?Function properties.*?\n\s*)0 bytes stack frame, 0 bytes spill stores/${1}8 bytes stack frame, 8 bytes spill stores/s' \
    "$log" > "$TMP/spill.ptxas"
  expect "planted: a fused attention kernel that spills fails the check, named" 1 \
    "FAIL .*spill registers: attn_fwd_kernel<" $CHECK "$TMP/spill.ptxas"
  perl -0pe 's/(Compiling entry function \x27\S*attn_simple_fwd_kernel\S*\x27.*?\n.*?Function properties.*?\n\s*)0 bytes stack frame, 0 bytes spill stores/${1}8 bytes stack frame, 8 bytes spill stores/s' \
    "$log" > "$TMP/offpath.ptxas"
  cmp -s "$log" "$TMP/spill.ptxas" && bad "planted spill" "the substitution did not apply to $log"
  cmp -s "$log" "$TMP/offpath.ptxas" && bad "planted off-path spill" "the substitution did not apply to $log"
  expect "planted: spills in the simple attention path (off the step's path) pass" 0 \
    "^ok .*none on the step's path spills" $CHECK "$TMP/offpath.ptxas"
fi
# The machine-code analysis (kernel_report.py --sass): a planted kernel with a __threadfence and a
# dependent chain of global loads in its loop is flagged, naming both; a loop whose loads are
# issued together is not; and no fused attention kernel of the CUDA build is (the backward's
# ordered dq sum: one release fence, MEMBAR.ALL, no __threadfence, its partial sums loaded
# together ahead of the dQ product). Needs nvcc and cuobjdump (CUDA_HOME/bin, PATH, or the
# nvidia-cuda-cuobjdump wheel, which make deps installs beside nvcc).
NVCC_BIN=$(make -s --no-print-directory print-nvcc 2> /dev/null)
CUOBJDUMP_BIN=$(python3 -c 'import sys; sys.path.insert(0, "scripts"); import kernel_report; print(kernel_report.find_cuobjdump() or "")')
if [ -n "$NVCC_BIN" ] && [ -n "$CUOBJDUMP_BIN" ]; then
  if "$NVCC_BIN" -cubin -O3 -gencode arch=compute_90,code=sm_90 test/sass_planted.cu -o "$TMP/planted.cubin" 2> "$TMP/nvcc.log"; then
    expect "planted: a __threadfence and a dependent chain of global loads in a loop are flagged" 1 \
      "^\| planted_chain_fence .*MEMBAR.SC \(a __threadfence\) in the loop; a dependent chain of [0-9]+ global round trips \|" \
      python3 scripts/kernel_report.py --sass "$TMP/planted.cubin"
    expect "a loop whose loads are issued together is not flagged" 1 "^\| clean_stream \|.*\| - \|$" \
      python3 scripts/kernel_report.py --sass "$TMP/planted.cubin"
  else
    bad "planted SASS kernel" "nvcc failed: $(tail -3 "$TMP/nvcc.log")"
  fi
  obj=build/cuda/kernels/cuda/attention.o
  if [ -e "$obj" ]; then
    out=$(python3 scripts/kernel_report.py --sass "$obj" 2>&1)
    if grep -q '^| attn_bwd_kernel' <<< "$out" && ! grep -E '^\| attn_(fwd|bwd)_kernel' <<< "$out" | grep -vqE '\| - \|$'; then
      ok "$obj: no fused attention kernel flagged ($(grep -c '^| attn_bwd_kernel' <<< "$out") backward variants read)"
    else
      bad "$obj" "$(grep -E '^\| attn_' <<< "$out" | grep -vE '\| - \|$' | head -3)"
    fi
  fi
else
  echo "note: no nvcc or no cuobjdump: the machine-code checks did not run"
fi
cases_summary
