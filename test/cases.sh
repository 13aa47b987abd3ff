# cases.sh: ok/bad/expect for the shell tests (sourced). Every case prints one line as it
# finishes, with the seconds since the previous one, so a long part shows its progress; the
# script ends with cases_summary's "N passed, M failed".
pass=0
fail=0
case_start=$(date +%s.%N)
# Sets case_took to the seconds since the previous case ended.
case_time() {
  local now
  now=$(date +%s.%N)
  case_took=$(awk -v a="$case_start" -v b="$now" 'BEGIN { printf "%.1f s", b - a }')
  case_start=$now
}
ok() { pass=$((pass + 1)); case_time; echo "ok   $1 ($case_took)"; }
bad() { fail=$((fail + 1)); case_time; echo "FAIL $1${2:+: $2} ($case_took)"; }
# expect NAME EXIT_CODE PATTERN COMMAND...: the command exits with EXIT_CODE and prints PATTERN.
expect() {
  local name=$1 code=$2 pattern=$3
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" = "$code" ] && echo "$out" | grep -qE -- "$pattern"; then
    ok "$name"
  else
    bad "$name" "exit $rc, output: $(echo "$out" | grep -v '^|' | tail -3)"
  fi
}
cases_summary() { echo "$pass passed, $fail failed"; }
