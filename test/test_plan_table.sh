#!/usr/bin/env bash
# test_plan_table.sh: docs/performance.md's tables of what the AWS post's and torchtitan's runs need are what
# scripts/plan_table.py prints today from --plan (regenerate it with
# scripts/plan_table.py --write docs/performance.md), and both runs plan to fit a 40 GB GPU with
# the options the table names, as they did for the post; the Llama runs fit an 80 GB H100.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
DOC=docs/performance.md
cp "$DOC" "$TMP/doc.md"
if python3 scripts/plan_table.py --write "$TMP/doc.md" > "$TMP/table.md"; then
  ok "scripts/plan_table.py ran ($(grep -c '^| gpt' "$TMP/table.md") rows)"
else
  bad "scripts/plan_table.py failed"
fi
cmp -s "$TMP/doc.md" "$DOC" && ok "$DOC holds the current plan table" ||
  bad "$DOC's plan table is stale: run scripts/plan_table.py --write $DOC" "$(diff "$TMP/doc.md" "$DOC" | head -4)"
grep -q '^| gpt3-175b, 20 x 512, 128 | `--recompute block --wrap linear --offload optim,activations` | [0-9.]* | yes ' "$TMP/table.md" &&
  ok "gpt3-175b, batch 20 x 512 on 128 ranks fits 40 GB with --recompute block --wrap linear --offload optim,activations" ||
  bad "gpt3-175b does not plan to fit 40 GB" "$(grep '175b' "$TMP/table.md" | tail -3)"
for w in 32 128 512; do
  grep -q "^| gpt-1t, 4 x 2048, $w | \`--recompute block --wrap linear --offload all --limit-all-gathers 1\` | [0-9.]* | yes " "$TMP/table.md" &&
    ok "gpt-1t, batch 4 x 2048 on $w ranks fits 40 GB with recompute, linear wrapping, all offloaded and one slot" ||
    bad "gpt-1t on $w ranks does not plan to fit 40 GB" "$(grep "1t, 4 x 2048, $w " "$TMP/table.md" | tail -2)"
done
grep -q '^| llama3.1-8b, 2 x 8192, 8 | `--recompute selective` | [0-9.]* | yes ' "$TMP/table.md" &&
  ok "llama3.1-8b at torchtitan's settings (batch 2 x 8192 on 8 ranks, --recompute selective) fits 80 GB" ||
  bad "llama3.1-8b does not plan to fit 80 GB" "$(grep 'llama3.1-8b' "$TMP/table.md" | head -3)"
for w in 64 256; do
  grep -q "^| llama3.1-70b, 1 x 8192, $w | \`--recompute block\` | [0-9.]* | yes " "$TMP/table.md" &&
    ok "llama3.1-70b, batch 1 x 8192 on $w ranks fits 80 GB with --recompute block" ||
    bad "llama3.1-70b on $w ranks does not plan to fit 80 GB" "$(grep "70b, 1 x 8192, $w " "$TMP/table.md" | head -3)"
done
cases_summary
[ $fail = 0 ]
