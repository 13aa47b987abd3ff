#!/usr/bin/env bash
# run_sim_tests.sh: the CUDA simulator's part of the suite (make test-sim, and make test): the
# PTX tables, the cuBLASLt and cub subset, every CUDA kernel against the CPU reference
# (test/gpu/test_kernels_gpu.c itself, small profile), the same with the fallback matmul
# kernel and a shuffled thread order, the planted faults, and the whole CUDA trainer
# (test_trainer.sh). Prints a line per test as it goes and ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
SIM=build/sim
total_pass=0
total_fail=0
part() {
  local name=$1
  shift
  echo "== $name"
  local out rc line start=$SECONDS
  out=$("$@" 2>&1)
  rc=$?
  echo "$out" | grep -v '^ok ' | tail -n 40
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
  if [ -z "$line" ]; then
    echo "FAIL $name: no summary line (exit code $rc)"
    total_fail=$((total_fail + 1))
    return
  fi
  local p f
  p=$(echo "$line" | awk '{print $1}')
  f=$(echo "$line" | awk '{print $3}')
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  echo "   $name: $p passed, $f failed ($((SECONDS - start)) s)"
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
}

part "simulator: PTX fragment tables" $SIM/test_ptx
part "simulator: cuBLASLt and cub subset" $SIM/test_cublaslt
part "simulator: CUDA kernels vs CPU (small profile)" $SIM/test_kernels_gpu --profile small
# Every product through the fallback kernel (the heuristic returns no algorithm), and the
# threads of each block in another valid order: same checks, same tolerances.
part "simulator: CUDA kernels, fallback matmul, shuffled threads" \
  env CUDASIM_LT_NO_ALGO=1 CUDASIM_SEED=7 $SIM/test_kernels_gpu --profile small
part "simulator: planted faults" bash test/cudasim/test_faults.sh $SIM
# The whole CUDA trainer (needs MPI: the simulated NCCL runs over it).
if [ -x ./train_gpt_sim ]; then
  part "simulator: train_gpt_sim (CUDA trainer, NCCL over MPI) vs train_gpt_cpu" bash test/cudasim/test_trainer.sh
else
  echo "FAIL train_gpt_sim was not built (it needs mpicc)"
  total_fail=$((total_fail + 1))
fi

echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
