#!/usr/bin/env bash
# End-to-end: `make run` (a small GPT on the built-in addition data) learns addition, and the
# part prints how long its training took; and its run on 4 ranks is the same computation as on one.
#
# Threshold. Each 10-token problem "ab+cd=sss\n" has four random operand digits that no model
# can predict: the loss floor is 4 ln(10) / 10 = 0.921 nats per token. A model that has learned
# the format but not the sum also pays for the answer digits (about 2 ln 10 + ln 2 more), near
# 1.45. A validation loss below 1.0 therefore needs most answer digits right, i.e. addition;
# the exact-match accuracy on held-out problems (never in the training stream) must also
# exceed 80%.
#
# 4 ranks. Each rank takes a quarter of the micro-batch: 4 ranks with batch B/4 are, bit for
# bit, one rank with batch B/4 and accumulation 4 (the claim test/test_multirank.sh proves for
# every strategy). Here it is checked on make run's own model, data and options over its first
# 100 steps; training the 4 ranks for all 1000 steps again would only repeat that claim.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

ARGS=$(make -s print-run-args)
check() {  # check NAME LOGFILE
  local vl acc
  vl=$(grep -o '"val_loss": [0-9.e+-]*' "$2" | tail -1 | awk '{print $2}')
  acc=$(grep -o '"exact_match": [0-9.e+-]*' "$2" | tail -1 | awk '{print $2}')
  if [ -n "$vl" ] && python3 -c "import sys; sys.exit(0 if float('$vl') < 1.0 else 1)"; then
    ok "$1: validation loss $vl < 1.0"
  else bad "$1: validation loss '$vl' not below 1.0"; fi
  if [ -n "$acc" ] && python3 -c "import sys; sys.exit(0 if float('$acc') > 0.8 else 1)"; then
    ok "$1: exact-match accuracy $acc > 0.8 on held-out problems"
  else bad "$1: exact-match accuracy '$acc' not above 0.8"; fi
}

if want "1 rank"; then
  load=$(cut -d' ' -f1-3 /proc/loadavg 2> /dev/null)
  start=$(date +%s.%N)
  ./train_gpt_cpu $ARGS --log "$TMP/one.json" > "$TMP/one.out" 2>&1 || bad "1-rank run failed: $(tail -2 "$TMP/one.out")"
  # make run's training time, a figure (the machine may be shared; the suite runs parts side by
  # side): wall seconds, threads, the vector target and the load average before and after.
  echo "note: make run's training took $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s wall" \
    "with OMP_NUM_THREADS=$OMP_NUM_THREADS, $(grep -o 'cpu ([a-z0-9]* vectors)' "$TMP/one.out" | head -1);" \
    "load average $load before, $(cut -d' ' -f1-3 /proc/loadavg 2> /dev/null) after (the build is not included)"
  check "1 rank (make run)" "$TMP/one.json"
fi
if want "4 ranks"; then
  B=$(echo "$ARGS" | awk '{for (i = 1; i < NF; i++) if ($i == "--batch") print $(i + 1)}')
  SHORT=$(echo "$ARGS" | sed -E "s/--batch [0-9]+/--batch $((B / 4))/; s/--steps [0-9]+/--steps 100/; s/--eval-every [0-9]+/--eval-every 100/")
  spawn "$TMP/four.out" env OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 4 ./train_gpt_cpu $SHORT --digest --log "$TMP/four.json"
  spawn "$TMP/accum.out" ./train_gpt_cpu $SHORT --accum 4 --digest --log "$TMP/accum.json"
  settle
  d4=$(grep params_digest "$TMP/four.out" | awk '{print $2}') d1=$(grep params_digest "$TMP/accum.out" | awk '{print $2}')
  if [ -n "$d4" ] && [ "$d4" = "$d1" ] && diff -q <(sed 's/, "ms".*//' "$TMP/four.json") <(sed 's/, "ms".*//' "$TMP/accum.json") > /dev/null; then
    ok "4 ranks x batch $((B / 4)) (make run's options, 100 steps): the losses, validation and accuracy of 1 rank x batch $((B / 4)) x accumulation 4, and its parameters ($d4)"
  else
    bad "4 ranks vs 1 rank with accumulation 4: digest '$d4' vs '$d1': $(tail -2 "$TMP/four.out")"
  fi
fi
cases_summary
[ $fail = 0 ]
