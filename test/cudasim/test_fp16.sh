#!/usr/bin/env bash
# test_fp16.sh: the fp16 build of the CUDA trainer (make PRECISION=fp16: ./train_gpt_sim_fp16,
# fp16 activations, tensor-core products and cuBLASLt types; the dynamic loss scale by default)
# on the simulator:
#   1. GPT, T5 and Llama (grouped-query attention 2:1) train like ./train_gpt_cpu, within bounds
#      8x tighter than bf16's (fp16 keeps 11 significant bits to bf16's 8)
#   2. 2 ranks with --reduce-dtype fp16 (NCCL fp16 sums) and accumulation track 1 rank
#   3. the sharded gradient scaler against a real fp16 overflow: a scale of 2^24 overflows the
#      fp16 loss gradient, so the first steps are skipped on every rank and the scale halves
#      until it fits; the bf16 build, with fp32's range, runs the same scale without a skip
#   4. the defaults and refusals of the build: the settings table, --reduce-dtype bf16, a static
#      scale that would overflow fp16 on every step
# Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
source test/cases.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BIN=./train_gpt_sim_fp16
MPIRUN="mpirun --oversubscribe -np"
DATA='data/addition/train_*.bin'
has() { grep -qE -- "$2" "$TMP/$1.out"; }
show() { grep -E "error|cudasim|SKIPPED|overflow" "$TMP/$1.out" | head -3; tail -2 "$TMP/$1.out"; }

# ---- 1. fp16 on the simulator vs CPU -----------------------------------------------------
GPT="--model gpt:L=2,C=64,H=4,V=256,T=10 --data $DATA --batch 8 --seq 10 --steps 6 --lr 3e-3 --warmup 50 --weight-decay 0.0"
T5="--model t5:L=2,C=48,H=3,D=16,F=96,V=512 --data $DATA --batch 2 --enc-len 24 --dec-len 8 --steps 5 --lr 1e-3"
LLAMA="--model llama:L=2,C=64,H=4,KV=2,F=96,V=256,T=10,scaling=8 --data $DATA --batch 8 --seq 10 --steps 6 --lr 3e-3 --weight-decay 0.0"
for cfg in GPT T5 LLAMA; do
  args=${!cfg}
  if ! $BIN $args --log "$TMP/$cfg.sim.json" > "$TMP/$cfg.sim.out" 2>&1; then
    bad "$cfg fp16: simulated CUDA run failed" "$(show $cfg.sim)"
    continue
  fi
  ./train_gpt_cpu $args --log "$TMP/$cfg.cpu.json" > "$TMP/$cfg.cpu.out" 2>&1 || { bad "$cfg: CPU run failed"; continue; }
  if table=$(python3 test/compare_losses.py "$TMP/$cfg.sim.json" "$TMP/$cfg.cpu.json" 0.00125 0.00375); then
    ok "$cfg fp16: train_gpt_sim_fp16 and train_gpt_cpu losses agree (step 1 within 0.125%, later within 0.375%)"
  else
    echo "$table"
    bad "$cfg fp16: losses differ beyond the fp16 tolerance"
  fi
  has $cfg.sim "SKIPPED" && bad "$cfg fp16: a step was skipped at the default loss scale" "$(show $cfg.sim)"
done

# ---- 2. NCCL fp16 reduction ----------------------------------------------------------------
# As test_trainer.sh part 3: 2 ranks against 1 rank with --accum 2, losses and parameters within
# 5e-3 (fp16 rounds each reduced gradient element to 11 bits, 2^-12 relative, 8x finer than
# bf16's); the key bias, whose true gradient is zero, within 2 x lr x steps = 8e-3.
MR="--model gpt:L=3,C=72,H=3,V=509,T=32 --data $DATA --batch 2 --seq 16 --steps 4 --lr 1e-3 --grad-clip 1.0"
$BIN $MR --accum 2 --log "$TMP/ref2.json" --dump-params "$TMP/ref2.bin" > "$TMP/ref2.out" 2>&1 ||
  bad "fp16, 1 rank --accum 2 failed" "$(show ref2)"
if timeout 600 $MPIRUN 2 $BIN $MR --reduce-dtype fp16 --log "$TMP/w2.json" --dump-params "$TMP/w2.bin" > "$TMP/w2.out" 2>&1; then
  if r=$(python3 test/compare_params.py "$TMP/w2.bin" "$TMP/ref2.bin" "$TMP/w2.json" "$TMP/ref2.json" 5e-3 8e-3); then
    ok "fp16, 2 ranks --reduce-dtype fp16: tracks 1 rank --accum 2 within 5e-3 ($r)"
  else
    bad "fp16, 2 ranks --reduce-dtype fp16: $r"
  fi
  has w2 "reduce fp16" || bad "fp16: the settings table does not say the reduction is fp16" "$(grep precision "$TMP/w2.out")"
else
  bad "fp16, 2 ranks --reduce-dtype fp16 failed" "$(show w2)"
fi

# ---- 3. the scaler against a real fp16 overflow ------------------------------------------
# At 2^24 the loss gradient of a token (scale / tokens x (p - y), up to 2^24 / 80) is beyond
# fp16's 65504: the gradient turns inf, the global norm (one all-reduce over every shard) is
# not finite on every rank, the step is skipped everywhere and the scale halved, until it fits.
OV="$GPT --loss-scale dynamic:16777216"
timeout 600 $MPIRUN 2 $BIN $OV --log "$TMP/ov.json" > "$TMP/ov.out" 2>&1
rc=$?
if [ $rc = 0 ] && has ov "^step +1 \| gradient overflow at loss scale 16777216.*the scale is now 8388608" &&
  python3 - "$TMP/ov.json" <<'EOF'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if "loss_scale" in l]
skipped = [bool(x.get("skipped")) for x in s]
k = skipped.index(False)  # the first step that fits
ok = k >= 1 and not any(skipped[k:])  # skips first, then trains
ok = ok and all(s[i + 1]["loss_scale"] == s[i]["loss_scale"] / 2 for i in range(k))  # halved per skip
ok = ok and all(x["loss"] is not None for x in s) and s[-1]["loss"] < s[k]["loss"]   # the loss goes down
sys.exit(0 if ok else 1)
EOF
then
  ok "fp16, 2 ranks: a real overflow at loss scale 2^24 skips the step on every rank and halves the scale until it fits; training then goes on ($(grep -c SKIPPED "$TMP/ov.out") steps skipped)"
else
  bad "fp16 overflow" "$(show ov)"
fi
./train_gpt_sim $OV > "$TMP/ov_bf16.out" 2>&1
if [ $? = 0 ] && ! has ov_bf16 "SKIPPED" && has ov_bf16 "^step +6/6"; then
  ok "the bf16 build runs the same scale without an overflow (fp32's range): the skips above are fp16's"
else
  bad "bf16 at loss scale 2^24" "$(show ov_bf16)"
fi

# ---- 4. defaults and refusals ----------------------------------------------------------------
if has GPT.sim "precision +\| fp16 compute, reduce fp32" && has GPT.sim "loss scale +\| dynamic 65536, window 2000"; then
  ok "the fp16 build computes in fp16 with a dynamic loss scale from 65536 by default (settings table)"
else
  bad "fp16 defaults" "$(grep -E 'precision|loss scale' "$TMP/GPT.sim.out")"
fi
$BIN $GPT --steps 1 --reduce-dtype bf16 > "$TMP/rd.out" 2>&1
rc=$?
if [ $rc = 2 ] && has rd "built for fp16 activations.*make train_gpt PRECISION=bf16"; then
  ok "--reduce-dtype bf16 on the fp16 build is refused, naming the build to use"
else
  bad "--reduce-dtype bf16 on fp16 (exit $rc)" "$(show rd)"
fi
./train_gpt_sim $GPT --steps 1 --reduce-dtype fp16 > "$TMP/rd16.out" 2>&1
rc=$?
if [ $rc = 2 ] && has rd16 "built for bf16 activations.*make train_gpt PRECISION=fp16"; then
  ok "--reduce-dtype fp16 on the bf16 build is refused, naming the build to use"
else
  bad "--reduce-dtype fp16 on bf16 (exit $rc)" "$(show rd16)"
fi

# A static scale that overflows fp16 on every step is refused before training (2^24 / 80 tokens).
$BIN $GPT --loss-scale 16777216 > "$TMP/st.out" 2>&1
rc=$?
if [ $rc = 2 ] && has st "beyond fp16's 65504, so every step would overflow; use --loss-scale dynamic"; then
  ok "a static loss scale that would overflow fp16 on every step is refused before training"
else
  bad "static --loss-scale 2^24 on fp16 (exit $rc)" "$(show st)"
fi

cases_summary
[ $fail = 0 ]
