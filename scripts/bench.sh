#!/usr/bin/env bash
# bench.sh: the benchmark sweep of fsdp.c in one command; writes a results directory and its
# report (scripts/bench_report.py: results.md, results.json, plots).
#
#   scripts/bench.sh [--quick] [--cpu] [--out DIR] [--parts LIST] [--models "A B"] [--dry-run]
#
# GPU mode (default): ./train_gpt (built with `make train_gpt` when missing) on one GPU.
#   peak    one --peak run: the matmul rate this device delivers to our kernels (peak.json);
#           the report gives every row's MFU against it beside the datasheet MFU
#   models  gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (B=8, T=1024) and t5-small, t5-base,
#           t5-large, t5-3b (B=16, enc 512, dec 114), --shard full, world 1, "where memory
#           allows": each configuration is first planned with --plan; when plan_bytes_per_rank
#           exceeds the GPU's free memory (nvidia-smi, less 1.5 GiB for the CUDA context) the
#           batch is halved until it fits, and a model that does not fit at B=1 is skipped;
#           both are recorded (manifest.tsv, results.md)
#   torch   scripts/bench_torch.py on the same shapes and batch, when a python with torch and
#           CUDA is found (BENCH_PYTHON, else python3, /usr/bin/python3): --tuned (one GPU without
#           FSDP, the whole model compiled: what a PyTorch user with one GPU runs), and FSDP2 on
#           one rank eager and --compile (FSDP2's own per-unit overhead)
#   sim     one mid model (gpt2-350m) with a simulated link, --sim-world 8 --sim-link 5, 10, 25,
#           50, 100, 200 GB/s: --shard full / grad-op / none at every bandwidth, --prefetch none
#           (against both) at every bandwidth, --limit-all-gathers 1 / 2 / 4 at 25 GB/s. On one
#           GPU the strategies differ only in what they communicate, so they are compared under
#           the simulated link.
#           Every fsdp.c run without a simulated link is also predicted by the timeline backend
#           (--predict GPU --world 1 with the same options; predict/README.md) for the catalogue
#           GPU this one is, and the report puts the predicted step beside the measured one.
#   profile where one step's time goes: ncu (Nsight Compute) times every kernel of a 2-step run
#           of the first GPT and the first T5 model (profile/<run>.csv); the report sums them
#           per kernel and per kernel group beside the timeline's modelled kernels of the same
#           step (predict/<run>.trace.json). Skipped without ncu, and in --cpu mode (only with
#           --parts profile there)
# --quick trims it: 4 models, gpt2-124m for the link sweep (5, 25, 200 GB/s; the strategies,
#   prefetch none and K at 25), fewer steps.
# --cpu runs the same pipeline with ./train_gpt_cpu on tiny custom models (gpt:..., t5:...,
#   with gpt3-175b as a model that no memory allows: it is planned and skipped) and slow
#   simulated links (0.05 .. 2 GB/s), with Debian's /usr/bin/python3 torch for the baseline;
#   `--cpu --quick` takes well under a minute (test/test_bench_scripts.sh runs it).
# --out DIR     results directory (default bench_results/<date>). Rerunning into the same DIR
#               reuses the runs whose JSON is already there, so a sweep cut short (or run part
#               by part) can be completed; the report covers everything in DIR.
# --parts LIST  comma-separated subset of peak,models,torch,sim,profile (default all). The full GPU
#               sweep takes longer than 10 minutes: e.g. run `--parts peak,models`, then
#               `--parts torch`, then `--parts sim` into the same --out DIR.
# --models "A B"  only these models of the mode's model list
# --steps N, --warmup N   timed and untimed steps of every run (default GPU 10/3, quick 5/2,
#               CPU 3/1)
# --dry-run     write commands.txt and manifest.tsv of the sweep without planning or running
#               anything (needs no GPU and no binary): what the sweep would run
# Environment: BENCH_DATA (token shards, default the built-in addition data), BENCH_PYTHON,
# BENCH_REPORT_PYTHON (default: a python3 that imports matplotlib, else python3),
# BENCH_TIMEOUT (seconds per run: GPU 900, CPU 120), BENCH_MEMORY_BYTES (memory budget per
# run instead of the free memory), BENCH_PREDICT_GPU (the catalogue GPU to predict the runs on:
# a100-40gb, a100-80gb, h100-sxm, h200; default the one nvidia-smi names, none on the CPU;
# "none" predicts nothing).
#
# The directory holds: runs/<run>.json (--bench-json; bench_torch.py --json), logs/<run>.jsonl
# (--log: loss per step), out/<run>.txt (each run's output), predict/<run>.txt (its
# prediction), peak.json, plans.txt (the --plan
# results), manifest.tsv (one line per run: settings, status ok/reused/skipped/failed, note),
# commands.txt (the exact command lines, in order), meta.txt (date, device, git commit), and the
# report. Exit status: 0, or 1 when a run failed (the report is written either way), 2 on usage.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)

usage() {
  sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

MODE=gpu QUICK=0 OUT="" PARTS="" ONLY_MODELS="" DRY=0 STEPS="" WARMUP=""
ARGV_LINE="scripts/bench.sh"
for a in "$@"; do ARGV_LINE+=" $(printf '%q' "$a")"; done
need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then echo "error: $1 needs a value" >&2; exit 2; fi; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --cpu) MODE=cpu ;;
    --dry-run) DRY=1 ;;
    --out) need_value "$@"; OUT=$2; shift ;;
    --parts) need_value "$@"; PARTS=$2; shift ;;
    --models) need_value "$@"; ONLY_MODELS=$2; shift ;;
    --steps) need_value "$@"; STEPS=$2; shift ;;
    --warmup) need_value "$@"; WARMUP=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown option '$1'" >&2; echo "usage: scripts/bench.sh [--quick] [--cpu] [--out DIR] [--parts LIST] [--models \"A B\"] [--steps N] [--warmup N] [--dry-run] (--help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$PARTS" ] || PARTS=peak,models,torch,sim$([ $MODE = gpu ] && echo ,profile)
for p in ${PARTS//,/ }; do
  case $p in peak | models | torch | sim | profile) ;; *) echo "error: --parts: unknown part '$p' (peak, models, torch, sim, profile)" >&2; exit 2 ;; esac
done
for v in "$STEPS" "$WARMUP"; do
  if [ -n "$v" ] && ! [[ $v =~ ^[0-9]+$ ]]; then echo "error: --steps/--warmup expect a number, got '$v'" >&2; exit 2; fi
done
has_part() { [[ ",$PARTS," == *",$1,"* ]]; }

# ---- the sweep of each mode: "model|batch|shape arguments" ------------------------------
if [ $MODE = gpu ]; then
  BIN=./train_gpt PLAN_BACKEND=cuda
  GPT_SHAPE="--seq 1024" T5_SHAPE="--enc-len 512 --dec-len 114"
  MODEL_LIST=("gpt2-124m|8|$GPT_SHAPE" "gpt2-350m|8|$GPT_SHAPE" "gpt2-774m|8|$GPT_SHAPE" "gpt2-1.5b|8|$GPT_SHAPE"
              "t5-small|16|$T5_SHAPE" "t5-base|16|$T5_SHAPE" "t5-large|16|$T5_SHAPE" "t5-3b|16|$T5_SHAPE")
  SIM_MODEL="gpt2-350m|8|$GPT_SHAPE"
  PEAK_MODEL="gpt2-124m|1|--seq 64"
  SIM_WORLD=8 LINKS="5 10 25 50 100 200" DEFAULT_LINK=25
  DEF_STEPS=10 DEF_WARMUP=3 RUN_TIMEOUT=${BENCH_TIMEOUT:-900}
  if [ $QUICK = 1 ]; then
    MODEL_LIST=("gpt2-124m|8|$GPT_SHAPE" "gpt2-350m|8|$GPT_SHAPE" "t5-small|16|$T5_SHAPE" "t5-base|16|$T5_SHAPE")
    SIM_MODEL="gpt2-124m|8|$GPT_SHAPE" LINKS="5 25 200" DEF_STEPS=5 DEF_WARMUP=2
  fi
else
  BIN=./train_gpt_cpu PLAN_BACKEND=cpu
  MODEL_LIST=("gpt:L=2,C=64,H=4,V=256,T=64|4|--seq 64" "gpt:L=4,C=128,H=4,V=256,T=64|4|--seq 64"
              "t5:L=1,C=64,H=4,D=16,F=128,V=512|2|--enc-len 48 --dec-len 16"
              "t5v1.1:L=2,C=96,H=4,D=24,F=192,V=512|2|--enc-len 64 --dec-len 24" "gpt3-175b|1|--seq 64")
  SIM_MODEL="gpt:L=4,C=64,H=4,V=256,T=64|2|--seq 64"
  PEAK_MODEL="gpt:L=2,C=64,H=4,V=256,T=64|1|--seq 16"
  SIM_WORLD=8 LINKS="0.05 0.1 0.25 0.5 1 2" DEFAULT_LINK=0.5
  DEF_STEPS=3 DEF_WARMUP=1 RUN_TIMEOUT=${BENCH_TIMEOUT:-120}
  if [ $QUICK = 1 ]; then
    MODEL_LIST=("gpt:L=2,C=64,H=4,V=256,T=64|4|--seq 64" "t5:L=1,C=64,H=4,D=16,F=128,V=512|2|--enc-len 48 --dec-len 16"
                "gpt3-175b|1|--seq 64")
    LINKS="0.05 0.5 2"
  fi
fi
STEPS=${STEPS:-$DEF_STEPS} WARMUP=${WARMUP:-$DEF_WARMUP}
if [ -n "$ONLY_MODELS" ]; then
  kept=()
  for e in "${MODEL_LIST[@]}"; do
    for m in $ONLY_MODELS; do [ "${e%%|*}" = "$m" ] && kept+=("$e"); done
  done
  for m in $ONLY_MODELS; do
    found=0
    for e in "${MODEL_LIST[@]}" "$SIM_MODEL"; do [ "${e%%|*}" = "$m" ] && found=1; done
    [ $found = 1 ] || { echo "error: --models: '$m' is not in this mode's model list" >&2; exit 2; }
  done
  MODEL_LIST=("${kept[@]+"${kept[@]}"}")
fi
DATA=${BENCH_DATA:-data/addition/train_000.bin}

# ---- the results directory -------------------------------------------------------------
[ -n "$OUT" ] || OUT=bench_results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"/runs "$OUT"/logs "$OUT"/out "$OUT"/predict "$OUT"/profile || { echo "error: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
MANIFEST=$OUT/manifest.tsv CMDS=$OUT/commands.txt PLANS=$OUT/plans.txt
[ -s "$MANIFEST" ] || printf 'run\tgroup\tbackend\tmodel\tbatch\tshape\tshard\tprefetch\tK\tsim_world\tsim_link\tjson\tlog\tstatus\tnote\n' > "$MANIFEST"
NOW=$(date '+%Y-%m-%d %H:%M:%S %Z')
{ echo "# $NOW: $ARGV_LINE   (in $ROOT)"; } >> "$CMDS"

say() { echo "bench: $*"; }
quote() { local s="" a; for a in "$@"; do s+="$(printf '%q' "$a") "; done; echo "${s% }"; }
log_cmd() { quote "$@" >> "$CMDS"; }
slug() { echo "$1" | sed 's/[^A-Za-z0-9.-]/_/g'; }
# manifest RUN GROUP BACKEND MODEL BATCH SHAPE SHARD PREFETCH K SIM_WORLD SIM_LINK JSON LOG STATUS NOTE
manifest() {
  local IFS=$'\t'
  echo "$*" | tr -d '\n' >> "$MANIFEST"
  echo >> "$MANIFEST"
}
FAILED=0 RUNS=0 SKIPPED=0

# ---- binaries, data, device, memory ----------------------------------------------------
if [ $DRY = 0 ]; then
  if [ ! -x "$BIN" ]; then
    say "building $BIN"
    make "${BIN#./}" >&2 || { echo "error: make ${BIN#./} failed" >&2; exit 1; }
  fi
  if [ -z "${BENCH_DATA:-}" ] && [ ! -f "$DATA" ]; then
    make data/addition/train_000.bin >&2 || { echo "error: cannot make the addition data" >&2; exit 1; }
  fi
fi
GPU_INFO="" FREE_BYTES=""
if [ $MODE = gpu ] && command -v nvidia-smi >/dev/null 2>&1; then
  GPU_INFO=$(nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv,noheader 2>/dev/null | head -1)
  free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc '0-9')
  # the CUDA context, cuBLAS workspaces and the allocator's slack are not in the plan
  [ -n "$free_mib" ] && FREE_BYTES=$(( free_mib * 1048576 - 1536 * 1048576 ))
elif [ $MODE = cpu ]; then
  avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null)
  [ -n "$avail_kb" ] && FREE_BYTES=$(( avail_kb * 1024 * 8 / 10 ))
fi
[ -n "${BENCH_MEMORY_BYTES:-}" ] && FREE_BYTES=$BENCH_MEMORY_BYTES
if [ $MODE = gpu ] && [ -z "$FREE_BYTES" ] && [ $DRY = 0 ]; then
  say "warning: no nvidia-smi: configurations are not checked against free memory (train_gpt refuses what does not fit)"
fi

# The catalogue GPU the timeline predicts the runs on (kernels/timeline/catalogue.c): this one's kind.
PREDICT_GPU=""
if [ $MODE = gpu ]; then
  case "$GPU_INFO" in
    *H200*) PREDICT_GPU=h200 ;;
    *H100*PCIe* | *H100*NVL*) ;;  # not in the catalogue (other clocks and memory)
    *H100*) PREDICT_GPU=h100-sxm ;;
    *A100*80GB*) PREDICT_GPU=a100-80gb ;;
    *A100*40GB*) PREDICT_GPU=a100-40gb ;;
  esac
fi
[ -n "${BENCH_PREDICT_GPU:-}" ] && PREDICT_GPU=$BENCH_PREDICT_GPU
[ "$PREDICT_GPU" = none ] && PREDICT_GPU=""
if [ -n "$PREDICT_GPU" ] && [ $DRY = 0 ] && [ ! -x ./predict_gpt ]; then
  say "building ./predict_gpt"
  make predict_gpt >&2 || { echo "error: make predict_gpt failed" >&2; exit 1; }
fi

TORCH_PY=""
if [ $DRY = 1 ]; then
  TORCH_PY=${BENCH_PYTHON:-python3}
else
  cands=(python3 /usr/bin/python3)
  [ -n "${BENCH_PYTHON:-}" ] && cands=("$BENCH_PYTHON")
  for py in "${cands[@]}"; do
    command -v "$py" >/dev/null 2>&1 || continue
    if [ $MODE = gpu ]; then check='import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'
    else check='import torch'; fi
    if "$py" -c "$check" >/dev/null 2>&1; then TORCH_PY=$py; break; fi
  done
fi
TORCH_DESC="none found"
[ -n "$TORCH_PY" ] && TORCH_DESC="$TORCH_PY (torch $("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?'))"
REPORT_PY=${BENCH_REPORT_PYTHON:-}
if [ -z "$REPORT_PY" ]; then
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 && "$py" -c 'import matplotlib' >/dev/null 2>&1 && { REPORT_PY=$py; break; }
  done
  REPORT_PY=${REPORT_PY:-$(command -v python3 || echo /usr/bin/python3)}
fi
GIT=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && GIT+=" (with uncommitted changes)"
if [ $MODE = gpu ]; then DEVICE_DESC=${GPU_INFO:-"no nvidia-smi"}
else DEVICE_DESC="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//'), $(nproc --all) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"; fi
{
  echo "date: $NOW"
  echo "mode: $MODE$([ $QUICK = 1 ] && echo ' --quick')$([ $DRY = 1 ] && echo ' --dry-run'), parts $PARTS, $STEPS timed steps after $WARMUP warm-up"
  echo "host: $(hostname 2>/dev/null || echo '?')"
  [ $MODE = gpu ] && echo "gpu: $DEVICE_DESC"
  [ $MODE = cpu ] && echo "cpu: $DEVICE_DESC"
  echo "git: $GIT"
  echo "binary: $BIN"
  echo "torch: $TORCH_DESC"
  echo "predicted on: ${PREDICT_GPU:-nothing (no catalogue GPU)}"
  [ -n "$FREE_BYTES" ] && echo "free memory: $(awk -v b="$FREE_BYTES" 'BEGIN {printf "%.2f GiB budget per run", b / 1073741824}')"
  echo "data: $DATA"
} > "$OUT/meta.txt"
say "$MODE sweep into $OUT ($BIN, torch: $TORCH_DESC, parts $PARTS)"

# ---- planning: the largest batch <= the given one whose plan fits ----------------------
# fit_batch MODEL BATCH SHAPE EXTRA...: sets FIT_B (0: nothing fits) and FIT_NOTE.
fit_batch() {
  local model=$1 b=$2 shape=$3
  shift 3
  FIT_B=$b FIT_NOTE=""
  if [ $DRY = 1 ] || [ -z "$FREE_BYTES" ]; then return 0; fi
  local want=$b bytes
  while [ "$b" -ge 1 ]; do
    # shellcheck disable=SC2206  # $shape: several words on purpose
    local cmd=("$BIN" --plan --backend "$PLAN_BACKEND" --model "$model" --batch "$b" $shape "$@")
    log_cmd "${cmd[@]}"
    bytes=$("${cmd[@]}" 2>&1 | awk '/^plan_bytes_per_rank / {print $2}')
    echo "$model batch $b $* : plan_bytes_per_rank ${bytes:-?} (budget $FREE_BYTES)" >> "$PLANS"
    if [ -z "$bytes" ]; then  # run it anyway: the trainer refuses a plan that does not fit
      FIT_B=$b FIT_NOTE="--plan gave no plan_bytes_per_rank: not checked against free memory"
      return 0
    fi
    if [ "$bytes" -le "$FREE_BYTES" ]; then
      FIT_B=$b
      [ "$b" != "$want" ] && FIT_NOTE="batch lowered from $want to $b to fit"
      return 0
    fi
    FIT_NOTE=$(awk -v p="$bytes" -v f="$FREE_BYTES" -v b="$b" 'BEGIN {printf "plan %.2f GiB per rank at batch %d > %.2f GiB free", p / 1073741824, b, f / 1073741824}')
    b=$((b / 2))
  done
  FIT_B=0
}

# summary FILE: "median ms, tokens/s" from a bench JSON
summary() {
  sed -n 's/.*"step_ms_median": \([0-9.e+-]*\).*"tokens_per_s_per_rank": \([0-9.e+-]*\).*/\1 \2/p' "$1" |
    awk '{printf "%.2f ms median, %.0f tokens/s", $1, $2}'
}

# predict_ours NAME SHAPE-ARGS...: the timeline's prediction of a run, once (predict/NAME.txt).
predict_ours() {
  local name=$1
  shift
  [ -n "$PREDICT_GPU" ] || return 0
  local cmd=("$BIN" "$@" --predict "$PREDICT_GPU" --world 1)
  log_cmd "${cmd[@]}"
  [ $DRY = 1 ] && return 0
  grep -qs '^predict_tflops_per_gpu' "$OUT/predict/$name.txt" && return 0
  if ! "${cmd[@]}" > "$OUT/predict/$name.txt" 2>&1; then
    say "$name: prediction FAILED (see predict/$name.txt)"
    FAILED=$((FAILED + 1))
  fi
}

# run_ours NAME GROUP MODEL BATCH SHAPE SHARD PREFETCH K LINK NOTE
run_ours() {
  local name=$1 group=$2 model=$3 b=$4 shape=$5 shard=$6 prefetch=$7 k=$8 link=$9 note=${10}
  local json=runs/$name.json log=logs/$name.jsonl sw=- sl=-
  local extra=(--shard "$shard" --prefetch "$prefetch" --limit-all-gathers "$k")
  if [ "$link" != - ]; then extra+=(--sim-world "$SIM_WORLD" --sim-link "$link"); sw=$SIM_WORLD sl=$link; fi
  # shellcheck disable=SC2206  # $shape: several words on purpose
  local cmd=("$BIN" --model "$model" --data "$DATA" --batch "$b" $shape --steps "$STEPS" --bench --bench-warmup "$WARMUP"
             "${extra[@]}" --bench-json "$OUT/$json" --log "$OUT/$log")
  local row=("$name" "$group" fsdp.c "$model" "$b" "$shape" "$shard" "$prefetch" "$k" "$sw" "$sl" "$json" "$log")
  RUNS=$((RUNS + 1))
  # shellcheck disable=SC2206  # $shape: several words on purpose
  [ "$link" = - ] && predict_ours "$name" --model "$model" --batch "$b" $shape "${extra[@]}"
  if [ $DRY = 1 ]; then log_cmd "${cmd[@]}"; manifest "${row[@]}" planned "$note"; return; fi
  if grep -qs step_ms_median "$OUT/$json"; then
    say "$name: reused ($(summary "$OUT/$json"))"
    manifest "${row[@]}" reused "$note"
    return
  fi
  log_cmd "${cmd[@]}"
  timeout "$RUN_TIMEOUT" "${cmd[@]}" > "$OUT/out/$name.txt" 2>&1
  local rc=$?
  if [ $rc = 0 ] && grep -qs step_ms_median "$OUT/$json"; then
    say "$name: $(summary "$OUT/$json")"
    manifest "${row[@]}" ok "$note"
  else
    local why="exit $rc"
    [ $rc = 124 ] && why="timed out after ${RUN_TIMEOUT}s"
    why+=": $(grep -m1 -i 'error' "$OUT/out/$name.txt" | cut -c1-200)"
    say "$name: FAILED ($why; see out/$name.txt)"
    rm -f "$OUT/$json"
    manifest "${row[@]}" failed "$why"
    FAILED=$((FAILED + 1))
  fi
}

# run_torch NAME GROUP MODEL BATCH SHAPE KIND NOTE; KIND: fsdp2 (eager), fsdp2-compile, tuned
run_torch() {
  local name=$1 group=$2 model=$3 b=$4 shape=$5 kind=$6 note=$7
  local json=runs/$name.json log=logs/$name.jsonl backend=pytorch
  [ "$kind" = fsdp2-compile ] && backend=pytorch+compile
  [ "$kind" = tuned ] && backend=pytorch-tuned
  local row=("$name" "$group" "$backend" "$model" "$b" "$shape" - - - - - "$json" "$log")
  RUNS=$((RUNS + 1))
  if [ -z "$TORCH_PY" ]; then
    manifest "${row[@]}" skipped "no python with torch$([ $MODE = gpu ] && echo ' and CUDA') (set BENCH_PYTHON)"
    SKIPPED=$((SKIPPED + 1))
    return
  fi
  # shellcheck disable=SC2206  # $shape: several words on purpose
  local cmd=("$TORCH_PY" scripts/bench_torch.py --model "$model" --batch "$b" $shape --steps "$STEPS" --warmup "$WARMUP"
             --data "$DATA" --device "$([ $MODE = gpu ] && echo cuda || echo cpu)" --json "$OUT/$json" --log "$OUT/$log")
  [ "$kind" = fsdp2-compile ] && cmd+=(--compile)
  [ "$kind" = tuned ] && cmd+=(--tuned)
  if [ $DRY = 1 ]; then log_cmd "${cmd[@]}"; manifest "${row[@]}" planned "$note"; return; fi
  if grep -qs step_ms_median "$OUT/$json"; then
    say "$name: reused ($(summary "$OUT/$json"))"
    manifest "${row[@]}" reused "$note"
    return
  fi
  log_cmd "${cmd[@]}"
  timeout "$RUN_TIMEOUT" "${cmd[@]}" > "$OUT/out/$name.txt" 2>&1
  local rc=$?
  local skip
  skip=$(grep -m1 '^skip:' "$OUT/out/$name.txt" | cut -c7-220)
  if [ $rc = 0 ] && grep -qs step_ms_median "$OUT/$json"; then
    say "$name: $(summary "$OUT/$json")"
    manifest "${row[@]}" ok "$(grep -m1 -o 'no FSDP2 in this torch[^;]*' "$OUT/out/$name.txt")"
  elif [ $rc = 0 ] && [ -n "$skip" ]; then
    say "$name: skipped ($skip)"
    manifest "${row[@]}" skipped "$skip"
    SKIPPED=$((SKIPPED + 1))
  else
    local why="exit $rc"
    [ $rc = 124 ] && why="timed out after ${RUN_TIMEOUT}s"
    why+=": $(grep -E -m1 'Error|error' "$OUT/out/$name.txt" | cut -c1-200)"
    say "$name: FAILED ($why; see out/$name.txt)"
    rm -f "$OUT/$json"
    manifest "${row[@]}" failed "$why"
    FAILED=$((FAILED + 1))
  fi
}

record_skip() {  # NAME GROUP BACKEND MODEL BATCH SHAPE NOTE
  say "$1: skipped ($7)"
  manifest "$1" "$2" "$3" "$4" "$5" "$6" - - - - - - - skipped "$7"
  SKIPPED=$((SKIPPED + 1))
}

# ---- peak ------------------------------------------------------------------------------
if has_part peak; then
  IFS='|' read -r pm pb pshape <<< "$PEAK_MODEL"
  # shellcheck disable=SC2206  # $shape: several words on purpose
  cmd=("$BIN" --model "$pm" --data "$DATA" --batch "$pb" $pshape --steps 1 --bench --bench-warmup 0 --peak
       --bench-json "$OUT/peak.json")
  RUNS=$((RUNS + 1))
  if [ $DRY = 1 ]; then
    log_cmd "${cmd[@]}"
    manifest peak peak fsdp.c "$pm" "$pb" "$pshape" full both 2 - - peak.json - planned ""
  elif grep -qs peak_tflops "$OUT/peak.json"; then
    say "peak: reused"
    manifest peak peak fsdp.c "$pm" "$pb" "$pshape" full both 2 - - peak.json - reused ""
  else
    log_cmd "${cmd[@]}"
    if timeout "$RUN_TIMEOUT" "${cmd[@]}" > "$OUT/out/peak.txt" 2>&1 && grep -qs peak_tflops "$OUT/peak.json"; then
      say "peak: $(sed -n 's/.*"peak_tflops": \([0-9.e+-]*\).*/\1/p' "$OUT/peak.json") TFLOPS measured (--peak)"
      manifest peak peak fsdp.c "$pm" "$pb" "$pshape" full both 2 - - peak.json - ok ""
    else
      say "peak: FAILED (see out/peak.txt)"
      manifest peak peak fsdp.c "$pm" "$pb" "$pshape" full both 2 - - peak.json - failed "see out/peak.txt"
      FAILED=$((FAILED + 1))
    fi
  fi
fi

# ---- models (and their PyTorch baselines) ----------------------------------------------
if has_part models || has_part torch; then
  for entry in "${MODEL_LIST[@]+"${MODEL_LIST[@]}"}"; do
    IFS='|' read -r model b shape <<< "$entry"
    s=$(slug "$model")
    fit_batch "$model" "$b" "$shape" --shard full --limit-all-gathers 2
    if [ "$FIT_B" = 0 ]; then
      has_part models && record_skip "model-$s-B$b" models fsdp.c "$model" "$b" "$shape" "memory: $FIT_NOTE"
      if has_part torch; then
        record_skip "torcht-$s-B$b" torch pytorch-tuned "$model" "$b" "$shape" "memory: fsdp.c's $FIT_NOTE (same batch)"
        record_skip "torch-$s-B$b" torch pytorch "$model" "$b" "$shape" "memory: fsdp.c's $FIT_NOTE (same batch)"
        record_skip "torchc-$s-B$b" torch pytorch+compile "$model" "$b" "$shape" "memory: fsdp.c's $FIT_NOTE (same batch)"
      fi
      continue
    fi
    b=$FIT_B
    has_part models && run_ours "model-$s-B$b" models "$model" "$b" "$shape" full both 2 - "$FIT_NOTE"
    if has_part torch; then
      run_torch "torcht-$s-B$b" torch "$model" "$b" "$shape" tuned "$FIT_NOTE"
      run_torch "torch-$s-B$b" torch "$model" "$b" "$shape" fsdp2 "$FIT_NOTE"
      run_torch "torchc-$s-B$b" torch "$model" "$b" "$shape" fsdp2-compile "$FIT_NOTE"
    fi
  done
fi

# ---- simulated link: strategies, prefetch, K, bandwidth -------------------------------
if has_part sim; then
  IFS='|' read -r model b shape <<< "$SIM_MODEL"
  s=$(slug "$model")
  if [ -n "$ONLY_MODELS" ] && [[ " $ONLY_MODELS " != *" $model "* ]]; then
    say "sim: $model is not in --models: link sweep left out"
  else
    # one batch for the whole sweep: the one the hungriest configuration (nothing resharded,
    # the largest slot pool) fits
    fit_batch "$model" "$b" "$shape" --shard none --limit-all-gathers 4
    if [ "$FIT_B" = 0 ]; then
      record_skip "sim-$s" sim fsdp.c "$model" "$b" "$shape" "memory: $FIT_NOTE"
    else
      b=$FIT_B
      if [ $QUICK = 1 ]; then strategy_links=$DEFAULT_LINK prefetch_links=$DEFAULT_LINK
      else strategy_links=$LINKS prefetch_links=$LINKS; fi
      for link in $LINKS; do
        run_ours "sim-$s-B$b-full-both-K2-link$link" link "$model" "$b" "$shape" full both 2 "$link" "$FIT_NOTE"
      done
      for link in $strategy_links; do
        for shard in grad-op none; do
          run_ours "sim-$s-B$b-$shard-both-K2-link$link" strategy "$model" "$b" "$shape" "$shard" both 2 "$link" "$FIT_NOTE"
        done
      done
      for link in $prefetch_links; do
        run_ours "sim-$s-B$b-full-none-K2-link$link" prefetch "$model" "$b" "$shape" full none 2 "$link" "$FIT_NOTE"
      done
      for k in 1 4; do
        run_ours "sim-$s-B$b-full-both-K$k-link$DEFAULT_LINK" limit "$model" "$b" "$shape" full both "$k" "$DEFAULT_LINK" "$FIT_NOTE"
      done
    fi
  fi
fi

# ---- profile: where one step's time goes ------------------------------------------------
# ncu's gpu__time_duration of every kernel of a short run, caches and clocks as they are (its
# defaults flush the caches and lock the clocks before each kernel). The report divides by
# PROFILE_STEPS, so the first step's one-time work counts once in two. The first GPT and the
# first T5 model of the list are profiled, each beside the timeline's modelled kernels of the
# same step (--predict GPU --trace: predict/<run>.trace.json), summed per kernel group.
PROFILE_STEPS=2
profile_models=()
for kind in gpt t5; do
  for e in "${MODEL_LIST[@]+"${MODEL_LIST[@]}"}"; do
    case ${e%%|*} in "$kind"*) profile_models+=("$e"); break ;; esac
  done
done
if has_part profile; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for entry in "${profile_models[@]+"${profile_models[@]}"}"; do
    IFS='|' read -r model b shape <<< "$entry"
    name=profile-$(slug "$model")-B$b
    # shellcheck disable=SC2206  # $shape: several words on purpose
    cmd=("${NCU:-ncu}" --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none
         "$BIN" --model "$model" --data "$DATA" --batch "$b" $shape --steps $PROFILE_STEPS)
    row=("$name" profile fsdp.c "$model" "$b" "$shape" full both 2 - - "profile/$name.csv" -)
    RUNS=$((RUNS + 1))
    if [ -n "$PREDICT_GPU" ] && [ $MODE = gpu ]; then
      # shellcheck disable=SC2206
      pcmd=("$BIN" --model "$model" --batch "$b" $shape --predict "$PREDICT_GPU" --world 1 --trace "$OUT/predict/$name.trace.json")
      log_cmd "${pcmd[@]}"
      if [ $DRY = 0 ] && ! [ -s "$OUT/predict/$name.trace.json" ] && ! "${pcmd[@]}" > "$OUT/predict/$name.txt" 2>&1; then
        say "$name: the prediction's trace FAILED (see predict/$name.txt)"
        FAILED=$((FAILED + 1))
      fi
    fi
    if [ $DRY = 1 ]; then
      log_cmd "${cmd[@]}"
      manifest "${row[@]}" planned "$PROFILE_STEPS steps"
    elif [ $MODE = cpu ]; then
      record_skip "$name" profile fsdp.c "$model" "$b" "$shape" "ncu profiles CUDA kernels: a GPU part"
    elif [ -z "$NCU" ]; then
      record_skip "$name" profile fsdp.c "$model" "$b" "$shape" "no ncu (Nsight Compute) on PATH or under /usr/local/cuda/bin"
    elif grep -qs '"Kernel Name"' "$OUT/profile/$name.csv"; then
      say "$name: reused"
      manifest "${row[@]}" reused "$PROFILE_STEPS steps"
    else
      log_cmd "${cmd[@]}"
      timeout "$RUN_TIMEOUT" "${cmd[@]}" > "$OUT/profile/$name.csv" 2> "$OUT/out/$name.txt"
      rc=$?
      if [ $rc = 0 ] && grep -qs '"Kernel Name"' "$OUT/profile/$name.csv"; then
        say "$name: $(grep -c '"gpu__time_duration.sum"' "$OUT/profile/$name.csv") kernels timed"
        manifest "${row[@]}" ok "$PROFILE_STEPS steps"
      else
        say "$name: FAILED (exit $rc; see out/$name.txt)"
        rm -f "$OUT/profile/$name.csv"
        manifest "${row[@]}" failed "exit $rc: $(grep -m1 -iE 'error' "$OUT/out/$name.txt" | cut -c1-200)"
        FAILED=$((FAILED + 1))
      fi
    fi
  done
fi

# ---- report ----------------------------------------------------------------------------
if [ $DRY = 1 ]; then
  say "dry run: $RUNS runs written to $CMDS and $MANIFEST (nothing run)"
  exit 0
fi
say "$RUNS runs, $SKIPPED skipped, $FAILED failed; report with $REPORT_PY"
echo "$(quote "$REPORT_PY" scripts/bench_report.py "$OUT")" >> "$CMDS"
"$REPORT_PY" scripts/bench_report.py "$OUT" || { echo "error: bench_report.py failed" >&2; exit 1; }
[ $FAILED = 0 ] || exit 1
exit 0
