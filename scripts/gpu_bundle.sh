#!/usr/bin/env bash
# gpu_bundle.sh: the run script of the GPU bundle (`make gpu-bundle` copies it there as run.sh):
# one command on a GPU machine that measures fsdp.c in a few minutes and leaves every figure
# behind even when it is cut off.
#
#   bash build/gpu-bundle/run.sh OUT [--only LIST] [--skip LIST] [--budget SECONDS] [--dry-run]
#
# The bundle holds everything prebuilt (train_gpt, the GPU kernel test, llm.c's train_gpt2cu,
# the token shard, the CPU reference losses, the timeline's predictions of the runs below);
# bundle.conf says what it was built from and which shapes to run. The steps, in this order,
# each under its own `timeout`:
#   machine      the GPU, driver and clocks in one line; which CUDA, cuBLASLt, NCCL and cuDNN
#                libraries the binaries load and from where; the tools (ncu, python3, torch)
#   kernels      the attention and step-control kernels against the CPU reference on this GPU
#                (causal and not, with and without the T5 bias: the ordered dQ sum's waits run
#                for real)
#   train-check  train_gpt for 10 steps on tiny GPT, T5, T5 v1.1 and Llama models against the CPU
#                trainer's losses (computed when the bundle was built)
#   llmc         fsdp.c beside llm.c (plain and cuDNN) at the same B, T and shard, interleaved
#                (scripts/bench_llmc.sh with the bundle's binaries): medians of the timed steps
#   profile      ncu's duration of every kernel of one fsdp.c step (its NVTX range "step N")
#   profile-llmc the same for one llm.c step ("Train step N")
#   detail       ncu's speed of light, warp stalls, memory and compute workload of one
#                attention forward and one backward launch
#   gelu-off     fsdp.c with --gelu-epilogue off (the product, then the GELU kernel, as llm.c
#                ships), beside the llmc step's run with the epilogue
#   torch        PyTorch on one GPU, tuned (scripts/bench_torch.py --tuned), the machine's torch
#   t5           one t5-base step per kernel group (ncu), beside its prediction
#   larger       fsdp.c beside llm.c for the next GPT-2 size
#   llama        fsdp.c's Llama 3.2 1B (--bench: tokens/s and MFU), beside its prediction
#   report       report.md from what is there (scripts/gpu_bundle_report.py)
# A step whose tools or binaries are missing records "not available"; one that fails or times
# out is recorded as such and the next step runs. The last steps (gelu-off to llama) run only
# while the budget (default 480 s from the start) leaves room for their timeout.
#
# OUT gets at most these files, rewritten as each step ends, so a run cut off at any point
# leaves what it measured until then:
#   steps.tsv     one line per step: name, status (ok, failed, timeout, not available, skipped),
#                 seconds, note
#   run.log       everything printed
#   results.tgz   the whole work folder (logs, ncu CSVs, JSON), for gpu_bundle_report.py
#   report.md     the report (written by the last step, report)
# The work folder is OUT/../<basename OUT>.work when it can be written, else under $TMPDIR; it
# is left in place (its path is in run.log).
# --only / --skip take comma-separated step names; --dry-run prints every command and runs
# nothing. Exit status: 0 when every step that ran passed, 1 otherwise, 2 on usage.
set -u
BUNDLE=$(cd "$(dirname "$0")" && pwd)
STEPS_ALL=machine,kernels,train-check,llmc,profile,profile-llmc,detail,gelu-off,torch,t5,larger,llama,report
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
OUT="" ONLY="" SKIP="" BUDGET="" DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --only) ONLY=${2:-}; shift ;;
    --skip) SKIP=${2:-}; shift ;;
    --budget)
      [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "error: --budget needs whole seconds (got '${2:-}')" >&2; exit 2; }
      BUDGET=$2; shift ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "error: unknown option '$1' (see run.sh --help)" >&2; exit 2 ;;
    *) [ -z "$OUT" ] || { echo "error: one output folder, got '$OUT' and '$1'" >&2; exit 2; }; OUT=$1 ;;
  esac
  shift
done
[ -n "$OUT" ] || { echo "error: run.sh needs the output folder (run.sh OUT; see --help)" >&2; exit 2; }
for s in ${ONLY//,/ } ${SKIP//,/ }; do
  [[ ",$STEPS_ALL," == *",$s,"* ]] || { echo "error: unknown step '$s' (steps: $STEPS_ALL)" >&2; exit 2; }
done
[ -f "$BUNDLE/bundle.conf" ] || { echo "error: $BUNDLE/bundle.conf is missing: build the bundle with make gpu-bundle" >&2; exit 2; }
# shellcheck source=/dev/null
source "$BUNDLE/bundle.conf"
BUDGET=${BUDGET:-$BUNDLE_BUDGET}
T0=$(date +%s)
wanted() { [[ -z "$ONLY" || ",$ONLY," == *",$1,"* ]] && [[ ",$SKIP," != *",$1,"* ]]; }

if [ $DRY = 0 ]; then
  mkdir -p "$OUT" || { echo "error: cannot create $OUT" >&2; exit 2; }
  OUT=$(cd "$OUT" && pwd)
  W=$OUT.work
  if ! mkdir -p "$W" 2>/dev/null || [ ! -w "$W" ]; then W=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-bundle.XXXXXX"); fi
  W=$(cd "$W" && pwd)
  exec > >(tee -a "$OUT/run.log") 2>&1
  printf 'step\tstatus\tseconds\tnote\n' > "$W/steps.tsv"
  cp "$W/steps.tsv" "$OUT/steps.tsv"
else
  W='$W'
fi
say() { printf '[bundle %3d:%02d] %s\n' $((($(date +%s) - T0) / 60)) $((($(date +%s) - T0) % 60)) "$*"; }
[ $DRY = 0 ] && say "bundle $BUNDLE ($BUNDLE_KIND, commit $BUNDLE_COMMIT, built $BUNDLE_DATE) into $OUT; work folder $W"

# pack: the work folder into OUT (results.tgz, written beside and renamed, so a copy taken at any
# moment is whole), and the steps and report as they are now.
pack() {
  cp "$W/steps.tsv" "$OUT/steps.tsv.tmp" && mv -f "$OUT/steps.tsv.tmp" "$OUT/steps.tsv"
  [ -f "$W/report.md" ] && cp "$W/report.md" "$OUT/report.md.tmp" && mv -f "$OUT/report.md.tmp" "$OUT/report.md"
  tar -C "$(dirname "$W")" -czf "$OUT/results.tgz.tmp" --exclude='*.ncu-rep' "$(basename "$W")" 2>/dev/null &&
    mv -f "$OUT/results.tgz.tmp" "$OUT/results.tgz"
}

STATUS=0
# step NAME TIMEOUT FUNCTION [ARGS]: runs one step (a function below) in a shell of its own under
# `timeout`, in the bundle folder with the libraries the machine step found, its output to
# W/logs/NAME.txt (and the terminal), its outcome to steps.tsv; a step that exits 3 means "not
# available" (a tool or binary this machine or bundle lacks), its last line saying why. In a dry
# run the function prints its commands instead of running them.
step() {
  local name=$1 limit=$2 t rc secs status note
  shift 2
  wanted "$name" || return 0
  local cmd="source $(printf '%q' "$W")/bundle.env 2> /dev/null; $(printf '%q ' "$@")"
  if [ $DRY = 1 ]; then
    echo "step $name (timeout ${limit}s):"
    (cd "$BUNDLE" && "$@")
    return 0
  fi
  local left=$((T0 + BUDGET - $(date +%s)))
  if [ "${OPTIONAL:-0}" = 1 ] && [ "$left" -lt "$limit" ]; then
    say "step $name: skipped (${left}s of the budget left, it may take ${limit}s)"
    printf '%s\tskipped\t0\tbudget: %ss left of %ss\n' "$name" "$left" "$BUDGET" >> "$W/steps.tsv"
    pack
    return 0
  fi
  say "step $name (timeout ${limit}s)"
  mkdir -p "$W/logs"
  t=$(date +%s)
  (cd "$BUNDLE" && timeout -s KILL "$limit" bash -c "set -o pipefail; $cmd") 2>&1 | tee "$W/logs/$name.txt"
  rc=${PIPESTATUS[0]}
  secs=$(($(date +%s) - t))
  note=""
  case $rc in
    0) status=ok ;;
    3) status="not available"; note=$(tail -n 1 "$W/logs/$name.txt" | cut -c1-300) ;;
    124 | 137) status=timeout; note="stopped after ${limit}s"; STATUS=1 ;;
    *) status=failed; note="exit $rc: $(grep -iE 'error|fail' "$W/logs/$name.txt" | tail -n 1 | cut -c1-240)"; STATUS=1 ;;
  esac
  say "step $name: $status in ${secs}s${note:+ ($note)}"
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "$note" >> "$W/steps.tsv"
  pack
}

# ---- what the steps run ------------------------------------------------------------------
# Each is a function exported to the step's own shell; all run in the bundle folder and write
# into W. They exit 3 for "not available", naming what is missing on their last line, and run
# their commands through `run`, which prints them (in a dry run, only prints them).
run() {
  echo "    + $(printf '%q ' "$@")"
  [ "$DRY" = 1 ] || "$@"
}

# The libraries the binaries need, each from the first folder that has it: this machine's CUDA,
# the folders of python3's NVIDIA packages (cuBLAS, NCCL, cuDNN, NVRTC come with PyTorch), then
# what the bundle carries (lib/). W/bundle.env keeps the path for the later steps.
find_libraries() {
  local dirs=() d missing lib found
  for d in "${CUDA_HOME:-}" /usr/local/cuda; do
    [ -n "$d" ] && dirs+=("$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib")
  done
  if command -v python3 > /dev/null; then
    while read -r d; do dirs+=("$d"); done < <(python3 -c 'import nvidia, glob, os
for p in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(p, "*", "lib"))): print(d)' 2> /dev/null)
  fi
  dirs+=(/usr/lib/x86_64-linux-gnu "$PWD/lib")
  local path=""
  for bin in train_gpt bin/test_kernels_gpu llmc/cuda/train_gpt2cu llmc/cudnn/train_gpt2cu; do
    [ -x "$bin" ] || continue
    missing=$(LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$bin" 2> /dev/null | awk '/not found/ {print $1}')
    for lib in $missing; do
      found=""
      for d in "${dirs[@]}"; do
        [ -e "$d/$lib" ] && { found=$d; break; }
      done
      if [ -n "$found" ]; then
        [[ ":$path:" == *":$found:"* ]] || path=$path${path:+:}$found
      else
        echo "missing: $lib (needed by $bin; looked in ${dirs[*]})"
      fi
    done
  done
  echo "export LD_LIBRARY_PATH=$(printf '%q' "$path")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" > "$W/bundle.env"
}

machine() {
  if [ "$DRY" = 1 ]; then
    echo "    the libraries of train_gpt, bin/test_kernels_gpu and llmc/*/train_gpt2cu (ldd), found in CUDA_HOME,"
    echo "    /usr/local/cuda, python3's nvidia packages, /usr/lib/x86_64-linux-gnu or lib/ (W/bundle.env)"
    run ./train_gpt --help
    run nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,temperature.gpu,persistence_mode --format=csv,noheader
    return 0
  fi
  cp bundle.conf "$W/" && cp -r predict "$W/"  # the report reads the run's shapes and predictions from W
  find_libraries | tee "$W/libraries.txt"
  source "$W/bundle.env"
  {
    echo "# the libraries each binary loads here (ldd, with the path the bundle found)"
    for bin in train_gpt bin/test_kernels_gpu llmc/cuda/train_gpt2cu llmc/cudnn/train_gpt2cu; do
      [ -x "$bin" ] || continue
      ldd "$bin" 2>&1 | grep -E 'cublas|cudart|nccl|cudnn|nvrtc|gomp|mpi|not found' | sed "s|^[[:space:]]*|$bin: |"
    done
  } >> "$W/libraries.txt"
  grep -vE '^#' "$W/libraries.txt"
  if ./train_gpt --help > "$W/train_gpt-help.txt" 2>&1; then
    echo "train_gpt starts: $(head -n 1 "$W/train_gpt-help.txt" | cut -c1-100)"
  else
    echo "error: the bundle's train_gpt does not start here: $(tail -n 2 "$W/train_gpt-help.txt")"
    return 1
  fi
  local ncu torch nvcc
  ncu=$(find_ncu)
  torch=$(python3 -c 'import torch; print(torch.__version__)' 2> /dev/null || echo none)
  nvcc=$( (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2> /dev/null | head -n 1)
  {
    echo "kind: gpu-bundle"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $BUNDLE_COMMIT"
    echo "bundle_date: $BUNDLE_DATE"
    echo "toolkit: $BUNDLE_TOOLKIT (the bundle's build)"
    echo "machine_nvcc: ${nvcc:+$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p')}"
    echo "torch: $torch"
    echo "ncu: ${ncu:-none}"
    echo "llmc_dir: bundle"
    echo "llmc_commit: $LLMC_COMMIT"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  } > "$W/meta.txt"
  if ! command -v nvidia-smi > /dev/null; then
    echo "gpu: none" >> "$W/meta.txt"
    cat "$W/meta.txt"
    echo "not available: no nvidia-smi on this machine (the binaries above run on whatever CUDA device there is)"
    return 3
  fi
  local q=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,temperature.gpu,persistence_mode
  local line
  line=$(nvidia-smi --query-gpu=$q --format=csv,noheader | head -n 1)
  {
    echo "gpu: $(cut -d, -f1 <<< "$line" | sed 's/ *$//')"
    echo "gpu_memory: $(cut -d, -f2 <<< "$line" | sed 's/^ //')"
    echo "driver: $(cut -d, -f3 <<< "$line" | sed 's/^ //')"
    echo "gpu_line: $line ($q)"
  } >> "$W/meta.txt"
  cat "$W/meta.txt"
}

find_ncu() {
  (command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu) 2> /dev/null | head -n 1
}

# train_check: train_gpt on the tiny models of make test-gpu for 10 steps, its losses against
# the CPU trainer's (ref/, written when the bundle was built; test/compare_losses.py's bounds:
# step 1 within 1%, steps 2-10 within 3%).
train_check() {
  local pass=0 fail=0 cfg args
  [ "$DRY" = 1 ] || mkdir -p "$W/train-check"
  for cfg in $TRAIN_CHECK_MODELS; do
    args=$(cat "ref/$cfg.args")
    # shellcheck disable=SC2086  # the arguments as the CPU reference ran them
    if [ "$DRY" = 1 ]; then
      run ./train_gpt $args --log "$W/train-check/$cfg.cuda.jsonl"
      run python3 scripts/compare_losses.py "$W/train-check/$cfg.cuda.jsonl" "ref/$cfg.cpu.jsonl"
      continue
    fi
    if ! ./train_gpt $args --log "$W/train-check/$cfg.cuda.jsonl" > "$W/train-check/$cfg.out" 2>&1; then
      echo "FAIL $cfg: train_gpt failed: $(tail -n 2 "$W/train-check/$cfg.out")"
      fail=$((fail + 1))
    elif python3 scripts/compare_losses.py "$W/train-check/$cfg.cuda.jsonl" "ref/$cfg.cpu.jsonl"; then
      echo "ok   $cfg: the CUDA losses track the CPU trainer's (step 1 within 1%, steps 2-10 within 3%)"
      pass=$((pass + 1))
    else
      echo "FAIL $cfg: the CUDA losses differ from the CPU trainer's beyond the bf16 tolerance"
      fail=$((fail + 1))
    fi
  done
  [ "$DRY" = 1 ] && return 0
  echo "$pass passed, $fail failed"
  [ $fail = 0 ]
}

# profile WHO MODEL BATCH SEQ: ncu's duration of every kernel of one step into W/profile/.
#   fsdp.c  train_gpt's step PROFILE_STEP (its NVTX range "step N"); beside it the bundle's
#           prediction of the same step for this GPU (predict/)
#   llm.c   train_gpt2cu's step PROFILE_STEP - 1 (its range "Train step N", from 0)
#   detail  ncu's sections of one attention forward and one backward launch of step 2
# Where a range selects no kernel (a profiler that reads the ranges otherwise), every kernel of
# a two-step run is profiled instead, and the report halves it.
profile() {
  local who=$1 model=$2 b=$3 T=$4 ncu name cmd=() fallback=() seqargs=()
  ncu=$(find_ncu)
  [ -n "$ncu" ] || [ "$DRY" = 1 ] || { echo "not available: no ncu (Nsight Compute) on PATH, in /usr/local/cuda/bin or /opt/nvidia"; return 3; }
  ncu=${ncu:-ncu}
  [ "$DRY" = 1 ] || mkdir -p "$W/profile"
  [ "$T" != 0 ] && seqargs=(--seq "$T")
  local fsdp=(./train_gpt --model "$model" --batch "$b" "${seqargs[@]}" --data data/bench.bin)
  local timing=(--metrics gpu__time_duration.sum --csv --cache-control none --clock-control none)
  name=$(echo "$who-$model-B$b" | sed 's/[^A-Za-z0-9.-]/_/g')
  case $who in
    fsdp.c)
      cmd=("$ncu" --nvtx --nvtx-include "step $PROFILE_STEP/" "${timing[@]}" "${fsdp[@]}" --steps "$PROFILE_STEP")
      fallback=("$ncu" "${timing[@]}" "${fsdp[@]}" --steps 2) ;;
    llm.c)
      [ -x llmc/cuda/train_gpt2cu ] || [ "$DRY" = 1 ] || { echo "not available: the bundle has no llm.c (built without LLMC_DIR)"; return 3; }
      local desc
      desc=$(llmc_descriptor "$model")
      [ -n "$desc" ] || { echo "not available: $model has no llm.c descriptor"; return 3; }
      local llmc=(llmc/cuda/train_gpt2cu -e "$desc" -i data/bench.bin -j data/bench.bin -b "$b" -t "$T" -v 100000 -m 1 -s 0
                  -n 0 -r 0 -c 0.1)
      cmd=("$ncu" --nvtx --nvtx-include "Train step $((PROFILE_STEP - 1))/" "${timing[@]}" "${llmc[@]}" -x $((PROFILE_STEP + 1)))
      fallback=("$ncu" "${timing[@]}" "${llmc[@]}" -x 2) ;;
    detail)
      local k rc=0
      for k in $DETAIL_KERNELS; do
        cmd=("$ncu" --nvtx --nvtx-include "step 2/" -k "regex:$k" --launch-count 1 --clock-control none
             --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
             --section Occupancy --section LaunchStats --section SchedulerStats -f -o "$W/profile/detail-$k" "${fsdp[@]}" --steps 2)
        run "${cmd[@]}"
        [ "$DRY" = 1 ] && continue
        if "${cmd[@]}" > "$W/profile/detail-$k.log" 2>&1 && [ -f "$W/profile/detail-$k.ncu-rep" ]; then
          "$ncu" --import "$W/profile/detail-$k.ncu-rep" --page details > "$W/profile/detail-$k.txt" 2>&1
          "$ncu" --import "$W/profile/detail-$k.ncu-rep" --page details --csv > "$W/profile/detail-$k.csv" 2>&1
          grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread'             "$W/profile/detail-$k.txt" | sed "s/^ */$k: /"
        else
          echo "error: ncu found no $k launch in step 2 (see profile/detail-$k.log)"
          tail -n 3 "$W/profile/detail-$k.log"
          rc=1
        fi
      done
      return $rc ;;
  esac
  echo "    + $(printf '%q ' "${cmd[@]}") > $W/profile/$name.csv"
  [ "$DRY" = 1 ] && { echo "    (where the range selects no kernel: $(printf '%q ' "${fallback[@]}"))"; return 0; }
  "${cmd[@]}" > "$W/profile/$name.csv" 2> "$W/profile/$name.log"
  local rc=$? n
  n=$(grep -c '"gpu__time_duration.sum"' "$W/profile/$name.csv")
  if [ "$n" = 0 ]; then
    echo "the NVTX range selected no kernel (exit $rc): every kernel of two steps instead"
    echo "    + $(printf '%q ' "${fallback[@]}")"
    "${fallback[@]}" > "$W/profile/$name.csv" 2> "$W/profile/$name.log"
    rc=$?
    n=$(grep -c '"gpu__time_duration.sum"' "$W/profile/$name.csv")
    echo "steps: 2" > "$W/profile/$name.steps"
  else
    echo "steps: 1" > "$W/profile/$name.steps"
  fi
  echo "$name: $n kernels timed (exit $rc)"
  [ "$n" -gt 0 ] || { tail -n 5 "$W/profile/$name.log"; return 1; }
}

kernels() {
  [ -x bin/test_kernels_gpu ] || { echo "not available: the bundle has no bin/test_kernels_gpu"; return 3; }
  echo "    + TEST_FILTER=$(printf '%q' "$KERNEL_TEST_FILTER") bin/test_kernels_gpu $KERNEL_TEST_ARGS > $W/kernels.txt"
  [ "$DRY" = 1 ] && return 0
  # shellcheck disable=SC2086  # the conf's arguments
  TEST_FILTER=$KERNEL_TEST_FILTER bin/test_kernels_gpu $KERNEL_TEST_ARGS | tee "$W/kernels.txt"
}

# side_by_side OUTSUB MODEL BATCHES [FSDP-OPTIONS]: fsdp.c beside the bundle's llm.c
# (scripts/bench_llmc.sh); with FSDP-OPTIONS, fsdp.c alone with them
side_by_side() {
  local args=(--models "$2" --batches "$3" --seq "$BENCH_SEQ" --rounds "$BENCH_ROUNDS" --steps "$BENCH_STEPS"
              --warmup "$BENCH_WARMUP" --out "$W/$1")
  export BENCH_FSDP_ARGS=${4:-}
  [ -x llmc/cuda/train_gpt2cu ] && [ -z "$BENCH_FSDP_ARGS" ] && args+=(--prebuilt-llmc llmc)
  if [ "$DRY" = 1 ]; then
    local d
    d=$(mktemp -d)
    BENCH_DATA=$PWD/data/bench.bin LLMC_DIR='' bash scripts/bench_llmc.sh "${args[@]}" --out "$d" --dry-run > /dev/null 2>&1
    grep -v '^#' "$d/commands.txt" | sed 's/^/    + /'
    rm -rf "$d"
    return 0
  fi
  BENCH_DATA=$PWD/data/bench.bin FSDP_COMMIT=$BUNDLE_COMMIT LLMC_DIR='' bash scripts/bench_llmc.sh "${args[@]}"
}

torch_tuned() {
  [ "$DRY" = 1 ] || python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null ||
    { echo "not available: no python3 with a CUDA torch"; return 3; }
  [ "$DRY" = 1 ] || mkdir -p "$W/torch"
  run python3 scripts/bench_torch.py --tuned --model "$BENCH_MODEL" --batch "$PROFILE_BATCH" --seq "$BENCH_SEQ" \
    --data "$PWD/data/bench.bin" --steps "$BENCH_STEPS" --warmup "$BENCH_WARMUP" --json "$W/torch/tuned.json" \
    --log "$W/torch/tuned.jsonl"
}

# llama_bench: train_gpt's --bench of the Llama run (no llm.c counterpart), its JSON beside the
# bundle's prediction of the same run (predict/)
llama_bench() {
  [ "$DRY" = 1 ] || mkdir -p "$W/llama"
  run ./train_gpt --model "$LLAMA_MODEL" --data data/bench.bin --batch "$LLAMA_BATCH" --seq "$LLAMA_SEQ" \
    --steps $((BENCH_STEPS + BENCH_WARMUP)) --bench --bench-warmup "$BENCH_WARMUP" --shard full \
    --bench-json "$W/llama/bench.json" --log "$W/llama/bench.jsonl"
}

report() {
  run python3 scripts/gpu_bundle_report.py "$W" --out "$W/report.md"
}

# llm.c's model descriptors for the GPT-2 presets (train_gpt2.cu gpt_build_from_descriptor)
llmc_descriptor() {
  case $1 in gpt2-124m) echo d12 ;; gpt2-350m) echo d24 ;; gpt2-774m) echo d36 ;; gpt2-1.5b) echo d48 ;; *) echo "" ;; esac
}
export -f run find_libraries machine find_ncu train_check profile kernels side_by_side torch_tuned llama_bench report \
  llmc_descriptor
export W DRY BUNDLE_COMMIT BUNDLE_DATE BUNDLE_TOOLKIT LLMC_COMMIT TRAIN_CHECK_MODELS PROFILE_STEP DETAIL_KERNELS \
  KERNEL_TEST_FILTER KERNEL_TEST_ARGS BENCH_MODEL BENCH_SEQ BENCH_ROUNDS BENCH_STEPS BENCH_WARMUP PROFILE_BATCH \
  LLAMA_MODEL LLAMA_BATCH LLAMA_SEQ

# ---- the steps ------------------------------------------------------------------------------
step machine 60 machine
step kernels "$T_KERNELS" kernels
step train-check "$T_TRAIN_CHECK" train_check
step llmc "$T_LLMC" side_by_side llmc "$BENCH_MODEL" "$BENCH_BATCHES"
step profile "$T_PROFILE" profile fsdp.c "$BENCH_MODEL" "$PROFILE_BATCH" "$BENCH_SEQ"
step profile-llmc "$T_PROFILE_LLMC" profile llm.c "$BENCH_MODEL" "$PROFILE_BATCH" "$BENCH_SEQ"
step detail "$T_DETAIL" profile detail "$BENCH_MODEL" "$PROFILE_BATCH" "$BENCH_SEQ"
OPTIONAL=1  # these only while the budget leaves room
step gelu-off "$T_GELU_OFF" side_by_side llmc-gelu-off "$BENCH_MODEL" "$PROFILE_BATCH" "--gelu-epilogue off"
step torch "$T_TORCH" torch_tuned
step t5 "$T_T5" profile fsdp.c "$T5_MODEL" "$T5_BATCH" 0
step larger "$T_LARGER" side_by_side llmc-larger "$LARGER_MODEL" "$PROFILE_BATCH"
step llama "$T_LLAMA" llama_bench
OPTIONAL=0
step report 60 report

if [ $DRY = 1 ]; then
  echo "(the budget: ${BUDGET}s; gelu-off, torch, t5, larger and llama run only while it leaves room for their timeout)"
  exit 0
fi
pack
say "done: $(awk -F'\t' 'NR > 1 {n[$2]++} END {for (s in n) printf "%s %d, ", s, n[s]}' "$W/steps.tsv" | sed 's/, $//')"
[ -f "$OUT/report.md" ] && cat "$OUT/report.md"
exit $STATUS
