#!/usr/bin/env bash
# run_sim_tests.sh: the CUDA simulator's part of the suite (make test-sim, and make test): the
# PTX tables, the cuBLASLt and cub subset, every CUDA kernel against the CPU reference
# (test/gpu/test_kernels_gpu.c itself, small profile), the same with the fallback matmul
# kernel and a shuffled thread order, the planted faults, the same kernels built for fp16, and
# the whole CUDA trainer (test_trainer.sh), bf16 and fp16 (test_fp16.sh). Prints a line per test as it goes and ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
SIM=build/sim
source test/suite.sh
# OpenMPI refuses to start as root unless told it is intended (CI and containers run as root).
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

part "simulator: PTX fragment tables" $SIM/test_ptx
part "simulator: cuBLASLt and cub subset" $SIM/test_cublaslt
part "simulator: CUDA kernels vs CPU (small profile)" $SIM/test_kernels_gpu --profile small
# Every product through the fallback kernel (the heuristic returns no algorithm), and the
# threads of each block in another valid order: same checks, same tolerances.
part "simulator: CUDA kernels, fallback matmul, shuffled threads" \
  env CUDASIM_LT_NO_ALGO=1 CUDASIM_SEED=7 $SIM/test_kernels_gpu --profile small
part "simulator: planted faults" bash test/cudasim/test_faults.sh $SIM
# The fp16 build (make PRECISION=fp16): every kernel against the CPU reference with fp16's
# bounds, both matmul paths; then the fp16 test against the bf16 kernels, which must fail (the
# bounds see a kernel computing in the other 16-bit type).
part "simulator: fp16 CUDA kernels vs CPU (small profile)" $SIM-fp16/test_kernels_gpu --profile small
part "simulator: fp16 CUDA kernels, fallback matmul, shuffled threads" \
  env CUDASIM_LT_NO_ALGO=1 CUDASIM_SEED=7 $SIM-fp16/test_kernels_gpu --profile small
planted_precision() {
  g++ "$SIM-fp16/test_kernels_gpu.o" "$SIM"/kernels/*.o build/test-gpu/cpu_ref/*.o "$SIM/libcudasim.a" \
    -o "$SIM-fp16/test_on_bf16_kernels" -lstdc++ -lm -fopenmp -ldl || { echo "0 passed, 1 failed"; return 1; }
  local out failed
  out=$("$SIM-fp16/test_on_bf16_kernels" --profile small 2>&1)
  failed=$(echo "$out" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p')
  if [ "${failed:-0}" -ge 20 ]; then
    echo "ok   planted: the fp16 kernel test run on the bf16 kernels fails ($failed checks fail)"
    echo "1 passed, 0 failed"
  else
    echo "FAIL planted: the fp16 kernel test passed the bf16 kernels ($failed checks fail)"
    echo "0 passed, 1 failed"
  fi
}
part "simulator: planted precision mismatch" planted_precision
# The whole CUDA trainer (needs MPI: the simulated NCCL runs over it).
if [ -x ./train_gpt_sim ]; then
  part "simulator: train_gpt_sim (CUDA trainer, NCCL over MPI) vs train_gpt_cpu" bash test/cudasim/test_trainer.sh
else
  echo "FAIL train_gpt_sim was not built (it needs mpicc)"
  total_fail=$((total_fail + 1))
fi
if [ -x ./train_gpt_sim_fp16 ]; then
  part "simulator: train_gpt_sim_fp16 (the fp16 build, its loss scaler) vs train_gpt_cpu" bash test/cudasim/test_fp16.sh
else
  echo "FAIL train_gpt_sim_fp16 was not built (make PRECISION=fp16 sim-bins; it needs mpicc)"
  total_fail=$((total_fail + 1))
fi

suite_summary
