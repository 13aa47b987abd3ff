# suite.sh: the test runner's machinery (sourced by test/run_tests.sh, which lists the parts).
#
#   part ID "what it checks" "make targets" COMMAND...   registers a part
#   run_suite                                         builds the selected parts' targets, runs
#                                                     them JOBS at a time in the order they were
#                                                     registered, ends with the total
#
# Selection (environment, set by `make test T=... F=...`):
#   T=ID[,ID...]  the parts to run; shell patterns allowed (T='sim-*'); default: all
#   F=REGEX       TEST_FILTER for every part: only the cases whose names match (extended regex,
#                 case-insensitive; see want in test/cases.sh, test_wanted in test/test.h)
#   JOBS=N        parts at a time (default 3: on the two cores the suite is sized for, one part
#                 is usually waiting on process start-up, a timeout or a signal)
#
# Every line a part prints is shown as it comes, prefixed with the part's id. A part ends with
# "N passed, M failed"; a part that exits without that line (a crash) counts as one failure, and
# a part that exits non-zero with none failed also counts one.
PART_IDS=()
declare -A PART_DESC PART_TARGETS PART_CMD

part() {
  local id=$1 desc=$2 targets=$3
  shift 3
  PART_IDS+=("$id")
  PART_DESC[$id]=$desc
  PART_TARGETS[$id]=$targets
  PART_CMD[$id]=$(printf '%q ' "$@")
}

# The ids T selects, in registration order.
selected_parts() {
  local id pat sel=()
  for id in "${PART_IDS[@]}"; do
    if [ -z "${T:-}" ]; then sel+=("$id"); continue; fi
    for pat in ${T//,/ }; do
      # shellcheck disable=SC2053
      if [[ $id == $pat ]]; then sel+=("$id"); break; fi
    done
  done
  echo "${sel[@]}"
}

# run_one ID: runs the part, its lines prefixed, its log in $SUITE_LOGS/ID.log; writes the
# part's counts and seconds to $SUITE_LOGS/ID.result.
run_one() {
  local id=$1 log=$SUITE_LOGS/$1.log start=$SECONDS rc line p f
  echo "== $id: ${PART_DESC[$id]}"
  # The part's CPU time (user + system, its children included) beside its wall time: what it
  # costs the machine whatever else runs beside it.
  bash -c "${PART_CMD[$id]}"'; rc=$?; times > "$0"; exit $rc' "$SUITE_LOGS/$id.cpu" < /dev/null 2>&1 |
    while IFS= read -r line; do
      printf '%s\n' "$line" >> "$log"
      printf '[%s] %s\n' "$id" "$line"
    done
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" 2> /dev/null | tail -1)
  if [ -z "$line" ]; then
    p=0 f=1
    echo "[$id] FAIL $id: no summary line (exit code $rc)"
  else
    p=$(echo "$line" | awk '{print $1}')
    f=$(echo "$line" | awk '{print $3}')
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "[$id] FAIL $id: exit code $rc"; fi
  fi
  local cpu
  # `times`: the shell's user and system time, then its children's ("1m2.500s 0m3.000s")
  cpu=$(awk 'NR == 2 {t = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); t += a[1] * 60 + a[2]}; printf "%.0f", t}' \
    "$SUITE_LOGS/$id.cpu" 2> /dev/null)
  echo "$p $f $((SECONDS - start)) ${cpu:-0}" > "$SUITE_LOGS/$id.result"
  echo "== $id: $p passed, $f failed ($((SECONDS - start)) s)"
}

run_suite() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  local ids id targets=() jobs=${JOBS:-3} running=0 start=$SECONDS
  read -r -a ids <<< "$(selected_parts)"
  if [ ${#ids[@]} = 0 ]; then
    echo "no part matches T=${T:-}; the parts are:"
    for id in "${PART_IDS[@]}"; do printf '  %-16s %s\n' "$id" "${PART_DESC[$id]}"; done
    echo "0 passed, 1 failed"
    return 1
  fi
  export TEST_FILTER=${F:-}
  [ -n "$TEST_FILTER" ] && echo "filter: only the cases matching /$TEST_FILTER/"
  # OpenMPI refuses to start as root unless told it is intended (CI and containers run as root).
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for id in "${ids[@]}"; do read -r -a more <<< "${PART_TARGETS[$id]}"; targets+=("${more[@]}"); done
  mkdir -p build
  SUITE_LOGS=$(mktemp -d)
  if [ ${#targets[@]} -gt 0 ]; then
    echo "== building ${#targets[@]} targets for ${#ids[@]} parts (make -j$jobs; log: build/test-build.log)"
    if ! make -j"$jobs" --no-print-directory "${targets[@]}" > build/test-build.log 2>&1; then
      tail -30 build/test-build.log
      echo "FAIL the build failed (build/test-build.log)"
      echo "0 passed, 1 failed"
      return 1
    fi
    echo "== built in $((SECONDS - start)) s"
  fi
  for id in "${ids[@]}"; do
    while [ $running -ge "$jobs" ]; do wait -n; running=$((running - 1)); done
    run_one "$id" &
    running=$((running + 1))
  done
  wait
  local total_pass=0 total_fail=0 total_cpu=0 p f s c
  echo "== summary (${#ids[@]} parts: wall seconds, and CPU seconds with the part's children)"
  for id in "${ids[@]}"; do
    read -r p f s c < "$SUITE_LOGS/$id.result" || { p=0 f=1 s=0 c=0; }
    printf '   %-16s %5d passed, %3d failed  %4d s  cpu %4d s  %s\n' "$id" "$p" "$f" "$s" "$c" "${PART_DESC[$id]}"
    total_cpu=$((total_cpu + c))
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
  done
  rm -rf "$SUITE_LOGS"
  echo "== $((SECONDS - start)) s in all (build included), $total_cpu CPU seconds in the parts"
  echo "$total_pass passed, $total_fail failed"
  [ "$total_fail" = 0 ]
}
