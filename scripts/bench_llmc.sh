#!/usr/bin/env bash
# bench_llmc.sh: fsdp.c beside llm.c (github.com/karpathy/llm.c) on one machine: the same
# model, micro-batch, sequence and token shards, runs interleaved (fsdp.c, llm.c, ..., round
# after round) so a change of load or clocks slows every side alike; a table with the medians
# of the timed steps, tokens/s, TFLOPS and MFU from one FLOP count for all (layers/config.c's,
# ported in scripts/bench_report.py), and each side's throughput against fsdp.c's.
#
#   scripts/bench_llmc.sh [--models "gpt2-124m ..."] [--batches "8 64"] [--seq T] [--rounds R]
#                         [--steps S] [--warmup W] [--no-cudnn] [--out DIR] [--dry-run | --build-only]
#                         [--prebuilt-llmc DIR]
#   scripts/bench_llmc.sh --cpu [--model M] [--batch B] [--seq T] [--threads N] [--rounds R]
#                         [--steps S] [--warmup W] [--torch-blas DIR] [--no-torch] [--vectors V]
#                         [--out DIR]
#
# llm.c comes from a checkout the user names: LLMC_DIR (docs/performance.md, "Against llm.c", says how to get
# the commit these scripts were written against). Its Makefile, train_gpt2.c, train_gpt2.cu and
# llmc/ are copied to build/llmc/<variant>/ and patched there (scripts/llmc_patch.py lists every
# change and why; patches.txt in DIR records the ones applied). Without LLMC_DIR the llm.c
# sides are skipped, saying so, and the other sides still run. --prebuilt-llmc DIR runs llm.c's
# binaries already built there instead (DIR/cuda/train_gpt2cu, DIR/cudnn/train_gpt2cu when there,
# DIR/commit.txt: the GPU bundle's llmc/), without LLMC_DIR and without building.
#
# GPU mode (default): ./train_gpt (--shard full, one rank) against llm.c's train_gpt2cu (bf16),
#   built with llm.c's Makefile (NO_MULTI_GPU=1 NO_USE_MPI=1, the GPU's compute capability),
#   and, when cuDNN and its frontend headers are found, once more with USE_CUDNN=1 (llm.c's
#   flash attention). Models gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (llm.c's d12, d24, d36,
#   d48, randomly initialized by both), T=1024, micro-batches 8 and 64. llm.c runs as its own
#   scripts/run_gpt2_*.sh do on one GPU: no recompute (-r 0), weight decay 0.1, and -ge 1 for
#   d48; no gradient accumulation, evaluation at the first and last step only (one batch, outside
#   its timed region), no sampling, no checkpoints. A model llm.c has no descriptor for (a custom
#   shape) runs on fsdp.c's side only. A batch that does not fit one side (fsdp.c's
#   plan refuses it, or llm.c runs out of memory) is halved for both, and the table says so.
# CPU mode (--cpu): ./train_gpt_cpu (fp32) against llm.c's train_gpt2 (fp32, the CPU trainer) and
#   scripts/bench_torch.py --device cpu (PyTorch eager fp32; --no-torch leaves it out), all with
#   OMP_NUM_THREADS=N. Default gpt2-124m, batch 4, seq 64, 2 threads, 3 rounds of 3 timed steps
#   after 1 untimed. llm.c's CPU trainer starts from a checkpoint file: scripts/llmc_checkpoint.py
#   writes a random one (build/llmc/ckpt/), which fsdp.c loads too (--init-from), and both run
#   llm.c's optimizer settings (AdamW lr 1e-4, betas 0.9/0.999, no weight decay, no clipping,
#   constant rate), so their losses at the first two steps must agree (checked, in the table).
#   --torch-blas DIR puts DIR first on LD_LIBRARY_PATH for the PyTorch runs (an optimized
#   libblas.so.3, e.g. Debian's libopenblas0-pthread unpacked with apt-get download + dpkg -x;
#   Debian's torch otherwise gets the unoptimized reference BLAS), with OPENBLAS_NUM_THREADS=N.
#   --vectors avx2 measures, on a machine with AVX-512, what a machine with AVX2 + FMA only
#   would run: fsdp.c is build/vec/avx2/train_gpt_cpu (mk/tests.mk: -march=native
#   -mno-avx512f), llm.c is built with the same flags (its CFLAGS_COND, in build/llmc/cpu-avx2),
#   and PyTorch runs with ATEN_CPU_CAPABILITY=avx2 and OpenBLAS's AVX2 kernels
#   (OPENBLAS_CORETYPE=Zen on AMD, Haswell otherwise). --vectors native (the default) lets each
#   side use all the machine has. meta.txt records each side's vectors either way.
#
# Data: BENCH_DATA (one llm.c token shard, the same file for every side), else
# build/bench-data/zipf-V<vocab>.bin (scripts/zipf_tokens.py: 2M Zipf-distributed ids).
# Environment: LLMC_DIR; FSDP_COMMIT (the commit meta.txt names, where DIR is not a checkout: the
# bundle's); BENCH_FSDP_ARGS (more options for every fsdp.c run, e.g. --recompute
# selective or --memory-limit GIB); BENCH_PYTHON (PyTorch's python, CPU mode; default /usr/bin/python3);
# BENCH_TIMEOUT (seconds per run, default 900 GPU, 600 CPU); CUDNN_FRONTEND_PATH (cudnn-frontend's
# include/; else cudnn-frontend/include beside the llm.c checkout, in it, or in ~, the last two
# where llm.c's Makefile looks); CUDNN_HOME (cuDNN's include/ and lib/; else the system's, else
# the pip package nvidia-cudnn-cu*'s that python3 imports).
#
# DIR (default bench_results/llmc-<date>, or llmc-cpu-<date>) holds runs.tsv (every run: side,
# model, batch, round, log, status), logs/ (each run's output; fsdp.c's --log JSON lines),
# commands.txt, patches.txt, meta.txt, and results.md / results.json (scripts/side_by_side.py).
# Rerunning into the same DIR reuses the runs that finished, so a sweep can be split over several
# calls (--models). --dry-run writes commands.txt and runs.tsv without building or running
# anything; --build-only builds llm.c (no GPU needed: nvcc compiles without one) and stops.
# Exit status 0, 1 when a build or run failed or the loss check disagreed, 2 on usage.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)

MODE=gpu MODELS="" BATCHES="" SEQ="" THREADS=2 ROUNDS="" STEPS="" WARMUP="" OUT="" TORCH_BLAS=""
USE_TORCH=1 USE_CUDNN=1 DRY=0 BUILD_ONLY=0 PREBUILT="" VECTORS=native
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
need_int() {  # need_int OPTION VALUE MIN
  if ! [[ ${2:-} =~ ^[0-9]+$ ]] || [ "$2" -lt "$3" ]; then
    echo "error: $1 needs an integer >= $3 (got '${2:-}')" >&2
    exit 2
  fi
}
need_value() { if [ -z "${2:-}" ]; then echo "error: $1 needs a value" >&2; exit 2; fi; }
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) MODE=cpu ;;
    --models | --model) need_value "$1" "${2:-}"; MODELS=$2; shift ;;
    --batches | --batch)
      need_value "$1" "${2:-}"
      for b in $2; do need_int "$1" "$b" 1; done
      BATCHES=$2; shift ;;
    --seq) need_int "$1" "${2:-}" 1; SEQ=$2; shift ;;
    --threads) need_int "$1" "${2:-}" 1; THREADS=$2; shift ;;
    --rounds) need_int "$1" "${2:-}" 1; ROUNDS=$2; shift ;;
    --steps) need_int "$1" "${2:-}" 1; STEPS=$2; shift ;;
    --warmup) need_int "$1" "${2:-}" 0; WARMUP=$2; shift ;;
    --torch-blas)
      [ -f "${2:-}/libblas.so.3" ] || { echo "error: --torch-blas needs a directory holding libblas.so.3 (got '${2:-}')" >&2; exit 2; }
      TORCH_BLAS=$(cd "$2" && pwd); shift ;;
    --no-torch) USE_TORCH=0 ;;
    --vectors)
      case ${2:-} in native | avx2) VECTORS=$2 ;; *) echo "error: --vectors takes native or avx2 (got '${2:-}')" >&2; exit 2 ;; esac
      shift ;;
    --no-cudnn) USE_CUDNN=0 ;;
    --out) need_value "$1" "${2:-}"; OUT=$2; shift ;;
    --dry-run) DRY=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --prebuilt-llmc)
      [ -x "${2:-}/cuda/train_gpt2cu" ] || { echo "error: --prebuilt-llmc needs a folder with cuda/train_gpt2cu (got '${2:-}')" >&2; exit 2; }
      PREBUILT=$(cd "$2" && pwd); shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown option '$1' (see scripts/bench_llmc.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ $MODE = gpu ]; then
  MODELS=${MODELS:-gpt2-124m gpt2-350m gpt2-774m gpt2-1.5b} BATCHES=${BATCHES:-8 64} SEQ=${SEQ:-1024}
  ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-10} WARMUP=${WARMUP:-3} RUN_TIMEOUT=${BENCH_TIMEOUT:-900}
  SIDES="fsdp.c llm.c llm.c+cudnn" BIN=./train_gpt
else
  MODELS=${MODELS:-gpt2-124m} BATCHES=${BATCHES:-4} SEQ=${SEQ:-64}
  ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-3} WARMUP=${WARMUP:-1} RUN_TIMEOUT=${BENCH_TIMEOUT:-600}
  SIDES="fsdp.c llm.c pytorch" BIN=./train_gpt_cpu
fi
# --vectors avx2: every side without AVX-512 (the usage above)
LLMC_VARIANT=cpu LLMC_ARCH=() TORCH_VEC_ENV=()
if [ $VECTORS = avx2 ]; then
  [ $MODE = cpu ] || { echo "error: --vectors is a --cpu option" >&2; exit 2; }
  if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
    echo "error: --vectors avx2: this CPU has no AVX2 + FMA to measure" >&2
    exit 2
  fi
  BIN=build/vec/avx2/train_gpt_cpu LLMC_VARIANT=cpu-avx2 LLMC_ARCH=("CFLAGS_COND=-march=native -mno-avx512f")
  TORCH_VEC_ENV=(ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=$(grep -qm1 AuthenticAMD /proc/cpuinfo && echo Zen || echo Haswell))
fi
# llm.c's model descriptors (train_gpt2.cu gpt_build_from_descriptor) for the GPT-2 presets
llmc_descriptor() {
  case $1 in gpt2-124m) echo d12 ;; gpt2-350m) echo d24 ;; gpt2-774m) echo d36 ;; gpt2-1.5b) echo d48 ;; *) echo "" ;; esac
}
PY=python3
command -v $PY >/dev/null 2>&1 || PY=/usr/bin/python3
VOCABS=""
for m in $MODELS; do
  v=$($PY -c 'import sys; sys.path.insert(0, "scripts"); from bench_report import parse_model
c = parse_model(sys.argv[1]); print(c["V"] if c["kind"] == "gpt" else "t5")' "$m" 2>/dev/null)
  if [ -z "$v" ] || [ "$v" = t5 ]; then
    echo "error: --models: '$m' is not a GPT model fsdp.c knows (llm.c trains GPT-2 only)" >&2
    exit 2
  fi
  VOCABS+=" $v"
done
[ "$(echo $VOCABS | tr ' ' '\n' | sort -u | wc -l)" = 1 ] || { echo "error: --models: all models must share one vocabulary (one token shard serves every run)" >&2; exit 2; }
VOCAB=$(echo $VOCABS | awk '{print $1}')

OUT=${OUT:-bench_results/llmc-$([ $MODE = cpu ] && echo cpu-)$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/logs" || { echo "error: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
MANIFEST=$OUT/runs.tsv CMDS=$OUT/commands.txt
[ -s "$MANIFEST" ] || printf 'side\tmodel\tbatch\tseq\tround\tformat\tlog\tstatus\tnote\n' > "$MANIFEST"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): scripts/bench_llmc.sh $([ $MODE = cpu ] && echo --cpu) (models $MODELS, batches $BATCHES)" >> "$CMDS"
say() { echo "llmc: $*"; }
quote() { local s="" a; for a in "$@"; do s+="$(printf '%q' "$a") "; done; echo "${s% }"; }
manifest() { local IFS=$'\t'; echo "$*" >> "$MANIFEST"; }
FAILED=0

# ---- llm.c: copy, patch, build ------------------------------------------------------------
LLMC=${LLMC_DIR:-}
LLMC_SKIP=""
if [ -n "$PREBUILT" ]; then
  LLMC=""
elif [ -z "$LLMC" ]; then
  LLMC_SKIP="LLMC_DIR is not set (a checkout of karpathy/llm.c: docs/performance.md, 'Against llm.c')"
elif [ ! -f "$LLMC/train_gpt2.c" ] || [ ! -d "$LLMC/llmc" ]; then
  echo "error: LLMC_DIR=$LLMC is not an llm.c checkout (no train_gpt2.c and llmc/ there)" >&2
  exit 2
else
  LLMC=$(cd "$LLMC" && pwd)
fi
LLMC_COMMIT=$( [ -n "$LLMC" ] && [ -z "$LLMC_SKIP" ] && git -C "$LLMC" rev-parse HEAD 2>/dev/null || echo unknown)
[ -n "$LLMC_SKIP" ] && LLMC_COMMIT="-"
[ -n "$PREBUILT" ] && LLMC_COMMIT=$(cat "$PREBUILT/commit.txt" 2>/dev/null || echo unknown)
[ -n "$LLMC_SKIP" ] && say "skip: llm.c: $LLMC_SKIP; the other sides run alone"
: > "$OUT/patches.txt"

# llmc_sync VARIANT MODE [--nvml-events]: llm.c's sources in build/llmc/VARIANT, patched for MODE
# (cpu, cuda: scripts/llmc_patch.py); files whose patched content did not change keep their time
# stamps, so the build can tell it is up to date.
llmc_sync() {
  local variant=$1 mode=$2 stage dst=build/llmc/$1 f
  shift 2
  stage=$(mktemp -d) || return 1
  (cd "$LLMC" && tar -cf - Makefile train_gpt2.c train_gpt2.cu llmc) | tar -C "$stage" -xf - || { rm -rf "$stage"; return 1; }
  if ! $PY scripts/llmc_patch.py "$mode" "$stage" "$@" > "$stage.patches" 2>&1; then
    cat "$stage.patches" >&2
    rm -rf "$stage" "$stage.patches"
    return 1
  fi
  sed "s/^patched /$variant: /" "$stage.patches" >> "$OUT/patches.txt"
  mkdir -p "$dst"
  (cd "$stage" && find . -type f) | while read -r f; do
    mkdir -p "$dst/$(dirname "$f")"
    cmp -s "$stage/$f" "$dst/$f" || cp "$stage/$f" "$dst/$f"
  done
  rm -rf "$stage" "$stage.patches"
}

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LLMC_BIN="" LLMC_CUDNN_BIN="" LLMC_CUDNN_LIB="" CUDNN_SKIP=""
# find_lib NAME: a directory to link NAME (libNAME.so) from; makes build/llmc/lib/libNAME.so
# point at libNAME.so.N when only the versioned file exists (driver and pip installs).
find_lib() {
  local name=$1 d f
  for d in "${@:2}" $CUDA_HOME/lib64/stubs $CUDA_HOME/targets/x86_64-linux/lib/stubs; do
    [ -f "$d/lib$name.so" ] && { echo "$d"; return 0; }
  done
  f=$(ldconfig -p 2>/dev/null | awk -v n="lib$name.so" '$1 == n {print $NF; exit}')
  [ -n "$f" ] && { dirname "$f"; return 0; }
  for d in "${@:2}"; do
    f=$(ls "$d"/lib"$name".so.* 2>/dev/null | head -1)
    [ -n "$f" ] && break
  done
  [ -n "$f" ] || f=$(ldconfig -p 2>/dev/null | awk -v n="lib$name.so." 'index($1, n) == 1 {print $NF; exit}')
  [ -n "$f" ] || return 1
  mkdir -p build/llmc/lib && ln -sf "$f" "build/llmc/lib/lib$name.so" && echo "$ROOT/build/llmc/lib"
}

# llmc_make VARIANT TARGET MAKE-ARGS...: llm.c's Makefile in build/llmc/VARIANT, skipped when
# the target is newer than every source there and was made with the same arguments (llm.c
# declares its targets .PHONY, so its make always rebuilds); the log goes to logs/.
llmc_make() {
  local variant=$1 target=$2
  shift 2
  local dir=build/llmc/$variant line
  line=$(quote make -C "$dir" "$target" "$@")
  echo "$line" >> "$CMDS"
  if [ -x "$dir/$target" ] && [ "$(cat "$dir/build.cmd" 2>/dev/null)" = "$line" ] &&
     [ -z "$(find "$dir" -type f -newer "$dir/$target" ! -name 'build.*')" ]; then
    say "llm.c $variant build: $target is up to date"
  else
    say "building llm.c's $target ($variant) in $dir"
    rm -f "$dir/build.cmd"
    if ! PATH=$CUDA_HOME/bin:$PATH make -C "$dir" "$target" "$@" > "$dir/build.log" 2>&1; then
      cp "$dir/build.log" "$OUT/logs/build-llmc-$variant.txt"
      echo "error: building llm.c's $target ($variant) failed; see $OUT/logs/build-llmc-$variant.txt" >&2
      tail -5 "$dir/build.log" >&2
      return 1
    fi
    echo "$line" > "$dir/build.cmd"
  fi
  cp "$dir/build.log" "$OUT/logs/build-llmc-$variant.txt"
}

build_llmc_cpu() {
  local v=$LLMC_VARIANT
  llmc_sync "$v" cpu && llmc_make "$v" train_gpt2 "${LLMC_ARCH[@]+"${LLMC_ARCH[@]}"}" || return 1
  # llm.c's Makefile quietly builds without OpenMP when the compiler lacks it: one thread
  # against N would not be a comparison
  if ! grep -q -- '-fopenmp' "build/llmc/$v/build.log"; then
    echo "error: llm.c's Makefile built train_gpt2 without OpenMP (its compiler, ${CC:-cc}, has no -fopenmp): set CC" >&2
    return 1
  fi
  LLMC_BIN=$ROOT/build/llmc/$v/train_gpt2
}

build_llmc_cuda() {
  local cc nvml_dir="" ldflags="-lcublas -lcublasLt" ldlibs="" nvml_patch=()
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  cc=${cc:-90}
  if [ -f "$CUDA_HOME/include/nvml.h" ]; then
    nvml_dir=$(find_lib nvidia-ml) || { echo "error: $CUDA_HOME/include/nvml.h is there but no libnvidia-ml to link llm.c with" >&2; return 1; }
    ldflags+=" -lnvidia-ml" ldlibs="-L$nvml_dir"
    grep -q nvmlDeviceGetCurrentClocksEventReasons "$CUDA_HOME/include/nvml.h" && nvml_patch=(--nvml-events)
  fi
  llmc_sync cuda cuda "${nvml_patch[@]+"${nvml_patch[@]}"}" || return 1
  local common=(NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY="$cc" PRECISION=BF16)
  llmc_make cuda train_gpt2cu "${common[@]}" "NVCC_LDFLAGS=$ldflags" "NVCC_LDLIBS=$ldlibs" || return 1
  LLMC_BIN=$ROOT/build/llmc/cuda/train_gpt2cu
  [ $USE_CUDNN = 1 ] || { CUDNN_SKIP="--no-cudnn"; return 0; }

  # cuDNN: the frontend headers (header-only) and the library with its headers
  local fe="" inc="" lib="" d
  for d in "${CUDNN_FRONTEND_PATH:-}" "$(dirname "$LLMC")/cudnn-frontend/include" "$LLMC/cudnn-frontend/include" \
           "$HOME/cudnn-frontend/include"; do
    [ -n "$d" ] && [ -f "$d/cudnn_frontend.h" ] && { fe=$(cd "$d" && pwd); break; }
  done
  if [ -n "${CUDNN_HOME:-}" ]; then
    inc=$CUDNN_HOME/include lib=$CUDNN_HOME/lib
    [ -d "$lib" ] || lib=$CUDNN_HOME/lib64
  elif [ -f /usr/include/cudnn.h ] || [ -f "$CUDA_HOME/include/cudnn.h" ]; then
    inc=$( [ -f "$CUDA_HOME/include/cudnn.h" ] && echo "$CUDA_HOME/include" || echo /usr/include)
  else
    d=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0])' 2>/dev/null)
    [ -n "$d" ] && [ -f "$d/include/cudnn.h" ] && inc=$d/include lib=$d/lib
  fi
  if [ -z "$fe" ]; then
    CUDNN_SKIP="no cudnn-frontend headers (CUDNN_FRONTEND_PATH, cudnn-frontend/include beside or in LLMC_DIR, ~/cudnn-frontend/include)"
  elif [ -z "$inc" ] || ! lib=$(find_lib cudnn ${lib:+"$lib"}); then
    CUDNN_SKIP="no cuDNN library and headers (CUDNN_HOME, the system's, or python3's nvidia.cudnn package)"
  fi
  if [ -n "$CUDNN_SKIP" ]; then say "skip: llm.c with cuDNN: $CUDNN_SKIP"; return 0; fi
  llmc_sync cudnn cuda "${nvml_patch[@]+"${nvml_patch[@]}"}" || return 1
  # llm.c's Makefile stops unless it sees cudnn-frontend/include in ~ or its own directory, even
  # with CUDNN_FRONTEND_PATH given; and recent frontends compile some kernels at run time
  # (NVRTC), which llm.c's link line predates: -lnvrtc
  ln -sfn "$(dirname "$fe")" build/llmc/cudnn/cudnn-frontend
  llmc_make cudnn train_gpt2cu "${common[@]}" USE_CUDNN=1 "CUDNN_FRONTEND_PATH=$fe -I$inc" \
    "NVCC_LDFLAGS=$ldflags -lcudnn -lnvrtc" "NVCC_LDLIBS=$ldlibs -L$lib" || return 1
  LLMC_CUDNN_BIN=$ROOT/build/llmc/cudnn/train_gpt2cu LLMC_CUDNN_LIB=$lib
}

if [ -n "$PREBUILT" ]; then
  [ $MODE = gpu ] || { echo "error: --prebuilt-llmc is for the GPU mode" >&2; exit 2; }
  [ $BUILD_ONLY = 0 ] || { echo "error: --prebuilt-llmc runs prebuilt binaries: nothing to build" >&2; exit 2; }
  LLMC_BIN=$PREBUILT/cuda/train_gpt2cu
  if [ $USE_CUDNN = 0 ]; then CUDNN_SKIP="--no-cudnn"
  elif [ -x "$PREBUILT/cudnn/train_gpt2cu" ]; then LLMC_CUDNN_BIN=$PREBUILT/cudnn/train_gpt2cu
  else CUDNN_SKIP="the prebuilt folder $PREBUILT has no cudnn/train_gpt2cu"; fi
  cp "$PREBUILT/patches.txt" "$OUT/patches.txt" 2>/dev/null || true
elif [ -z "$LLMC_SKIP" ] && [ $DRY = 0 ]; then
  if [ $MODE = cpu ]; then build_llmc_cpu; else build_llmc_cuda; fi || exit 1
fi
if [ $BUILD_ONLY = 1 ]; then
  [ -n "$LLMC_SKIP" ] && { echo "error: --build-only: $LLMC_SKIP" >&2; exit 2; }
  say "built: $LLMC_BIN${LLMC_CUDNN_BIN:+ and $LLMC_CUDNN_BIN}${CUDNN_SKIP:+ (cuDNN: $CUDNN_SKIP)}; patches:"
  sed 's/^/  /' "$OUT/patches.txt"
  exit 0
fi
[ $MODE = gpu ] && [ -n "$LLMC_SKIP" ] && CUDNN_SKIP="$LLMC_SKIP"
[ $MODE = gpu ] && [ $DRY = 1 ] && [ $USE_CUDNN = 0 ] && CUDNN_SKIP="--no-cudnn"

# ---- fsdp.c, data, PyTorch ------------------------------------------------------------------
if [ $DRY = 0 ] && { [ ! -x "$BIN" ] || [ $VECTORS = avx2 ]; }; then
  say "building $BIN"
  make "${BIN#./}" >&2 || { echo "error: make ${BIN#./} failed" >&2; exit 1; }
fi
if [ -n "${BENCH_DATA:-}" ]; then
  DATA=$BENCH_DATA
  [ -f "$DATA" ] || [ $DRY = 1 ] || { echo "error: BENCH_DATA=$DATA: no such file (one llm.c token shard)" >&2; exit 2; }
else
  DATA=build/bench-data/zipf-V$VOCAB.bin
  if [ $DRY = 0 ] && [ ! -f "$DATA" ]; then
    mkdir -p build/bench-data
    $PY scripts/zipf_tokens.py --vocab "$VOCAB" "$DATA" >/dev/null || { echo "error: cannot write $DATA" >&2; exit 1; }
  fi
fi
DATA_ABS=$ROOT/$DATA
[[ $DATA = /* ]] && DATA_ABS=$DATA
TORCH_PY="" TORCH_SKIP=""
if [ $MODE = cpu ]; then
  if [ $USE_TORCH = 0 ]; then
    TORCH_SKIP="--no-torch"
  else
    TORCH_PY=${BENCH_PYTHON:-/usr/bin/python3}
    if [ $DRY = 0 ] && ! "$TORCH_PY" -c 'import torch' >/dev/null 2>&1; then
      TORCH_SKIP="$TORCH_PY cannot import torch (set BENCH_PYTHON; Debian: apt install python3-torch)" TORCH_PY=""
    fi
  fi
  [ -n "$TORCH_SKIP" ] && say "skip: PyTorch: $TORCH_SKIP"
fi

# CPU: llm.c's checkpoint (fsdp.c loads the same one) and the run directory llm.c's main()
# reads its fixed file names from
ckpt_for() { echo "build/llmc/ckpt/$(echo "$1" | sed 's/[^A-Za-z0-9.-]/_/g')-seed1337.bin"; }
if [ $MODE = cpu ] && [ -z "$LLMC_SKIP" ] && [ $DRY = 0 ]; then
  NUMPY_PY=""
  for p in python3 /usr/bin/python3; do "$p" -c 'import numpy' >/dev/null 2>&1 && { NUMPY_PY=$p; break; }; done
  [ -n "$NUMPY_PY" ] || { echo "error: no python3 with numpy to write llm.c's checkpoint (Debian: apt install python3-numpy)" >&2; exit 1; }
  mkdir -p build/llmc/ckpt
  for m in $MODELS; do
    c=$(ckpt_for "$m")
    [ -f "$c" ] && continue
    say "writing $c (a random $m in llm.c's checkpoint format)"
    $NUMPY_PY scripts/llmc_checkpoint.py --model "$m" "$c" >/dev/null || exit 1
  done
fi

# ---- the runs ---------------------------------------------------------------------------------
# run_side SIDE MODEL BATCH ROUND: one run; sets RUN_STATUS to ok, reused, oom or failed.
run_side() {
  local side=$1 model=$2 b=$3 r=$4
  local name slug
  slug=$(echo "$model" | sed 's/[^A-Za-z0-9.-]/_/g')
  name=$side-$slug-B$b-r$r
  local log=logs/$name.txt jsonl=logs/$name.jsonl fmt cmd=() env=() done_pat cwd=$ROOT
  case $side in
    fsdp.c)
      fmt=jsonl done_pat='"step"'
      # shellcheck disable=SC2206  # BENCH_FSDP_ARGS: several options on purpose
      cmd=("$BIN" --model "$model" --data "$DATA_ABS" --batch "$b" --seq "$SEQ" --steps "$STEPS" --bench
           --bench-warmup "$WARMUP" --log "$OUT/$jsonl" ${BENCH_FSDP_ARGS:-})
      if [ $MODE = gpu ]; then
        cmd+=(--shard full --bench-json "$OUT/logs/$name.json")
      else
        # llm.c's train_gpt2.c optimizer settings, and its weights when it runs too
        cmd+=(--lr 1e-4 --beta2 0.999 --weight-decay 0 --grad-clip 0 --lr-final-frac 1)
        [ -z "$LLMC_SKIP" ] && cmd+=(--init-from "$ROOT/$(ckpt_for "$model")")
        env=(OMP_NUM_THREADS="$THREADS")
      fi ;;
    llm.c | llm.c+cudnn)
      if [ $MODE = gpu ]; then
        fmt=llmc-cuda done_pat='total average iteration time'
        local bin=${LLMC_BIN:-$ROOT/build/llmc/cuda/train_gpt2cu} desc
        [ $side = llm.c+cudnn ] && bin=${LLMC_CUDNN_BIN:-$ROOT/build/llmc/cudnn/train_gpt2cu}
        # cuDNN from where it was found at the build (a prebuilt llm.c finds it on the library path)
        [ $side = llm.c+cudnn ] && [ -n "$LLMC_CUDNN_LIB" ] && env=(LD_LIBRARY_PATH="$LLMC_CUDNN_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        desc=$(llmc_descriptor "$model")
        cmd=("$bin" -e "$desc" -i "$DATA_ABS" -j "$DATA_ABS" -b "$b" -t "$SEQ" -x $((WARMUP + STEPS)) -v 100000 -m 1
             -s 0 -n 0 -r 0 -c 0.1)
        [ "$desc" = d48 ] && cmd+=(-ge 1)
        cwd=$OUT/llmc-run
      else
        fmt=llmc-cpu done_pat='^step [0-9]+: train loss'
        cmd=("${LLMC_BIN:-$ROOT/build/llmc/$LLMC_VARIANT/train_gpt2}")
        env=(OMP_NUM_THREADS="$THREADS" LLMC_BENCH_B="$b" LLMC_BENCH_T="$SEQ" LLMC_BENCH_STEPS=$((WARMUP + STEPS)))
        cwd=$OUT/llmc-run/$slug
      fi
      jsonl=$log ;;
    pytorch)
      fmt=jsonl done_pat='"step"'
      cmd=("$TORCH_PY" scripts/bench_torch.py --model "$model" --data "$DATA_ABS" --batch "$b" --seq "$SEQ"
           --steps "$STEPS" --warmup "$WARMUP" --device cpu --dtype fp32 --log "$OUT/$jsonl")
      env=(OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" "${TORCH_VEC_ENV[@]+"${TORCH_VEC_ENV[@]}"}")
      [ -n "$TORCH_BLAS" ] && env+=(LD_LIBRARY_PATH="$TORCH_BLAS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
  esac
  local row=("$side" "$model" "$b" "$SEQ" "$r" "$fmt" "$jsonl")
  echo "(cd $(printf '%q' "$cwd") && $([ ${#env[@]} -gt 0 ] && quote env "${env[@]}") $(quote "${cmd[@]}"))" >> "$CMDS"
  if [ $DRY = 1 ]; then manifest "${row[@]}" planned ""; RUN_STATUS=ok; return; fi
  local want=$((WARMUP + STEPS))
  if [ -f "$OUT/$log.done" ]; then
    say "round $r/$ROUNDS: $side $model B=$b: reused"
    manifest "${row[@]}" reused ""
    RUN_STATUS=reused
    return
  fi
  say "round $r/$ROUNDS: $side $model B=$b"
  if [ $MODE = cpu ] && [[ $side = llm.c ]]; then
    # llm.c's CPU main() opens gpt2_124M.bin and tiny_shakespeare_{train,val}.bin in its directory
    mkdir -p "$cwd/dev/data/tinyshakespeare"
    ln -sf "$ROOT/$(ckpt_for "$model")" "$cwd/gpt2_124M.bin"
    ln -sf "$DATA_ABS" "$cwd/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
    ln -sf "$DATA_ABS" "$cwd/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
  fi
  mkdir -p "$cwd"
  (cd "$cwd" && env "${env[@]+"${env[@]}"}" timeout "$RUN_TIMEOUT" "${cmd[@]}") > "$OUT/$log" 2>&1
  local rc=$? got
  got=$(grep -cE "$done_pat" "$OUT/$jsonl" 2>/dev/null)
  [ "$fmt" = llmc-cuda ] && got=$(grep -cE '^step +[0-9]+/[0-9]+ \| loss' "$OUT/$log")
  if [ $rc = 0 ] && [ "${got:-0}" -ge "$want" ]; then
    touch "$OUT/$log.done"
    manifest "${row[@]}" ok ""
    RUN_STATUS=ok
  elif grep -qiE 'out of memory|the memory plan needs' "$OUT/$log"; then
    say "$side $model B=$b: does not fit ($(grep -m1 -iE 'out of memory|the memory plan needs' "$OUT/$log" | cut -c1-160))"
    manifest "${row[@]}" oom "does not fit at batch $b"
    RUN_STATUS=oom
  else
    local why="exit $rc"
    [ $rc = 124 ] && why="timed out after ${RUN_TIMEOUT}s"
    say "$side $model B=$b: FAILED ($why, $got of $want steps; see $log)"
    tail -3 "$OUT/$log" | sed 's/^/    /'
    manifest "${row[@]}" failed "$why; $got of $want steps"
    RUN_STATUS=failed
    FAILED=$((FAILED + 1))
  fi
}

side_skip() {  # side_skip SIDE MODEL: why the side does not run (empty when it does)
  case $1 in
    llm.c | llm.c+cudnn) if [ $MODE = gpu ] && [ -z "$(llmc_descriptor "$2")" ]; then echo "llm.c has no descriptor for $2"
                         elif [ $1 = llm.c ]; then echo "$LLMC_SKIP"; else echo "$CUDNN_SKIP"; fi ;;
    pytorch) echo "$TORCH_SKIP" ;;
    *) echo "" ;;
  esac
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for model in $MODELS; do
  for want in $BATCHES; do
    b=$want note=""
    while :; do
      lowered=0
      for r in $(seq 1 "$ROUNDS"); do
        for side in $SIDES; do
          why=$(side_skip "$side" "$model")
          if [ -n "$why" ]; then
            [ "$r" = 1 ] && manifest "$side" "$model" "$b" "$SEQ" "$r" - - skipped "$why"
            continue
          fi
          run_side "$side" "$model" "$b" "$r"
          if [ "$RUN_STATUS" = oom ] && [ "$r" = 1 ] && [ "$b" -gt 1 ]; then
            note="batch lowered from $want: $side does not fit at $b"
            b=$((b / 2)) lowered=1
            break 2
          fi
        done
      done
      [ $lowered = 1 ] || break
    done
    [ -n "$note" ] && manifest - "$model" "$b" "$SEQ" - - - note "$note"
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the machine and the versions, then the report --------------------------------------------
{
  echo "mode: $MODE"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: ${FSDP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$([ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)')}"
  echo "llmc_commit: $LLMC_COMMIT"
  echo "data: $DATA"
  echo "rounds: $ROUNDS"
  echo "steps: $STEPS"
  echo "warmup: $WARMUP"
  if [ $MODE = gpu ]; then
    echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "toolkit: $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p')"
    echo "cudnn: ${CUDNN_SKIP:+skipped: }${CUDNN_SKIP:-$LLMC_CUDNN_LIB}"
  else
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "threads: $THREADS"
    echo "vectors: $VECTORS"
    # each side's vectors: fsdp.c's device line, llm.c's compiler flags, PyTorch's below
    echo "fsdp_vectors: $(grep -ho 'cpu ([a-z0-9]* vectors)' "$OUT"/logs/fsdp.c-*.txt 2>/dev/null | head -1 | sed 's/cpu (\(.*\) vectors)/\1/')"
    echo "llmc_arch: $([ ${#LLMC_ARCH[@]} -gt 0 ] && echo "${LLMC_ARCH[0]#CFLAGS_COND=}" || echo "-march=native")"
    echo "load_before: $LOAD_BEFORE"
    echo "load_after: $LOAD_AFTER"
    if [ -n "$TORCH_PY" ] && [ $DRY = 0 ]; then
      # torch's version, the threads its intra-op pool uses and the BLAS it loads (after one
      # matmul, from the process's mappings), in the PyTorch runs' environment
      env OMP_NUM_THREADS="$THREADS" ${TORCH_BLAS:+LD_LIBRARY_PATH=$TORCH_BLAS} "${TORCH_VEC_ENV[@]+"${TORCH_VEC_ENV[@]}"}" "$TORCH_PY" -c '
import ctypes, torch
torch.ones(8, 8) @ torch.ones(8, 8)
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.split()[-1].rsplit("/", 1)[-1]})
print("torch: %s\ntorch_threads: %d\ntorch_blas: %s" % (torch.__version__, torch.get_num_threads(), ", ".join(libs) or "unknown"))
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines() if "CPU capability usage" in l]
core = []
for lib in libs:  # OpenBLAS names the kernels it picked for this CPU
    try:
        f = ctypes.CDLL(lib).openblas_get_corename
        f.restype = ctypes.c_char_p
        core = [f().decode()]
        break
    except (OSError, AttributeError):
        pass
print("torch_vectors: ATen %s%s" % ((cap or ["?"])[0], ", OpenBLAS %s kernels" % core[0] if core else ""))' 2>/dev/null
    fi
  fi
} > "$OUT/meta.txt"
if [ $DRY = 1 ]; then
  say "dry run: the runs are listed in $CMDS and $MANIFEST (nothing built or run)"
  exit 0
fi
$PY scripts/side_by_side.py "$OUT" || FAILED=$((FAILED + 1))
cat "$OUT/results.md"
echo "results: $OUT/results.md"
[ $FAILED = 0 ]
