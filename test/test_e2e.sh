#!/usr/bin/env bash
# End-to-end: train a small GPT on the built-in addition data, on 1 rank and on 4 ranks.
#
# Threshold. Each 10-token problem "ab+cd=sss\n" has four random operand digits that no model
# can predict: the loss floor is 4 ln(10) / 10 = 0.921 nats per token. A model that has learned
# the format but not the sum also pays for the answer digits (about 2 ln 10 + ln 2 more), near
# 1.45. A validation loss below 1.0 therefore needs most answer digits right, i.e. addition;
# the exact-match accuracy on held-out problems (never in the training stream) must also
# exceed 80%.
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

./train_gpt_cpu $ARGS --log "$TMP/one.json" > "$TMP/one.out" 2>&1 || bad "1-rank run failed: $(tail -2 "$TMP/one.out")"
check "1 rank" "$TMP/one.json"
# 4 ranks with a quarter of the micro-batch: the same global batch and the same data order.
ARGS4=$(echo "$ARGS" | sed -E 's/--batch ([0-9]+)/--batch \1 --accum 1/' | awk '{for(i=1;i<=NF;i++){if($i=="--batch"){$(i+1)=$(i+1)/4} } print}')
OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 4 ./train_gpt_cpu $ARGS4 --log "$TMP/four.json" > "$TMP/four.out" 2>&1 ||
  bad "4-rank run failed: $(tail -2 "$TMP/four.out")"
check "4 ranks" "$TMP/four.json"
cases_summary
[ $fail = 0 ]
