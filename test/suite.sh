# suite.sh: the test runners' shared part (sourced by test/run_tests.sh and
# test/cudasim/run_sim_tests.sh). part NAME COMMAND... runs one part, printing its lines as they
# come, and adds the counts of its closing "N passed, M failed" line (a crash, or no closing
# line, counts as one failure). The runner ends with suite_summary.
total_pass=0
total_fail=0
part() {
  local name=$1
  shift
  echo "== $name"
  local log rc line start=$SECONDS
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  rm -f "$log"
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
suite_summary() {
  echo "$total_pass passed, $total_fail failed"
  [ "$total_fail" = 0 ]
}
