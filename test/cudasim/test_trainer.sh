#!/usr/bin/env bash
# test_trainer.sh: the whole CUDA trainer on the simulator (./train_gpt_sim: train_gpt.c, fsdp/
# with the CUDA device and NCCL, layers/, kernels/cuda/) against the CPU reference trainer. The
# CPU backend proves the arithmetic of every setting (test/test_multirank.sh); what is proven
# here is the CUDA path: kernels in a real step, stream and event order, NCCL.
#   1. GPT, T5 v1.0, T5 v1.1 and Llama (grouped-query attention 2:1) train like ./train_gpt_cpu
#      (the tolerances of test/gpu/test_gpu.sh)
#   2. the schedule's variants (prefetch, rate limit, recompute, per-linear wrapping, offload; and
#      Llama's recompute) each in another stream interleaving (CUDASIM_SEED) give the reference's
#      final parameters: the schedule's events, not the order the device happens to pick, decide
#      what every kernel reads
#   3. NCCL (over MPI) with 2 and 4 ranks: full, grad-op, none, hybrid:2 and hpz (node groups of
#      2) track one rank with accumulation, in fp32 and bf16; 2 and 3 ranks started without
#      mpirun; a checkpoint saved on 2 ranks resumes on 1
#   4. a stalled rank: --comm-timeout ends every rank, naming the rank and the collective, also
#      when ncclCommAbort itself never returns; a rank that never starts: the start-up watchdog
#      ends the one waiting for it in the NCCL id exchange
#   5. planted faults: a wait removed from fsdp/schedule.c, an extra collective on one rank,
#      waits removed from the offload paths (stream order, and the host's own pinned accesses)
#   6. the memory plan against the simulated device; no allocation and no host-blocking call
#      inside a step
#   7. launches per GPT block no more than llm.c's for the same block
# Usage: test_trainer.sh [SECTIONS]: SECTIONS, a regex over these names, runs some of them (the
# suite runs "vs CPU|interleavings|offload|memory|launches" and "NCCL|stall|planted" as two
# parts): "vs CPU", "interleavings", "offload", "NCCL", "stall", "planted", "memory" (6),
# "launches" (7). TEST_FILTER selects among them the same way. Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
source test/cases.sh
SECTIONS=${1:-}
section() { { [ -z "$SECTIONS" ] || grep -qiE -- "$SECTIONS" <<< "$1"; } && want "$1"; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SIM=${SIM:-build/sim}
digest() { grep -o 'params_digest [0-9a-f]*' "$1" | awk '{print $2}'; }
MPIRUN="mpirun --oversubscribe -np"

# ---- 1. CUDA on the simulator vs CPU ---------------------------------------------------
DATA='data/addition/train_*.bin'
GPT="--model gpt:L=2,C=64,H=4,V=256,T=10 --data $DATA --batch 8 --seq 10 --steps 6 --lr 3e-3 --warmup 50 --weight-decay 0.0"
T5="--model t5:L=2,C=48,H=3,D=16,F=96,V=512 --data $DATA --batch 2 --enc-len 24 --dec-len 8 --steps 5 --lr 1e-3"
T5V11="--model t5v1.1:L=1,M=2,C=48,H=3,D=16,F=64,V=512 --data $DATA --batch 2 --enc-len 24 --dec-len 8 --steps 5 --lr 1e-3"
LLAMA="--model llama:L=2,C=64,H=4,KV=2,F=96,V=256,T=10,scaling=8 --data $DATA --batch 8 --seq 10 --steps 6 --lr 3e-3 --weight-decay 0.0"
section "vs CPU" || section interleavings || section memory && for cfg in GPT T5 T5V11 LLAMA; do
  args=${!cfg}
  if ! ./train_gpt_sim $args --digest --log "$TMP/$cfg.sim.json" > "$TMP/$cfg.sim.out" 2>&1; then
    bad "$cfg: simulated CUDA run failed: $(grep -m1 cudasim "$TMP/$cfg.sim.out") $(tail -2 "$TMP/$cfg.sim.out")"
    continue
  fi
  ./train_gpt_cpu $args --log "$TMP/$cfg.cpu.json" > "$TMP/$cfg.cpu.out" 2>&1 || { bad "$cfg: CPU run failed"; continue; }
  if table=$(python3 test/compare_losses.py "$TMP/$cfg.sim.json" "$TMP/$cfg.cpu.json"); then
    ok "$cfg: train_gpt_sim and train_gpt_cpu losses agree (step 1 within 1%, later steps within 3%)"
  else
    echo "$table"
    bad "$cfg: train_gpt_sim and train_gpt_cpu losses differ beyond the bf16 tolerance"
  fi
done

# Without a GPU: no driver at all is said as such (CUDA's runtime calls it an insufficient
# driver, which would send the user to update one that is not there); an old driver names both
# versions; a driver that sees no device says so.
section "vs CPU" && for mode in "none:this machine has no NVIDIA driver; run train_gpt_cpu" \
    "old:the NVIDIA driver supports CUDA up to 12.2, older than the CUDA 13.0 runtime" \
    "no-device:no CUDA GPU found \(no CUDA-capable device is detected\): run train_gpt_cpu"; do
  out=$(CUDASIM_DRIVER=${mode%%:*} ./train_gpt_sim $GPT 2>&1)
  rc=$?
  if [ $rc = 1 ] && grep -qE -- "${mode#*:}" <<< "$out" && { [ "${mode%%:*}" = old ] || ! grep -qi insufficient <<< "$out"; }; then
    ok "CUDASIM_DRIVER=${mode%%:*}: $(grep -m1 -o 'error: .\{0,70\}' <<< "$out")..."
  else
    bad "CUDASIM_DRIVER=${mode%%:*}: exit $rc: $(grep -m1 error <<< "$out")"
  fi
done

# ---- 2. one answer whatever the device's order ----------------------------------------
# The reference: section 1's run of the model (natural stream order). Each variant runs in
# another interleaving, so one run checks both that the variant's events order its kernels and
# that the order the device picks does not matter (a second run of the same interleaving would
# only repeat the second claim).
same() {  # same MODEL LABEL ENV... -- ARGS...: a run of MODEL (GPT, LLAMA) that must end with its section 1 digest
  local model=$1 label=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" ./train_gpt_sim ${!model} --digest "$@" > "$TMP/same.out" 2>&1
  local d ref
  d=$(digest "$TMP/same.out")
  ref=$(digest "$TMP/$model.sim.out")
  if [ -n "$ref" ] && [ "$d" = "$ref" ]; then ok "$label: same final parameters ($d)"
  else bad "$label: digest '$d', reference '$ref': $(grep -m1 cudasim "$TMP/same.out") $(tail -1 "$TMP/same.out")"; fi
}
if section interleavings; then
  same GPT "--prefetch none, stream interleaving CUDASIM_SEED=2" CUDASIM_SEED=2 -- --prefetch none
  same GPT "--limit-all-gathers 1, CUDASIM_SEED=3" CUDASIM_SEED=3 -- --limit-all-gathers 1
  same GPT "--limit-all-gathers 2 --prefetch forward, CUDASIM_SEED=4" CUDASIM_SEED=4 -- --limit-all-gathers 2 --prefetch forward
  same GPT "--wrap linear --recompute block --limit-all-gathers 1, CUDASIM_SEED=5" CUDASIM_SEED=5 -- --wrap linear --recompute block --limit-all-gathers 1
  same GPT "--recompute block, --loss-scale dynamic doubled every 2 steps (power-of-two scaling is exact in bf16), CUDASIM_SEED=6" \
    CUDASIM_SEED=6 -- --recompute block --loss-scale dynamic --loss-scale-window 2
  # Llama's recompute reruns the forward's own kernels (block: the whole block, rotary q and k
  # included; selective: the RMS norms and SwiGLU from the kept matmul outputs): the same bits as
  # keeping every activation, also per linear.
  same LLAMA "Llama --wrap linear --recompute block --limit-all-gathers 1, CUDASIM_SEED=7" CUDASIM_SEED=7 -- \
    --wrap linear --recompute block --limit-all-gathers 1
  same LLAMA "Llama --wrap linear --recompute selective --prefetch none, CUDASIM_SEED=8" CUDASIM_SEED=8 -- \
    --wrap linear --recompute selective --prefetch none
  # Selective recompute runs the GELU unfused (gelu_forward) where the forward fused it into the
  # matmul's epilogue, and the LayerNorm from the bf16-stored residual: the last bf16 bit may
  # differ, so the losses are held to the bf16 bound of part 1, not to the bits.
  ./train_gpt_sim $GPT --recompute selective --log "$TMP/sel.json" > "$TMP/sel.out" 2>&1
  if table=$(python3 test/compare_losses.py "$TMP/sel.json" "$TMP/GPT.sim.json"); then
    ok "--recompute selective: losses track the run that keeps activations ($(echo "$table" | tail -1 | awk '{print $4}') relative at the last step)"
  else
    bad "--recompute selective: $(grep -m1 cudasim "$TMP/sel.out") $table"
  fi
fi

# --offload with more blocks than the device ring holds (5 > 3): block outputs go to the host in
# forward and come back in backward on the copy stream; the optimizer step with a shard across
# PCIe from AdamW's state stages two units at a time on the copy stream (fsdp/optimizer.c). Each
# setting in its own interleaving must give the bits of the run without offload. (The planted
# faults of section 5 run --offload activations, params and optim twice more each.)
OFFM="--model gpt:L=5,C=64,H=4,V=256,T=10 --data $DATA --batch 4 --seq 10 --steps 2 --lr 3e-3 --warmup 50"
# interleaved REF SEED LABEL ARGS...: ./train_gpt_sim ARGS under CUDASIM_SEED=SEED ends with digest
# REF, with no checker finding.
interleaved() {
  local ref=$1 seed=$2 label=$3
  shift 3
  CUDASIM_SEED=$seed ./train_gpt_sim "$@" --digest > "$TMP/off.out" 2>&1
  if [ -n "$ref" ] && [ "$(digest "$TMP/off.out")" = "$ref" ] && ! grep -q '^cudasim: [a-z]*check' "$TMP/off.out"; then
    ok "$label, CUDASIM_SEED=$seed: same final parameters as without offload ($ref)"
  else
    bad "$label: digest $(digest "$TMP/off.out") vs $ref: $(grep -m1 '^cudasim' "$TMP/off.out") $(tail -1 "$TMP/off.out")"
  fi
}
if section offload || section memory; then
  ./train_gpt_sim $OFFM --digest > "$TMP/offref.out" 2>&1
  offref=$(digest "$TMP/offref.out")
  seed=1
  for cfg in "--offload all --recompute block" "--offload activations,grads --wrap linear --recompute block --limit-all-gathers 1" \
             "--offload optim" "--offload params" "--offload grads --wrap linear"; do
    interleaved "$offref" $seed "$cfg (5 blocks, a ring of 3 on the device)" $OFFM $cfg
    seed=$((seed + 1))
  done
  # T5: the encoder's and the decoder's block outputs (two lengths) through the same ring.
  T5OFF="--model t5:L=4,M=3,C=40,H=4,D=10,F=64,V=512 --data $DATA --batch 2 --enc-len 24 --dec-len 8 --steps 2 --lr 3e-3 --warmup 50"
  ./train_gpt_sim $T5OFF --digest > "$TMP/t5offref.out" 2>&1
  interleaved "$(digest "$TMP/t5offref.out")" 2 "T5 --offload activations --recompute block (4 + 3 blocks, a ring of 3)" \
    $T5OFF --offload activations --recompute block
  cp "$TMP/off.out" "$TMP/OFFLOAD.sim.out"  # for section 6
fi

# ---- 3. NCCL over MPI ----------------------------------------------------------------------
# The bounds of test/gpu/test_gpu.sh part 5: W ranks with accumulation 1 against one rank with
# accumulation W, losses and parameters (L2 over the model) within 5e-3; bf16 reduction 2e-2.
MR="--model gpt:L=3,C=72,H=3,V=509,T=32 --data $DATA --batch 2 --seq 16 --steps 4 --lr 1e-3 --grad-clip 1.0"
CK="--lr-final-frac 1.0"  # a constant learning rate: the schedule does not depend on --steps
if section NCCL; then
for W in 2 3 4; do
  ./train_gpt_sim $MR --accum $W --log "$TMP/ref$W.json" --dump-params "$TMP/ref$W.bin" > "$TMP/ref$W.out" 2>&1 ||
    bad "1 rank --accum $W failed: $(tail -2 "$TMP/ref$W.out")"
done
track() {  # track W SHARD BOUND EXTRA...
  local W=$1 S=$2 bound=$3 key=1e-3
  shift 3
  [ "$*" = "--reduce-dtype bf16" ] && key=8e-3
  local name="w${W}_${S/:/}$*"
  name=${name// /_}
  if timeout 600 $MPIRUN "$W" ./train_gpt_sim $MR --shard "$S" "$@" --digest --log "$TMP/$name.json" --dump-params "$TMP/$name.bin" \
    > "$TMP/$name.out" 2>&1; then
    local r
    if r=$(python3 test/compare_params.py "$TMP/$name.bin" "$TMP/ref$W.bin" "$TMP/$name.json" "$TMP/ref$W.json" "$bound" "$key"); then
      ok "NCCL over MPI, $W ranks --shard $S $*: tracks 1 rank --accum $W within $bound ($r)"
    else
      bad "$W ranks --shard $S $*: $r"
    fi
  else
    bad "$W ranks --shard $S $* failed: $(grep -m1 cudasim "$TMP/$name.out") $(tail -2 "$TMP/$name.out")"
  fi
}
# (3 ranks, an odd world, run below without mpirun.)
track 2 full 5e-3
track 2 grad-op 5e-3
track 4 hybrid:2 5e-3
# --shard hpz: the backward all-gathers the secondary shards over node groups of 2 (FSDP_NODE_MAP
# lays out two nodes), their copies out of and into the slots on the all-gather stream: it tracks
# one rank as above and the CPU trainer within part 1's bf16 bound, with no checker finding.
if timeout 600 $MPIRUN 4 -x FSDP_NODE_MAP=0,0,1,1 ./train_gpt_sim $MR --shard hpz --log "$TMP/hpz.json" \
     --dump-params "$TMP/hpz.bin" > "$TMP/hpz.out" 2>&1; then
  ./train_gpt_cpu $MR --accum 4 --log "$TMP/hpz_cpu.json" > "$TMP/hpz_cpu.out" 2>&1
  if r=$(python3 test/compare_params.py "$TMP/hpz.bin" "$TMP/ref4.bin" "$TMP/hpz.json" "$TMP/ref4.json" 5e-3) &&
     python3 test/compare_losses.py "$TMP/hpz.json" "$TMP/hpz_cpu.json" > "$TMP/hpz_losses.txt" &&
     grep -q "collectives per step: 7 all-gathers (3 of them over node groups)" "$TMP/hpz.out" &&
     ! grep -q '^cudasim: [a-z]*check' "$TMP/hpz.out"; then
    ok "NCCL over MPI, 4 ranks --shard hpz (3 backward all-gathers per step over node groups): tracks 1 rank --accum 4 within 5e-3 ($r) and the CPU trainer"
  else
    bad "4 ranks --shard hpz: ${r:-} $(cat "$TMP/hpz_losses.txt") $(grep -m1 -E '^cudasim: [a-z]*check|collectives' "$TMP/hpz.out")"
  fi
else
  bad "4 ranks --shard hpz failed: $(grep -m1 cudasim "$TMP/hpz.out") $(tail -2 "$TMP/hpz.out")"
fi
# bf16 reduction: each reduced gradient element is rounded once to 8 bits (2^-9 relative); the
# key bias, whose true gradient is zero, then moves on different noise: up to lr per step on
# each run, so within 2 x lr x steps = 8e-3 absolute (compare_params.py's sixth argument).
# A sharded unit's gradient is narrowed to bf16 in its own buffer (with replicas, the chunk is
# then all-reduced there too); unsharded (--shard none), it goes through a staging buffer.
track 2 full 2e-2 --reduce-dtype bf16
track 4 hybrid:2 2e-2 --reduce-dtype bf16
track 2 none 2e-2 --reduce-dtype bf16
# With the gradient shards (and everything else) on the host, the narrowed reduction feeds the
# same fp32 accumulation: the bits of the run that keeps them on the device (track's above).
bf=$(digest "$TMP/w2_full--reduce-dtype_bf16.out")
$MPIRUN 2 ./train_gpt_sim $MR --reduce-dtype bf16 --offload all --recompute block --wrap linear --digest > "$TMP/bfoff.out" 2>&1
[ -n "$bf" ] && [ "$(digest "$TMP/bfoff.out")" = "$bf" ] && ! grep -q '^cudasim: [a-z]*check' "$TMP/bfoff.out" &&
  ok "2 ranks --reduce-dtype bf16 --offload all --recompute block --wrap linear: the bits of bf16 reduction without offload ($bf)" ||
  bad "bf16 reduction with --offload all: $(digest "$TMP/bfoff.out") vs '$bf': $(grep -m1 '^cudasim' "$TMP/bfoff.out") $(tail -1 "$TMP/bfoff.out")"

# Started without mpirun (each process a launcher's rank from the environment): the simulated
# NCCL then runs over sockets, bootstrapped as comm_nccl.c does: through an id file in
# --init-dir, or through NCCL_COMM_ID's address. The same bounds as above.
envlaunch() {  # envlaunch W NAME EXTRA_ENV ARGS...: W processes, rank 0's output in NAME.out
  local W=$1 name=$2 extra=$3 pids=() rc=0
  shift 3
  for r in $(seq 0 $((W - 1))); do
    env RANK=$r WORLD_SIZE=$W LOCAL_RANK=$r FSDP_RUN_ID=sim$$ $extra timeout 600 ./train_gpt_sim $MR "$@" \
      --log "$TMP/$name.json.$r" --dump-params "$TMP/$name.bin.$r" > "$TMP/$name.out.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cp "$TMP/$name.out.0" "$TMP/$name.out"
  cp "$TMP/$name.json.0" "$TMP/$name.json" 2> /dev/null
  cp "$TMP/$name.bin.0" "$TMP/$name.bin" 2> /dev/null
  cp "$TMP/$name.bin.0.json" "$TMP/$name.bin.json" 2> /dev/null
  return $rc
}
mkdir -p "$TMP/ids"
port=$((20000 + $$ % 20000))
for launch in "2 init-dir" "3 nccl-comm-id"; do
  set -- $launch
  W=$1 how=$2 name="env_$2"
  if [ "$how" = init-dir ]; then envlaunch "$W" "$name" "" --init-dir "$TMP/ids"
  else envlaunch "$W" "$name" "NCCL_COMM_ID=127.0.0.1:$port"; fi
  if [ $? = 0 ] && r=$(python3 test/compare_params.py "$TMP/$name.bin" "$TMP/ref$W.bin" "$TMP/$name.json" "$TMP/ref$W.json" 5e-3); then
    ok "$W ranks without mpirun (--$how bootstrap, NCCL over sockets): tracks 1 rank --accum $W within 5e-3 ($r)"
  else
    bad "$W ranks with the $how bootstrap: ${r:-failed: $(grep -h -m1 -E 'cudasim|error' "$TMP/$name".out.* | head -2)}"
  fi
done

# A checkpoint written by 2 ranks after 2 steps, resumed on 1 rank with accumulation 2 for
# the last 2, must end where 4 uninterrupted steps end.
./train_gpt_sim $MR $CK --accum 2 --digest > "$TMP/full4.out" 2>&1
timeout 600 $MPIRUN 2 ./train_gpt_sim $MR $CK --steps 2 --save "$TMP/ck" > "$TMP/save.out" 2>&1 &&
  ./train_gpt_sim $MR $CK --accum 2 --resume "$TMP/ck" --digest > "$TMP/resume.out" 2>&1
d1=$(digest "$TMP/full4.out") d2=$(digest "$TMP/resume.out")
if [ -n "$d1" ] && [ "$d1" = "$d2" ]; then ok "--save on 2 ranks, --resume on 1 rank: same final parameters as an uninterrupted run ($d1)"
else bad "--resume across world sizes: '$d2' vs uninterrupted '$d1': $(tail -2 "$TMP/resume.out")"; fi
fi

# ---- 4. a stalled rank -------------------------------------------------------------------
# Rank 1's device stops starting collectives after its 20th (CUDASIM_STALL_AFTER), as a hung
# GPU or link would. Its next collective and the peers' matching one wait forever: the
# watchdog of every rank must end it within --comm-timeout (5 s) plus its polling, naming the
# rank and the collective. Started without mpirun, so that no launcher ends the ranks for them.
# stalled_pair NAME [VAR=VALUE ...]: the two ranks (outputs $TMP/NAME0.out, NAME1.out), rank 1
# stalled after its 20th collective; sets rcs (their exit codes) and elapsed (seconds).
stalled_pair() {
  local name=$1 r p pids=() start
  shift
  start=$(date +%s)
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r FSDP_RUN_ID=$name$$ CUDASIM_STALL_AFTER=$([ $r = 1 ] && echo 20) "$@" \
      timeout 300 ./train_gpt_sim $MR --steps 4 --init-dir "$TMP/ids" --comm-timeout 5 > "$TMP/$name$r.out" 2>&1 &
    pids+=($!)
  done
  rcs=""
  for p in "${pids[@]}"; do wait "$p"; rcs="$rcs $?"; done
  elapsed=$(($(date +%s) - start))
}
if section stall; then
mkdir -p "$TMP/ids"
stalled_pair stall
# Both watchdogs fire about 5 s in; when one rank has already exited, the other's NCCL
# transport can see the closed connection first (the simulator reports that, exit 86) before
# its own watchdog names the collective. Either way every rank ends by itself.
named=0 peer_gone=0
for r in 0 1; do
  if grep -q "\[rank $r\] error: .* did not finish within 5 s (--comm-timeout)" "$TMP/stall$r.out"; then named=$((named + 1))
  elif grep -q "^cudasim: nccl: socket transport: a peer closed its connection" "$TMP/stall$r.out"; then peer_gone=$((peer_gone + 1)); fi
done
if [ $named -ge 1 ] && [ $((named + peer_gone)) = 2 ] && ! echo "$rcs" | grep -qw 0 && ! echo "$rcs" | grep -qw 124; then
  ok "a stalled rank: --comm-timeout 5 ends both ranks by themselves in ${elapsed}s (exit codes$rcs; $named named the collective, $peer_gone saw its peer exit first): $(grep -h -o '\[rank [01]\] error: [^;]*' "$TMP/stall0.out" "$TMP/stall1.out" | head -1)"
else
  bad "stalled rank: exit codes$rcs after ${elapsed}s, $named of 2 ranks named the collective: $(tail -2 "$TMP/stall0.out") / $(tail -2 "$TMP/stall1.out")"
fi

# The same stall with an ncclCommAbort that never returns (CUDASIM_ABORT_HANGS, as a real one
# can once its peer has gone): the watchdog's 10 s grace must still end both ranks.
stalled_pair abort CUDASIM_ABORT_HANGS=1
graced=$(grep -l "ncclCommAbort did not return within 10 s; exiting without it" "$TMP/abort0.out" "$TMP/abort1.out" | wc -l)
if [ "$graced" -ge 1 ] && ! echo "$rcs" | grep -qw 0 && ! echo "$rcs" | grep -qw 124; then
  ok "an ncclCommAbort that never returns: both ranks still exit by themselves in ${elapsed}s (exit codes$rcs; $graced waited out the grace)"
else
  bad "hanging ncclCommAbort: exit codes$rcs after ${elapsed}s, $graced ranks left after the grace: $(tail -2 "$TMP/abort0.out") / $(tail -2 "$TMP/abort1.out")"
fi

# A rank that never starts: the one started waits at start-up (rank 0 in ncclCommInitRank, rank 1
# for the id in --init-dir), before the collectives' watchdog runs. The start-up watchdog must end
# it within --comm-timeout, naming the stage.
for r in 0 1; do
  start=$(date +%s)
  env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r FSDP_RUN_ID=alone$r$$ timeout -s KILL 60 ./train_gpt_sim $MR --steps 2 \
    --init-dir "$TMP/ids" --comm-timeout 3 > "$TMP/alone$r.out" 2>&1
  rc=$? elapsed=$(($(date +%s) - start))
  if [ $rc != 0 ] && [ $rc != 137 ] && [ $elapsed -lt 30 ] &&
     grep -q "\[rank $r\] error: the NCCL id exchange .* did not finish within --comm-timeout 3 s" "$TMP/alone$r.out"; then
    ok "rank $r of 2 started alone: the start-up watchdog ends it in ${elapsed}s, naming the NCCL id exchange"
  else
    bad "rank $r of 2 started alone: exit $rc after ${elapsed}s: $(tail -2 "$TMP/alone$r.out")"
  fi
done
fi

# ---- 5. planted faults ---------------------------------------------------------------------
# build_variant NAME FILE PERL: train_gpt_sim with one host file changed (exactly one match).
build_variant() {
  local name=$1 file=$2 subst=$3 n
  n=$(perl -0ne "\$n = ($subst); print \$n + 0" "$file")
  [ "$n" = 1 ] || { bad "$name: the planted change matched $n times in $file"; return 1; }
  mkdir -p "$TMP/$name/$(dirname "$file")"
  perl -0pe "$subst" "$file" > "$TMP/$name/$file"
  local obj="$SIM/host/${file%.c}.o" objs=()
  for o in $(make -s --no-print-directory print-sim-host-objs); do [ "$o" = "$obj" ] || objs+=("$o"); done
  mpicc -O2 -g -std=c11 -fopenmp -I. -D_GNU_SOURCE -DFSDP_CUDA -Itest/cudasim/include -c "$TMP/$name/$file" \
    -o "$TMP/$name/obj.o" 2> "$TMP/$name/build.log" &&
    mpicc "${objs[@]}" "$TMP/$name/obj.o" $SIM/kernels/*.o $SIM/rt/nccl.o $SIM/libcudasim.a -o "$TMP/$name/train_gpt_sim" \
      -lstdc++ -lm -fopenmp -ldl -lpthread 2>> "$TMP/$name/build.log" ||
    { bad "$name: build failed: $(tail -3 "$TMP/$name/build.log")"; return 1; }
}
if section planted; then
[ -f "$TMP/full4.out" ] || ./train_gpt_sim $MR $CK --accum 2 --digest > "$TMP/full4.out" 2>&1
# (a) The compute stream no longer waits for a unit's all-gather before its forward uses the
# parameters: kernels may read a slot while the collective is still filling it, or the values
# of the unit that held the slot before. The stream-order checker must report it (or, failing
# that, the run must end with other parameters), in each of three interleavings.
if build_variant no-wait fsdp/schedule.c 's/  device_stream_wait_timed\(STREAM_COMPUTE, fs->units\[u\]\.gathered\);  \/\/ exposed all-gather time\n//'; then
  good=$(digest "$TMP/full4.out")
  caught=0
  for seed in 1 2 3; do
    CUDASIM_SEED=$seed timeout 600 "$TMP/no-wait/train_gpt_sim" $MR $CK --accum 2 --digest > "$TMP/nw$seed.out" 2>&1
    d=$(digest "$TMP/nw$seed.out")
    if grep -q '^cudasim:' "$TMP/nw$seed.out" || [ "$d" != "$good" ]; then caught=$((caught + 1)); fi
  done
  line=$(grep -h -m1 '^cudasim: streamcheck:' "$TMP"/nw*.out | head -1)
  if [ $caught = 3 ]; then ok "planted fault: a removed all-gather wait in fsdp/schedule.c is caught in 3 of 3 interleavings: ${line:0:200}"
  else bad "planted fault: the run without the all-gather wait went unnoticed in $((3 - caught)) of 3 interleavings"; fi
fi
# (b) Rank 1 issues one all-reduce more than rank 0 (after the loss's) and waits in it, while
# rank 0 waits for rank 1 in the gradient norm's all-reduce on another communicator: NCCL
# hangs. The simulator must say so after CUDASIM_HANG_SECONDS, with where each rank waits.
if build_variant extra-collective train/step.c 's/(  comm_all_reduce\(fs->world, m->loss_sum, 1, DT_F64\);\n)/$1  if (rank == 1) comm_all_reduce(fs->world, m->loss_sum, 1, DT_F64);\n/'; then
  CUDASIM_HANG_SECONDS=5 timeout 300 $MPIRUN 2 "$TMP/extra-collective/train_gpt_sim" $MR > "$TMP/extra.out" 2>&1
  rc=$?
  line=$(grep -m1 '^cudasim: nccl: collective #[0-9]* on communicator #[0-9]* has waited' "$TMP/extra.out")
  if [ $rc != 0 ] && [ -n "$line" ] && grep -qE 'rank 1: issued ([0-9]+) collectives, waits in #\1 \(AllReduce of 1 x fp64\)' "$TMP/extra.out"; then
    ok "planted fault: an extra collective on rank 1 is reported: ${line:0:120}... rank 1: $(grep -m1 -oE 'issued [0-9]+ collectives, waits in #[0-9]+ \(AllReduce of 1 x fp64\)' "$TMP/extra.out")"
  else
    bad "planted fault: extra collective not reported (exit $rc): $(tail -3 "$TMP/extra.out")"
  fi
fi

# planted NAME WHAT PATTERN ARGS...: the variant NAME runs in two interleavings, and each must
# report PATTERN (a checker's finding) for WHAT, the fault planted.
planted() {
  local name=$1 what=$2 pattern=$3 caught=0 seed line
  shift 3
  for seed in 1 2; do
    CUDASIM_SEED=$seed timeout 600 "$TMP/$name/train_gpt_sim" "$@" > "$TMP/$name/run$seed.out" 2>&1
    grep -q "$pattern" "$TMP/$name/run$seed.out" && caught=$((caught + 1))
  done
  line=$(grep -h -m1 "$pattern" "$TMP/$name"/run*.out | head -1)
  if [ $caught = 2 ]; then ok "planted fault: $what is caught in 2 of 2 interleavings: ${line:0:200}"
  else bad "planted fault: $what went unnoticed in $((2 - caught)) of 2 interleavings"; fi
}
# (c) --offload activations: block l + 3 overwrites the ring slot of block l's output without
# waiting for the copy stream to have sent it to the host. The checker must see the copy's read
# and the kernel's write unordered.
build_variant no-act-wait fsdp/offload.c 's/  if \(offloaded\(fs\)\) device_stream_wait_timed\(STREAM_COMPUTE, fs->acts\.copy_done\[l % ACT_RING\]\);\n//' &&
  planted no-act-wait "a removed wait before a block output's ring slot is reused (fsdp/offload.c)" \
    '^cudasim: streamcheck:' $OFFM --offload activations
# (d) --offload params: the copy stream sends a unit's updated master shard back to the host
# without waiting for the AdamW kernel that writes it on the compute stream.
build_variant no-step-wait fsdp/optimizer.c 's/      device_stream_wait\(STREAM_COPY, fs->offload\.step_updated\[k\]\);\n//' &&
  planted no-step-wait "a removed wait before an updated master shard is copied back (fsdp/optimizer.c)" \
    '^cudasim: streamcheck:' $OFFM --offload params
# (e) --offload optim: the host runs AdamW on a unit's master shard without waiting for the copy
# that brings it from the device into pinned memory. The host's own accesses are not stream
# operations; the pinned pages, protected while the copy is pending, must fault and the
# simulator name the copy (hostcheck.cpp).
build_variant no-host-wait fsdp/optimizer.c 's/      if \(on_host\) device_event_synchronize\(fs->offload\.step_in\[k\]\);\n      else /      if (!on_host) /' &&
  planted no-host-wait "the host AdamW without its wait for the copy into pinned memory (fsdp/optimizer.c)" \
    '^cudasim: hostcheck: the host read pinned host block' $OFFM --offload optim

fi

# ---- 6. memory ---------------------------------------------------------------------------
section memory && for cfg in GPT T5 OFFLOAD; do
  out=$(cat "$TMP/$cfg.sim.out")
  plan=$(echo "$out" | sed -n 's/^memory: plan \([0-9]*\) bytes, measured \([0-9]*\) bytes.*/\1/p')
  used=$(echo "$out" | sed -n 's/^memory: plan \([0-9]*\) bytes, measured \([0-9]*\) bytes.*/\2/p')
  if [ -n "$plan" ] && python3 -c "import sys; p, u = $plan, $used; sys.exit(0 if abs(u - p) <= 0.02 * p else 1)"; then
    ok "$cfg: device memory measured by the simulated cudaMemGetInfo ($used bytes) within 2% of the plan ($plan)"
  else
    bad "$cfg: measured '$used' bytes vs plan '$plan'"
  fi
  # The per-step table: no cudaMalloc or cudaFree inside any optimizer step, and (but with
  # --offload, whose host AdamW and host gradient shards wait for their copies) no host-blocking
  # call either: the step's loss, norm and verdict stay on the device (train/step.c).
  rows=$(echo "$out" | awk '/^cudasim: per optimizer step/ {t = 1; next} t && $1 ~ /^[0-9]+$/ {print}')
  if [ -n "$rows" ] && echo "$rows" | awk '$5 != 0 || $6 != 0 {exit 1}'; then
    ok "$cfg: no device allocation or free inside the step loop ($(echo "$rows" | wc -l) steps)"
  else
    bad "$cfg: allocations inside the step loop, or no per-step table: $rows"
  fi
  if [ "$cfg" != OFFLOAD ]; then
    if [ -n "$rows" ] && echo "$rows" | awk '$4 != 0 {exit 1}'; then
      ok "$cfg: no host-blocking call inside any step ($(echo "$rows" | wc -l) steps)"
    else
      bad "$cfg: host syncs inside a step: $rows"
    fi
  fi
done

# ---- 7. launches per GPT block against llm.c's -----------------------------------------------
# A block's launches: the per-step table's kernels and library calls (cuBLASLt products) of a
# 3-block model less those of the same model with 2, on one rank and on two (full sharding, its
# casts and collectives). llm.c's train_gpt2.cu, counted from its source at its defaults (no
# cuDNN, gelu_fusion 0, recompute 1) on an H100: forward 12 (qkv matmul; attention: permute,
# batched matmul, softmax, batched matmul, unpermute; proj matmul; fused residual + layernorm;
# fc matmul and GELU; fcproj matmul; the next block's fused residual + layernorm), backward 27
# (GELU recompute; fcproj: bias reduction in two kernels, dinp matmul, GELU backward, dweight
# matmul; fc: 2 + 2 matmuls; layernorm backward; proj: 2 + 2; attention: 7; qkv: 2 + 2; layernorm
# backward): 39 (its two cudaMemsetAsync are not counted).
LLMC_BLOCK=39
per_block() {  # per_block RANKS: kernels + library calls of one more block, step 2
  local n=$1 a b
  for L in 2 3; do
    $MPIRUN "$n" ./train_gpt_sim --model gpt:L=$L,C=64,H=4,V=256,T=10 --data "$DATA" --batch 8 --seq 10 --steps 2 \
      > "$TMP/blk$L.out" 2>&1
  done
  a=$(awk '/^cudasim: per optimizer step/ {t = 1; next} t && $1 == 2 {print $2 + $3; exit}' "$TMP/blk2.out")
  b=$(awk '/^cudasim: per optimizer step/ {t = 1; next} t && $1 == 2 {print $2 + $3; exit}' "$TMP/blk3.out")
  [ -n "$a" ] && [ -n "$b" ] && echo $((b - a))
}
section launches && for n in 1 2; do
  blk=$(per_block $n)
  if [ -n "$blk" ] && [ "$blk" -le $LLMC_BLOCK ]; then
    ok "$n rank(s): $blk launches per GPT block (kernels and cuBLASLt products), no more than llm.c's $LLMC_BLOCK"
  else
    bad "$n rank(s): '$blk' launches per GPT block, llm.c's $LLMC_BLOCK: $(tail -2 "$TMP/blk3.out")"
  fi
done

cases_summary
[ $fail = 0 ]
