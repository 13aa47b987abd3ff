#!/usr/bin/env bash
# test_table.sh: timeline/README.md's table of seed figures is what scripts/predict_seeds.py
# prints today (regenerate it with scripts/predict_seeds.py --write timeline/README.md). It checks
# the table is current, not how close any prediction is to a published figure.
set -u
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
cp timeline/README.md "$TMP/README.md"
if python3 scripts/predict_seeds.py --write "$TMP/README.md" > "$TMP/table.md"; then
  echo "ok   scripts/predict_seeds.py ran ($(grep -c '^| [A-Z]' "$TMP/table.md") rows)"
  pass=$((pass + 1))
else
  echo "FAIL scripts/predict_seeds.py failed"
  fail=$((fail + 1))
fi
if cmp -s "$TMP/README.md" timeline/README.md; then
  echo "ok   timeline/README.md holds the current table"
  pass=$((pass + 1))
else
  echo "FAIL timeline/README.md's table is stale: run scripts/predict_seeds.py --write timeline/README.md"
  diff "$TMP/README.md" timeline/README.md | head -6
  fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
