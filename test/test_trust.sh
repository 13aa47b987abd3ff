#!/usr/bin/env bash
# Trust under faults and bad input: checkpoints that are verified and survive a crash at any
# point of a save, output paths (and their names' lengths) checked before the first step,
# exports that never touch what they did not create, one run per --save directory, a clean
# save on SIGTERM/SIGINT/SIGUSR1, non-finite steps skipped on every rank, token ids checked on
# every read, hung collectives that end, and launches that MPI does not match refused. Each
# case fails on a trainer without the protection it checks. TEST_FILTER picks sections by name:
# checkpoints, "output paths", exports, signals, non-finite, "loss scaling", data, launch, smaller.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=./train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MPIRUN="mpirun --oversubscribe -x OMP_NUM_THREADS"
cp data/addition/train_000.bin "$TMP/train.bin"
M="--model gpt:L=2,C=72,H=3,V=509,T=32 --data $TMP/train.bin --batch 2 --seq 32"
CONST="--lr 1e-3 --lr-final-frac 1"  # a constant learning rate: step k does not depend on --steps
digest() { grep -o 'params_digest [0-9a-f]*' "$1" | awk '{print $2}'; }
# run NAME ARGS...: runs the trainer, output in $TMP/NAME.out, exit code in $rc.
run() {
  local name=$1
  shift
  "$@" > "$TMP/$name.out" 2>&1
  rc=$?
}
has() { grep -qE -- "$2" "$TMP/$1.out"; }
show() { grep -v '^|' "$TMP/$1.out" | grep -iE "error|warn|skip|resum" | head -3; }

# ---- checkpoints -------------------------------------------------------------------------
CK=$TMP/ck
run ref $BIN $M $CONST --steps 5 --digest
run ref_a3 $BIN $M $CONST --steps 5 --accum 3 --digest
run save3 $BIN $M $CONST --steps 3 --save "$CK"
# LD_PRELOAD shims that several groups below use: a disk that fills after ENOSPC_AFTER_BYTES,
# and SIGTERM raised in the fsync of SIGNAL_FSYNC_PATH.
cc -shared -fPIC -O1 -o "$TMP/enospc.so" test/enospc_shim.c -ldl
cc -shared -fPIC -O1 -o "$TMP/signal.so" test/signal_shim.c -ldl
[ -f "$CK/complete.json" ] && [ ! -e "$CK.tmp" ] && ok "a save ends with its completion marker and no temporary" ||
  bad "save: $(ls "$TMP")"
cp -r "$CK" "$TMP/good"
restore() { rm -rf "$CK" "$CK.tmp" "$CK.old"; cp -r "$TMP/good" "$CK"; }
if want "checkpoints"; then

# meta.json: every field validated, with the reason (JSON that is not JSON, too).
for v in -1000000 3.7 99999999999 true '"3"' abc; do
  restore
  sed -i "s/\"step\": 3/\"step\": $v/" "$CK/meta.json"
  run meta $BIN $M $CONST --steps 5 --resume "$CK"
  want="meta.json: \"step\" is $v, (out of range|not a whole number)"
  [ "$v" = abc ] && want="meta.json is not valid JSON: line 1, column [0-9]+ \(byte [0-9]+\): expected a value, found 'a'"
  [ $rc = 1 ] && has meta "$want" && ok "meta.json step $v is refused with the reason" || bad "meta.json step $v" "exit $rc $(show meta)"
done
restore
sed -i 's/"step": 3,/"step": 3, "step": 3,/' "$CK/meta.json"
run meta $BIN $M $CONST --steps 5 --resume "$CK"
[ $rc = 1 ] && has meta 'the key "step" appears twice' && ok "meta.json with \"step\" twice is refused (which one counts is ambiguous)" ||
  bad "meta.json duplicate key" "exit $rc $(show meta)"
restore
sed -i 's/"saved_by_world_size": 1/"saved_by_world_size": 0/' "$CK/meta.json"
run meta $BIN $M $CONST --steps 5 --resume "$CK"
[ $rc = 1 ] && has meta 'saved_by_world_size" is 0, out of range' && ok "meta.json world size 0 is refused" ||
  bad "meta.json world size" "$(show meta)"
restore
sed -i 's/"seed": [0-9][0-9]*/"seed": "x"/' "$CK/meta.json"  # meta.json's own seed, not the options' "seed": "1337"
run meta $BIN $M $CONST --steps 5 --resume "$CK"
[ $rc = 1 ] && has meta '"seed" is "x", not a whole number' && ok "meta.json seed that is not a number is refused" ||
  bad "meta.json seed" "$(show meta)"

# A byte flipped anywhere in any array is found, naming the array and the byte range.
for f in params.bin adam_m.bin adam_v.bin; do
  restore
  printf '\x5a' | dd of="$CK/$f" bs=1 seek=4321 conv=notrunc status=none
  run flip $BIN $M $CONST --steps 5 --resume "$CK"
  [ $rc = 1 ] && has flip "$f: bytes \[0, [0-9]+\) do not match their checksum" &&
    ok "a flipped byte in $f is refused, naming the file and byte range" || bad "flipped byte in $f" "$(show flip)"
done
restore
truncate -s 1000 "$CK/params.bin"
run trunc $BIN $M $CONST --steps 5 --resume "$CK"
[ $rc = 1 ] && has trunc "params.bin has 1000 bytes" && ok "a truncated array is refused" || bad "truncated" "$(show trunc)"

# A half-written save (no marker) is never loaded.
restore
mv "$CK" "$CK.tmp"
rm "$CK.tmp/complete.json"
run half $BIN $M $CONST --steps 5 --resume "$CK"
[ $rc = 1 ] && has half "ck.tmp is an interrupted save" && ok "a half-written DIR.tmp alone is refused, and named" ||
  bad "half-written tmp" "$(show half)"

# Killed between the two renames of a save: DIR.old (step 3) and DIR.tmp (step 5) remain.
restore
run save5 $BIN $M $CONST --steps 5 --save "$TMP/ck5"
mv "$CK" "$CK.old"
mv "$TMP/ck5" "$CK.tmp"
cp -r "$CK.old" "$TMP/old3"
run swap $BIN $M $CONST --steps 5 --resume "$CK" --digest
[ $rc = 0 ] && has swap "using .*ck.tmp, the newest complete" && [ "$(digest "$TMP/swap.out")" = "$(digest "$TMP/ref.out")" ] &&
  ok "--resume finds the newest complete checkpoint among DIR, DIR.tmp and DIR.old and says which" ||
  bad "resume after a crash between renames" "exit $rc $(show swap)"
# The next run's save settles them: nothing complete is lost before the new one is complete.
run settle $BIN $M $CONST --steps 6 --resume "$CK" --save "$CK" --digest
[ $rc = 0 ] && grep -q '"step": 6' "$CK/complete.json" && [ ! -e "$CK.tmp" ] && [ ! -e "$CK.old" ] &&
  ok "the next save replaces them with the new checkpoint and leaves no DIR.tmp or DIR.old" ||
  bad "settle" "exit $rc $(ls "$TMP") $(show settle)"
# Only DIR.old is complete (killed after DIR was moved aside, before DIR.tmp had its marker).
rm -rf "$CK" "$CK.tmp"
cp -r "$TMP/old3" "$CK.old"
cp -r "$TMP/good" "$CK.tmp"
rm "$CK.tmp/complete.json"
run oldonly $BIN $M $CONST --steps 5 --resume "$CK" --digest
[ $rc = 0 ] && has oldonly "using .*ck.old" && has oldonly "ck.tmp is an interrupted save" &&
  [ "$(digest "$TMP/oldonly.out")" = "$(digest "$TMP/ref.out")" ] &&
  ok "with DIR missing and DIR.tmp incomplete, --resume uses DIR.old and says why" || bad "old only" "$(show oldonly)"

# --keep-checkpoints N: step-numbered checkpoints, the N newest kept; --resume DIR takes the newest.
run keep $BIN $M $CONST --steps 4 --save "$TMP/keep" --save-every 1 --keep-checkpoints 2
[ $rc = 0 ] && [ "$(ls "$TMP/keep" | tr '\n' ' ')" = "step_00000003 step_00000004 " ] &&
  ok "--keep-checkpoints 2 keeps the two newest step-numbered checkpoints" || bad "keep" "$(ls "$TMP/keep")"
run keepres $BIN $M $CONST --steps 5 --resume "$TMP/keep" --digest
[ $rc = 0 ] && has keepres "using .*step_00000004" && [ "$(digest "$TMP/keepres.out")" = "$(digest "$TMP/ref.out")" ] &&
  ok "--resume of a --keep-checkpoints directory continues from its newest checkpoint" || bad "keep resume" "$(show keepres)"
printf '\x01' | dd of="$TMP/keep/step_00000004/params.bin" bs=1 seek=8 conv=notrunc status=none
run keepbad $BIN $M $CONST --steps 5 --resume "$TMP/keep"
[ $rc = 0 ] && has keepbad "using .*step_00000003" && has keepbad "skipped: .*step_00000004/params.bin" &&
  ok "a corrupt newest checkpoint is skipped for the previous one, saying why" || bad "keep corrupt" "$(show keepbad)"

# Any world size verifies any checkpoint: saved on 3 ranks, verified and resumed on 2.
# (3 ranks x batch 2 = 1 rank x batch 2 x accum 3: the same micro-batches, so the same bits.)
run save_w3 $MPIRUN -np 3 $BIN $M $CONST --steps 3 --save "$TMP/ck_w3"
run res_w1 $BIN $M $CONST --steps 5 --accum 3 --resume "$TMP/ck_w3" --digest
[ $rc = 0 ] && [ "$(digest "$TMP/res_w1.out")" = "$(digest "$TMP/ref_a3.out")" ] &&
  ok "a checkpoint saved on 3 ranks verifies and resumes on 1, bit-identical" || bad "3 -> 1 ranks" "$(show res_w1)"
run res_w2 $MPIRUN -np 2 $BIN $M $CONST --steps 4 --accum 1 --resume "$TMP/ck_w3"  # 4 sequences a step, not the 6 of 3 ranks
[ $rc = 0 ] && has res_w2 "resumed from .*ck_w3 after step 3" && ok "and it verifies on 2 ranks" || bad "verify on 2" "$(show res_w2)"
printf '\x01' | dd of="$TMP/ck_w3/adam_m.bin" bs=1 seek=300000 conv=notrunc status=none
run bad_w2 $MPIRUN -np 2 $BIN $M $CONST --steps 5 --accum 1 --resume "$TMP/ck_w3"
[ $rc != 0 ] && has bad_w2 "adam_m.bin: bytes \[0, [0-9]+\) do not match" && ok "and on 2 ranks a flipped byte is found" ||
  bad "corrupt on 2 ranks" "$(show bad_w2)"

fi

# ---- output paths, checked before the first step ----------------------------------------
if want "output paths"; then
echo keep > "$TMP/afile"
mkdir -p "$TMP/notckpt" && echo mine > "$TMP/notckpt/notes.txt"
for case in "--save $TMP/afile|a file of that name exists" "--save $TMP/notckpt|is not an fsdp.c checkpoint" \
            "--save /|name the checkpoint directory itself" "--save $TMP/missing/ck|does not exist" \
            "--log $TMP/missing/log.jsonl|does not exist" "--dump-params $TMP/missing/p.bin|does not exist" \
            "--bench-json $TMP/missing/b.json|does not exist" "--trace $TMP/missing/t.json|does not exist" \
            "--log $TMP|is a directory" "--export $TMP/missing/hf|does not exist" "--export $TMP/afile|a file of that name" \
            "--export $TMP/notckpt|is not an earlier export"; do
  args=${case%%|*} pattern=${case#*|}
  run path $BIN $M --steps 2 $args
  [ $rc = 2 ] && has path "$pattern" && ! has path "^step +1/" && [ "$(cat "$TMP/afile")" = keep ] &&
    [ -f "$TMP/notckpt/notes.txt" ] && [ ! -e "$TMP/notckpt.tmp" ] && ok "$args is refused before the first step" ||
    bad "$args" "exit $rc $(show path)"
done
# Names the file system cannot create: a component over NAME_MAX (255), or one that is under
# it only until the run adds its suffix (.lock, .tmp, .json, .rank1), for every output option.
long=$(printf 'n%.0s' $(seq 256))
near=$(printf 'n%.0s' $(seq 251))
for case in "--log $TMP/$long" "--bench-json $TMP/$long" "--dump-params $TMP/$long" "--trace $TMP/$long" \
            "--save $TMP/$long" "--export $TMP/$long" "--save $TMP/$near" "--export $TMP/$near" "--dump-params $TMP/$near"; do
  run name $BIN $M --steps 2 $case
  name_len=$(echo "$case" | awk -F/ '{print length($NF)}')
  [ $rc = 2 ] && has name "NAME_MAX" && ! has name "^step +1/" && ok "${case%% *} with a $name_len-byte name is refused before the first step" ||
    bad "${case%% *} with a $name_len-byte name" "exit $rc $(show name)"
done
run name3 $MPIRUN -np 2 $BIN $M --steps 2 --trace "$TMP/$(printf 'n%.0s' $(seq 250))"
[ $rc != 0 ] && has name3 "rank 1\] error: --trace .*NAME_MAX" && ok "--trace with a 250-byte name is refused (each rank adds .rankN)" ||
  bad "--trace name on 2 ranks" "exit $rc $(show name3)"
run empty $BIN $M --steps 2 --save ''
[ $rc = 2 ] && has empty "needs a directory name" && ! ls -a | grep -q '^\.tmp$' && ok "--save '' is refused, no stray .tmp" ||
  bad "--save ''" "$(show empty)"
run trace3 $MPIRUN -np 2 $BIN $M --steps 2 --trace "$TMP/missing/t.json"
[ $rc != 0 ] && has trace3 "rank 1\] error: --trace .*t.json.rank1: the directory" &&
  ok "a trace path is checked on every rank, naming the rank" || bad "trace on 2 ranks" "$(show trace3)"
# A full disk says so.
run full $BIN $M --steps 2 --log /dev/full
[ $rc = 1 ] && has full "No space left on device" && ok "a full disk under --log says 'No space left on device'" ||
  bad "full disk" "$(show full)"
if [ -f "$TMP/enospc.so" ]; then
  restore
  run fullck env LD_PRELOAD="$TMP/enospc.so" ENOSPC_AFTER_BYTES=100000 $BIN $M $CONST --steps 4 --save "$CK"
  [ $rc = 1 ] && has fullck "No space left on device" && grep -q '"step": 3' "$CK/complete.json" &&
    run after $BIN $M $CONST --steps 5 --resume "$CK" --digest && [ "$(digest "$TMP/after.out")" = "$(digest "$TMP/ref.out")" ] &&
    ok "a checkpoint save onto a full disk fails naming it and leaves the previous checkpoint intact" ||
    bad "full disk during a save" "exit $rc $(show fullck)"
else
  bad "full disk during a save" "cannot build test/enospc_shim.c"
fi

fi

# ---- exports: never touching what they did not create ----------------------------------
if want "exports"; then
# A DIR.tmp or DIR.old that is not the export's own is refused at start-up, named, and left as
# it is (it was emptied after training).
for sfx in tmp old; do
  mkdir -p "$TMP/hf_$sfx.$sfx" && echo mine > "$TMP/hf_$sfx.$sfx/notes.txt"
  run exp $BIN $M --steps 2 --export "$TMP/hf_$sfx"
  [ $rc = 2 ] && has exp "hf_$sfx.$sfx already exists" && ! has exp "^step +1/" && [ "$(cat "$TMP/hf_$sfx.$sfx/notes.txt")" = mine ] &&
    [ ! -e "$TMP/hf_$sfx" ] && ok "--export with a foreign DIR.$sfx is refused at start-up, naming it; its files are intact" ||
    bad "--export with a foreign DIR.$sfx" "exit $rc $(show exp) $(ls "$TMP/hf_$sfx.$sfx")"
done
# export_weights_cpu onto a user's directory (a model of someone else's, with notes), onto a
# directory of exactly config.json and model.safetensors that fsdp.c did not write, and onto a
# file: refused, nothing moved or changed.
mkdir -p "$TMP/user_hf" "$TMP/hub_hf"
for f in config.json model.safetensors notes.txt; do echo "user $f" > "$TMP/user_hf/$f"; done
for f in config.json model.safetensors; do echo "hub $f" > "$TMP/hub_hf/$f"; done
echo mine > "$TMP/user_file"
for target in user_hf hub_hf user_file; do
  run expw ./export_weights_cpu "$TMP/good" "$TMP/$target"
  intact=1
  if [ -d "$TMP/$target" ]; then
    for f in "$TMP/$target"/*; do grep -q "^\(user\|hub\) $(basename "$f")$" "$f" || intact=0; done
  else
    [ "$(cat "$TMP/$target")" = mine ] || intact=0
  fi
  [ $rc = 2 ] && has expw "$target" && [ $intact = 1 ] && [ ! -e "$TMP/$target.old" ] && [ ! -e "$TMP/$target.tmp" ] &&
    ok "export_weights_cpu onto $target is refused; nothing there is moved or changed" ||
    bad "export_weights_cpu onto $target" "exit $rc intact $intact $(show expw) $(ls -d "$TMP/$target"*)"
done
# An earlier export of fsdp.c is replaced, leaving no DIR.tmp or DIR.old.
run expa ./export_weights_cpu "$TMP/good" "$TMP/ours_hf"
run expb $BIN $M $CONST --resume "$TMP/good" --steps 4 --export "$TMP/ours_hf"
run expc $BIN $M $CONST --init-from "$TMP/ours_hf" --steps 0 --digest
run expd $BIN $M $CONST --resume "$TMP/good" --steps 4 --digest
[ $rc = 0 ] && [ "$(digest "$TMP/expc.out")" = "$(digest "$TMP/expd.out")" ] && [ ! -e "$TMP/ours_hf.tmp" ] && [ ! -e "$TMP/ours_hf.old" ] &&
  ok "an earlier export of fsdp.c is replaced by the new one, and nothing else is left" ||
  bad "replacing an earlier export" "$(show expb; show expc)"
# A full disk during the export of 3 ranks, while rank 0 writes the header (after 1000 bytes)
# and while every rank writes its part (after 20000): the system's reason, and nothing left
# that --init-from would load.
for bytes in 1000 20000; do
  run expfull env LD_PRELOAD="$TMP/enospc.so" ENOSPC_AFTER_BYTES=$bytes $MPIRUN -x LD_PRELOAD -x ENOSPC_AFTER_BYTES -np 3 \
    $BIN $M --steps 1 --export "$TMP/full_hf"
  run expload $BIN $M --init-from "$TMP/full_hf.tmp" --steps 0
  [ "$(grep -c "No space left on device" "$TMP/expfull.out")" -ge 1 ] && ! has expfull "No such file or directory" &&
    [ ! -e "$TMP/full_hf" ] && [ $rc != 0 ] &&
    ok "an export onto a disk full after $bytes bytes (3 ranks) says 'No space left on device'; nothing is left that --init-from loads" ||
    bad "export onto a disk full after $bytes bytes" "$(grep -i error "$TMP/expfull.out" | head -3) / init-from: exit $rc $(show expload)"
  rm -rf "$TMP/full_hf.tmp"
done
# An export killed while its tensors are written (two SIGTERMs at the fsync of its
# model.safetensors, through test/signal_shim.c, an LD_PRELOAD that raises SIGTERM in fsync):
# config.json, written last, is not there, so --init-from refuses the leftover, and the next
# export names it.
if [ -f "$TMP/signal.so" ]; then
  { run cutrun env LD_PRELOAD="$TMP/signal.so" SIGNAL_FSYNC_PATH=cut_hf.tmp/model.safetensors SIGNAL_TIMES=2 \
      $BIN $M --steps 1 --export "$TMP/cut_hf"; } 2> /dev/null
  rc0=$rc
  run cutload $BIN $M --init-from "$TMP/cut_hf.tmp" --steps 0
  rc1=$rc
  run cutexp $BIN $M --steps 1 --export "$TMP/cut_hf"
  [ $rc0 = 143 ] && [ -f "$TMP/cut_hf.tmp/model.safetensors" ] && [ $rc1 != 0 ] && has cutload "config.json" &&
    [ $rc = 2 ] && has cutexp "cut_hf.tmp already exists.*interrupted export" &&
    ok "an export killed while writing its tensors is not a model for --init-from, and the next export names it" ||
    bad "an interrupted export" "exit $rc0 $(ls "$TMP/cut_hf.tmp" 2>&1) $(show cutload; show cutexp)"
else
  bad "an interrupted export" "cannot build test/signal_shim.c"
fi

fi

# ---- one run per directory, and a clean stop on a signal ---------------------------------
if want "signals"; then
stepped() { for _ in $(seq 300); do grep -qE "^step +$2/" "$1" && return 0; sleep 0.05; done; return 1; }
stopped_at() { sed -n 's/^step *\([0-9]*\) | stopped by .*/\1/p' "$1"; }
# A run saving to ck_sig (held still with SIGSTOP meanwhile, so it stops a few steps in); a
# second run given the same directory is refused before its first step with the first run's
# pid and host; SIGTERM then stops the first after its current step with a checkpoint that
# resumes bit-exactly.
$BIN $M $CONST --steps 100000 --save "$TMP/ck_sig" > "$TMP/sig1.out" 2>&1 &
pid=$!
stepped "$TMP/sig1.out" 2
kill -STOP $pid
run second $BIN $M $CONST --steps 3 --save "$TMP/ck_sig"
rc_second=$rc
kill -TERM $pid
kill -CONT $pid
wait $pid
rc_stop=$?
k=$(stopped_at "$TMP/sig1.out")
[ $rc_second = 2 ] && has second "ck_sig is in use by another run \(pid $pid on host $(hostname)" && ! has second "^step +1/" &&
  ok "a second run on the same --save directory is refused before its first step, naming the first run's pid and host" ||
  bad "two runs on one directory" "exit $rc_second $(show second)"
if [ -n "$k" ]; then
  run sig1ref $BIN $M $CONST --steps $((k + 2)) --digest
  run sig1res $BIN $M $CONST --steps $((k + 2)) --resume "$TMP/ck_sig" --digest
fi
[ $rc_stop = 75 ] && [ -n "$k" ] && grep -q "\"step\": $k" "$TMP/ck_sig/complete.json" && [ ! -e "$TMP/ck_sig.lock" ] &&
  [ "$(digest "$TMP/sig1res.out")" = "$(digest "$TMP/sig1ref.out")" ] &&
  ok "SIGTERM during training (1 rank): saved after step $k, exit 75, lock released; resumed bit-exact" ||
  bad "SIGTERM during training" "exit $rc_stop at '$k' $(grep -E "stop|error" "$TMP/sig1.out" | head -3)"
# 3 ranks, SIGTERM to rank 1 only: every rank stops after the same step; resumed on 1 rank with
# accumulation 3 (the same micro-batches), bit-exact. (--comm-timeout: ranks that disagreed
# would end in seconds, not hang.)
$MPIRUN -np 3 $BIN $M $CONST --steps 100000 --save "$TMP/ck_sig3" --comm-timeout 10 > "$TMP/sig3.out" 2>&1 &
pid=$!
stepped "$TMP/sig3.out" 2
victim=$(pgrep -f "^$BIN .*--save $TMP/ck_sig3" | sed -n 2p)
[ -n "$victim" ] && kill -TERM "$victim"
wait $pid
rc_stop=$?
k=$(stopped_at "$TMP/sig3.out")
if [ -n "$k" ]; then
  run sig3ref $BIN $M $CONST --steps $((k + 2)) --accum 3 --digest
  run sig3res $BIN $M $CONST --steps $((k + 2)) --accum 3 --resume "$TMP/ck_sig3" --digest
fi
[ $rc_stop = 75 ] && [ -n "$k" ] && has sig3 "\[rank [0-2]\] SIGTERM: stopping after this step" && grep -q "\"step\": $k" "$TMP/ck_sig3/complete.json" &&
  [ "$(digest "$TMP/sig3res.out")" = "$(digest "$TMP/sig3ref.out")" ] &&
  ok "SIGTERM to rank 1 of 3 during training: every rank saves after step $k and exits 75; resumed on 1 rank bit-exact" ||
  bad "SIGTERM on 3 ranks" "exit $rc_stop at '$k' $(grep -E "stop|error" "$TMP/sig3.out" | head -3)"
# mpirun forwards SIGUSR1 to every rank (SIGTERM to mpirun becomes SIGKILL a second later).
$MPIRUN -np 2 $BIN $M $CONST --steps 100000 --save "$TMP/ck_usr1" --comm-timeout 10 > "$TMP/usr1.out" 2>&1 &
pid=$!
stepped "$TMP/usr1.out" 2
kill -USR1 $pid
wait $pid
rc=$?
k=$(stopped_at "$TMP/usr1.out")
[ $rc = 75 ] && [ -n "$k" ] && grep -q "\"step\": $k" "$TMP/ck_usr1/complete.json" && has usr1 "stopped by SIGUSR1" &&
  ok "SIGUSR1 to mpirun reaches every rank: saved after step $k, exit 75" || bad "SIGUSR1 under mpirun" "exit $rc $(show usr1)"
# During a save: the signal comes while the arrays of the step-2 checkpoint are written (on rank
# 1 of 3 with SIGNAL_RANK); the save completes, step 3 carries the signal to every rank in its
# all-reduce, the ranks learn of it with step 3's outcome, after step 4 is queued, so they finish
# step 4, save it and stop; resumed to step 5, bit-exact on 1 and 3 ranks. Two signals in one
# save end the run at once, and the previous checkpoint resumes bit-exactly.
if [ -f "$TMP/signal.so" ]; then
  SIG="env LD_PRELOAD=$TMP/signal.so SIGNAL_FSYNC_PATH=ck_save.tmp/params.bin"
  run save1 $SIG $BIN $M $CONST --steps 100 --save-every 2 --save "$TMP/ck_save"
  rc1=$rc
  run save1res $BIN $M $CONST --steps 5 --resume "$TMP/ck_save" --digest
  [ $rc1 = 75 ] && has save1 "stopped by SIGTERM" && grep -q '"step": 4' "$TMP/ck_save/complete.json" &&
    [ "$(digest "$TMP/save1res.out")" = "$(digest "$TMP/ref.out")" ] &&
    ok "SIGTERM during a save (1 rank): the save completes, the run saves and stops after step 4; resumed bit-exact" ||
    bad "SIGTERM during a save" "exit $rc1 $(show save1; show save1res)"
  rm -rf "$TMP/ck_save"
  run save3 $SIG SIGNAL_RANK=1 $MPIRUN -x LD_PRELOAD -x SIGNAL_FSYNC_PATH -x SIGNAL_RANK -np 3 $BIN $M $CONST --steps 100 \
    --save-every 2 --save "$TMP/ck_save" --comm-timeout 10
  rc3=$rc
  run save3res $BIN $M $CONST --steps 5 --accum 3 --resume "$TMP/ck_save" --digest
  [ $rc3 = 75 ] && has save3 "\[rank 1\] SIGTERM" && grep -q '"step": 4' "$TMP/ck_save/complete.json" &&
    [ "$(digest "$TMP/save3res.out")" = "$(digest "$TMP/ref_a3.out")" ] &&
    ok "SIGTERM on rank 1 of 3 during a save: every rank saves and stops after step 4; resumed on 1 rank bit-exact" ||
    bad "SIGTERM during a save on 3 ranks" "exit $rc3 $(show save3; show save3res)"
  rm -rf "$TMP/ck_save"
  { run twice $SIG SIGNAL_SKIP=1 SIGNAL_TIMES=2 $BIN $M $CONST --steps 100 --save-every 1 --save "$TMP/ck_save"; } 2> /dev/null
  rc2=$rc
  run twiceres $BIN $M $CONST --steps 5 --resume "$TMP/ck_save" --digest
  [ $rc2 = 143 ] && grep -q '"step": 1' "$TMP/ck_save/complete.json" && has twiceres "resumed from .*ck_save after step 1" &&
    [ "$(digest "$TMP/twiceres.out")" = "$(digest "$TMP/ref.out")" ] &&
    ok "a second SIGTERM during a save ends the run at once; the previous checkpoint resumes bit-exact" ||
    bad "a second signal" "exit $rc2 $(show twice; show twiceres)"
else
  bad "signals during a save" "cannot build test/signal_shim.c"
fi

fi

# ---- non-finite steps --------------------------------------------------------------------
if want "non-finite"; then
run nan1 $BIN $M $CONST --steps 3 --inject-nonfinite 3:0:2 --digest --save "$TMP/cknan" --log "$TMP/nan.jsonl"
run two $BIN $M $CONST --steps 2 --digest
[ $rc = 0 ] && has nan1 "step +3 \| non-finite gradient norm; the first unit whose gradient shard was non-finite: block.1" &&
  [ "$(digest "$TMP/nan1.out")" = "$(digest "$TMP/two.out")" ] &&
  python3 -c "
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])]  # strict JSON: a NaN norm is written as null
sys.exit(0 if s[2]['skipped'] and s[2]['grad_norm'] is None else 1)" "$TMP/nan.jsonl" &&
  ok "a NaN gradient skips the update: parameters equal those of the step before, the unit is named, the JSON log says so" ||
  bad "non-finite skip" "$(show nan1)"
run two3 $MPIRUN -np 3 $BIN $M $CONST --steps 2 --digest
run nan3 $MPIRUN -np 3 $BIN $M $CONST --steps 3 --inject-nonfinite 3:1:1 --digest
[ $rc = 0 ] && has nan3 "non-finite: block.0" && [ "$(digest "$TMP/nan3.out")" = "$(digest "$TMP/two3.out")" ] &&
  ok "a NaN on rank 1 of 3 skips the step on every rank, bit-identical to stopping a step earlier" || bad "nan on 3 ranks" "$(show nan3)"
run nanhy $MPIRUN -np 4 $BIN $M $CONST --steps 3 --shard hybrid:2 --inject-nonfinite 3:3 --digest
[ $rc = 0 ] && has nanhy "non-finite gradient norm" && ok "with hybrid sharding a NaN on one replica skips the step everywhere" ||
  bad "nan hybrid" "$(show nanhy)"
run nanstop $BIN $M $CONST --steps 5 --inject-nonfinite 2:0 --max-bad-steps 1 --save "$TMP/cknan2" --save-every 1
[ $rc = 1 ] && has nanstop "stopping at step 2 after 1 steps with a non-finite" && grep -q '"step": 1' "$TMP/cknan2/complete.json" &&
  ok "--max-bad-steps stops the run; the last checkpoint is the last good step" || bad "max bad steps" "exit $rc $(show nanstop)"
# Without saves between them, step 3 is queued before step 2's outcome is read (the host learns
# a verdict one step late): the run still stops at step 2, and step 3 is never reported.
run nanstop3 $BIN $M $CONST --steps 5 --inject-nonfinite 2:0 --max-bad-steps 1 --log "$TMP/nanstop3.jsonl"
[ $rc = 1 ] && has nanstop3 "stopping at step 2 after 1 steps with a non-finite" && ! has nanstop3 "step +3/5" &&
  [ "$(wc -l < "$TMP/nanstop3.jsonl")" = 2 ] &&
  ok "--max-bad-steps with the next step already queued: stops at step 2, step 3 never reported" ||
  bad "max bad steps, pipelined" "exit $rc $(show nanstop3)"

# A skipped step leaves the AdamW state as it was too: the arrays of a checkpoint saved after the
# skipped step 3 equal those saved after step 2, byte for byte (the step counter aside).
run skip_ck $BIN $M $CONST --steps 3 --inject-nonfinite 3:0:1 --save "$TMP/ck_skip"
run two_ck $BIN $M $CONST --steps 2 --save "$TMP/ck_two"
cmp -s "$TMP/ck_skip/params.bin" "$TMP/ck_two/params.bin" && cmp -s "$TMP/ck_skip/adam_m.bin" "$TMP/ck_two/adam_m.bin" &&
  cmp -s "$TMP/ck_skip/adam_v.bin" "$TMP/ck_two/adam_v.bin" &&
  ok "a skipped step leaves parameters and both AdamW moments byte-identical" || bad "skipped step changed the state"

fi

# ---- loss scaling --------------------------------------------------------------------------
if want "loss scaling"; then
# A power-of-two loss scale is exact: without overflow, the same bits as no scaler, on 1 rank
# and on 3 with accumulation; a dynamic scale that grows every 2 steps too.
LS="$M $CONST --steps 5 --accum 2 --digest"
run ls_none $BIN $LS
run ls_1024 $BIN $LS --loss-scale 1024
run ls_dyn $BIN $LS --loss-scale dynamic --loss-scale-window 2
run ls_none3 $MPIRUN -np 3 $BIN $LS
run ls_dyn3 $MPIRUN -np 3 $BIN $LS --loss-scale dynamic --loss-scale-window 2
d=$(digest "$TMP/ls_none.out")
[ -n "$d" ] && [ "$(digest "$TMP/ls_1024.out")" = "$d" ] && [ "$(digest "$TMP/ls_dyn.out")" = "$d" ] &&
  [ "$(digest "$TMP/ls_dyn3.out")" = "$(digest "$TMP/ls_none3.out")" ] &&
  ok "loss scale 1024 and a dynamic scale give the bits of no scaler (1 rank, and 3 ranks with accumulation)" ||
  bad "loss scaling changed the result" "$(digest "$TMP/ls_1024.out") $(digest "$TMP/ls_dyn.out") vs $d"
has ls_dyn "step +2/5 .*loss scale 65536 -> 131072" && has ls_dyn "step +4/5 .*loss scale 131072 -> 262144" &&
  ok "the dynamic scale doubles after --loss-scale-window finite steps" || bad "scale growth" "$(grep 'loss scale' "$TMP/ls_dyn.out")"
# An overflow on one rank skips the step on every rank and halves the scale; the run then ends
# with the bits of a run without a scaler that skipped the same step.
run ls_over3 $MPIRUN -np 3 $BIN $LS --loss-scale dynamic --inject-nonfinite 3:2 --log "$TMP/ls_over3.jsonl"
run ls_skip3 $MPIRUN -np 3 $BIN $LS --inject-nonfinite 3:2
[ $rc = 0 ] && has ls_over3 "step +3 \| gradient overflow at loss scale 65536.*the scale is now 32768" &&
  [ "$(digest "$TMP/ls_over3.out")" = "$(digest "$TMP/ls_skip3.out")" ] &&
  python3 -c "
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if 'loss_scale' in l]
sys.exit(0 if [x['loss_scale'] for x in s] == [65536, 65536, 65536, 32768, 32768] and s[2].get('skipped') else 1)" "$TMP/ls_over3.jsonl" &&
  ok "an overflow on rank 2 of 3 skips the step everywhere, halves the scale, and changes nothing else" ||
  bad "overflow" "$(show ls_over3)"
# A checkpoint saved with one set of memory options resumes into a run with another.
run opt_save $BIN $M $CONST --steps 3 --recompute block --loss-scale dynamic --save "$TMP/ck_opts"
run opt_res $BIN $M $CONST --steps 5 --recompute selective --resume "$TMP/ck_opts" --digest
[ $rc = 0 ] && [ "$(digest "$TMP/opt_res.out")" = "$(digest "$TMP/ref.out")" ] &&
  ok "saved with --recompute block --loss-scale dynamic, resumed with --recompute selective: bit-identical" ||
  bad "resume across options" "$(show opt_res)"
# --wrap only regroups the same parameters into units: checkpoints move between the policies
# and world sizes (3 ranks x batch 2 = 1 rank x batch 2 x accum 3, as above).
run wrap_save $BIN $M $CONST --steps 3 --accum 3 --wrap linear --save "$TMP/ck_wrap"
run wrap_res $BIN $M $CONST --steps 5 --accum 3 --resume "$TMP/ck_wrap" --digest
run wrap_res3 $MPIRUN -np 3 $BIN $M $CONST --steps 5 --wrap linear --recompute block --resume "$TMP/ck_wrap" --digest
run wrap_back $BIN $M $CONST --steps 5 --wrap linear --resume "$TMP/ck_opts" --digest
[ "$(digest "$TMP/wrap_res.out")" = "$(digest "$TMP/ref_a3.out")" ] && [ "$(digest "$TMP/wrap_res3.out")" = "$(digest "$TMP/ref_a3.out")" ] &&
  [ "$(digest "$TMP/wrap_back.out")" = "$(digest "$TMP/ref.out")" ] &&
  ok "saved with --wrap linear, resumed with --wrap block and on 3 ranks with --recompute block; saved with --wrap block, resumed with linear: bit-identical" ||
  bad "resume across --wrap" "$(show wrap_res; show wrap_res3; show wrap_back)"
# --offload only moves where state lives: a checkpoint saved with everything on the host resumes
# without offload, and the other way (on 3 ranks, with the host step), bit for bit.
run off_save $BIN $M $CONST --steps 3 --accum 3 --offload all --recompute block --save "$TMP/ck_off"
run off_res $BIN $M $CONST --steps 5 --accum 3 --resume "$TMP/ck_off" --digest
run off_res3 $MPIRUN -np 3 $BIN $M $CONST --steps 5 --offload optim,grads --resume "$TMP/ck_wrap" --digest
[ "$(digest "$TMP/off_res.out")" = "$(digest "$TMP/ref_a3.out")" ] && [ "$(digest "$TMP/off_res3.out")" = "$(digest "$TMP/ref_a3.out")" ] &&
  ok "saved with --offload all, resumed without; saved without, resumed on 3 ranks with --offload optim,grads: bit-identical" ||
  bad "resume across --offload" "$(show off_res; show off_res3)"
run ls_bad $BIN $M --loss-scale 1e30
[ $rc = 2 ] && has ls_bad "would overflow the gradients on the first step" && ok "a loss scale that would overflow is refused" ||
  bad "--loss-scale 1e30" "$(show ls_bad)"
run ls_bad_dyn $BIN $M --loss-scale dynamic:33554432
rc1=$rc
run ls_bad_word $BIN $M --loss-scale dynamically
[ $rc1 = 2 ] && has ls_bad_dyn "would overflow the gradients on the first step.*got 'dynamic:33554432'" && [ $rc = 2 ] &&
  has ls_bad_word "got 'dynamically'" && ok "a dynamic scale starting at 2^25, and 'dynamically', are refused" ||
  bad "--loss-scale dynamic:2^25 / dynamically" "$(show ls_bad_dyn; show ls_bad_word)"
# dynamic:S starts from S (the settings table says so) and still gives the bits of no scaler.
run ls_dyn_s $BIN $LS --loss-scale dynamic:1024 --loss-scale-window 2
[ "$(digest "$TMP/ls_dyn_s.out")" = "$(digest "$TMP/ls_none.out")" ] && has ls_dyn_s "loss scale +\| dynamic 1024, window 2" &&
  has ls_dyn_s "step +2/5 .*loss scale 1024 -> 2048" && ok "--loss-scale dynamic:1024 starts at 1024, doubles, same bits" ||
  bad "--loss-scale dynamic:1024" "$(show ls_dyn_s)"
# A dynamic scale is training state: a checkpoint saved after an overflow (the scale halved, one
# finite step into its window) resumes at that scale and place in the window, so the resumed run
# logs the scales of the run that never stopped; a --loss-scale dynamic:S given on resume wins.
LSR="$M $CONST --loss-scale dynamic --loss-scale-window 2"
run lsr_full $BIN $LSR --steps 6 --inject-nonfinite 2:0 --log "$TMP/lsr_full.jsonl" --digest
run lsr_save $BIN $LSR --steps 3 --inject-nonfinite 2:0 --save "$TMP/ck_ls"
run lsr_res $BIN $LSR --steps 6 --resume "$TMP/ck_ls" --log "$TMP/lsr_res.jsonl" --digest
[ $rc = 0 ] && has lsr_res "resumed the loss scale at 32768 \(1 of 2 finite steps" &&
  [ "$(digest "$TMP/lsr_res.out")" = "$(digest "$TMP/lsr_full.out")" ] &&
  python3 -c "
import json, sys
scales = lambda f: [json.loads(l)['loss_scale'] for l in open(f) if 'loss_scale' in l]
full, res = scales(sys.argv[1]), scales(sys.argv[2])
sys.exit(0 if full[3:] == res and res == [32768, 65536, 65536] else 1)" "$TMP/lsr_full.jsonl" "$TMP/lsr_res.jsonl" &&
  ok "a dynamic loss scale resumes where it was (scale and window): the scales of the run that never stopped" ||
  bad "loss scale across a resume" "$(show lsr_res; cat "$TMP/lsr_res.jsonl" | head -3)"
run lsr_given $BIN $M $CONST --loss-scale dynamic:1024 --loss-scale-window 2 --steps 4 --resume "$TMP/ck_ls"
cp -r "$TMP/ck_ls" "$TMP/ck_ls_bad"
sed -i 's/"loss_scale": 32768/"loss_scale": 3000/' "$TMP/ck_ls_bad/meta.json"
run lsr_bad $BIN $LSR --steps 4 --resume "$TMP/ck_ls_bad"
rc_bad=$rc
[ $rc_bad != 0 ] && has lsr_bad '"loss_scale" is 3000, not a power of two' &&
  has lsr_given "the loss scale starts at 1024 as --loss-scale says, not at the checkpoint's 32768" &&
  ok "a resume with dynamic:S starts at S, saying so; a saved scale that is not a power of two is refused" ||
  bad "loss scale resume edge cases" "$(show lsr_given; show lsr_bad)"

fi

# ---- data ---------------------------------------------------------------------------------
if want "data"; then
cp data/addition/train_000.bin "$TMP/live.bin"
timeout 60 $BIN --model gpt:L=2,C=72,H=3,V=509,T=32 --data "$TMP/live.bin" --batch 2 --seq 32 --steps 1000000 > "$TMP/live.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -qE "^step +2/" "$TMP/live.out" && break; sleep 0.1; done
python3 -c "
import sys; p = sys.argv[1]; d = bytearray(open(p, 'rb').read()); d[1024:] = b'\xff' * (len(d) - 1024)
open(p, 'r+b').write(d)" "$TMP/live.bin"
wait $pid
rc=$?
[ $rc = 1 ] && has live "live.bin: token [0-9]+ \(byte offset [0-9]+\) has id 65535 >= vocab 509; the file changed" &&
  ok "a shard rewritten during the run stops it at the next batch, naming file and offset" || bad "live rewrite" "exit $rc $(show live)"

fi

# ---- launch and hangs ----------------------------------------------------------------------
if want "launch"; then
run env1 env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 $BIN $M --steps 1
[ $rc = 2 ] && has env1 "torchrun environment describes 2 ranks, but MPI started 1.*mpirun -np 2" &&
  ok "torchrun-style variables without mpirun are refused, saying how to launch" || bad "launcher env" "$(show env1)"
run env2 env SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_LOCALID=1 $BIN $M --steps 1
[ $rc = 2 ] && has env2 "slurm environment describes 4 ranks" && ok "srun-style variables without MPI are refused" ||
  bad "slurm env" "$(show env2)"
run initdir $BIN $M --steps 1 --init-dir "$TMP"
[ $rc = 1 ] && has initdir "--init-dir is for the NCCL build" && ok "--init-dir is refused by the MPI build" || bad "init-dir" "$(show initdir)"
run groups $MPIRUN -np 4 --map-by node $BIN $M --steps 1 --shard hybrid:2
[ $rc = 0 ] && has groups "shard groups \(F=2, ranks that share a host together\): \{0,1\} \{2,3\}" &&
  ok "hybrid sharding says which ranks form each shard group" || bad "hybrid groups" "$(show groups)"
# A stopped rank ends every rank within --comm-timeout, naming the collective.
timeout 60 $MPIRUN -np 3 $BIN $M --steps 1000000 --comm-timeout 3 > "$TMP/hang.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -qE "^step +2/" "$TMP/hang.out" && break; sleep 0.1; done
victim=$(pgrep -f "^$BIN .*$TMP/train.bin.*--comm-timeout 3" | sed -n 2p)  # rank 1 of this run
start=$SECONDS
[ -n "$victim" ] && kill -STOP "$victim"
wait $pid
rc=$?
[ -n "$victim" ] && kill -CONT "$victim" 2> /dev/null
[ $rc != 0 ] && [ $((SECONDS - start)) -lt 30 ] &&
  has hang "\[rank [02]\] error: [a-z -]+( \(all-reduce of a flag\))? #[0-9]+ .*did not finish within --comm-timeout 3 s" &&
  ok "SIGSTOP on one of 3 ranks ends every rank in $((SECONDS - start)) s, naming rank and collective" ||
  bad "stopped rank" "exit $rc after $((SECONDS - start)) s $(show hang)"

# A network partition: two ranks talking over TCP on the loopback of a private network
# namespace, whose loopback is then taken down. Needs unshare -n (root); said when unavailable.
partition() {
  ip link set lo up || return 1
  timeout 90 $MPIRUN -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo $BIN $M --steps 1000000 --comm-timeout 3 \
    > "$TMP/part.out" 2>&1 &
  local pid=$! i
  for i in $(seq 150); do grep -qE "^step +2/" "$TMP/part.out" && break; sleep 0.1; done
  ip link set lo down
  wait $pid
}
if unshare -n true 2> /dev/null; then
  export -f partition
  start=$SECONDS
  BIN=$BIN M=$M TMP=$TMP MPIRUN=$MPIRUN unshare -n bash -c partition
  rc=$?
  [ $rc != 0 ] && [ $rc != 124 ] && [ $((SECONDS - start)) -lt 75 ] &&
    has part "error: [a-z -]+ #[0-9]+ .*did not finish within --comm-timeout 3 s" &&
    ok "a network partition (TCP between ranks cut) ends every rank in $((SECONDS - start)) s, naming the collective" ||
    bad "network partition" "exit $rc after $((SECONDS - start)) s $(show part)"
else
  echo "note: no network namespaces here (unshare -n needs root): the partition case is not run"
fi

fi

# ---- smaller ------------------------------------------------------------------------------
if want "smaller"; then
run zero $BIN $M --steps 0 --save "$TMP/ck0"
[ $rc = 0 ] && has zero "saved .*ck0 \(the initial parameters" && grep -q '"step": 0' "$TMP/ck0/complete.json" &&
  ok "--steps 0 --save saves the initial parameters and says so" || bad "--steps 0 --save" "$(show zero)"
run nothing $BIN $M $CONST --steps 3 --resume "$TMP/good" --save "$TMP/good2"
[ $rc = 0 ] && has nothing "no step to train, and no new checkpoint is saved" && ok "resuming at or past --steps says nothing is trained" ||
  bad "nothing to do" "$(show nothing)"
run mem $BIN $M --steps 2
has mem "memory: plan [0-9]+ bytes, measured [1-9][0-9]* bytes" && ok "the CPU memory line reports a measured, non-zero figure" ||
  bad "memory line" "$(grep memory "$TMP/mem.out")"
# With --offload the plan's pinned host part is host memory too: the measured resident growth of the
# first step (the pages every region touches) must be within 2% of both parts together.
run memoff $BIN --model gpt:L=6,C=384,H=6,V=509,T=64 --data "$TMP/train.bin" --seq 64 --batch 2 --steps 1 --offload all --recompute block
line=$(grep -m1 "memory: plan [0-9]* bytes, measured" "$TMP/memoff.out")
plan=$(echo "$line" | sed -n 's/^memory: plan \([0-9]*\) bytes, measured \([0-9]*\) bytes.*/\1/p')
used=$(echo "$line" | sed -n 's/^memory: plan \([0-9]*\) bytes, measured \([0-9]*\) bytes.*/\2/p')
host=$(grep -m1 "^pinned host memory (per rank, one allocation of" "$TMP/memoff.out" | grep -o "[0-9]* bytes" | awk '{print $1}')
[ -n "$plan" ] && [ -n "$host" ] && [ "$host" -gt 0 ] && python3 -c "import sys; sys.exit(0 if abs($used - $plan) <= 0.02 * $plan else 1)" &&
  ok "--offload all: the measured memory ($used bytes) is within 2% of the plan's device and host parts ($plan, $host of it on the host)" ||
  bad "offload memory" "$line / host '$host'"
fi
cases_summary
[ $fail = 0 ]
