#!/usr/bin/env bash
# Multi-rank FSDP tests on the CPU backend (MPI). Prints "ok"/"FAIL" per check and ends with
# "N passed, M failed".
#
# The core claim: W ranks with accumulation A equal one rank with accumulation W*A. With A = 1
# this is bit-exact (same loss log, same params_digest) for full, grad-op and none, because
# every sum is folded in rank order; hybrid sharding, W ranks with A > 1 and --no-sync-accum
# regroup the sums, so they must agree within 1e-6 relative.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN="mpirun --oversubscribe --bind-to none"
BIN=./train_gpt_cpu
DATA=data/addition/train_000.bin
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# A tiny model with odd shapes that force padding everywhere (C=72, V=509: no unit is a
# multiple of 128, let alone of F*128), 6 steps with a learning rate high enough and a clip
# low enough that clipping is active on every step.
ARGS="--model gpt:L=3,C=72,H=3,V=509,T=32 --data $DATA --batch 2 --seq 32 --steps 6 --lr 1e-2 --warmup 2 --grad-clip 0.5 --digest"

run() {  # run NAME NP extra-args...
  local name=$1 np=$2
  shift 2
  if [ "$np" = 1 ]; then
    $BIN $ARGS --log "$TMP/$name.json" --dump-params "$TMP/$name.bin" "$@" > "$TMP/$name.out" 2>&1
  else
    $MPIRUN -np "$np" $BIN $ARGS --log "$TMP/$name.json" --dump-params "$TMP/$name.bin" "$@" > "$TMP/$name.out" 2>&1
  fi
}
losses() { sed -e 's/, "ms".*//' "$1"; }  # the log without its timings
digest() { grep params_digest "$1" | awk '{print $2}'; }

# Reference runs: one rank with accumulation 1..4 and 8.
for A in 1 2 3 4 8; do run ref$A 1 --accum $A || bad "reference run --accum $A"; done
clipped=$(python3 -c "import json,sys; print(all(json.loads(l)['grad_norm'] > 0.5 for l in open(sys.argv[1]) if 'grad_norm' in l))" "$TMP/ref4.json")
[ "$clipped" = True ] && ok "clipping is active on every step of the reference" || bad "clipping is not active on every step"

for W in 1 2 3 4; do
  for S in full grad-op none; do
    name="w${W}_$S"
    if ! run "$name" "$W" --shard "$S" --accum 1; then bad "$name: run failed ($(tail -1 "$TMP/$name.out"))"; continue; fi
    if [ "$(digest "$TMP/$name.out")" = "$(digest "$TMP/ref$W.out")" ] && [ -n "$(digest "$TMP/$name.out")" ] &&
       diff -q <(losses "$TMP/$name.json") <(losses "$TMP/ref$W.json") > /dev/null; then
      ok "bit-exact: $W ranks --shard $S == 1 rank --accum $W (digest $(digest "$TMP/$name.out"))"
    else
      bad "bit-exact: $W ranks --shard $S vs 1 rank --accum $W: digest $(digest "$TMP/$name.out") vs $(digest "$TMP/ref$W.out")"
    fi
  done
done

close() {  # close NAME REF DESCRIPTION
  local r
  r=$(python3 test/compare_params.py "$TMP/$1.bin" "$TMP/$2.bin" "$TMP/$1.json" "$TMP/$2.json" 1e-6)
  if [ $? = 0 ]; then ok "$3 ($r)"; else bad "$3 ($r)"; fi
}
run hybrid 4 --shard hybrid:2 --accum 1 && close hybrid ref4 "4 ranks --shard hybrid:2 within 1e-6 of 1 rank --accum 4" || bad "hybrid run failed"
run hybrid_a2 4 --shard hybrid:2 --accum 2 && close hybrid_a2 ref8 "4 ranks --shard hybrid:2 --accum 2 within 1e-6 of 1 rank --accum 8" || bad "hybrid accum run failed"
run w4_a2 4 --accum 2 && close w4_a2 ref8 "4 ranks --accum 2 within 1e-6 of 1 rank --accum 8" || bad "accum run failed"
run w2_nosync 2 --accum 2 --no-sync-accum && close w2_nosync ref4 "2 ranks --accum 2 --no-sync-accum within 1e-6 of 1 rank --accum 4" || bad "no-sync run failed"
run w3_nosync_gradop 3 --shard grad-op --no-sync-accum && close w3_nosync_gradop ref3 "3 ranks grad-op --no-sync-accum within 1e-6 of 1 rank --accum 3" || bad "no-sync grad-op run failed"
run w2_k1 2 --limit-all-gathers 1 --prefetch none --accum 1 &&
  [ "$(digest "$TMP/w2_k1.out")" = "$(digest "$TMP/ref2.out")" ] && ok "--limit-all-gathers 1 --prefetch none is bit-exact too" || bad "--limit-all-gathers 1 --prefetch none differs"

# T5 (encoder-decoder units, span-corrupted batches with padded targets): the same claims.
T5A="--data $DATA --batch 2 --enc-len 30 --dec-len 12 --steps 5 --lr 1e-2 --warmup 2 --grad-clip 0.5 --digest"
for MODEL in "t5:L=2,M=2,C=40,H=3,D=12,F=72,V=509" "t5v1.1:L=1,M=2,C=40,H=3,D=12,F=56,V=509"; do
  tag=$(echo "$MODEL" | cut -d: -f1)
  for W in 2 3; do
    ARGS_SAVED=$ARGS
    ARGS="--model $MODEL $T5A"
    run "${tag}_ref$W" 1 --accum $W
    for S in full grad-op none; do
      name="${tag}_w${W}_$S"
      run "$name" "$W" --shard "$S" || bad "$name: run failed"
      if [ -n "$(digest "$TMP/$name.out")" ] && [ "$(digest "$TMP/$name.out")" = "$(digest "$TMP/${tag}_ref$W.out")" ] &&
         diff -q <(losses "$TMP/$name.json") <(losses "$TMP/${tag}_ref$W.json") > /dev/null; then
        ok "bit-exact $tag: $W ranks --shard $S == 1 rank --accum $W"
      else
        bad "bit-exact $tag: $W ranks --shard $S vs 1 rank --accum $W: $(digest "$TMP/$name.out") vs $(digest "$TMP/${tag}_ref$W.out")"
      fi
    done
    ARGS=$ARGS_SAVED
  done
  ARGS_SAVED=$ARGS
  ARGS="--model $MODEL $T5A"
  run "${tag}_ref4" 1 --accum 4
  run "${tag}_hybrid" 4 --shard hybrid:2 && close "${tag}_hybrid" "${tag}_ref4" "$tag: 4 ranks --shard hybrid:2 within 1e-6 of 1 rank --accum 4" || bad "$tag hybrid run failed"
  ARGS=$ARGS_SAVED
done

# --trace: a Chrome trace per rank with every unit's all-gather, compute and reduce-scatter.
$MPIRUN -np 2 $BIN $ARGS --steps 2 --trace "$TMP/trace.json" > "$TMP/trace.out" 2>&1
r=$(python3 - "$TMP/trace.json" <<'PYEOF'
import collections, json, sys
L, steps = 3, 2
for rank in (0, 1):
    ev = [e for e in json.load(open("%s.rank%d" % (sys.argv[1], rank)))["traceEvents"] if e["ph"] == "X"]
    c = collections.Counter(e["cat"] for e in ev)
    # The root computes twice per pass: the embedding, and the final norm + lm_head + loss
    # after the blocks' forward (their gradients before the blocks' backward).
    want = {"all-gather": (1 + 2 * L) * steps, "forward": (2 + L) * steps, "backward": (2 + L) * steps,
            "reduce-scatter": (1 + L) * steps, "optimizer": steps}
    if dict(c) != want:
        print("rank %d: %s != %s" % (rank, dict(c), want)); sys.exit(1)
    # The compute track, in time order, is the step as train_gpt.c runs it, with no gap left
    # unnamed where the root computes and no two compute spans overlapping.
    one = (["forward root"] + ["forward block.%d" % l for l in range(L)] + ["forward root", "backward root"]
           + ["backward block.%d" % l for l in reversed(range(L))] + ["backward root", "optimizer"])
    compute = sorted((e for e in ev if e["tid"] == 0), key=lambda e: e["ts"])
    if [e["name"] for e in compute] != one * steps:
        print("rank %d compute track: %s" % (rank, [e["name"] for e in compute])); sys.exit(1)
    if any(b["ts"] < a["ts"] + a["dur"] - 1e-3 for a, b in zip(compute, compute[1:])):
        print("overlapping compute spans on rank %d" % rank); sys.exit(1)
    comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] in (1, 2))
    if any(b[0] < a[1] - 1e-3 for a, b in zip(comm, comm[1:])):  # CPU collectives run one at a time
        print("overlapping collectives on rank %d" % rank); sys.exit(1)
    if any(e["dur"] < 0 for e in ev):
        print("negative duration"); sys.exit(1)
print("ok")
PYEOF
)
[ "$r" = ok ] && ok "--trace writes a Chrome trace per rank with every unit's all-gather, compute and reduce-scatter, the root's head included" || bad "--trace: $r"

# T5's root computes three times per pass: embeddings, then between the stacks (the encoder's
# final norm, the decoder's embedding), then the head; each stretch is a span of its own.
$MPIRUN -np 2 $BIN --model t5:L=2,M=2,C=40,H=3,D=12,F=72,V=509 $T5A --steps 1 --trace "$TMP/trace5.json" > "$TMP/trace5.out" 2>&1
r=$(python3 - "$TMP/trace5.json" <<'PYEOF'
import json, sys
enc, dec = ["encoder.%d" % l for l in range(2)], ["decoder.%d" % l for l in range(2)]
one = (["forward root"] + ["forward " + u for u in enc] + ["forward root"] + ["forward " + u for u in dec]
       + ["forward root", "backward root"] + ["backward " + u for u in reversed(dec)] + ["backward root"]
       + ["backward " + u for u in reversed(enc)] + ["backward root", "optimizer"])
for rank in (0, 1):
    ev = [e for e in json.load(open("%s.rank%d" % (sys.argv[1], rank)))["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    names = [e["name"] for e in sorted(ev, key=lambda e: e["ts"])]
    if names != one:
        print("rank %d compute track: %s" % (rank, names)); sys.exit(1)
print("ok")
PYEOF
)
[ "$r" = ok ] && ok "--trace, T5: the root's compute between and after the stacks has spans of its own" || bad "--trace T5: $r $(tail -2 "$TMP/trace5.out")"

# Checkpoints are independent of the world size: 3 steps on one rank, saved, then resumed on
# two ranks for 3 more steps ends bit-identical to 6 uninterrupted steps; and back from 3 ranks
# to one.
CK="$TMP/ck"
CKARGS=$(echo "$ARGS" | sed 's/--steps 6//')
$BIN $CKARGS --steps 3 --accum 2 --save "$CK" > "$TMP/ck1.out" 2>&1
$MPIRUN -np 2 $BIN $CKARGS --steps 6 --resume "$CK" > "$TMP/ck2.out" 2>&1
[ -n "$(digest "$TMP/ck2.out")" ] && [ "$(digest "$TMP/ck2.out")" = "$(digest "$TMP/ref2.out")" ] &&
  ok "checkpoint saved on 1 rank, resumed on 2: bit-identical to an uninterrupted run" ||
  bad "checkpoint 1 -> 2 ranks: $(digest "$TMP/ck2.out") vs $(digest "$TMP/ref2.out") $(tail -2 "$TMP/ck2.out")"
$MPIRUN -np 3 $BIN $CKARGS --steps 3 --shard none --save "$CK" > "$TMP/ck3.out" 2>&1
$BIN $CKARGS --steps 6 --accum 3 --resume "$CK" > "$TMP/ck4.out" 2>&1
[ -n "$(digest "$TMP/ck4.out")" ] && [ "$(digest "$TMP/ck4.out")" = "$(digest "$TMP/ref3.out")" ] &&
  ok "checkpoint saved on 3 replicas (--shard none), resumed on 1: bit-identical to an uninterrupted run" ||
  bad "checkpoint 3 -> 1 ranks: $(digest "$TMP/ck4.out") vs $(digest "$TMP/ref3.out")"
[ ! -e "$CK.tmp" ] && [ ! -e "$CK.old" ] && ok "saving leaves no temporary checkpoint behind" || bad "temporary checkpoint left behind"
out=$($BIN --model gpt:L=2,C=72,H=3,V=509,T=32 --data $DATA --batch 2 --seq 32 --steps 4 --resume "$CK" 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "holds model" && ok "resuming another model is refused" || bad "resume with another model: $out"
truncate -s 1000 "$CK/adam_v.bin"
out=$($BIN $CKARGS --steps 6 --resume "$CK" 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "adam_v.bin" && ok "a truncated checkpoint is refused, naming the file" || bad "truncated checkpoint: $out"

# The comparison must be able to fail: a different seed gives different parameters.
run other 1 --accum 4 --seed 7
python3 test/compare_params.py "$TMP/other.bin" "$TMP/ref4.bin" "$TMP/other.json" "$TMP/ref4.json" 1e-6 > /dev/null &&
  bad "compare_params.py accepted different runs" || ok "compare_params.py rejects a different run"

# Impossible configurations get clear errors.
out=$($MPIRUN -np 4 $BIN $ARGS --shard hybrid:3 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "divide the world size" && ok "hybrid:3 on 4 ranks is refused" || bad "hybrid:3 on 4 ranks: $out"
out=$($MPIRUN -np 3 $BIN $ARGS --global-batch 8 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "must be a multiple of batch x ranks" && ok "--global-batch 8 on 3 ranks x batch 2 is refused" || bad "global batch split: $out"
$MPIRUN -np 2 $BIN $ARGS --global-batch 8 --steps 1 > /dev/null 2>&1 && ok "--global-batch 8 on 2 ranks x batch 2 runs (accum 2)" || bad "--global-batch 8 on 2 ranks failed"

# A bad data path on one rank brings every rank down within seconds, naming that rank.
start=$(date +%s)
out=$(timeout 60 $MPIRUN -np 3 bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then d=/nonexistent/shard_*.bin; else d='"$DATA"'; fi; exec '"$BIN"' '"${ARGS/--data $DATA/}"' --data "$d"' 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ $rc != 0 ] && [ $rc != 124 ] && [ $elapsed -lt 20 ] && echo "$out" | grep -q "\[rank 2\] error"; then
  ok "a missing file on rank 2 stops all 3 ranks in ${elapsed}s with a message naming rank 2"
else
  bad "missing file on one rank: rc=$rc after ${elapsed}s: $(echo "$out" | head -3)"
fi

# Activation checkpointing re-runs a block's forward (block) or its norms and activation
# functions (selective) with the same kernels on the same inputs: the same bits as keeping the
# activations, at W=1 and W=3 with accumulation, for GPT and both T5 versions.
for m in "gpt:L=3,C=72,H=3,V=509,T=32 --seq 32" "t5:L=2,C=48,H=3,D=16,F=96,V=512 --enc-len 40 --dec-len 12" \
         "t5v1.1:L=2,M=3,C=48,H=3,D=16,F=64,V=512 --enc-len 40 --dec-len 12"; do
  RC="--model $m --data $DATA --batch 2 --steps 3 --lr 1e-3 --digest"
  $BIN $RC --accum 6 > "$TMP/rc_none1.out" 2>&1
  $MPIRUN -np 3 $BIN $RC --accum 2 > "$TMP/rc_none3.out" 2>&1
  d1=$(digest "$TMP/rc_none1.out") d3=$(digest "$TMP/rc_none3.out")
  for mode in block selective; do
    $BIN $RC --accum 6 --recompute $mode > "$TMP/rc_1.out" 2>&1
    $MPIRUN -np 3 $BIN $RC --accum 2 --recompute $mode > "$TMP/rc_3.out" 2>&1
    [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/rc_1.out")" ] && [ "$d3" = "$(digest "$TMP/rc_3.out")" ] &&
      ok "${m%% *}: --recompute $mode is bit-identical to keeping activations, on 1 rank (accum 6) and 3 ranks (accum 2)" ||
      bad "${m%% *} --recompute $mode: W=1 $d1 vs $(digest "$TMP/rc_1.out"); W=3 $d3 vs $(digest "$TMP/rc_3.out")"
  done
done

# --wrap linear makes each matmul weight its own unit (norms and biases with their neighbour):
# the same parameters, initial values and arithmetic in more, smaller units, so the same bits as
# --wrap block with every recompute mode and strategy, with accumulation (synchronized or not).
RC="--model gpt:L=3,C=72,H=3,V=509,T=32 --seq 32 --data $DATA --batch 2 --steps 3 --lr 1e-3 --digest"
for cfg in "--recompute none" "--recompute block" "--recompute block --limit-all-gathers 1" "--recompute selective --no-sync-accum" \
           "--recompute block --shard grad-op" "--recompute block --shard none --prefetch none"; do
  $BIN $RC --accum 6 $cfg > "$TMP/wr_ref1.out" 2>&1
  $MPIRUN -np 3 $BIN $RC --accum 2 $cfg > "$TMP/wr_ref3.out" 2>&1
  $BIN $RC --accum 6 --wrap linear $cfg > "$TMP/wr_1.out" 2>&1
  $MPIRUN -np 3 $BIN $RC --accum 2 --wrap linear $cfg > "$TMP/wr_3.out" 2>&1
  d1=$(digest "$TMP/wr_ref1.out") d3=$(digest "$TMP/wr_ref3.out")
  [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/wr_1.out")" ] && [ "$d3" = "$(digest "$TMP/wr_3.out")" ] &&
    grep -q "units  *| 13 " "$TMP/wr_1.out" &&
    ok "--wrap linear $cfg: 13 units, bit-identical to --wrap block on 1 rank (accum 6) and 3 ranks (accum 2)" ||
    bad "--wrap linear $cfg: W=1 $d1 vs $(digest "$TMP/wr_1.out"); W=3 $d3 vs $(digest "$TMP/wr_3.out")"
done

# --offload moves shards, AdamW state (and its step) and block outputs to host memory; on the
# CPU backend every copy and the host step must give the same bits as keeping everything in
# place: each of the 15 subsets, at W=1 (accum 6) and W=3 (accum 2), with 5 blocks (more than
# the device ring of 3 block outputs) and the recompute modes and wrapping policies in turn.
RC="--model gpt:L=5,C=72,H=3,V=509,T=32 --seq 32 --data $DATA --batch 2 --steps 3 --lr 1e-3 --digest"
$BIN $RC --accum 6 > "$TMP/off_ref1.out" 2>&1
$MPIRUN -np 3 $BIN $RC --accum 2 > "$TMP/off_ref3.out" 2>&1
d1=$(digest "$TMP/off_ref1.out") d3=$(digest "$TMP/off_ref3.out")
i=0
for sub in params optim grads activations params,optim params,grads params,activations optim,grads optim,activations \
           grads,activations params,optim,grads params,optim,activations params,grads,activations optim,grads,activations all; do
  extra=$(case $((i % 4)) in 0) echo "";; 1) echo "--recompute block";; 2) echo "--recompute selective --wrap linear";;
          3) echo "--recompute block --wrap linear --limit-all-gathers 1";; esac)
  i=$((i + 1))
  $BIN $RC --accum 6 --offload $sub $extra > "$TMP/off_1.out" 2>&1
  $MPIRUN -np 3 $BIN $RC --accum 2 --offload $sub $extra > "$TMP/off_3.out" 2>&1
  [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/off_1.out")" ] && [ "$d3" = "$(digest "$TMP/off_3.out")" ] &&
    ok "--offload $sub${extra:+ $extra}: bit-identical to no offload on 1 rank (accum 6) and 3 ranks (accum 2)" ||
    bad "--offload $sub $extra: W=1 $d1 vs $(digest "$TMP/off_1.out"); W=3 $d3 vs $(digest "$TMP/off_3.out"): $(grep -m1 error "$TMP/off_1.out" "$TMP/off_3.out")"
done
# T5's block outputs are the encoder's then the decoder's (two sizes: --enc-len and --dec-len
# rows): 5 + 4 blocks through the device ring of 3, with the recompute modes.
T5O="--model t5:L=5,M=4,C=40,H=3,D=12,F=72,V=509 --data $DATA --batch 2 --enc-len 30 --dec-len 12 --steps 3 --lr 1e-3 --digest"
$BIN $T5O --accum 6 > "$TMP/t5o_ref1.out" 2>&1
$MPIRUN -np 3 $BIN $T5O --accum 2 > "$TMP/t5o_ref3.out" 2>&1
d1=$(digest "$TMP/t5o_ref1.out") d3=$(digest "$TMP/t5o_ref3.out")
for cfg in "activations" "activations --recompute block" "all --recompute selective" "optim,activations --recompute block --limit-all-gathers 1"; do
  $BIN $T5O --accum 6 --offload $cfg > "$TMP/t5o_1.out" 2>&1
  $MPIRUN -np 3 $BIN $T5O --accum 2 --offload $cfg > "$TMP/t5o_3.out" 2>&1
  [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/t5o_1.out")" ] && [ "$d3" = "$(digest "$TMP/t5o_3.out")" ] &&
    ok "T5 --offload $cfg: bit-identical to no offload on 1 rank (accum 6) and 3 ranks (accum 2)" ||
    bad "T5 --offload $cfg: W=1 $d1 vs $(digest "$TMP/t5o_1.out"); W=3 $d3 vs $(digest "$TMP/t5o_3.out"): $(grep -m1 -i error "$TMP/t5o_1.out" "$TMP/t5o_3.out")"
done

# Sharded layout, init and memory on W ranks (each rank checks its own shard).
for W in 2 3 4; do
  if $MPIRUN -np $W build/test/test_fsdp > "$TMP/fsdp$W.out" 2>&1; then ok "test_fsdp on $W ranks: $(tail -1 "$TMP/fsdp$W.out")"
  else bad "test_fsdp on $W ranks: $(grep FAIL "$TMP/fsdp$W.out" | head -3)"; fi
done

cases_summary
[ $fail = 0 ]
