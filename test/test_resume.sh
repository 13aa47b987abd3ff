#!/usr/bin/env bash
# --resume restores the run: the model and the options meta.json records come back for every
# option not given again, an option given again that must agree and does not is refused by
# name, the few that may change say so; --resume-if-present for job scripts that may be
# preempted; --init-from a checkpoint's weights as a new run. Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=./train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MPIRUN="mpirun --oversubscribe -x OMP_NUM_THREADS"
digest() { grep -o 'params_digest [0-9a-f]*' "$1" | awk '{print $2}'; }
run() {  # run NAME ARGS...: output in $TMP/NAME.out, exit code in $rc
  local name=$1
  shift
  "$@" > "$TMP/$name.out" 2>&1
  rc=$?
}
has() { grep -qE -- "$2" "$TMP/$1.out"; }
show() { grep -v '^|' "$TMP/$1.out" | grep -iE "error|resum|note|new run" | head -3; }

# A run whose every recorded option is not the default: after warm-up the learning rate is
# constant (--lr-final-frac 1), so step k does not depend on --steps and 3 + 3 steps must give
# the bits of 6.
MODEL="gpt:L=2,C=48,H=3,V=256,T=16"
RUN="--model $MODEL --data data/addition/train_000.bin --val-data data/addition/val_000.bin --batch 2 --seq 12 --accum 2
  --lr 2e-3 --warmup 2 --lr-final-frac 1 --weight-decay 0.05 --decay-embeddings --beta1 0.8 --beta2 0.99 --adam-eps 1e-7
  --grad-clip 0.5 --seed 7 --eval-every 3 --eval-batches 2"
CK=$TMP/ck
run ref $BIN $RUN --steps 6 --digest
run first $BIN $RUN --steps 3 --save "$CK" --log "$TMP/log.jsonl"
run again $BIN --resume "$CK" --steps 6 --digest --log "$TMP/log.jsonl"
[ $rc = 0 ] && [ -n "$(digest "$TMP/ref.out")" ] && [ "$(digest "$TMP/again.out")" = "$(digest "$TMP/ref.out")" ] &&
  has again "the run's settings from .*meta.json:.* --lr 0.002 " && has again "--decay-embeddings" &&
  has again "val loss" && ok "--resume DIR alone restores the model and the run's options: 3 + 3 steps give the bits of 6" ||
  bad "resume restores the settings" "exit $rc $(show again) $(digest "$TMP/again.out") vs $(digest "$TMP/ref.out")"
has again "--steps 6 \(the checkpoint's run: 3\); the learning-rate schedule spans the new --steps" &&
  ok "a changed --steps (which may change) is named with both values" || bad "the --steps note" "$(show again)"
python3 - "$TMP/log.jsonl" > "$TMP/logcheck" 2>&1 << 'EOF'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l]
assert steps == [1, 2, 3, 4, 5, 6], steps
EOF
[ $? = 0 ] && ok "the resumed run's --log continues the earlier steps (appended)" || bad "log on resume" "$(cat "$TMP/logcheck")"

# Options given again must agree, or are refused by name before anything runs.
for pair in "--lr 1e-3:--lr 0.001 disagrees with the checkpoint's --lr 0.002" \
            "--seed 8:--seed 8 disagrees with the checkpoint's --seed 7" \
            "--seq 16:--seq 16 disagrees with the checkpoint's --seq 12" \
            "--beta2 0.95:--beta2 0.95 disagrees with the checkpoint's --beta2 0.99"; do
  opt=${pair%%:*} want=${pair#*:}
  # shellcheck disable=SC2086  # $opt: an option and its value
  run agree $BIN --resume "$CK" $opt --steps 6
  [ $rc = 2 ] && has agree "$want" && has agree "--init-from" && ! has agree "^step " &&
    ok "--resume with $opt is refused, naming both values and --init-from" || bad "refuse $opt" "exit $rc $(show agree)"
done
run same $BIN --resume "$CK" --lr 0.002 --seq 12 --seed 7 --steps 3 --model "$MODEL"
[ $rc = 0 ] && ! has same "disagrees" && ! has same "the checkpoint's run:" && ok "the same values given again are accepted silently" ||
  bad "agreeing options" "exit $rc $(show same)"
# The wrong model: refused by what is wrong, not as "no complete, intact checkpoint".
run model $BIN --resume "$CK" --model gpt:L=2,C=48,H=3,V=256,T=32 --steps 4
[ $rc = 2 ] && head -1 "$TMP/model.out" | grep -q "holds model 'gpt:L=2,C=48,H=3,V=256,T=16' but --model is" &&
  ! has model "no complete" && ok "--resume with another --model: the first words say the checkpoint holds another model" ||
  bad "resume with another model" "exit $rc $(head -2 "$TMP/model.out")"
# The global batch of the run (2 x 2 = 4 sequences) on 3 ranks with --batch 2 does not split:
# refused with the choices; --accum given chooses another split and says the old one is not kept.
run split $MPIRUN -np 3 $BIN --resume "$CK" --steps 4
[ $rc = 2 ] && has split "took 4 sequences per optimizer step .* 3 ranks with --batch 2 cannot split" &&
  ok "a global batch the new world cannot split is refused with the choices" || bad "global batch split" "exit $rc $(show split)"
run split1 $BIN --resume "$CK" --steps 4 --accum 1
[ $rc = 0 ] && has split1 "--accum given: the checkpoint's 4 sequences per step .* are not kept" &&
  ok "--accum given on resume splits its own global batch, and says so" || bad "--accum on resume" "exit $rc $(show split1)"

# A checkpoint written before meta.json recorded options resumes with the options given.
cp -r "$CK" "$TMP/old"
python3 -c "
import json, sys
p = sys.argv[1] + '/meta.json'
m = json.load(open(p)); del m['options']; open(p, 'w').write(json.dumps(m))" "$TMP/old"
# shellcheck disable=SC2086
run old $BIN $RUN --steps 6 --resume "$TMP/old" --digest
[ $rc = 0 ] && [ "$(digest "$TMP/old.out")" = "$(digest "$TMP/ref.out")" ] &&
  ok "a checkpoint without recorded options resumes with the options given, bit-identical" || bad "old checkpoint" "exit $rc $(show old)"
python3 -c "
import sys
p = sys.argv[1] + '/meta.json'
t = open(p).read().replace('\"seed\": \"7\"', '\"seed\": 7'); open(p, 'w').write(t)" "$CK"
run badopt $BIN --resume "$CK" --steps 6
[ $rc = 1 ] && has badopt 'meta.json: "seed" is 7, not a string' &&
  ok "a recorded option that is not a string is refused, naming it" || bad "options not strings" "exit $rc $(show badopt)"

# --resume-if-present: a new run when there is nothing to resume, the run continued when there
# is; the same command line each time, as a job script's.
JOB="--model $MODEL --data data/addition/train_000.bin --batch 2 --seq 12 --lr 2e-3 --lr-final-frac 1 --save $TMP/job
  --resume-if-present $TMP/job --digest"
# shellcheck disable=SC2086
run jobref $BIN $JOB --steps 6
rm -rf "$TMP/job"
mkdir "$TMP/job.tmp"  # an interrupted first save: nothing complete to continue
# shellcheck disable=SC2086
run job1 $BIN $JOB --steps 3
[ $rc = 0 ] && has job1 "--resume-if-present .*/job: no complete, intact checkpoint: .*job.tmp is an interrupted save.*: a new run" &&
  has job1 "^step +3/3" && ok "--resume-if-present with only an interrupted save starts a new run and says why" ||
  bad "resume-if-present, nothing complete" "exit $rc $(show job1)"
# shellcheck disable=SC2086
run job2 $BIN $JOB --steps 6
[ $rc = 0 ] && has job2 "resumed from .*/job after step 3" && [ "$(digest "$TMP/job2.out")" = "$(digest "$TMP/jobref.out")" ] &&
  ok "--resume-if-present with a checkpoint continues it: bit-identical to an uninterrupted run" ||
  bad "resume-if-present, continued" "exit $rc $(show job2)"
run job3 $BIN --resume-if-present "$TMP/nothing" --model "$MODEL" --data data/addition/train_000.bin --steps 1
[ $rc = 0 ] && has job3 "no checkpoint there yet: a new run" && ok "--resume-if-present of a directory that does not exist: a new run" ||
  bad "resume-if-present, no directory" "exit $rc $(show job3)"
run both $BIN --resume "$CK" --resume-if-present "$CK"
[ $rc = 2 ] && has both "give one" && ok "--resume and --resume-if-present together are refused" || bad "both resumes" "exit $rc $(show both)"

# --init-from a checkpoint: its weights, as a new run (step 0, AdamW afresh).
run init $BIN --init-from "$TMP/old" --data data/addition/train_000.bin --seq 12 --steps 0 --save "$TMP/init"
[ $rc = 0 ] && has init "initialized from" && cmp -s "$TMP/old/params.bin" "$TMP/init/params.bin" &&
  python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); sys.exit(0 if d and not any(d) else 1)" "$TMP/init/adam_m.bin" &&
  grep -q '"step": 0' "$TMP/init/meta.json" &&
  ok "--init-from a checkpoint takes its weights (the same params.bin) with AdamW zeroed, at step 0" ||
  bad "--init-from a checkpoint" "exit $rc $(show init)"

cases_summary
[ $fail = 0 ]
