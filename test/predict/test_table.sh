#!/usr/bin/env bash
# test_table.sh: predict/README.md's table of seed figures is what scripts/predict_seeds.py
# prints today (regenerate it with scripts/predict_seeds.py --write predict/README.md). It checks
# the table is current, not how close any prediction is to a published figure.
set -u
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
cp predict/README.md "$TMP/README.md"
if python3 scripts/predict_seeds.py --write "$TMP/README.md" > "$TMP/table.md"; then
  echo "ok   scripts/predict_seeds.py ran ($(grep -c '^| [A-Z]' "$TMP/table.md") rows)"
  pass=$((pass + 1))
else
  echo "FAIL scripts/predict_seeds.py failed"
  fail=$((fail + 1))
fi
if cmp -s "$TMP/README.md" predict/README.md; then
  echo "ok   predict/README.md holds the current table"
  pass=$((pass + 1))
else
  echo "FAIL predict/README.md's table is stale: run scripts/predict_seeds.py --write predict/README.md"
  diff "$TMP/README.md" predict/README.md | head -6
  fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
