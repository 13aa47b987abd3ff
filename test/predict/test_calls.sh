#!/usr/bin/env bash
# test_calls.sh: the timeline backend runs the trainer's step call for call. For each
# configuration, train_gpt_cpu (built with its entry points logged: test/predict/call_log.c)
# trains 3 steps and predict_gpt predicts the same run; the sequences of kernels.h, device.h and
# comm.h calls inside each step (device_step_begin .. device_step_end) must be identical on
# rank 0. A mismatch prints the first lines that differ.
set -u
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CPU=build/calls/train_gpt_cpu
PRED=./predict_gpt
DATA='data/addition/train_*.bin'
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

steps_of() { awk '/^device_step_begin$/{on=1} on{print} /^device_step_end$/{on=0}' "$1"; }

# compare NAME WORLD CPU_OPTIONS -- PREDICT_OPTIONS (the same options unless given apart)
run_pair() {
  local world=$1 cpu_opts=$2 pred_opts=$3
  rm -f "$TMP"/cpu.log* "$TMP"/tl.log
  if [ "$world" = 1 ]; then
    FSDP_CALL_LOG=$TMP/cpu.log $CPU $cpu_opts --data "$DATA" --steps 3 > "$TMP/cpu.out" 2>&1 || return 2
    cp "$TMP/cpu.log" "$TMP/cpu.log.rank0"
  else
    FSDP_CALL_LOG=$TMP/cpu.log mpirun --oversubscribe -np "$world" $CPU $cpu_opts --data "$DATA" --steps 3 \
      > "$TMP/cpu.out" 2>&1 || return 2
  fi
  FSDP_CALL_LOG=$TMP/tl.log $PRED $pred_opts --predict h100-sxm --world "$world" > "$TMP/tl.out" 2>&1 || return 3
  steps_of "$TMP/cpu.log.rank0" > "$TMP/a"
  steps_of "$TMP/tl.log" > "$TMP/b"
  [ -s "$TMP/a" ] || return 4
  cmp -s "$TMP/a" "$TMP/b"
}

same() {
  local name=$1 world=$2 opts=$3
  run_pair "$world" "$opts" "$opts"
  local rc=$?
  if [ $rc = 0 ]; then
    echo "ok   same calls: $name ($(wc -l < "$TMP/a") calls in 3 steps)"
    pass=$((pass + 1))
  else
    echo "FAIL same calls: $name (rc $rc)"
    [ $rc = 2 ] && tail -5 "$TMP/cpu.out"
    [ $rc = 3 ] && tail -5 "$TMP/tl.out"
    [ $rc = 1 ] && diff "$TMP/a" "$TMP/b" | head -10
    fail=$((fail + 1))
  fi
}

GPT="--model gpt:L=2,C=96,H=4,V=256,T=10 --batch 4 --seq 10"
T5="--model t5:L=2,C=48,H=3,D=16,F=96,V=512 --batch 2 --enc-len 40 --dec-len 12"
T5G="--model t5v1.1:L=1,M=2,C=40,H=3,D=12,F=56,V=509 --batch 2 --enc-len 40 --dec-len 12"
same "GPT, 1 rank" 1 "$GPT"
same "GPT, 2 ranks, full shard, 2 micro-steps" 2 "$GPT --accum 2"
same "GPT, 2 ranks, grad-op, no prefetch, limit 1" 2 "$GPT --shard grad-op --prefetch none --limit-all-gathers 1"
same "GPT, 3 ranks, no-sync accumulation" 3 "$GPT --accum 2 --no-sync-accum"
same "GPT, 2 ranks, DDP (none), forward prefetch only" 2 "$GPT --shard none --prefetch forward"
same "GPT, 2 ranks, --wrap linear --recompute block" 2 "$GPT --wrap linear --recompute block"
same "GPT, 1 rank, --wrap linear --recompute selective --limit-all-gathers 3" 1 "$GPT --wrap linear --recompute selective --limit-all-gathers 3"
same "GPT (4 blocks), 2 ranks, --offload all --recompute block --wrap linear --limit-all-gathers 1" 2 "$GPT --model gpt:L=4,C=96,H=4,V=256,T=10 --offload all --recompute block --wrap linear --limit-all-gathers 1"
same "GPT, 1 rank, --offload optim (the AdamW step on the host)" 1 "$GPT --offload optim"
same "T5, 2 ranks, hybrid:1" 2 "$T5 --shard hybrid:1"
same "T5 v1.1, 1 rank, 2 micro-steps" 1 "$T5G --accum 2"
same "T5 (4 + 4 blocks), 2 ranks, --offload activations,params --recompute block" 2 "$T5 --model t5:L=4,C=48,H=3,D=16,F=96,V=512 --offload activations,params --recompute block"

# The comparison can fail: another prefetch setting issues the all-gathers elsewhere.
run_pair 2 "$GPT --prefetch none" "$GPT"
if [ $? = 1 ]; then
  echo "ok   different calls are told apart: --prefetch none against both"
  pass=$((pass + 1))
else
  echo "FAIL different calls are told apart: --prefetch none against both compared equal"
  fail=$((fail + 1))
fi
# --predict from the trainer: train_gpt_cpu hands it to predict_gpt (no data, no MPI needed).
check_cli() {
  local name=$1 want_rc=$2 pattern=$3
  shift 3
  "$@" > "$TMP/cli.out" 2>&1
  local rc=$?
  if [ $rc = "$want_rc" ] && grep -qE -- "$pattern" "$TMP/cli.out"; then
    echo "ok   $name"
    pass=$((pass + 1))
  else
    echo "FAIL $name (rc $rc, want $want_rc, pattern '$pattern'):"
    tail -3 "$TMP/cli.out"
    fail=$((fail + 1))
  fi
}
check_cli "train_gpt_cpu --predict runs the prediction" 0 "^predict_tflops_per_gpu [0-9.]+$" \
  ./train_gpt_cpu --model gpt2-124m --batch 8 --predict h100-sxm --world 16
check_cli "train_gpt_cpu --predict-sweep ranks configurations" 0 "^\|    1 \| " \
  ./train_gpt_cpu --model gpt:L=2,C=64,H=4,V=256,T=16 --batch 2 --predict a100-40gb --world 16 --predict-sweep
check_cli "--predict-sweep says what its TFLOPS column counts (T5: the decoder at the encoder's length)" 0 \
  "^TFLOPS: the IBM T5 appendix formula, .*whatever --recompute is, and the decoder at the encoder's length;$" \
  ./predict_gpt --model t5-small --batch 2 --predict a100-40gb --world 8 --predict-sweep
check_cli "predict_gpt's usage line names it and what it needs" 2 \
  "^usage: predict_gpt --model NAME --predict GPU\[:NETWORK\] --world N \[options\]" ./predict_gpt --model gpt2-124m --bogus
# The eager attention's score tensors, by hand: GPT 4 x 8 heads x 1024^2 = 33.6M scores per layer;
# minGPT keeps 5 bytes of each (softmax output, dropout mask and output) and one backward holds
# 4 more: 4 layers x 5 + 4 = 24 bytes = 0.75 GiB without recompute (selective keeps attention
# outputs too), 5 + 4 = 9 bytes = 0.28 GiB with block recompute (one block at a time). T5-small,
# 8 heads, batch 4, encoder 512, decoder 114: HF T5 keeps 7 bytes a score (fp32 softmax output,
# dropout mask and output), 8 more in backward: 6 encoder blocks (512^2) and 6 decoder blocks
# (114^2 + 114 x 512) x 7 + 512^2 x 8 = 0.48 GiB; with block recompute 512^2 x (7 + 8) = 0.12.
EG="--model gpt:L=4,C=256,H=8,V=256,T=1024 --batch 4 --predict h100-sxm --world 8 --predict-attention eager"
ET="--model t5-small --batch 4 --predict h100-sxm --world 8 --predict-attention eager"
check_cli "eager GPT, no recompute: every layer's score tensors, 0.75 GiB" 0 "eager attention's score tensors \(GiB\) +\| +0\.75 \|" \
  ./predict_gpt $EG --recompute none
check_cli "eager GPT, selective recompute keeps them too, 0.75 GiB" 0 "eager attention's score tensors \(GiB\) +\| +0\.75 \|" \
  ./predict_gpt $EG --recompute selective
check_cli "eager GPT, block recompute: one block's, 0.28 GiB" 0 "eager attention's score tensors \(GiB\) +\| +0\.28 \|" \
  ./predict_gpt $EG --recompute block
check_cli "eager T5, no recompute: encoder and decoder blocks', 0.48 GiB" 0 "eager attention's score tensors \(GiB\) +\| +0\.48 \|" \
  ./predict_gpt $ET --recompute none
check_cli "eager T5, block recompute: the largest block's, 0.12 GiB" 0 "eager attention's score tensors \(GiB\) +\| +0\.12 \|" \
  ./predict_gpt $ET --recompute block
check_cli "eager score tensors count against the GPU's memory" 0 "note: the plan with the eager attention's score tensors needs" \
  ./predict_gpt --model gpt:L=4,C=256,H=8,V=256,T=1024 --batch 512 --predict a100-40gb --world 8 --predict-attention eager
check_cli "--predict list prints the catalogue's figures (no model, no --world): EFA's 59% bus bandwidth" 0 \
  "^\| efa400 +\| +8 \| +50 \| +59% \| +4 \|" ./train_gpt_cpu --predict list
check_cli "--predict with an unknown GPU names the choices" 2 "unknown GPU 'v100'.*a100-40gb" \
  ./train_gpt_cpu --model gpt2-124m --predict v100 --world 8
check_cli "--predict without --world says so" 2 "needs --world N" ./train_gpt_cpu --model gpt2-124m --predict h200
check_cli "--predict-attention eager says which attention it models" 0 "note: with Hugging Face T5's unfused attention" \
  ./predict_gpt --model t5-small --predict a100-80gb --world 8 --predict-attention eager
check_cli "a bad --predict-attention names the choices" 2 "must be fused .* or eager" \
  ./predict_gpt --model gpt2-124m --predict h200 --world 8 --predict-attention flash
check_cli "--predict-attention without --predict is refused" 2 "--predict-attention is for --predict" \
  ./train_gpt_cpu --model gpt2-124m --data x --predict-attention eager
check_cli "--predict reports the SMs a collective holds (2 per NIC, 8 NICs per RoCE node)" 0 "SMs a collective holds \\(of 108\\) *\\| *16 \\|" \
  ./predict_gpt --model gpt2-124m --predict a100-80gb --world 16
check_cli "--predict-comm-sms caps the collectives' SMs and says so" 0 "note: each collective holds at most 4 SMs" \
  ./predict_gpt --model gpt2-124m --predict a100-80gb --world 16 --predict-comm-sms 4
check_cli "--predict-comm-sms without --predict is refused" 2 "--predict-comm-sms is for --predict" \
  ./train_gpt_cpu --model gpt2-124m --data x --predict-comm-sms 8
check_cli "--predict --trace writes a Chrome trace" 0 "trace: " ./predict_gpt --model gpt2-124m --predict h200 \
  --world 8 --trace "$TMP/trace.json"
if [ "$(tail -1 "$TMP/cli.out" | cut -d' ' -f1)" = predict_tflops_per_gpu ]; then
  echo "ok   with --trace too, the last line is predict_tflops_per_gpu"
  pass=$((pass + 1))
else
  echo "FAIL with --trace, the last line is not predict_tflops_per_gpu: $(tail -1 "$TMP/cli.out")"
  fail=$((fail + 1))
fi
if python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
assert any(e.get('name', '').startswith('reduce-scatter block') and e.get('tid') == 2 for e in ev)
assert any(e.get('name') == 'matmul_forward' and e.get('tid') == 3 for e in ev)
assert any(e.get('ph') == 'C' and e['args']['SMs'] == 32 for e in ev)  # 2 x 18 NVLinks, at most 32" "$TMP/trace.json" 2> /dev/null; then
  echo "ok   the trace is JSON with unit spans (reduce-scatter), kernel tracks (matmul_forward) and the SMs collectives held"
  pass=$((pass + 1))
else
  echo "FAIL the trace is not JSON with unit spans, kernel tracks and the SMs collectives held"
  fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
