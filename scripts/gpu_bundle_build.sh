#!/usr/bin/env bash
# gpu_bundle_build.sh: assembles the GPU bundle (make gpu-bundle, make gpu-bundle-sim: the
# Makefile builds the binaries, this puts the folder together).
#
#   scripts/gpu_bundle_build.sh --kind gpu|sim --conf FILE --trainer BIN --kernel-test BIN DIR
#
# DIR gets: run.sh (scripts/gpu_bundle.sh) and bundle.conf (what it was built from, then FILE:
# what it runs); train_gpt and bin/test_kernels_gpu; scripts/ (the report and benchmark scripts
# the steps call); data/bench.bin (a Zipf shard of the conf's vocabulary, scripts/zipf_tokens.py)
# and data/addition/; ref/ (the CPU trainer's losses of the train-check models, with their
# arguments); predict/GPU/ (the timeline's prediction and trace of every run the steps profile or
# time, for the H100 and the H200); llmc/ (llm.c's train_gpt2cu, plain and with cuDNN, built from
# LLMC_DIR by scripts/bench_llmc.sh --build-only, when LLMC_DIR is set); lib/ (libgomp, used only
# where the GPU machine has none). The folder is written as DIR.tmp and renamed at the end, so a
# DIR that exists is whole.
set -eu
cd "$(dirname "$0")/.."
KIND="" CONF="" TRAINER="" KTEST="" DIR=""
while [ $# -gt 0 ]; do
  case $1 in
    --kind) KIND=$2; shift ;;
    --conf) CONF=$2; shift ;;
    --trainer) TRAINER=$2; shift ;;
    --kernel-test) KTEST=$2; shift ;;
    -*) echo "error: unknown option '$1'" >&2; exit 2 ;;
    *) DIR=$1 ;;
  esac
  shift
done
[ -n "$KIND" ] && [ -f "$CONF" ] && [ -x "$TRAINER" ] && [ -x "$KTEST" ] && [ -n "$DIR" ] ||
  { echo "usage: $0 --kind gpu|sim --conf FILE --trainer BIN --kernel-test BIN DIR" >&2; exit 2; }
# shellcheck source=/dev/null
source "$CONF"
T=$DIR.tmp
rm -rf "$T"
mkdir -p "$T/bin" "$T/scripts" "$T/data/addition" "$T/ref" "$T/lib" "$T/predict"
cp "$TRAINER" "$T/train_gpt"
cp "$KTEST" "$T/bin/test_kernels_gpu"
cp scripts/gpu_bundle.sh "$T/run.sh"
cp scripts/gpu_bundle_report.py scripts/bench_llmc.sh scripts/side_by_side.py scripts/bench_report.py \
  scripts/results_section.py scripts/bench_torch.py test/compare_losses.py "$T/scripts/"
cp data/addition/*.bin "$T/data/addition/"
gomp=$("${CC:-cc}" -print-file-name=libgomp.so.1)
[ -f "$gomp" ] && cp -L "$gomp" "$T/lib/"
python3 scripts/zipf_tokens.py --vocab "$BENCH_VOCAB" --tokens "$BENCH_TOKENS" "$T/data/bench.bin" > /dev/null

# The CPU trainer's losses of the tiny models train-check trains (the conf's arguments, run from
# the bundle folder as run.sh runs train_gpt there)
CPU_TRAINER=$PWD/train_gpt_cpu
for cfg in $TRAIN_CHECK_MODELS; do
  var=TRAIN_CHECK_$cfg
  [ -n "${!var:-}" ] || { echo "error: $CONF names train-check model $cfg but sets no $var" >&2; exit 1; }
  echo "${!var}" > "$T/ref/$cfg.args"
  # shellcheck disable=SC2086  # the arguments, word by word
  (cd "$T" && OMP_NUM_THREADS=2 "$CPU_TRAINER" ${!var} --log "ref/$cfg.cpu.jsonl" > "ref/$cfg.cpu.txt" 2>&1) ||
    { echo "error: the CPU reference run $cfg failed: see $T/ref/$cfg.cpu.txt" >&2; exit 1; }
done

# The timeline's prediction of every run the steps time or profile (fsdp.c, --shard full, one
# rank), named as the run script names its profiles.
predict() {  # predict MODEL BATCH SEQ (0: the model's own lengths)
  local g slug seq=()
  [ "$3" = 0 ] || seq=(--seq "$3")
  slug=$(echo "fsdp.c-$1-B$2" | sed 's/[^A-Za-z0-9.-]/_/g')
  for g in h100-sxm h200; do
    mkdir -p "$T/predict/$g"
    ./train_gpt_cpu --model "$1" --batch "$2" "${seq[@]}" --shard full --predict "$g" --world 1 \
      --trace "$T/predict/$g/$slug.trace.json" > "$T/predict/$g/$slug.txt" 2>&1 ||
      { echo "error: the prediction of $1 B=$2 on $g failed: see $T/predict/$g/$slug.txt" >&2; exit 1; }
  done
}
for b in $BENCH_BATCHES; do predict "$BENCH_MODEL" "$b" "$BENCH_SEQ"; done
predict "$LARGER_MODEL" "$PROFILE_BATCH" "$BENCH_SEQ"
predict "$T5_MODEL" "$T5_BATCH" 0
predict "$LLAMA_MODEL" "$LLAMA_BATCH" "$LLAMA_SEQ"

# llm.c, built with the project's patches (single GPU, no MPI), plain and with cuDNN when cuDNN
# and cudnn-frontend's headers are here
LLMC_COMMIT=-
if [ -n "${LLMC_DIR:-}" ]; then
  mkdir -p build
  if ! bash scripts/bench_llmc.sh --build-only --out build/llmc-build > build/llmc-build.log 2>&1; then
    tail -n 5 build/llmc-build.log >&2
    echo "error: llm.c did not build (LLMC_DIR=$LLMC_DIR): see build/llmc-build.log" >&2
    exit 1
  fi
  mkdir -p "$T/llmc/cuda"
  cp build/llmc/cuda/train_gpt2cu "$T/llmc/cuda/"
  if grep -q '^llmc: built: .* and .*/cudnn/train_gpt2cu' build/llmc-build.log; then
    mkdir -p "$T/llmc/cudnn"
    cp build/llmc/cudnn/train_gpt2cu "$T/llmc/cudnn/"
  fi
  cp build/llmc-build/patches.txt "$T/llmc/"
  LLMC_COMMIT=$(git -C "$LLMC_DIR" rev-parse HEAD 2> /dev/null || echo unknown)
  echo "$LLMC_COMMIT" > "$T/llmc/commit.txt"
  echo "llm.c: $(cd "$T" && ls llmc/*/train_gpt2cu | tr '\n' ' ')(commit ${LLMC_COMMIT:0:12}); $(grep -m1 'cuDNN' build/llmc-build.log || true)"
else
  echo "llm.c: not in the bundle (LLMC_DIR is unset; docs/performance.md says how to get it)"
fi

changes=$([ -n "$(git status --porcelain --untracked-files=no 2> /dev/null)" ] && echo +changes || true)
{
  echo "# bundle.conf: what this bundle was built from (scripts/gpu_bundle_build.sh), then what run.sh runs ($CONF)"
  echo "BUNDLE_KIND=$KIND"
  echo "BUNDLE_COMMIT=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)$changes"
  echo "BUNDLE_DATE='$(date -u '+%Y-%m-%d %H:%M UTC')'"
  echo "BUNDLE_TOOLKIT='$("${NVCC:-nvcc}" --version 2> /dev/null | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'), bf16'"
  echo "LLMC_COMMIT=$LLMC_COMMIT"
  cat "$CONF"
} > "$T/bundle.conf"
rm -rf "$DIR"
mv "$T" "$DIR"
echo "$DIR: $(du -sh "$DIR" | cut -f1) ($KIND); on the GPU machine: bash $DIR/run.sh OUT"
