#!/usr/bin/env bash
# Multi-rank FSDP tests on the CPU backend (MPI). Prints "ok"/"FAIL" per check and ends with
# "N passed, M failed".
#
# The core claim: W ranks with accumulation A equal one rank with accumulation W*A. With A = 1
# this is bit-exact (same loss log, same params_digest) for full, grad-op and none, because
# every sum is folded in rank order; hybrid sharding, W ranks with A > 1 and --no-sync-accum
# regroup the sums, so they must agree within 1e-6 relative.
#
# Runs that do not depend on each other start together (test/cases.sh's spawn). TEST_FILTER
# picks sections by name: "bit-exact GPT", hybrid, hpz, accum, no-sync, limit, "bit-exact t5",
# "bit-exact llama", trace, checkpoint, refused, "missing file", recompute, wrap, offload, test_fsdp.
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

# run NAME NP extra-args...: in the background (test/cases.sh's spawn): its output, log and
# parameters in $TMP/NAME.*, read after settle. ARGS is read when the run starts.
run() {
  local name=$1 np=$2
  shift 2
  if [ "$np" = 1 ]; then
    spawn "$TMP/$name.out" $BIN $ARGS --log "$TMP/$name.json" --dump-params "$TMP/$name.bin" "$@"
  else
    spawn "$TMP/$name.out" $MPIRUN -np "$np" $BIN $ARGS --log "$TMP/$name.json" --dump-params "$TMP/$name.bin" "$@"
  fi
}
ran() { [ "$(rc_of "$TMP/$1.out")" = 0 ]; }  # ran NAME: the run exited 0
losses() { sed -e 's/, "ms".*//' "$1"; }  # the log without its timings
digest() { grep params_digest "$1" | awk '{print $2}'; }

# Reference runs: one rank with accumulation 1..4, 6 and 8 (ref1 is also "1 rank --shard full").
# Every run of this section starts at once (spawn), and the checks follow.
# --shard hpz reshards after forward to the node (secondary shards), so backward all-gathers
# stay in node groups; gradients and AdamW are full sharding's, so the bits are too. Nodes are
# laid out on this host by FSDP_NODE_MAP; round robin (0,1,0,1) makes the groups {0,2} {1,3}, and
# orders the shards (and so the sums) by placement: full sharding on that map is the reference.
hpz() {  # hpz NAME NP NODE_MAP extra-args...: in the background, as run
  local name=$1 np=$2 map=$3
  shift 3
  spawn "$TMP/$name.out" $MPIRUN -np "$np" -x FSDP_NODE_MAP="$map" $BIN $ARGS --log "$TMP/$name.json" "$@"
}
close() {  # close NAME REF DESCRIPTION
  local r
  r=$(python3 test/compare_params.py "$TMP/$1.bin" "$TMP/$2.bin" "$TMP/$1.json" "$TMP/$2.json" 1e-6)
  if [ $? = 0 ]; then ok "$3 ($r)"; else bad "$3 ($r)"; fi
}
same_bits() {  # same_bits NAME REF DESCRIPTION: the same digest and loss log
  [ -n "$(digest "$TMP/$1.out")" ] && [ "$(digest "$TMP/$1.out")" = "$(digest "$TMP/$2.out")" ] &&
    diff -q <(losses "$TMP/$1.json") <(losses "$TMP/$2.json") > /dev/null &&
    ok "$3 (digest $(digest "$TMP/$1.out"))" || bad "$3: digest $(digest "$TMP/$1.out") vs $(digest "$TMP/$2.out") $(grep -m1 error "$TMP/$1.out")"
}
if want "bit-exact GPT" || want hybrid || want accum || want "no-sync" || want limit || want compare_params || \
   want checkpoint || want hpz; then
for A in 1 2 3 4 6 8; do run ref$A 1 --accum $A; done
for W in 1 2 3 4; do
  for S in full grad-op none; do [ "$W$S" = 1full ] || run "w${W}_$S" "$W" --shard "$S" --accum 1; done
done
run hybrid 4 --shard hybrid:2 --accum 1
run hybrid_a2 4 --shard hybrid:2 --accum 2
run w4_a2 4 --accum 2
run w2_nosync 2 --accum 2 --no-sync-accum
run w3_nosync_gradop 3 --shard grad-op --no-sync-accum
run w2_k1 2 --limit-all-gathers 1 --prefetch none --accum 1
run other 1 --accum 4 --seed 7
if want hpz; then
  hpz hpz_rr 4 0,1,0,1 --shard hpz --accum 2 --trace "$TMP/hpz_trace.json"
  hpz full_rr 4 0,1,0,1 --shard full --accum 2
  # Six ranks: node groups of 3 with per-linear units and block recomputation (a block's 4 units
  # are re-gathered for the recomputed forward, 3 of them again for backward), and of 2 with
  # everything offloaded and selective recomputation: the bits of one rank with accumulation 6.
  hpz hpz_w6 6 0,0,0,1,1,1 --shard hpz --recompute block --wrap linear
  hpz hpz_w6_off 6 0,0,1,1,2,2 --shard hpz --offload all --recompute selective
fi
settle
for f in out out.rc json; do cp "$TMP/ref1.$f" "$TMP/w1_full.$f"; done
for A in 1 2 3 4 6 8; do ran ref$A || bad "reference run --accum $A"; done
clipped=$(python3 -c "import json,sys; print(all(json.loads(l)['grad_norm'] > 0.5 for l in open(sys.argv[1]) if 'grad_norm' in l))" "$TMP/ref4.json")
[ "$clipped" = True ] && ok "clipping is active on every step of the reference" || bad "clipping is not active on every step"

for W in 1 2 3 4; do
  for S in full grad-op none; do
    name="w${W}_$S"
    if ! ran "$name"; then bad "$name: run failed ($(tail -1 "$TMP/$name.out"))"; continue; fi
    if [ "$(digest "$TMP/$name.out")" = "$(digest "$TMP/ref$W.out")" ] && [ -n "$(digest "$TMP/$name.out")" ] &&
       diff -q <(losses "$TMP/$name.json") <(losses "$TMP/ref$W.json") > /dev/null; then
      ok "bit-exact: $W ranks --shard $S == 1 rank --accum $W (digest $(digest "$TMP/$name.out"))"
    else
      bad "bit-exact: $W ranks --shard $S vs 1 rank --accum $W: digest $(digest "$TMP/$name.out") vs $(digest "$TMP/ref$W.out")"
    fi
  done
done

ran hybrid && close hybrid ref4 "4 ranks --shard hybrid:2 within 1e-6 of 1 rank --accum 4" || bad "hybrid run failed"
ran hybrid_a2 && close hybrid_a2 ref8 "4 ranks --shard hybrid:2 --accum 2 within 1e-6 of 1 rank --accum 8" || bad "hybrid accum run failed"
ran w4_a2 && close w4_a2 ref8 "4 ranks --accum 2 within 1e-6 of 1 rank --accum 8" || bad "accum run failed"
ran w2_nosync && close w2_nosync ref4 "2 ranks --accum 2 --no-sync-accum within 1e-6 of 1 rank --accum 4" || bad "no-sync run failed"
ran w3_nosync_gradop && close w3_nosync_gradop ref3 "3 ranks grad-op --no-sync-accum within 1e-6 of 1 rank --accum 3" || bad "no-sync grad-op run failed"
ran w2_k1 && [ "$(digest "$TMP/w2_k1.out")" = "$(digest "$TMP/ref2.out")" ] && ok "--limit-all-gathers 1 --prefetch none is bit-exact too" || bad "--limit-all-gathers 1 --prefetch none differs"
# The comparison must be able to fail: a different seed gives different parameters.
python3 test/compare_params.py "$TMP/other.bin" "$TMP/ref4.bin" "$TMP/other.json" "$TMP/ref4.json" 1e-6 > /dev/null &&
  bad "compare_params.py accepted different runs" || ok "compare_params.py rejects a different run"
if want hpz; then
  same_bits hpz_rr full_rr "4 ranks --shard hpz --accum 2 (node groups {0,2} {1,3}) == 4 ranks --shard full --accum 2"
  grep -q "node groups (F2=2[^)]*): {0,2} {1,3}$" "$TMP/hpz_rr.out" && grep -q "collectives per step: 14 all-gathers (6 of them over node groups), 8 reduce-scatters" "$TMP/hpz_rr.out" &&
    [ "$(grep -c '"cat": "all-gather (node)"' "$TMP/hpz_trace.json.rank0")" = 36 ] &&
    ok "hpz: node groups follow the placement; per step 2 x (1 + 3 + 3) all-gathers, the 2 x 3 of backward over node groups (counted, and in --trace)" ||
    bad "hpz groups and counts: $(grep -E 'node groups|collectives' "$TMP/hpz_rr.out")"
  same_bits hpz_w6 ref6 "6 ranks --shard hpz (node groups of 3) --recompute block --wrap linear == 1 rank --accum 6"
  grep -q "collectives per step: 34 all-gathers (21 of them over node groups), 13 reduce-scatters" "$TMP/hpz_w6.out" &&
    ok "hpz, --wrap linear --recompute block: 13 forward all-gathers, 4 + 3 per block in backward over node groups" ||
    bad "hpz w6 counts: $(grep collectives "$TMP/hpz_w6.out")"
  same_bits hpz_w6_off ref6 "6 ranks --shard hpz (node groups of 2) --offload all --recompute selective == 1 rank --accum 6"
fi

fi

# T5 (encoder-decoder units, span-corrupted batches with padded targets): the same claims.
T5A="--data $DATA --batch 2 --enc-len 30 --dec-len 12 --steps 5 --lr 1e-2 --warmup 2 --grad-clip 0.5 --digest"
T5MODELS="t5:L=2,M=2,C=40,H=3,D=12,F=72,V=509 t5v1.1:L=1,M=2,C=40,H=3,D=12,F=56,V=509"
if want "bit-exact t5" || want hybrid || want hpz; then
ARGS_SAVED=$ARGS
for MODEL in $T5MODELS; do
  tag=${MODEL%%:*}
  ARGS="--model $MODEL $T5A"
  for W in 2 3 4; do run "${tag}_ref$W" 1 --accum $W; done
  for W in 2 3; do
    for S in full grad-op none; do run "${tag}_w${W}_$S" "$W" --shard "$S"; done
  done
  run "${tag}_hybrid" 4 --shard hybrid:2
  want hpz && hpz "${tag}_hpz" 4 0,0,1,1 --shard hpz
done
ARGS=$ARGS_SAVED
settle
for MODEL in $T5MODELS; do
  tag=${MODEL%%:*}
  for W in 2 3; do
    for S in full grad-op none; do
      name="${tag}_w${W}_$S"
      ran "$name" || bad "$name: run failed"
      if [ -n "$(digest "$TMP/$name.out")" ] && [ "$(digest "$TMP/$name.out")" = "$(digest "$TMP/${tag}_ref$W.out")" ] &&
         diff -q <(losses "$TMP/$name.json") <(losses "$TMP/${tag}_ref$W.json") > /dev/null; then
        ok "bit-exact $tag: $W ranks --shard $S == 1 rank --accum $W"
      else
        bad "bit-exact $tag: $W ranks --shard $S vs 1 rank --accum $W: $(digest "$TMP/$name.out") vs $(digest "$TMP/${tag}_ref$W.out")"
      fi
    done
  done
  ran "${tag}_hybrid" && close "${tag}_hybrid" "${tag}_ref4" "$tag: 4 ranks --shard hybrid:2 within 1e-6 of 1 rank --accum 4" || bad "$tag hybrid run failed"
  want hpz && same_bits "${tag}_hpz" "${tag}_ref4" "$tag: 4 ranks --shard hpz (encoder and decoder units) == 1 rank --accum 4"
done
fi

# Llama (grouped-query attention 3:1 with rotary q and k, SwiGLU, an untied lm_head): the same
# claims, and recompute, --wrap linear and offload bit-identical to the plain run.
LLA="--model llama:L=2,C=72,H=6,KV=2,F=100,V=509,T=24 --data $DATA --batch 2 --seq 24 --steps 5 --lr 1e-2 --warmup 2 --grad-clip 0.5 --digest"
LLAMA_VARIANTS=("--recompute block" "--recompute selective" "--wrap linear --recompute block"
                "--wrap linear --offload all --recompute selective")
if want "bit-exact llama" || want hybrid || want hpz; then
ARGS_SAVED=$ARGS
ARGS=$LLA
for W in 2 3 4; do run "llama_ref$W" 1 --accum $W; done
for W in 2 3 4; do
  for S in full grad-op none; do run "llama_w${W}_$S" "$W" --shard "$S"; done
done
run llama_hybrid 4 --shard hybrid:2
want hpz && hpz llama_hpz 4 0,0,1,1 --shard hpz
for i in "${!LLAMA_VARIANTS[@]}"; do
  run "llama_v${i}_1" 1 --accum 3 ${LLAMA_VARIANTS[$i]}
  run "llama_v${i}_3" 3 ${LLAMA_VARIANTS[$i]}
done
ARGS=$ARGS_SAVED
settle
for W in 2 3 4; do
  for S in full grad-op none; do
    ran "llama_w${W}_$S" || bad "llama_w${W}_$S: run failed ($(grep -m1 error "$TMP/llama_w${W}_$S.out"))"
    same_bits "llama_w${W}_$S" "llama_ref$W" "bit-exact llama: $W ranks --shard $S == 1 rank --accum $W"
  done
done
ran llama_hybrid && close llama_hybrid llama_ref4 "llama: 4 ranks --shard hybrid:2 within 1e-6 of 1 rank --accum 4" || bad "llama hybrid run failed"
want hpz && same_bits llama_hpz llama_ref4 "llama: 4 ranks --shard hpz == 1 rank --accum 4"
for i in "${!LLAMA_VARIANTS[@]}"; do
  same_bits "llama_v${i}_1" llama_ref3 "llama ${LLAMA_VARIANTS[$i]}: 1 rank --accum 3 == the plain run"
  same_bits "llama_v${i}_3" llama_ref3 "llama ${LLAMA_VARIANTS[$i]}: 3 ranks == the plain run"
done
fi

# --trace: a Chrome trace per rank with every unit's all-gather, compute and reduce-scatter.
if want trace; then
spawn "$TMP/trace.out" $MPIRUN -np 2 $BIN $ARGS --steps 2 --trace "$TMP/trace.json"
spawn "$TMP/trace5.out" $MPIRUN -np 2 $BIN --model t5:L=2,M=2,C=40,H=3,D=12,F=72,V=509 $T5A --steps 1 --trace "$TMP/trace5.json"
settle
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
fi

# Checkpoints are independent of the world size: 3 steps on one rank, saved, then resumed on
# two ranks for 3 more steps ends bit-identical to 6 uninterrupted steps; and back from 3 ranks
# to one.
if want checkpoint; then
CK="$TMP/ck"
CKARGS=$(echo "$ARGS" | sed 's/--steps 6//')
$BIN $CKARGS --steps 3 --accum 2 --save "$CK" > "$TMP/ck1.out" 2>&1
$MPIRUN -np 2 $BIN $CKARGS --steps 6 --resume "$CK" > "$TMP/ck2.out" 2>&1
[ -n "$(digest "$TMP/ck2.out")" ] && [ "$(digest "$TMP/ck2.out")" = "$(digest "$TMP/ref2.out")" ] &&
  ok "checkpoint saved on 1 rank, resumed on 2: bit-identical to an uninterrupted run" ||
  bad "checkpoint 1 -> 2 ranks: $(digest "$TMP/ck2.out") vs $(digest "$TMP/ref2.out") $(tail -2 "$TMP/ck2.out")"
$MPIRUN -np 3 $BIN $CKARGS --steps 3 --shard none --save "$CK.none" > "$TMP/ck3.out" 2>&1
$BIN $CKARGS --steps 6 --accum 3 --resume "$CK.none" > "$TMP/ck4.out" 2>&1
[ -n "$(digest "$TMP/ck4.out")" ] && [ "$(digest "$TMP/ck4.out")" = "$(digest "$TMP/ref3.out")" ] &&
  ok "checkpoint saved on 3 replicas (--shard none), resumed on 1: bit-identical to an uninterrupted run" ||
  bad "checkpoint 3 -> 1 ranks: $(digest "$TMP/ck4.out") vs $(digest "$TMP/ref3.out")"
# Between --shard hpz and full sharding: saved by 4 ranks with hpz (node groups {0,1} {2,3}),
# resumed by 1 rank; saved by 4 ranks with full sharding, resumed by 4 ranks with hpz.
$MPIRUN -np 4 -x FSDP_NODE_MAP=0,0,1,1 $BIN $CKARGS --steps 3 --shard hpz --save "$CK.hpz" > "$TMP/ckh1.out" 2>&1
$BIN $CKARGS --steps 6 --accum 4 --resume "$CK.hpz" > "$TMP/ckh2.out" 2>&1
$MPIRUN -np 4 $BIN $CKARGS --steps 3 --save "$CK.full" > "$TMP/ckh3.out" 2>&1
$MPIRUN -np 4 -x FSDP_NODE_MAP=0,0,1,1 $BIN $CKARGS --steps 6 --shard hpz --resume "$CK.full" > "$TMP/ckh4.out" 2>&1
[ -n "$(digest "$TMP/ckh2.out")" ] && [ "$(digest "$TMP/ckh2.out")" = "$(digest "$TMP/ref4.out")" ] &&
  [ "$(digest "$TMP/ckh4.out")" = "$(digest "$TMP/ref4.out")" ] &&
  ok "checkpoints move between --shard hpz and full sharding (4 ranks hpz -> 1 rank, 4 ranks full -> 4 ranks hpz): bit-identical to an uninterrupted run" ||
  bad "checkpoint hpz <-> full: $(digest "$TMP/ckh2.out") and $(digest "$TMP/ckh4.out") vs $(digest "$TMP/ref4.out") $(grep -h -m1 error "$TMP"/ckh*.out)"
[ ! -e "$CK.tmp" ] && [ ! -e "$CK.old" ] && ok "saving leaves no temporary checkpoint behind" || bad "temporary checkpoint left behind"
out=$($BIN --model gpt:L=2,C=72,H=3,V=509,T=32 --data $DATA --batch 2 --seq 32 --steps 4 --resume "$CK" 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "holds model" && ok "resuming another model is refused" || bad "resume with another model: $out"
truncate -s 1000 "$CK/adam_v.bin"
out=$($BIN $CKARGS --steps 6 --resume "$CK" 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "adam_v.bin" && ok "a truncated checkpoint is refused, naming the file" || bad "truncated checkpoint: $out"
fi

# Impossible configurations get clear errors.
if want refused; then
spawn "$TMP/no_h3.out" $MPIRUN -np 4 $BIN $ARGS --shard hybrid:3
spawn "$TMP/no_gb.out" $MPIRUN -np 3 $BIN $ARGS --global-batch 8
spawn "$TMP/gb.out" $MPIRUN -np 2 $BIN $ARGS --global-batch 8 --steps 1
# --shard hpz where it cannot apply: one node (its node group would be the world), one rank per
# node (each would keep whole units: grad-op), F2 not dividing the world, unequal nodes, a bad map.
REFUSALS=()
refuse() {  # refuse DESCRIPTION PATTERN NP MAP ARGS...: in the background; checked below
  local n=${#REFUSALS[@]} np=$3 map=$4
  REFUSALS+=("$1"$'\t'"$2")
  shift 4
  spawn "$TMP/refuse$n.out" $MPIRUN -np "$np" ${map:+-x FSDP_NODE_MAP=$map} $BIN $ARGS --steps 1 "$@"
}
refuse "--shard hpz with 2 ranks on one node" "share one node, so the node group would be the whole world" 2 "" --shard hpz
refuse "--shard hpz with one rank per node" "use --shard grad-op" 2 0,1 --shard hpz
refuse "--shard hpz:3 on 4 ranks" "needs the node group size to divide the world size 4" 4 0,0,1,1 --shard hpz:3
refuse "--shard hpz with 3 + 1 ranks per node" "give the node group size with --shard hpz:F2" 4 0,0,0,1 --shard hpz
refuse "FSDP_NODE_MAP with 3 entries for 4 ranks" "FSDP_NODE_MAP='0,0,1' must list the node of every rank" 4 0,0,1 --shard hpz
settle
# A setting every rank finds impossible alike is said once, by rank 0, and no rank aborts the
# others (no MPI_ABORT banner, no "stopping after this step" from the signal it would send).
said_once() { [ "$(grep -c 'error:' "$1")" = 1 ] && ! grep -qE "MPI_ABORT|stopping after this step" "$1"; }
[ "$(rc_of "$TMP/no_h3.out")" != 0 ] && grep -q "divide the world size" "$TMP/no_h3.out" && said_once "$TMP/no_h3.out" &&
  ok "hybrid:3 on 4 ranks is refused, once" || bad "hybrid:3 on 4 ranks: $(tail -3 "$TMP/no_h3.out")"
[ "$(rc_of "$TMP/no_gb.out")" != 0 ] && grep -q "must be a multiple of batch x ranks" "$TMP/no_gb.out" &&
  ok "--global-batch 8 on 3 ranks x batch 2 is refused" || bad "global batch split: $(tail -3 "$TMP/no_gb.out")"
[ "$(rc_of "$TMP/gb.out")" = 0 ] && ok "--global-batch 8 on 2 ranks x batch 2 runs (accum 2)" || bad "--global-batch 8 on 2 ranks failed"
for n in "${!REFUSALS[@]}"; do
  what=${REFUSALS[$n]%%$'\t'*} pattern=${REFUSALS[$n]#*$'\t'} out="$TMP/refuse$n.out"
  [ "$(rc_of "$out")" != 0 ] && grep -q -- "$pattern" "$out" && { [[ $what != --shard* ]] || said_once "$out"; } &&
    ok "$what is refused$([[ $what == --shard* ]] && echo ', said once'): $(grep -m1 -o 'error: .\{0,60\}' "$out")..." ||
    bad "$what: rc $(rc_of "$out"): $(grep -c error: "$out") error lines: $(grep -m1 error "$out") $(grep -m1 -E 'MPI_ABORT|stopping' "$out")"
done
fi

# A bad data path on one rank brings every rank down within seconds, naming that rank.
if want "missing file"; then
start=$(date +%s)
out=$(timeout 60 $MPIRUN -np 3 bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then d=/nonexistent/shard_*.bin; else d='"$DATA"'; fi; exec '"$BIN"' '"${ARGS/--data $DATA/}"' --data "$d"' 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ $rc != 0 ] && [ $rc != 124 ] && [ $elapsed -lt 20 ] && echo "$out" | grep -q "\[rank 2\] error"; then
  ok "a missing file on rank 2 stops all 3 ranks in ${elapsed}s with a message naming rank 2"
else
  bad "missing file on one rank: rc=$rc after ${elapsed}s: $(echo "$out" | head -3)"
fi
fi

# Activation checkpointing re-runs a block's forward (block) or its norms and activation
# functions (selective) with the same kernels on the same inputs: the same bits as keeping the
# activations, at W=1 and W=3 with accumulation, for GPT and both T5 versions.
RCMODELS=("gpt:L=3,C=72,H=3,V=509,T=32 --seq 32" "t5:L=2,C=48,H=3,D=16,F=96,V=512 --enc-len 40 --dec-len 12"
          "t5v1.1:L=2,M=3,C=48,H=3,D=16,F=64,V=512 --enc-len 40 --dec-len 12")
rcargs() { echo "--model $1 --data $DATA --batch 2 --steps 3 --lr 1e-3 --digest"; }
if want recompute || want wrap; then
for i in 0 1 2; do
  RC=$(rcargs "${RCMODELS[$i]}")
  spawn "$TMP/rc${i}_none1.out" $BIN $RC --accum 6
  spawn "$TMP/rc${i}_none3.out" $MPIRUN -np 3 $BIN $RC --accum 2
  want recompute || break  # --wrap linear needs the GPT references only
  for mode in block selective; do
    spawn "$TMP/rc${i}_${mode}1.out" $BIN $RC --accum 6 --recompute $mode
    spawn "$TMP/rc${i}_${mode}3.out" $MPIRUN -np 3 $BIN $RC --accum 2 --recompute $mode
  done
done
settle
fi
if want recompute; then
for i in 0 1 2; do
  m=${RCMODELS[$i]}
  d1=$(digest "$TMP/rc${i}_none1.out") d3=$(digest "$TMP/rc${i}_none3.out")
  for mode in block selective; do
    [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/rc${i}_${mode}1.out")" ] && [ "$d3" = "$(digest "$TMP/rc${i}_${mode}3.out")" ] &&
      ok "${m%% *}: --recompute $mode is bit-identical to keeping activations, on 1 rank (accum 6) and 3 ranks (accum 2)" ||
      bad "${m%% *} --recompute $mode: W=1 $d1 vs $(digest "$TMP/rc${i}_${mode}1.out"); W=3 $d3 vs $(digest "$TMP/rc${i}_${mode}3.out")"
  done
done
fi

# --wrap linear makes each matmul weight its own unit (norms and biases with their neighbour):
# the same parameters, initial values and arithmetic in more, smaller units, so the same bits as
# --wrap block with every recompute mode and strategy, with accumulation (synchronized or not).
# Under --wrap block every setting below but --no-sync-accum has the bits of the GPT run without
# options above (the recompute and strategy claims), so that run is their reference.
if want wrap; then
RC=$(rcargs "${RCMODELS[0]}")
WRAPS=("--recompute none" "--recompute block" "--recompute block --limit-all-gathers 1" "--recompute selective --no-sync-accum"
       "--recompute block --shard grad-op" "--recompute block --shard none --prefetch none")
spawn "$TMP/wr_nosync1.out" $BIN $RC --accum 6 --recompute selective --no-sync-accum
spawn "$TMP/wr_nosync3.out" $MPIRUN -np 3 $BIN $RC --accum 2 --recompute selective --no-sync-accum
for i in "${!WRAPS[@]}"; do
  spawn "$TMP/wr${i}_1.out" $BIN $RC --accum 6 --wrap linear ${WRAPS[$i]}
  spawn "$TMP/wr${i}_3.out" $MPIRUN -np 3 $BIN $RC --accum 2 --wrap linear ${WRAPS[$i]}
done
settle
for i in "${!WRAPS[@]}"; do
  cfg=${WRAPS[$i]}
  if [[ $cfg == *no-sync* ]]; then d1=$(digest "$TMP/wr_nosync1.out") d3=$(digest "$TMP/wr_nosync3.out")
  else d1=$(digest "$TMP/rc0_none1.out") d3=$(digest "$TMP/rc0_none3.out"); fi
  [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/wr${i}_1.out")" ] && [ "$d3" = "$(digest "$TMP/wr${i}_3.out")" ] &&
    grep -q "units  *| 13 " "$TMP/wr${i}_1.out" &&
    ok "--wrap linear $cfg: 13 units, bit-identical to --wrap block on 1 rank (accum 6) and 3 ranks (accum 2)" ||
    bad "--wrap linear $cfg: W=1 $d1 vs $(digest "$TMP/wr${i}_1.out"); W=3 $d3 vs $(digest "$TMP/wr${i}_3.out")"
done
fi

# --offload moves shards, AdamW state (and its step) and block outputs to host memory; on the
# CPU backend every copy and the host step must give the same bits as keeping everything in
# place: each of the 15 subsets at W=3 (accum 2), with 5 blocks (more than the device ring of 3
# block outputs) and the recompute modes and wrapping policies in turn; on one rank (accum 6)
# the whole set and each kind of shard alone (an unsharded unit's copies and host step).
if want offload; then
RC="--model gpt:L=5,C=72,H=3,V=509,T=32 --seq 32 --data $DATA --batch 2 --steps 3 --lr 1e-3 --digest"
spawn "$TMP/off_ref1.out" $BIN $RC --accum 6
spawn "$TMP/off_ref3.out" $MPIRUN -np 3 $BIN $RC --accum 2
SUBSETS=(params optim grads activations params,optim params,grads params,activations optim,grads optim,activations
         grads,activations params,optim,grads params,optim,activations params,grads,activations optim,grads,activations all)
extra_of() { case $(($1 % 4)) in 0) echo "";; 1) echo "--recompute block";; 2) echo "--recompute selective --wrap linear";;
             3) echo "--recompute block --wrap linear --limit-all-gathers 1";; esac; }
for i in "${!SUBSETS[@]}"; do
  sub=${SUBSETS[$i]}
  spawn "$TMP/off${i}_3.out" $MPIRUN -np 3 $BIN $RC --accum 2 --offload $sub $(extra_of $i)
  case $sub in all|params|optim|grads) spawn "$TMP/off${i}_1.out" $BIN $RC --accum 6 --offload $sub $(extra_of $i);; esac
done
# T5's block outputs are the encoder's then the decoder's (two sizes: --enc-len and --dec-len
# rows): 5 + 4 blocks through the device ring of 3, with the recompute modes.
T5O="--model t5:L=5,M=4,C=40,H=3,D=12,F=72,V=509 --data $DATA --batch 2 --enc-len 30 --dec-len 12 --steps 3 --lr 1e-3 --digest"
T5CFGS=("activations" "activations --recompute block" "all --recompute selective" "optim,activations --recompute block --limit-all-gathers 1")
spawn "$TMP/t5o_ref1.out" $BIN $T5O --accum 6
spawn "$TMP/t5o_ref3.out" $MPIRUN -np 3 $BIN $T5O --accum 2
for i in "${!T5CFGS[@]}"; do
  spawn "$TMP/t5o${i}_1.out" $BIN $T5O --accum 6 --offload ${T5CFGS[$i]}
  spawn "$TMP/t5o${i}_3.out" $MPIRUN -np 3 $BIN $T5O --accum 2 --offload ${T5CFGS[$i]}
done
settle
d1=$(digest "$TMP/off_ref1.out") d3=$(digest "$TMP/off_ref3.out")
for i in "${!SUBSETS[@]}"; do
  sub=${SUBSETS[$i]} extra=$(extra_of $i) one=""
  [ -f "$TMP/off${i}_1.out" ] && one="1 rank (accum 6) and "
  [ -n "$d1" ] && [ -n "$d3" ] && [ "$d3" = "$(digest "$TMP/off${i}_3.out")" ] &&
    { [ -z "$one" ] || [ "$d1" = "$(digest "$TMP/off${i}_1.out")" ]; } &&
    ok "--offload $sub${extra:+ $extra}: bit-identical to no offload on ${one}3 ranks (accum 2)" ||
    bad "--offload $sub $extra: W=3 $d3 vs $(digest "$TMP/off${i}_3.out")${one:+; W=1 $d1 vs $(digest "$TMP/off${i}_1.out")}: $(grep -h -m1 error "$TMP/off${i}"_*.out)"
done
d1=$(digest "$TMP/t5o_ref1.out") d3=$(digest "$TMP/t5o_ref3.out")
for i in "${!T5CFGS[@]}"; do
  cfg=${T5CFGS[$i]}
  [ -n "$d1" ] && [ -n "$d3" ] && [ "$d1" = "$(digest "$TMP/t5o${i}_1.out")" ] && [ "$d3" = "$(digest "$TMP/t5o${i}_3.out")" ] &&
    ok "T5 --offload $cfg: bit-identical to no offload on 1 rank (accum 6) and 3 ranks (accum 2)" ||
    bad "T5 --offload $cfg: W=1 $d1 vs $(digest "$TMP/t5o${i}_1.out"); W=3 $d3 vs $(digest "$TMP/t5o${i}_3.out"): $(grep -h -m1 -i error "$TMP/t5o${i}"_*.out)"
done
fi

# Sharded layout, init and memory on W ranks (each rank checks its own shard).
if want test_fsdp; then
for W in 2 3 4; do spawn "$TMP/fsdp$W.out" $MPIRUN -np $W build/test/test_fsdp; done
settle
for W in 2 3 4; do
  if [ "$(rc_of "$TMP/fsdp$W.out")" = 0 ]; then ok "test_fsdp on $W ranks: $(tail -1 "$TMP/fsdp$W.out")"
  else bad "test_fsdp on $W ranks: $(grep FAIL "$TMP/fsdp$W.out" | head -3)"; fi
done
fi

cases_summary
[ $fail = 0 ]
