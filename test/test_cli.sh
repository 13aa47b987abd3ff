#!/usr/bin/env bash
# Command-line behaviour of train_gpt_cpu: help, refused options, clear errors for bad input,
# and the logs. Prints ok/FAIL per check and ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=./train_gpt_cpu
DATA=data/addition/train_000.bin
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
M="--model gpt:L=1,C=32,H=2,V=256,T=16"

expect "--help lists options and presets" 0 "gpt2-1.5b" $BIN --help
expect "--help lists the FSDP options" 0 "limit-all-gathers" $BIN --help
expect "unknown option refused with the usage line" 2 "unknown option '--bogus'.*|usage: train_gpt_cpu" $BIN $M --data $DATA --bogus
expect "malformed integer refused" 2 "option --batch expects an integer" $BIN $M --data $DATA --batch 4x
expect "negative learning rate refused" 2 "option --lr expects a number" $BIN $M --data $DATA --lr -1
expect "missing value refused" 2 "option --steps needs a value" $BIN $M --data $DATA --steps
expect "a value missing before the next option is named, not called unknown" 2 "option --batch needs a value" $BIN $M --data $DATA --batch
expect "--global-batch with --accum is refused, not silently overridden" 2 "give --accum or --global-batch, not both" $BIN $M --data $DATA --accum 2 --global-batch 8
expect "stray argument refused" 2 "unexpected argument 'extra'" $BIN $M --data $DATA extra
# Long options are taken whole: getopt_long would read --step as --steps, and an ambiguous
# prefix as an unknown option.
expect "an abbreviated option is refused, naming the option meant" 2 "unknown option '--step': options are not abbreviated; did you mean --steps\?" \
  $BIN $M --data $DATA --step 2
expect "an ambiguous abbreviation is refused, naming the candidates" 2 "unknown option '--eval'.*--eval-every or --eval-batches or --eval-prompts" \
  $BIN $M --data $DATA --eval 2
expect "--name=value is taken whole too" 2 "unknown option '--ste': .*did you mean --steps" $BIN $M --data $DATA --ste=3
expect "an option's value that looks like an option is not judged as one" 1 "no file matched" $BIN $M --data --dat --steps 1
expect "generate_cpu refuses abbreviations too" 2 "unknown option '--tok'.*did you mean --tokens or --tokenizer" ./generate_cpu x --tok 4
expect "--sample-tokens beyond what a sequence holds is refused, not capped" 2 "--sample-tokens 120: .* at most 15 new tokens" \
  $BIN $M --data $DATA --sample-every 1 --sample-tokens 120
expect "--plan exits 1 when the plan does not fit --memory-limit" 1 "does not fit: .* recommendation" \
  $BIN --plan --model gpt3-175b --world 8 --batch 1 --seq 2048 --memory-limit 80
expect "--plan exits 0 when it fits" 0 "^fits: " $BIN --plan --model gpt2-124m --world 8 --batch 1 --memory-limit 80
plan_without_16bit() { local out; out=$("$@"); grep -q 16-bit <<< "$out" || echo "$out"; }
expect "the CPU plan names its fp32 working copies, not 16-bit ones" 0 "working copies \(fp32\)" \
  plan_without_16bit $BIN --plan --backend cpu --model gpt2-124m --world 1 --batch 1 --seq 64
expect "missing --data refused" 2 "--data is required" $BIN $M
expect "unknown model lists the presets" 2 "unknown model 'gpt5'.*|gpt2-124m" $BIN --model gpt5 --data $DATA
expect "custom model with C not divisible by H refused" 2 "divisible by the number of heads" $BIN --model gpt:C=70,H=3 --data $DATA
expect "bad --shard refused" 2 "--shard expects full, grad-op, none, hybrid:F or hpz\[:F2\]" $BIN $M --data $DATA --shard half
expect "bad --wrap refused" 2 "--wrap expects block or linear" $BIN $M --data $DATA --wrap layer
expect "--wrap linear for a model without that policy names the fix" 1 "model t5-small has no per-linear wrapping policy.*use --wrap block" \
  $BIN --model t5-small --data $DATA --wrap linear
expect "bad --offload refused" 2 "--offload expects a comma-separated list of params, optim, grads, activations" $BIN $M --data $DATA --offload params,disk
expect "--seq above the model's T refused" 2 "maximum sequence length" $BIN $M --data $DATA --seq 32
expect "no file matching the data glob" 1 "no file matched" $BIN $M --data "$TMP/none_*.bin"
printf 'not a shard at all, just some text that is long enough' > "$TMP/bad.bin"
head -c 2048 /dev/zero >> "$TMP/bad.bin"
expect "wrong magic names the file" 1 "bad.bin.*magic" $BIN $M --data "$TMP/bad.bin"
expect "token id above the vocabulary names the file" 1 "train_000.bin.*vocab" $BIN --model gpt:L=1,C=32,H=2,V=50,T=16 --data $DATA

# A short run: the step lines, the JSON log (full-precision numbers), the digest, samples.
$BIN $M --data $DATA --val-data data/addition/val_000.bin --batch 2 --steps 3 --eval-every 2 \
  --sample-every 3 --sample-tokens 8 --log "$TMP/log.json" --digest > "$TMP/out" 2>&1
expect "step lines have loss, lr, norm, ms and tok/s" 0 "step +3/3 \| loss [0-9.]+ \| lr .* \| norm .* ms \| .* tok/s" cat "$TMP/out"
expect "start-up table shows parameter counts" 0 "parameters" cat "$TMP/out"
expect "start-up prints the memory plan" 0 "memory plan" cat "$TMP/out"
expect "validation loss is reported" 0 "val loss" cat "$TMP/out"
expect "a sample is printed" 0 "^sample: " cat "$TMP/out"
expect "params_digest is printed as 16 hex digits" 0 "^params_digest [0-9a-f]{16}$" cat "$TMP/out"
expect "JSON log: one object per step with all fields" 0 "^3$" python3 -c "
import json, sys
steps = [json.loads(l) for l in open('$TMP/log.json') if 'grad_norm' in l]
assert all(set(s) >= {'step', 'loss', 'lr', 'grad_norm', 'ms', 'tokens_per_s'} for s in steps)
assert any(len(repr(s['loss'])) > 12 for s in steps)  # full precision, not rounded for display
print(len(steps))"
$BIN $M --data $DATA --batch 2 --steps 3 --digest > "$TMP/out2" 2>&1
expect "the same command twice gives the same digest" 0 "same" bash -c "[ \"\$(grep digest $TMP/out)\" = \"\$(grep digest $TMP/out2)\" ] && echo same"
# scripts/prepare_text.py: any text file -> byte-level shards the trainer accepts.
for i in $(seq 1 200); do echo "line $i: the quick brown fox jumps over the lazy dog"; done > "$TMP/text.txt"
expect "prepare_text.py writes byte-level train and val shards" 0 "val" python3 scripts/prepare_text.py "$TMP/text.txt" "$TMP/text" --tokenizer byte
expect "the trainer trains on prepared text" 0 "step +2/2" $BIN $M --data "$TMP/text/train_*.bin" --val-data "$TMP/text/val_*.bin" --batch 2 --steps 2
expect "prepare_text.py --tokenizer gpt2 without tiktoken explains itself (or works)" "$(python3 -c 'import tiktoken' 2>/dev/null && echo 0 || echo 1)" "tiktoken|train" python3 scripts/prepare_text.py "$TMP/text.txt" "$TMP/text2" --tokenizer gpt2

# T5: span-corrupted batches from the same shards, the exact FLOP count beside the IBM formula.
T5="--model t5:L=2,C=48,H=3,D=16,F=96,V=512 --data $DATA --val-data data/addition/val_000.bin --batch 2 --enc-len 40 --dec-len 12"
$BIN $T5 --steps 12 --lr 3e-3 --eval-every 12 --log "$TMP/t5.json" > "$TMP/t5.out" 2>&1
expect "T5 trains from the command line (span corruption on the fly)" 0 "step +12/12" cat "$TMP/t5.out"
expect "T5 start-up shows the exact matmul FLOPs and the IBM formula" 0 "IBM T5 formula" cat "$TMP/t5.out"
expect "T5 loss falls over 12 steps" 0 "^falls$" python3 -c "
import json
l = [json.loads(x)['loss'] for x in open('$TMP/t5.json') if 'grad_norm' in x]
print('falls' if l[-1] < l[0] - 0.5 else l)"
expect "T5 --dec-len too short for the targets is refused" 2 "dec-len" $BIN $T5 --dec-len 3 --steps 1
expect "T5 vocabulary without room for sentinels is refused" 2 "V must be at least" $BIN --model t5:V=4 --data $DATA --enc-len 64 --dec-len 20 --steps 1
expect "T5 data tokens colliding with sentinels are refused" 1 "sentinels.*id 5[0-9] >= vocab 52" $BIN --model t5:V=80 --data $DATA --enc-len 512 --dec-len 114 --steps 1
expect "--eval-prompts is refused for T5" 2 "for GPT models" $BIN $T5 --eval-prompts data/addition/val_problems.txt

# Llama: the presets, the custom form's refusals, and a vocabulary past 65535 on llm.c's uint32
# (Llama 3) shards.
expect "--help lists the Llama presets" 0 "llama3.1-8b .*KV=8 F=14336 V=128256" $BIN --help
expect "custom Llama with KV not dividing H refused" 2 "KV=3 must divide the query heads H=4" $BIN --model llama:H=4,KV=3 --data $DATA
expect "custom Llama with an odd head size refused" 2 "even size" $BIN --model llama:C=60,H=4,KV=2 --data $DATA
python3 -c "
import struct, sys
ids = [(i * 7919 + 65530) % 70000 for i in range(400)]
open(sys.argv[1], 'wb').write(struct.pack('<256i', 20240801, 7, len(ids), *[0] * 253) + struct.pack('<400I', *ids))" "$TMP/l3.bin"
LL="--model llama:L=1,C=32,H=2,KV=1,F=48,V=70000,T=16 --data $TMP/l3.bin --batch 2 --seq 16"
expect "Llama with V=70000 trains on Llama 3's uint32 shards (ids past 65535)" 0 "step +2/2 \| loss 11\." $BIN $LL --steps 2
expect "uint32 ids past the model's vocabulary are refused, naming the file" 1 "l3.bin: token [0-9]+ has id [0-9]+ >= vocab 65536" \
  $BIN ${LL/V=70000/V=65536} --steps 1

# MFU is stated against the peak actually measured, with the digits that matter.
$BIN $M --data $DATA --batch 2 --steps 2 --bench --bench-warmup 1 --peak > "$TMP/peak.out" 2>&1
expect "MFU is stated against the measured peak as printed" 0 "^same$" python3 -c "
import re
out = open('$TMP/peak.out').read()
measured = float(re.search(r'peak: ([0-9.e+-]+) TFLOPS measured', out).group(1))
against = float(re.search(r'MFU against ([0-9.e+-]+) TFLOPS', out).group(1))
print('same' if abs(against - measured) <= 1e-3 * measured else (measured, against))"

cases_summary
[ $fail = 0 ]
