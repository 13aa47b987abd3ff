#!/usr/bin/env bash
# test_kernels.sh BUILD_DIR: test/gpu/test_kernels_gpu.c itself on the simulator (--profile
# small: every kernel at small and odd shapes against the CPU reference), for the build in
# BUILD_DIR (build/sim: bf16; build/sim-fp16: fp16).
#   1. every case, with the threads of each block run in a shuffled order (CUDASIM_SEED: an
#      order other than the natural one, which exposes code that assumes a warp runs in
#      lockstep; the racecheck itself does not depend on the order);
#   2. the matmul cases again with every product through the fallback kernel
#      (CUDASIM_LT_NO_ALGO=1: the simulated cuBLASLt heuristic finds no algorithm), the GELU
#      products without their epilogues (CUDASIM_LT_NO_ALGO=gelu: the plain product and the GELU
#      kernels, never the fallback kernel), and the
#      norm, matmul and attention cases with each launch's blocks in a shuffled order
#      (CUDASIM_BLOCK_SEED: their gradient sums are finished by whichever block arrives last; the
#      attention backward's blocks take their work from a ticket counter), and the attention cases
#      with the backward chunked by batch and head (FSDP_ATTN=chunked), and the attention and
#      classifier cases on a device with an A100's 163 KiB of shared memory per block
#      (CUDASIM_SMEM_OPTIN_KIB), where the largest variants must step aside, not abort;
#   3. fp16 only: the fp16 test's bounds against the bf16 kernels must fail (the bounds see a
#      kernel computing in the other 16-bit type): the matmul and norm cases, at least 20 checks.
# TEST_FILTER selects cases as in every part. Prints each check and "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
SIM=${1:-build/sim}
pass=0
fail=0
# counted COMMAND...: runs it, its lines shown, and adds its closing counts (none: one failure).
counted() {
  local out line rc
  out=$("$@" 2>&1)
  rc=$?
  echo "$out"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<< "$out" | tail -1)
  if [ -z "$line" ]; then fail=$((fail + 1)); echo "FAIL $*: no summary (exit $rc)"; return; fi
  pass=$((pass + $(awk '{print $1}' <<< "$line")))
  fail=$((fail + $(awk '{print $3}' <<< "$line")))
}
want() { [ -z "${TEST_FILTER:-}" ] || grep -qiE -- "$TEST_FILTER" <<< "$1"; }

counted env CUDASIM_SEED=7 "$SIM/test_kernels_gpu" --profile small
if want matmul; then
  echo "-- the matmul cases with the fallback kernel for every product (CUDASIM_LT_NO_ALGO=1)"
  counted env CUDASIM_LT_NO_ALGO=1 TEST_FILTER=matmul "$SIM/test_kernels_gpu" --profile small
fi

if want matmul; then
  echo "-- the GELU products with no algorithm for cuBLASLt's GELU epilogues (CUDASIM_LT_NO_ALGO=gelu): the plain"
  echo "   product and the GELU kernels, and never the fallback kernel"
  out=$(CUDASIM_LT_NO_ALGO=gelu TEST_FILTER='matmul_gelu|matmul_backward_gelu' "$SIM/test_kernels_gpu" --profile small 2>&1)
  # (The unaligned 7 x 13 -> 5 product, whose leading dimensions no cuBLASLt algorithm takes, is
  # the fallback's own case.)
  if grep 'using the slow fallback kernel' <<< "$out" | grep -qvE 'm=5 n=7 k=13|m=13 n=7 k=5|m=13 n=5 k=7'; then
    echo "FAIL the GELU products without their epilogue used the fallback kernel: $(grep 'fallback kernel' <<< "$out" | head -3)"
    fail=$((fail + 1))
  else
    counted echo "$out"
  fi
fi

if want "layernorm|rmsnorm|matmul|column|attention"; then
  echo "-- the norm and matmul cases (their parameter-gradient sums finished by the last block to arrive) and the"
  echo "   attention cases (the backward's blocks take their work from a ticket counter) with the blocks of each"
  echo "   launch in a shuffled order (CUDASIM_BLOCK_SEED): no deadlock, and the same bits (each case runs twice,"
  echo "   each run in another order)"
  counted env CUDASIM_BLOCK_SEED=3 TEST_FILTER='layernorm|rmsnorm|matmul|attention' "$SIM/test_kernels_gpu" --profile small
fi
if want attention; then
  echo "-- the attention cases with the backward one batch and one head per launch (FSDP_ATTN=chunked: as where"
  echo "   the kernel scratch holds less than every batch and head at once)"
  counted env FSDP_ATTN=chunked TEST_FILTER=attention "$SIM/test_kernels_gpu" --profile small
fi

if want "attention|classifier"; then
  echo "-- the attention and classifier cases on a device that allows a block 163 KiB of shared memory (an A100;"
  echo "   CUDASIM_SMEM_OPTIN_KIB): what does not fit takes the simple attention path, or reads the row twice"
  counted env CUDASIM_SMEM_OPTIN_KIB=163 TEST_FILTER='attention|classifier' "$SIM/test_kernels_gpu" --profile small
fi

if [ "$SIM" = build/sim-fp16 ] && want "planted precision"; then
  bf16=build/sim
  if g++ "$SIM/test_kernels_gpu.o" "$bf16"/kernels/*.o build/test-gpu/cpu_ref/*.o "$bf16/libcudasim.a" \
       -o "$SIM/test_on_bf16_kernels" -lstdc++ -lm -fopenmp -ldl; then
    out=$(TEST_FILTER='^(matmul|layernorm|rmsnorm)' "$SIM/test_on_bf16_kernels" --profile small 2>&1)
    failed=$(sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' <<< "$out")
    if [ "${failed:-0}" -ge 20 ]; then
      echo "ok   planted precision: the fp16 test's matmul and norm cases fail on the bf16 kernels ($failed checks fail)"
      pass=$((pass + 1))
    else
      echo "FAIL planted precision: the fp16 test passed the bf16 kernels (${failed:-no} checks fail)"
      fail=$((fail + 1))
    fi
  else
    echo "FAIL planted precision: linking the fp16 test with the bf16 kernels failed"
    fail=$((fail + 1))
  fi
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
