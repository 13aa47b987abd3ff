#!/usr/bin/env bash
# The test suite of `make test`: every C unit test, the PyTorch reference check, the
# multi-rank FSDP tests, the end-to-end run and the CUDA simulator's suite. Each part prints
# "N passed, M failed" as its last line; this script adds them up and ends with the suite's
# own line.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
total_pass=0
total_fail=0

# part NAME COMMAND...: runs one part and adds its counts (a crash counts as one failure).
part() {
  local name=$1
  shift
  echo "== $name"
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  echo "$out" | grep -v '^ok ' | tail -n 40
  local line
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
  echo "   $name: $p passed, $f failed"
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
}

for t in build/test/test_*; do
  part "$(basename "$t")" "$t"
done
part "pytorch reference (GPT)" /usr/bin/python3 test/ref_gpt.py
part "pytorch reference (T5)" /usr/bin/python3 test/ref_t5.py
part "command line" bash test/test_cli.sh
part "planner and benchmark" python3 test/test_plan.py
part "benchmark scripts" bash test/test_bench_scripts.sh
part "multi-rank FSDP" bash test/test_multirank.sh
part "end-to-end training" bash test/test_e2e.sh
part "CUDA simulator" bash test/cudasim/run_sim_tests.sh

echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
