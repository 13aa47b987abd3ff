#!/usr/bin/env bash
# gpu_report.sh: everything that needs a GPU, from one command, into one folder: the builds
# and `make test-gpu` of both precisions, fsdp.c beside llm.c, the PyTorch baselines, an ncu
# profile of a gpt2-124m and a t5-base step per kernel group beside the timeline's
# prediction, the kernel report, --peak; then results.md, from which the README's results
# section is regenerated (scripts/results_section.py). Progress is printed as it goes, each
# line with the minutes since the start.
#
#   scripts/gpu_report.sh [--out DIR] [--parts LIST] [--pack DEST] [--dry-run]
#   make gpu-report [GPU_REPORT_DIR=DIR] [GPU_REPORT_PARTS=LIST]
#
# DIR: --out, else GPU_REPORT_DIR, else bench_results/gpu-report-<date>. Rerunning into the same
# DIR reuses every benchmark run that finished there (bench.sh and bench_llmc.sh reuse their
# runs), so the parts can run in separate calls. Every benchmark reads one token shard,
# BENCH_DATA, by default build/bench-data/zipf-V32128.bin (Zipf-distributed ids below T5's
# vocabulary, for GPT and T5 alike; written when missing).
# Parts (--parts, comma-separated; default all, in this order):
#   build     make train_gpt predict_gpt train_gpt_cpu and the GPU test binaries, bf16 and fp16
#   test      make test-gpu (bf16)                                   -> test-bf16.txt
#   test-fp16 make test-gpu PRECISION=fp16                           -> test-fp16.txt
#   peak      ./train_gpt --peak (bench.sh --parts peak)             -> bench/peak.json
#   llmc      scripts/bench_llmc.sh (LLMC_DIR; without it the part says it is skipped):
#             gpt2-124m .. gpt2-1.5b at B=8 and 64, 1 round of 10 timed steps after 3
#             (GPU_REPORT_LLMC_MODELS replaces the models, GPU_REPORT_LLMC_ARGS the other
#             options, so the part can be split over calls)           -> llmc/
#   torch     scripts/bench.sh --parts models,torch --quick (gpt2-124m, gpt2-350m, t5-small,
#             t5-base: fsdp.c, PyTorch on one GPU tuned, FSDP2 eager and compiled) -> bench/
#   profile   scripts/bench.sh --parts profile for gpt2-124m and t5-base (ncu, and the
#             timeline's trace of the same step)                      -> bench/profile/
#   kernels   make kernel-report when the Makefile has that target (else a note) -> kernels.txt
# After the parts: scripts/bench_report.py on bench/ and scripts/results_section.py on DIR
# (results.md), and with --pack DEST, DEST/gpu-report.tar.gz (all of DIR but binary files)
# and DEST/results.md: two files, small enough to copy back from a lent machine.
# With --pack, DEST/gpu-report.tar.gz is also rewritten as each part ends, so a command stopped
# part-way leaves the parts it finished. Where commands are limited to a few minutes, the GPU
# bundle (make gpu-bundle, docs/performance.md) measures the essentials in one; else run these
# parts in several calls into one DIR. --dry-run prints the plan (every command, and each part's
# expected minutes, estimated from the runs' sizes) and runs nothing.
# Exit status: 0 when every part passed, 1 when one failed (the others still run), 2 on usage.
set -u
cd "$(dirname "$0")/.." || exit 2
ALL_PARTS=build,test,test-fp16,peak,llmc,torch,profile,kernels
OUT=${GPU_REPORT_DIR:-} PARTS=${GPU_REPORT_PARTS:-} PACK="" DRY=0
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ -n "${2:-}" ] || { echo "error: --out needs a directory" >&2; exit 2; }; OUT=$2; shift ;;
    --parts) [ -n "${2:-}" ] || { echo "error: --parts needs a list ($ALL_PARTS)" >&2; exit 2; }; PARTS=$2; shift ;;
    --pack) [ -n "${2:-}" ] || { echo "error: --pack needs a directory" >&2; exit 2; }; PACK=$2; shift ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown option '$1' (see scripts/gpu_report.sh --help)" >&2; exit 2 ;;
  esac
  shift
done
PARTS=${PARTS:-$ALL_PARTS}
for p in ${PARTS//,/ }; do
  [[ ",$ALL_PARTS," == *",$p,"* ]] || { echo "error: --parts: unknown part '$p' ($ALL_PARTS)" >&2; exit 2; }
done
OUT=${OUT:-bench_results/gpu-report-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || { echo "error: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
JOBS=$(nproc 2>/dev/null || echo 2)
T0=$(date +%s)
say() { printf '[gpu-report %3d:%02d] %s\n' $((($(date +%s) - T0) / 60)) $((($(date +%s) - T0) % 60)) "$*"; }
STATUS=0
[ -s "$OUT/parts.tsv" ] || printf 'part\tstatus\tseconds\tnote\n' > "$OUT/parts.tsv"

# part NAME NOTE COMMAND: runs one part's shell command (or prints it in a dry run, with the
# runs of the benchmark scripts' own --dry-run), its output to DIR/NAME.log, its result to
# parts.tsv
# The minutes each part is expected to take on an H100 (estimated from the runs' sizes)
expected() {
  case $1 in build) echo 2-3 ;; test | test-fp16) echo 3-6 ;; peak) echo 0-1 ;; llmc) echo 6-12 ;; torch) echo 5-10 ;;
    profile) echo 1-3 ;; kernels) echo 0-1 ;; esac
}
pack() {
  [ -n "$PACK" ] || return 0
  mkdir -p "$PACK" && tar -C "$(dirname "$OUT")" -czf "$PACK/gpu-report.tar.gz.tmp" --exclude='*.bin' "$(basename "$OUT")" &&
    mv -f "$PACK/gpu-report.tar.gz.tmp" "$PACK/gpu-report.tar.gz"
}
part() {
  local name=$1 note=$2 cmd=$3
  [[ ",$PARTS," == *",$name,"* ]] || return 0
  if [ $DRY = 1 ]; then
    echo "part $name: $cmd   # about $(expected "$name") min${note:+; $note}"
    case $name in
      llmc | torch | profile)
        local tmp
        tmp=$(mktemp -d)
        bash -c "${cmd//$OUT/$tmp} --dry-run" > /dev/null 2>&1
        find "$tmp" -name commands.txt -exec grep -v '^#' {} \; | sed 's/^/    /'
        rm -rf "$tmp" ;;
    esac
    return 0
  fi
  say "part $name (about $(expected "$name") min): $cmd"
  local t rc secs
  t=$(date +%s)
  bash -c "set -o pipefail; $cmd" > "$OUT/$name.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t))
  if [ $rc = 0 ]; then
    say "part $name: done in ${secs}s"
    printf '%s\tok\t%s\t%s\n' "$name" "$secs" "$note" >> "$OUT/parts.tsv"
  else
    say "part $name: FAILED (exit $rc, ${secs}s; the end of $name.log:)"
    tail -n 8 "$OUT/$name.log" | sed 's/^/    /'
    printf '%s\tfailed\t%s\texit %s; %s\n' "$name" "$secs" "$rc" "$note" >> "$OUT/parts.tsv"
    STATUS=1
  fi
  pack
}

if [ $DRY = 0 ]; then
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$([ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)')"
    echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    echo "gpu_memory: $(nvidia-smi --query-gpu=memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "toolkit: $("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p')"
    echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
    echo "llmc_dir: ${LLMC_DIR:-unset}"
  } > "$OUT/meta.txt"
  say "into $OUT: parts $PARTS ($(sed -n 's/^gpu: //p' "$OUT/meta.txt"))"
fi

# One token shard for every benchmark part: Zipf-distributed ids below T5's vocabulary (32128),
# so GPT and T5 runs, fsdp.c, llm.c and PyTorch all read the same file (scripts/zipf_tokens.py)
if [ -z "${BENCH_DATA:-}" ]; then
  export BENCH_DATA=build/bench-data/zipf-V32128.bin
  if [ $DRY = 0 ] && [ ! -f "$BENCH_DATA" ]; then
    mkdir -p build/bench-data && python3 scripts/zipf_tokens.py --vocab 32128 "$BENCH_DATA" > /dev/null ||
      { echo "error: cannot write $BENCH_DATA" >&2; exit 1; }
  fi
fi
[ $DRY = 1 ] && echo "data: BENCH_DATA=$BENCH_DATA"
Q=$(printf '%q' "$OUT")
part build "bf16 and fp16" "make -j$JOBS train_gpt predict_gpt train_gpt_cpu data/addition/train_000.bin \
build/test-gpu/test_kernels_gpu && make -j$JOBS PRECISION=fp16 build/cuda-fp16/train_gpt build/test-gpu-fp16/test_kernels_gpu"
part test "" "make --no-print-directory test-gpu 2>&1 | tee $Q/test-bf16.txt"
part test-fp16 "" "make --no-print-directory test-gpu PRECISION=fp16 2>&1 | tee $Q/test-fp16.txt"
part peak "" "bash scripts/bench.sh --parts peak --out $Q/bench"
part llmc "${LLMC_DIR:+LLMC_DIR=$LLMC_DIR}${LLMC_DIR:-LLMC_DIR is unset: llm.c is skipped}" \
  "bash scripts/bench_llmc.sh --out $Q/llmc --models '${GPU_REPORT_LLMC_MODELS:-gpt2-124m gpt2-350m gpt2-774m gpt2-1.5b}' \
${GPU_REPORT_LLMC_ARGS:---rounds 1 --steps 10 --warmup 3}"
part torch "" "bash scripts/bench.sh --quick --parts models,torch --out $Q/bench"
part profile "" "bash scripts/bench.sh --parts profile --models 'gpt2-124m t5-base' --out $Q/bench"
part kernels "make kernel-report, when the Makefile has it" "if make -n kernel-report >/dev/null 2>&1; then \
make --no-print-directory kernel-report 2>&1 | tee $Q/kernels.txt; else echo 'note: this Makefile has no kernel-report \
target: the kernel report is skipped' | tee $Q/kernels.txt; fi"
[ $DRY = 1 ] && { echo "then: scripts/results_section.py --gpu $OUT --out $OUT/results.md${PACK:+, and the pack in $PACK}"; exit 0; }

# the reports of what is in DIR, whichever parts ran now or before
[ -d "$OUT/bench" ] && { python3 scripts/bench_report.py "$OUT/bench" > "$OUT/bench_report.log" 2>&1 || STATUS=1; }
if ! python3 scripts/results_section.py --gpu "$OUT" --out "$OUT/results.md" > "$OUT/results_section.log" 2>&1; then
  say "results_section.py failed:"
  sed 's/^/    /' "$OUT/results_section.log"
  STATUS=1
fi
if [ -n "$PACK" ]; then
  pack && cp "$OUT/results.md" "$PACK/results.md" 2>/dev/null
  say "packed: $PACK/gpu-report.tar.gz ($(du -h "$PACK/gpu-report.tar.gz" | cut -f1)), $PACK/results.md"
fi
say "finished: $OUT/results.md"
[ -f "$OUT/results.md" ] && cat "$OUT/results.md"
exit $STATUS
