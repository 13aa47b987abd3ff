#!/usr/bin/env bash
# run_sim_tests.sh: the CUDA simulator's part of the suite (make test-sim, and make test): the
# PTX tables, the cuBLASLt and cub subset, every CUDA kernel against the CPU reference
# (test/gpu/test_kernels_gpu.c itself, small profile), the same with the fallback matmul
# kernel and a shuffled thread order, the planted faults, and the whole CUDA trainer
# (test_trainer.sh). Prints a line per test as it goes and ends with "N passed, M failed".
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
# The whole CUDA trainer (needs MPI: the simulated NCCL runs over it).
if [ -x ./train_gpt_sim ]; then
  part "simulator: train_gpt_sim (CUDA trainer, NCCL over MPI) vs train_gpt_cpu" bash test/cudasim/test_trainer.sh
else
  echo "FAIL train_gpt_sim was not built (it needs mpicc)"
  total_fail=$((total_fail + 1))
fi

suite_summary
