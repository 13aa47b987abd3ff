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
  want "$name" || return 0
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
# want NAME: whether the case (or group of checks) NAME runs under TEST_FILTER (`make test
# F=REGEX`: an extended regular expression, case-insensitive); every case runs without one.
want() { [ -z "${TEST_FILTER:-}" ] || grep -qiE -- "$TEST_FILTER" <<< "$1"; }

# spawn OUT COMMAND...: runs COMMAND in the background, its output (and, in OUT.rc, its exit code)
# in OUT, at most RUN_JOBS (4) at a time: small runs mostly wait on process start-up, so a part
# overlaps them; settle waits for them all before the checks that read OUT.
spawn() {
  local out=$1
  shift
  while [ "$(jobs -rp | wc -l)" -ge "${RUN_JOBS:-4}" ]; do wait -n; done
  { "$@"; echo $? > "$out.rc"; } > "$out" 2>&1 &
}
settle() { wait; }
# rc_of OUT: the exit code spawn recorded for OUT (1 when there is none).
rc_of() { cat "$1.rc" 2> /dev/null || echo 1; }
