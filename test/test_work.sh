#!/usr/bin/env bash
# Never losing a user's work: checkpoints owned by their run (rotation that cannot delete the
# wrong run's, or the newest intact one), outputs that can never be or reach an input, --save's
# names never followed through links, non-finite weights refused where they come in, one set of
# options and inputs on every rank, no unwatched wait at start-up, sizes bounded before anything
# is allocated, and the smaller cases of the same kind. Each case fails on a trainer without the
# protection it checks. TEST_FILTER picks sections by name: ownership, links, "outputs and
# inputs", non-finite, ranks, start-up, sizes, config, smaller.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=./train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MPIRUN="mpirun --oversubscribe -x OMP_NUM_THREADS"
cp data/addition/train_000.bin "$TMP/train.bin"
cp data/addition/val_000.bin "$TMP/val.bin"
MODEL="gpt:L=2,C=72,H=3,V=509,T=32"
M="--model $MODEL --data $TMP/train.bin --batch 2 --seq 32"
CONST="--lr 1e-3 --lr-final-frac 1"
run() {  # run NAME ARGS...: output in $TMP/NAME.out, exit code in $rc
  local name=$1
  shift
  "$@" > "$TMP/$name.out" 2>&1
  rc=$?
}
has() { grep -qE -- "$2" "$TMP/$1.out"; }
show() { grep -v '^|' "$TMP/$1.out" | grep -iE "error|warn|note|resum" | head -3; }
same_files() { cmp -s "$1/params.bin" "$2/params.bin" && cmp -s "$1/complete.json" "$2/complete.json"; }
# A real small file system, for the cases that need a disk that fills: a tmpfs of $2 KiB at $1
# in a private mount namespace (needs root); the function runs the rest of its arguments there.
in_small_fs() {
  local dir=$1 kib=$2
  shift 2
  unshare -m bash -c 'mount -t tmpfs -o size='"$kib"'k tmpfs "$0" && "$@"' "$dir" "$@"
}
small_fs_ok() { mkdir -p "$TMP/probe" && in_small_fs "$TMP/probe" 64 true 2> /dev/null; }

# ---- ownership: a run's checkpoints are its own ------------------------------------------
if want "ownership"; then
run a $BIN $M $CONST --steps 3 --save "$TMP/own"
cp -r "$TMP/own" "$TMP/own_before"
run b $BIN $M $CONST --steps 2 --save "$TMP/own"
[ $rc = 2 ] && has b "own holds a checkpoint of another run \(.*step 3, run [0-9a-f]{16}\).*add --resume .*own" &&
  same_files "$TMP/own" "$TMP/own_before" && ok "a new run's --save onto another run's checkpoint is refused, naming that run and --resume; the checkpoint is untouched" ||
  bad "new run onto another run's --save" "exit $rc $(show b)"
run c $BIN $M $CONST --steps 4 --resume "$TMP/own" --save "$TMP/own"
[ $rc = 0 ] && grep -q '"step": 4' "$TMP/own/complete.json" && grep -q "\"run_id\": \"$(grep -o '"run_id": "[0-9a-f]*"' "$TMP/own_before/meta.json" | cut -d'"' -f4)\"" "$TMP/own/meta.json" &&
  ok "a resumed run saves over its own checkpoint, under the identity it resumed" || bad "resume and save" "exit $rc $(show c)"
# --init-from a checkpoint takes its weights, not its run: the new run has its own identity, and
# cannot later save over the run it started from.
run i1 $BIN --init-from "$TMP/own" --data "$TMP/train.bin" --batch 2 --seq 32 $CONST --steps 1 --save "$TMP/from_own"
cp -r "$TMP/own" "$TMP/own_c"
run i2 $BIN --resume "$TMP/from_own" --steps 2 --save "$TMP/own"
id_of() { grep -o '"run_id": "[0-9a-f]*"' "$1/meta.json" | cut -d'"' -f4; }
[ $rc = 2 ] && [ -n "$(id_of "$TMP/from_own")" ] && [ "$(id_of "$TMP/from_own")" != "$(id_of "$TMP/own")" ] &&
  has i2 "own holds a checkpoint of another run" && same_files "$TMP/own" "$TMP/own_c" &&
  ok "--init-from a checkpoint starts a run of its own: it cannot save over the run it started from" ||
  bad "--init-from a checkpoint and identity" "exit $rc $(show i1) $(show i2)"

# --keep-checkpoints: a new run in an older run's directory neither prunes nor shadows its checkpoints.
run k1 $BIN $M $CONST --steps 4 --save "$TMP/keep" --save-every 1 --keep-checkpoints 2
cp -r "$TMP/keep" "$TMP/keep_before"
run k2 $BIN $M $CONST --steps 2 --save "$TMP/keep" --save-every 1 --keep-checkpoints 2
[ $rc = 2 ] && has k2 "holds a checkpoint of another run.*rotate out" && [ "$(ls "$TMP/keep" | tr '\n' ' ')" = "step_00000003 step_00000004 " ] &&
  same_files "$TMP/keep/step_00000004" "$TMP/keep_before/step_00000004" &&
  ok "--keep-checkpoints: a new run in an older run's directory is refused; the older run's checkpoints stay as they were" ||
  bad "new run in a --keep-checkpoints directory" "exit $rc $(ls "$TMP/keep") $(show k2)"

# A corrupt checkpoint is never counted among the kept: 4 and 6 kept, 6 corrupted, resumed from
# 4 and saved at 5: the rotation keeps 4 (verified) and leaves 6 where it is, saying so.
run r1 $BIN $M $CONST --steps 6 --save "$TMP/rot" --save-every 2 --keep-checkpoints 2
printf '\x01' | dd of="$TMP/rot/step_00000006/params.bin" bs=1 seek=8 conv=notrunc status=none
run r2 $BIN $M $CONST --steps 5 --resume "$TMP/rot" --save "$TMP/rot" --keep-checkpoints 2
[ $rc = 0 ] && [ -f "$TMP/rot/step_00000004/complete.json" ] && [ -f "$TMP/rot/step_00000005/complete.json" ] &&
  has r2 "using .*step_00000004" &&
  ok "rotation never counts a corrupt checkpoint: the intact one before it is kept, not deleted" ||
  bad "corrupt newest and rotation" "exit $rc $(ls "$TMP/rot") $(show r2)"

# Rotation verifies what this process did not write, on every rank together: on 2 ranks, a run
# resumed from a copy of step 3 saves step 4 into the directory whose step 3 is corrupt: step 3
# is left (said), step 2 kept as the newest intact one, step 1 rotated out.
run v1 $MPIRUN -np 2 $BIN $M $CONST --steps 3 --save "$TMP/ver" --save-every 1 --keep-checkpoints 3
cp -r "$TMP/ver/step_00000003" "$TMP/ver_copy3"
printf '\x01' | dd of="$TMP/ver/step_00000003/adam_m.bin" bs=1 seek=64 conv=notrunc status=none
run v2 $MPIRUN -np 2 $BIN $M $CONST --steps 4 --resume "$TMP/ver_copy3" --save "$TMP/ver" --keep-checkpoints 2
[ $rc = 0 ] && [ "$(ls "$TMP/ver" | tr '\n' ' ')" = "step_00000002 step_00000003 step_00000004 " ] &&
  has v2 "warning: --keep-checkpoints: .*step_00000003 does not verify \(.*adam_m.bin: bytes" &&
  ok "rotation on 2 ranks verifies the checkpoints it did not write: a corrupt one is left and said, the intact one before it kept" ||
  bad "rotation's verification on 2 ranks" "exit $rc $(ls "$TMP/ver") $(show v2)"

# --keep-checkpoints N needs room for N checkpoints: rotation happens before the write.
if small_fs_ok; then
  ck_kib=$(du -sk "$TMP/keep/step_00000004" | cut -f1)
  mkdir -p "$TMP/room"
  run room in_small_fs "$TMP/room" $((2 * ck_kib + ck_kib / 2)) $BIN $M $CONST --steps 4 --save "$TMP/room/ck" --save-every 1 \
    --keep-checkpoints 2
  [ $rc = 0 ] && ok "--keep-checkpoints 2 runs on a disk with room for 2.5 checkpoints (not 3)" ||
    bad "--keep-checkpoints room" "exit $rc $(show room)"
else
  echo "note: no private mounts here (unshare -m needs root): the --keep-checkpoints room case is not run"
fi
fi

# ---- links: --save's names are never followed -------------------------------------------
if want "links"; then
run l1 $BIN $M $CONST --steps 3 --save "$TMP/real"
cp -r "$TMP/real" "$TMP/real_before"
ln -s real "$TMP/link"
run l2 $BIN $M $CONST --steps 4 --resume "$TMP/link" --save "$TMP/link"
[ $rc = 2 ] && has l2 "link is a symbolic link \(to real\).*Give --save the real directory" && [ -L "$TMP/link" ] &&
  same_files "$TMP/real" "$TMP/real_before" && [ ! -e "$TMP/link.old" ] &&
  ok "--save onto a symbolic link is refused before the first step; the checkpoint it points to is intact" ||
  bad "--save onto a link" "exit $rc $(show l2) $(ls "$TMP")"
mkdir -p "$TMP/victim" && cp -r "$TMP/real_before/." "$TMP/victim/"
ln -s victim "$TMP/real.tmp"
run l3 $BIN $M $CONST --steps 4 --resume "$TMP/real" --save "$TMP/real"
[ $rc = 2 ] && has l3 "real.tmp is a symbolic link" && same_files "$TMP/victim" "$TMP/real_before" &&
  ok "a symbolic link planted at DIR.tmp is refused; the checkpoint it points to keeps its files" ||
  bad "a link at DIR.tmp" "exit $rc $(show l3) $(ls "$TMP/victim")"
rm -f "$TMP/real.tmp"
rm -rf "$TMP/victim" && mkdir -p "$TMP/victim" && cp -r "$TMP/real_before/." "$TMP/victim/"
ln -s victim "$TMP/real.old"
run l4 $BIN $M $CONST --steps 4 --resume "$TMP/real" --save "$TMP/real"
[ $rc = 2 ] && has l4 "real.old is a symbolic link" && same_files "$TMP/victim" "$TMP/real_before" && [ -L "$TMP/real.old" ] &&
  ok "a symbolic link planted at DIR.old is refused; the checkpoint it points to keeps its files" ||
  bad "a link at DIR.old" "exit $rc $(show l4) $(ls "$TMP/victim")"
rm -f "$TMP/real.old"
fi

# ---- outputs and inputs: compared by device and inode -------------------------------------
if want "outputs and inputs"; then
# An earlier export (a Hugging Face directory) to start from, and a prompts file.
run hf0 $BIN $M --steps 0 --save "$TMP/ck_hf"
run hf ./export_weights_cpu "$TMP/ck_hf" "$TMP/hf"
head -20 data/addition/val_problems.txt > "$TMP/prompts.txt"
cp "$TMP/hf/model.safetensors" "$TMP/ck_hf_export.safetensors"
sum_inputs() { cat "$TMP/train.bin" "$TMP/val.bin" "$TMP/hf/model.safetensors" "$TMP/prompts.txt" | md5sum; }
before=$(sum_inputs)
ln -s train.bin "$TMP/train_link.bin"
for case in "--log onto the --data shard|--log $TMP/train.bin|--log .*train.bin is --data" \
            "--dump-params onto the --val-data shard|--val-data $TMP/val.bin --dump-params $TMP/val.bin|--dump-params .*val.bin is --val-data" \
            "--dump-params onto --init-from's model.safetensors|--init-from $TMP/hf --dump-params $TMP/hf/model.safetensors|--dump-params .*model.safetensors lies inside --init-from" \
            "--trace onto the --data shard|--trace $TMP/train.bin|--trace .*train.bin is --data" \
            "--bench-json onto the --data shard|--bench --bench-json $TMP/train.bin|--bench-json .*train.bin is --data" \
            "--log onto --eval-prompts|--eval-prompts $TMP/prompts.txt --log $TMP/prompts.txt|--log .*prompts.txt is --eval-prompts" \
            "--log onto a link to the --data shard|--log $TMP/train_link.bin|--log .*train_link.bin is --data"; do
  IFS='|' read -r name args pattern <<< "$case"
  model=$M
  [[ $args == --init-from* ]] && model="--data $TMP/train.bin --batch 2 --seq 32"
  run oi $BIN $model --steps 1 $args
  [ $rc = 2 ] && has oi "$pattern" && ! has oi "^step +1/" && [ "$(sum_inputs)" = "$before" ] &&
    ok "$name is refused before the first step; the input is intact" || bad "$name" "exit $rc $(show oi)"
  cp data/addition/train_000.bin "$TMP/train.bin"  # as it was, should the case have destroyed it
  cp data/addition/val_000.bin "$TMP/val.bin"
  cp "$TMP/ck_hf_export.safetensors" "$TMP/hf/model.safetensors" && rm -f "$TMP/hf/model.safetensors.json"
  head -20 data/addition/val_problems.txt > "$TMP/prompts.txt"
done
run same $BIN $M --steps 1 --save "$TMP/both" --export "$TMP/both"
[ $rc = 2 ] && has same "--save .*both and --export .*both name the same path" && ! has same "in use by another run" &&
  ok "--save D --export D is refused as the same path (not as a run holding its own lock)" || bad "--save D --export D" "exit $rc $(show same)"
run expself ./export_weights_cpu "$TMP/hf" "$TMP/hf"
[ $rc = 2 ] && has expself "would replace SRC" && [ "$(sum_inputs)" = "$before" ] &&
  ok "export_weights_cpu onto its own source is refused" || bad "export onto SRC" "exit $rc $(show expself)"
fi

# ---- non-finite values: refused where they come in -------------------------------------
if want "non-finite"; then
[ -d "$TMP/hf" ] || { run hf0 $BIN $M --steps 0 --save "$TMP/ck_hf"; run hf ./export_weights_cpu "$TMP/ck_hf" "$TMP/hf"; }
cp -r "$TMP/hf" "$TMP/hf_nan"
python3 - "$TMP/hf_nan/model.safetensors" << 'EOF'
import json, struct, sys
p = sys.argv[1]
data = bytearray(open(p, "rb").read())
n = struct.unpack_from("<Q", data)[0]
head = json.loads(data[8:8 + n])
start = 8 + n + head["transformer.h.1.mlp.c_fc.weight"]["data_offsets"][0]
struct.pack_into("<f", data, start + 4 * 7, float("nan"))
open(p, "wb").write(data)
EOF
run nan_init $BIN --data "$TMP/train.bin" --batch 2 --seq 32 --steps 1 --init-from "$TMP/hf_nan"
[ $rc = 1 ] && has nan_init "tensor transformer.h.1.mlp.c_fc.weight holds a non-finite value \(nan\) at element 7" && ! has nan_init "^step +1/" &&
  ok "--init-from with a NaN weight is refused, naming the tensor and element" || bad "--init-from NaN" "exit $rc $(show nan_init)"
run nan_gen ./generate_cpu "$TMP/hf_nan" --prompt-ids "1 2" --tokens 4 --temperature 0
[ $rc = 1 ] && has nan_gen "SRC .*model.safetensors: tensor transformer.h.1.mlp.c_fc.weight holds a non-finite value" &&
  ok "generate_cpu refuses a model with a NaN weight (it printed ids 0 0 0 0)" || bad "generate NaN" "exit $rc $(show nan_gen)"
run nan_exp ./export_weights_cpu "$TMP/hf_nan" "$TMP/hf_nan_out"
[ $rc = 1 ] && has nan_exp "non-finite value" && [ ! -e "$TMP/hf_nan_out" ] &&
  ok "export_weights_cpu refuses a source with a NaN weight and writes nothing" || bad "export NaN" "exit $rc $(show nan_exp)"
# A checkpoint holding a NaN whose checksums were made to match (written by other means).
run ck_nan0 $BIN $M $CONST --steps 2 --save "$TMP/ck_nan"
python3 - "$TMP/ck_nan" << 'EOF'
import json, struct, sys
d = sys.argv[1]
raw = bytearray(open(d + "/params.bin", "rb").read())
struct.pack_into("<f", raw, 4 * 100, float("inf"))
open(d + "/params.bin", "wb").write(raw)
M = (1 << 64) - 1
def mix64(z):  # fsdp/checkpoint_format.c
    z = (z + 0x9e3779b97f4a7c15) & M
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return z ^ (z >> 31)
bits = struct.unpack(f"<{len(raw) // 4}I", raw)
chunk = 1 << 20
sums = [0] * ((len(bits) + chunk - 1) // chunk)
for e, b in enumerate(bits):
    sums[e // chunk] = (sums[e // chunk] + mix64((e << 32) ^ b)) & M
text = open(d + "/complete.json").read()
marker = json.loads(text)
marker["params.bin"] = [f"{s:016x}" for s in sums]
open(d + "/complete.json", "w").write(json.dumps(marker))
EOF
run ck_nan $BIN $M $CONST --steps 3 --resume "$TMP/ck_nan"
[ $rc = 1 ] && has ck_nan "params.bin: [a-z0-9_]+\.[a-z0-9_.]+ holds a non-finite value \(inf\) at element 100" &&
  ok "a checkpoint holding an inf under matching checksums is refused, naming the tensor" || bad "checkpoint inf" "exit $rc $(show ck_nan)"
for eps in 0 1e-50; do
  run eps $BIN $M --steps 1 --adam-eps $eps
  [ $rc = 2 ] && has eps "option --adam-eps expects a number in \(0, 1\], got '$eps'" &&
    ok "--adam-eps $eps is refused (AdamW would divide by zero)" || bad "--adam-eps $eps" "exit $rc $(show eps)"
done
run lr_tiny $BIN $M --steps 1 --lr 1e-60
[ $rc = 2 ] && has lr_tiny "beyond what a float holds" && ok "--lr 1e-60 (which strtof rounds to 0) is refused" || bad "--lr 1e-60" "exit $rc $(show lr_tiny)"
fi

# ---- ranks: one set of options and inputs ------------------------------------------------
if want "ranks"; then
run lr2 $MPIRUN -np 1 $BIN $M $CONST --steps 2 : -np 1 $BIN $M $CONST --steps 2 --lr 2e-3
[ $rc != 0 ] && has lr2 "\[rank 1\] error: --lr differs: '--lr 2e-3' here, '--lr 1e-3' on rank 0" && ! has lr2 "^step +1/" &&
  ok "ranks started with different --lr are refused before the first step, naming the option" || bad "different --lr" "exit $rc $(show lr2)"
run seed2 $MPIRUN -np 2 $BIN $M --steps 2 : -np 1 $BIN $M --steps 2 --seed 7
[ $rc != 0 ] && has seed2 "\[rank 2\] error: this rank was given '--seed 7', which rank 0 was not" &&
  ok "a rank given an option the others were not (a wrapper adding --seed) is refused, naming it" || bad "extra option" "exit $rc $(show seed2)"
run shape2 timeout 120 $MPIRUN -np 1 $BIN $M --steps 2 --comm-timeout 20 : -np 1 $BIN --model gpt:L=2,C=64,H=2,V=509,T=32 \
  --data "$TMP/train.bin" --batch 2 --seq 32 --steps 2 --comm-timeout 20
[ $rc != 0 ] && [ $rc != 124 ] && has shape2 "\[rank 1\] error: --model differs: '--model gpt:L=2,C=64,H=2,V=509,T=32' here" &&
  ! has shape2 "did not finish within|MPI_ERR_TRUNCATE" &&
  ok "ranks started with different model shapes are refused naming --model (it was MPI_ERR_TRUNCATE or a collective's timeout)" ||
  bad "different --model" "exit $rc $(show shape2)"
# Where only rank 0 writes (--log, --dump-params) or each rank its own file (--trace), a launcher
# may give each process its own path: that is not a different run.
run own $MPIRUN -np 1 $BIN $M --steps 2 --log "$TMP/own0.json" --dump-params "$TMP/own0.bin" --trace "$TMP/own0.trace" : \
  -np 1 $BIN $M --steps 2 --log "$TMP/own1.json" --dump-params "$TMP/own1.bin" --trace "$TMP/own1.trace"
[ $rc = 0 ] && [ -s "$TMP/own0.json" ] && [ -s "$TMP/own0.bin" ] && [ -s "$TMP/own0.trace.rank0" ] && [ -s "$TMP/own1.trace.rank1" ] &&
  ok "ranks given their own --log, --dump-params and --trace paths train (only whether they are given is compared)" ||
  bad "per-rank output paths" "exit $rc $(show own) $(ls "$TMP" | grep own)"
mkdir -p "$TMP/node0" "$TMP/node1"
cp "$TMP/train.bin" "$TMP/node0/shard.bin"
head -c 500000 "$TMP/train.bin" > "$TMP/node1/shard.bin"
python3 -c "import struct,sys; p=sys.argv[1]; d=bytearray(open(p,'rb').read()); struct.pack_into('<i', d, 8, (len(d)-1024)//2); open(p,'wb').write(d)" "$TMP/node1/shard.bin"
run data2 $MPIRUN -np 1 -wdir "$TMP/node0" $PWD/$BIN --model $MODEL --data shard.bin --batch 2 --seq 32 --steps 2 : \
  -np 1 -wdir "$TMP/node1" $PWD/$BIN --model $MODEL --data shard.bin --batch 2 --seq 32 --steps 2
[ $rc != 0 ] && has data2 "\[rank 1\] error: --data shard.bin is not rank 0's file of that name: 500000 bytes against" &&
  ok "ranks whose --data of one name holds other data (another node's copy) are refused, naming the file" ||
  bad "different data" "exit $rc $(show data2)"
start=$SECONDS
run alone timeout 120 $MPIRUN -np 1 $BIN $M --steps 2 --clip 2 : -np 1 $BIN $M --steps 2
[ $rc = 2 ] && [ $((SECONDS - start)) -lt 30 ] && has alone "unknown option '--clip'" &&
  ok "a usage error on rank 0 alone ends the job in $((SECONDS - start)) s (the other rank waited --comm-timeout)" ||
  bad "usage error on one rank" "exit $rc after $((SECONDS - start)) s $(show alone)"
start=$SECONDS
run alone1 timeout 120 $MPIRUN -np 1 $BIN $M --steps 2 : -np 1 $BIN $M --steps 2 --clip 2
[ $rc = 2 ] && [ $((SECONDS - start)) -lt 30 ] && has alone1 "\[rank 1\] error: unknown option '--clip' \(this rank alone" &&
  ok "a usage error on rank 1 alone ends the job in $((SECONDS - start)) s and rank 1 says why" ||
  bad "usage error on rank 1" "exit $rc after $((SECONDS - start)) s $(show alone1)"
# The data a checkpoint was trained on is recorded; a resume on other data says so.
python3 -c "
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read()); d[1024:1024 + 4000] = d[1024 + 4000:1024 + 8000]
open(sys.argv[2], 'wb').write(d)" "$TMP/train.bin" "$TMP/other.bin"
run dsave $BIN $M $CONST --steps 2 --save "$TMP/ck_data"
run dres $BIN --model $MODEL --data "$TMP/other.bin" --batch 2 --seq 32 $CONST --steps 3 --resume "$TMP/ck_data"
run dsame $BIN $M $CONST --steps 3 --resume "$TMP/ck_data"
[ $rc = 0 ] && has dres "note: --resume .*ck_data: the checkpoint was trained on other data \(1 shards, [0-9]+ tokens, digest [0-9a-f]+\) than this run's --data .*other.bin" &&
  ! has dsame "other data" && ok "--resume with another --data says so; with the same data it does not" ||
  bad "resume on other data" "$(show dres)"
# A shard replaced while the run reads it (renamed over, with valid ids) stops the run, naming it.
cp "$TMP/train.bin" "$TMP/live.bin"
timeout 60 $BIN --model $MODEL --data "$TMP/live.bin" --batch 2 --seq 32 --steps 1000000 > "$TMP/live.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -qE "^step +2/" "$TMP/live.out" && break; sleep 0.1; done
cp "$TMP/other.bin" "$TMP/live.new" && mv "$TMP/live.new" "$TMP/live.bin"
wait $pid
rc=$?
[ $rc = 1 ] && has live "live.bin changed while the run reads it: it was replaced by another file" &&
  ok "a shard replaced during the run (valid ids, renamed over it) stops the run at the next batch, naming it" ||
  bad "replaced shard" "exit $rc $(show live)"
fi

# ---- start-up: every blocking call is watched --------------------------------------------
if want "start-up"; then
if cc -shared -fPIC -O1 -o "$TMP/stall.so" test/stall_shim.c -ldl 2> "$TMP/stall_cc.out"; then
  for at in MPI_Init_thread MPI_Comm_split; do
    start=$SECONDS
    run stall timeout 120 $MPIRUN -x LD_PRELOAD="$TMP/stall.so" -x STALL_AT=$at -x STALL_RANK=1 -np 3 $BIN $M --steps 2 --comm-timeout 3
    stage="MPI's start-up \(MPI_Init_thread\)"
    [ $at = MPI_Comm_split ] && stage="a process group's split \(MPI_Comm_split\)"
    [ $rc != 0 ] && [ $rc != 124 ] && [ $((SECONDS - start)) -lt 30 ] && has stall "\[rank [02]\] error: $stage did not finish within --comm-timeout 3 s" &&
      ok "a rank stopped in $at ends the job in $((SECONDS - start)) s, naming the stage" ||
      bad "stopped in $at" "exit $rc after $((SECONDS - start)) s $(show stall)"
  done
else
  bad "start-up stalls" "cannot build test/stall_shim.c: $(head -3 "$TMP/stall_cc.out")"
fi
fi

# ---- sizes: bounded before anything is allocated -----------------------------------------
if want "sizes"; then
python3 - "$TMP/layers.bin" << 'EOF'
import os, struct, sys
L = 1 << 20  # an llm.c bf16 header of 2^20 one-wide layers, the file as large as it says (sparse)
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240326, 5, 1, 1, L, 1, 1, 1, *([0] * 248)))
os.truncate(sys.argv[1], 1024 + 2 * (1 + 1 + 25 * L + 2))
EOF
run layers bash -c "ulimit -v 2000000; exec $BIN --init-from $TMP/layers.bin --data $TMP/train.bin --batch 1 --seq 1 --steps 0"
[ $rc = 2 ] && has layers "layers.bin: implausible llm.c header .*L 1048576.*L at most 4096" && ! has layers "out of host memory" &&
  ok "an llm.c header of 2^20 layers is refused from the header, in 2 GB of address space, at once (it took 2.5 GB)" || bad "llm.c L=2^20" "exit $rc $(show layers)"
python3 - "$TMP/table.bin" << 'EOF'
import os, struct, sys
# GPT-2 124M's llm.c header on a file that ends inside the fourth block's weights (sparse)
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240326, 3, 1024, 50257, 12, 12, 768, 50304, *([0] * 248)))
os.truncate(sys.argv[1], 1024 + 400 * 2**20)
EOF
run table bash -c "ulimit -v 1000000; exec $BIN --init-from $TMP/table.bin --data $TMP/train.bin --batch 1 --seq 8 --steps 0"
[ $rc = 2 ] && has table "table.bin: tensor fcprojw.3 ends beyond the file's 419431424 bytes" && ! has table "out of host memory|memory: plan" &&
  ok "an llm.c file shorter than its header's tensors is refused by the table before the plan, in 1 GB of address space" ||
  bad "llm.c table against the file" "exit $rc $(show table)"
run plan bash -c "ulimit -v 4000000; exec $BIN --plan --backend cpu --model gpt:L=1000000"
[ $rc = 2 ] && has plan "1000000 blocks, more than the 4096" && ok "--plan gpt:L=1000000 is refused at once (it was killed at 24 GB)" ||
  bad "--plan L=1e6" "exit $rc $(show plan)"
run fpe $BIN --plan --backend cpu --model $MODEL --world 65536 --batch 65536 --global-batch 8
[ $rc = 2 ] && has fpe "--global-batch 8 cannot be split .* = 4294967296" && ok "--world 65536 --batch 65536 --global-batch 8 is refused (it was SIGFPE)" ||
  bad "run_shape overflow" "exit $rc $(show fpe)"
run zero $BIN --plan --backend cpu --model $MODEL --world 65536 --batch 65536
[ $rc = 2 ] && has zero "4294967296 sequences per step; at most 1073741824" && ok "2^32 sequences per step are refused (the plan said 0)" ||
  bad "sequences per step" "exit $rc $(show zero)"
run steps bash -c "ulimit -v 4000000; exec timeout --preserve-status -s TERM 3 $BIN $M --steps 1073741824"
[ $rc = 75 ] && has steps "stopped by SIGTERM" && ok "--steps 2^30 runs in 4 GB of address space (its timing arrays took 16 GB)" ||
  bad "--steps 2^30" "exit $rc $(show steps)"
run big0 $BIN $M --steps 0 --save "$TMP/ck_big"
sed -i "s/\"model\": \"[^\"]*\"/\"model\": \"gpt2-774m\"/" "$TMP/ck_big/meta.json"
for tool in generate_cpu export_weights_cpu; do
  args="$TMP/ck_big --prompt-ids 1"
  [ $tool = export_weights_cpu ] && args="$TMP/ck_big $TMP/ck_big_hf"
  run big bash -c "ulimit -v 4000000; exec ./$tool $args"
  [ $rc = 1 ] && has big "SRC .*ck_big: no checkpoint there fits its model \(checked before anything of the model's size is allocated\)" &&
    ! has big "out of host memory" && ok "$tool on a checkpoint whose meta.json names gpt2-774m beside small files refuses before allocating" ||
    bad "$tool on a mislabelled checkpoint" "exit $rc $(show big)"
done
run bigi bash -c "ulimit -v 4000000; exec $BIN --init-from $TMP/ck_big --data $TMP/train.bin --batch 1 --seq 8 --steps 0"
[ $rc = 1 ] && has bigi "--init-from .*ck_big: no checkpoint there fits its model \(checked before anything of the model's size" &&
  ! has bigi "out of host memory" && ok "--init-from the same checkpoint refuses before allocating" ||
  bad "--init-from a mislabelled checkpoint" "exit $rc $(show bigi)"
fi

# ---- config.json: fields that change the model are refused by name ----------------------
if want "config"; then
[ -d "$TMP/hf" ] || { run hf0 $BIN $M --steps 0 --save "$TMP/ck_hf"; run hf ./export_weights_cpu "$TMP/ck_hf" "$TMP/hf"; }
run t50 $BIN --model t5:L=1,C=32,H=2,D=16,F=64,V=512 --data "$TMP/train.bin" --steps 0 --save "$TMP/ck_t5"
run t5hf ./export_weights_cpu "$TMP/ck_t5" "$TMP/t5hf"
for case in "hf|layer_norm_epsilon|1e-05|1e-06|layer_norm_epsilon 1e-06" \
            "hf|scale_attn_weights|false|false|scale_attn_weights false" \
            "hf|scale_attn_by_inverse_layer_idx|false|true|scale_attn_by_inverse_layer_idx true" \
            "t5hf|layer_norm_epsilon|1e-06|1e-05|layer_norm_epsilon 1e-05"; do
  IFS='|' read -r dir key old new pattern <<< "$case"
  rm -rf "$TMP/cfg" && cp -r "$TMP/$dir" "$TMP/cfg"
  python3 -c "
import json, sys
p = sys.argv[1] + '/config.json'; c = json.load(open(p)); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open(p, 'w'))" \
    "$TMP/cfg" "$key" "$new"
  run cfg $BIN --data "$TMP/train.bin" --steps 1 --init-from "$TMP/cfg"
  [ $rc = 2 ] && has cfg "config.json: $pattern; fsdp.c" && ok "config.json ($dir) with $key $new is refused by name" ||
    bad "config.json $key $new" "exit $rc $(show cfg)"
done
fi

# ---- smaller ------------------------------------------------------------------------------
if want "smaller"; then
run tab $BIN --model "$(printf 'gpt:L=\t2,C=72,H=3,V=509,T=32')" --data "$TMP/train.bin" --batch 2 --seq 32 --steps 1 --save "$TMP/ck_tab"
[ $rc = 2 ] && has tab "bad value for L" && [ ! -e "$TMP/ck_tab" ] && ok "a TAB inside --model is refused (it went raw into meta.json)" ||
  bad "TAB in --model" "exit $rc $(show tab)"
run sp0 $BIN $M $CONST --steps 2 --save "$TMP/ck_spell"
run sp1 $BIN --model "gpt:T=32,V=509,H=03,C=72,L=2," --data "$TMP/train.bin" --batch 2 --seq 32 $CONST --steps 3 --resume "$TMP/ck_spell" --save "$TMP/ck_spell"
[ $rc = 0 ] && has sp1 "resumed from .*ck_spell after step 2" && grep -q "\"model\": \"$MODEL\"" "$TMP/ck_spell/meta.json" &&
  ok "the same shape spelled another way (key order, H=03, a trailing comma) resumes, and saves under the checkpoint's name" ||
  bad "another spelling" "exit $rc $(show sp1)"
cp -r "$TMP/ck_spell" "$TMP/ck_bad"
printf '\x01' | dd of="$TMP/ck_bad/adam_v.bin" bs=1 seek=100 conv=notrunc status=none
for tool in generate_cpu export_weights_cpu; do
  args="$TMP/ck_bad --prompt-ids 1"
  [ $tool = export_weights_cpu ] && args="$TMP/ck_bad $TMP/ck_bad_hf"
  run word ./$tool $args
  [ $rc = 1 ] && has word "SRC .*ck_bad: no complete, intact checkpoint" && ! has word "--resume" &&
    ok "$tool names its argument SRC in a checkpoint's errors, not --resume" || bad "$tool wording" "exit $rc $(show word)"
done
mkdir -p "$TMP/empty_export"
run emp $BIN $M --steps 1 --export "$TMP/empty_export"
[ $rc = 0 ] && [ -f "$TMP/empty_export/model.safetensors" ] && ok "an existing empty directory is an --export target" ||
  bad "empty --export directory" "exit $rc $(show emp)"
if small_fs_ok; then
  mkdir -p "$TMP/full"
  run dump in_small_fs "$TMP/full" 400 bash -c "$BIN $M --steps 1 --dump-params $TMP/full/p.bin; r=\$?; echo left: \$(ls -A $TMP/full); exit \$r"
  [ $rc = 1 ] && has dump "--dump-params: writing .* failed: No space left on device \(nothing was left behind\)" && has dump "^left: *$" &&
    ok "--dump-params on a full disk fails naming it and leaves no p.bin.tmp or p.bin.json.tmp" || bad "--dump-params on a full disk" "exit $rc $(tail -3 "$TMP/dump.out")"
else
  echo "note: no private mounts here (unshare -m needs root): the full-disk --dump-params case is not run"
fi
fi
cases_summary
[ $fail = 0 ]
