#!/usr/bin/env bash
# The test suite of `make test`: every C unit test, the PyTorch reference check, the
# multi-rank FSDP tests, the end-to-end run and the CUDA simulator's suite. Each part prints
# "N passed, M failed" as its last line; this script adds them up and ends with the suite's
# own line.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
source test/suite.sh
# OpenMPI refuses to start as root unless told it is intended (CI and containers run as root).
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

for t in build/test/test_*; do
  part "$(basename "$t")" "$t"
done
part "build (objects rebuilt when MPI appears)" bash test/test_build.sh
part "timeline models" build/predict/test_timeline
part "timeline call sequence" bash test/predict/test_calls.sh
part "prediction table" bash test/predict/test_table.sh
part "pytorch reference (GPT)" /usr/bin/python3 test/ref_gpt.py
part "pytorch reference (T5)" /usr/bin/python3 test/ref_t5.py
part "command line" bash test/test_cli.sh
part "pretrained weights (--init-from, --export)" /usr/bin/python3 test/test_weights.py
part "transformers parity (exported GPT-2, T5)" /usr/bin/python3 test/test_hf_parity.py
part "planner and benchmark" python3 test/test_plan.py
part "plan table (the AWS post's runs)" bash test/test_plan_table.sh
part "benchmark scripts" bash test/test_bench_scripts.sh
part "multi-rank FSDP" bash test/test_multirank.sh
part "faults and bad input" bash test/test_trust.sh
part "fuzzed shards and checkpoints (sanitizers)" python3 test/fuzz_inputs.py --cases 100
part "end-to-end training" bash test/test_e2e.sh
part "CUDA simulator" bash test/cudasim/run_sim_tests.sh

suite_summary
