#!/usr/bin/env bash
# bench_cpu.sh: fsdp.c's CPU backend and PyTorch eager on the CPU, side by side: the same model,
# batch, sequence, fp32 and thread count, runs interleaved (fsdp.c, PyTorch, fsdp.c, ...) so a
# machine whose load changes during the benchmark slows both alike. Writes a markdown table.
#
#   scripts/bench_cpu.sh [--model M] [--batch B] [--seq T] [--threads N] [--rounds R]
#                        [--steps S] [--warmup W] [--torch-blas DIR] [--out DIR]
#
# Defaults: gpt2-124m, batch 4, seq 64, 2 threads, 3 rounds of 3 timed steps after 1 untimed
# one.
# PyTorch's fp32 matmuls go to the libblas.so.3 it is linked with. On Debian that is whatever
# the libblas alternative points to, by default the unoptimized reference BLAS (30x slower than
# OpenBLAS on a 256x768x2304 product). --torch-blas DIR puts DIR first on LD_LIBRARY_PATH for the
# PyTorch runs (e.g. the openblas-pthread directory of Debian's libopenblas0-pthread, which
# `apt-get download` + `dpkg -x` unpack without installing), with OPENBLAS_NUM_THREADS=N; the
# table names the BLAS library PyTorch actually loaded. Each round runs ./train_gpt_cpu --bench (OMP_NUM_THREADS=N) then scripts/bench_torch.py
# --device cpu --dtype fp32 (the same N threads; BENCH_PYTHON, else /usr/bin/python3, Debian's
# torch). The table gives, per side, the median, min and max of every timed step of every
# round, the spread ((max - min) / median), and the ratio of the medians; then the machine
# (CPU model, cores, load average before and after), the torch version, the git commit, the
# date. Step times are wall-clock: on a machine shared with other work, read the load averages.
#
# DIR (default bench_results/cpu-<date>) holds logs/<side>-<round>.jsonl (one object per step),
# out/<side>-<round>.txt (each run's output), commands.txt, results.md. Exit status 0, 1 when a
# run failed, 2 on usage.
set -u
cd "$(dirname "$0")/.." || exit 2

MODEL=gpt2-124m BATCH=4 SEQ=64 THREADS=2 ROUNDS=3 STEPS=3 WARMUP=1 OUT="" TORCH_BLAS=""
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
need_int() {  # need_int OPTION VALUE MIN
  if ! [[ ${2:-} =~ ^[0-9]+$ ]] || [ "$2" -lt "$3" ]; then
    echo "error: $1 needs an integer >= $3 (got '${2:-}')" >&2
    exit 2
  fi
}
while [ $# -gt 0 ]; do
  case $1 in
    --model) [ $# -ge 2 ] && [ -n "$2" ] || { echo "error: --model needs a value" >&2; exit 2; }; MODEL=$2; shift ;;
    --batch) need_int "$1" "${2:-}" 1; BATCH=$2; shift ;;
    --seq) need_int "$1" "${2:-}" 1; SEQ=$2; shift ;;
    --threads) need_int "$1" "${2:-}" 1; THREADS=$2; shift ;;
    --rounds) need_int "$1" "${2:-}" 1; ROUNDS=$2; shift ;;
    --steps) need_int "$1" "${2:-}" 1; STEPS=$2; shift ;;
    --warmup) need_int "$1" "${2:-}" 0; WARMUP=$2; shift ;;
    --torch-blas) [ $# -ge 2 ] && [ -f "$2/libblas.so.3" ] || { echo "error: --torch-blas needs a directory holding libblas.so.3 (got '${2:-}')" >&2; exit 2; }; TORCH_BLAS=$(cd "$2" && pwd); shift ;;
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "error: --out needs a directory" >&2; exit 2; }; OUT=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown option '$1' (see scripts/bench_cpu.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

PY=${BENCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "error: $PY cannot import torch: set BENCH_PYTHON to a python with torch (Debian: apt install python3-torch)" >&2
  exit 2
fi
if [ ! -x ./train_gpt_cpu ]; then
  make train_gpt_cpu >/dev/null || { echo "error: make train_gpt_cpu failed" >&2; exit 1; }
fi
[ -f data/addition/train_000.bin ] || make data/addition/train_000.bin >/dev/null || exit 1
OUT=${OUT:-bench_results/cpu-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/logs" "$OUT/out" || exit 1
: > "$OUT/commands.txt"

load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_BEFORE=$(load)
DATA='data/addition/train_*.bin'
status=0
run() {  # run SIDE ROUND COMMAND...: one benchmark run, its output kept, its failure counted
  local side=$1 round=$2
  shift 2
  echo "OMP_NUM_THREADS=$THREADS $*" >> "$OUT/commands.txt"
  echo "round $round/$ROUNDS: $side"
  if ! OMP_NUM_THREADS=$THREADS "$@" > "$OUT/out/$side-$round.txt" 2>&1; then
    echo "error: the $side run of round $round failed; its output: $OUT/out/$side-$round.txt" >&2
    tail -5 "$OUT/out/$side-$round.txt" >&2
    status=1
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  run fsdp.c "$r" ./train_gpt_cpu --model "$MODEL" --data "$DATA" --batch "$BATCH" --seq "$SEQ" \
    --steps "$STEPS" --bench --bench-warmup "$WARMUP" --log "$OUT/logs/fsdp.c-$r.jsonl"
  run pytorch "$r" env ${TORCH_BLAS:+LD_LIBRARY_PATH=$TORCH_BLAS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} \
    OPENBLAS_NUM_THREADS=$THREADS "$PY" scripts/bench_torch.py --model "$MODEL" --data "$DATA" --batch "$BATCH" \
    --seq "$SEQ" --steps "$STEPS" --warmup "$WARMUP" --device cpu --dtype fp32 \
    --log "$OUT/logs/pytorch-$r.jsonl"
done
LOAD_AFTER=$(load)

TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
# the threads PyTorch's intra-op pool actually used under OMP_NUM_THREADS
export TORCH_THREADS=$(OMP_NUM_THREADS=$THREADS "$PY" -c 'import torch; print(torch.get_num_threads())' 2>/dev/null)
# the BLAS library the PyTorch runs loaded (after one matmul, from the process's mappings)
export TORCH_BLAS_LIB=$(env ${TORCH_BLAS:+LD_LIBRARY_PATH=$TORCH_BLAS} "$PY" -c '
import torch
torch.ones(8, 8) @ torch.ones(8, 8)
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.split()[-1].rsplit("/", 1)[-1]})
print(", ".join(libs) or "unknown")' 2>/dev/null)
CPU_MODEL=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
export MODEL BATCH SEQ THREADS ROUNDS STEPS WARMUP OUT LOAD_BEFORE LOAD_AFTER TORCH_VERSION CPU_MODEL
export CORES=$(nproc) COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
export DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
"$PY" - <<'EOF' > "$OUT/results.md" || status=1
import json, os, statistics
e = os.environ
steps, warmup, rounds = int(e["STEPS"]), int(e["WARMUP"]), int(e["ROUNDS"])

def timed_steps(side):
    """Step times (ms) of the timed steps of every round; the first WARMUP steps are untimed."""
    ms = []
    for r in range(1, rounds + 1):
        path = "%s/logs/%s-%d.jsonl" % (e["OUT"], side, r)
        if not os.path.exists(path):
            continue
        rows = [json.loads(line) for line in open(path) if line.strip()]
        ms += [row["ms"] for row in rows if "ms" in row and row.get("step", 0) > warmup]
    return ms

print("CPU benchmark: %s, batch %s, seq %s, fp32, %s threads, %d rounds x %d timed steps "
      "(after %d untimed), runs interleaved" % (e["MODEL"], e["BATCH"], e["SEQ"], e["THREADS"],
                                                 rounds, steps, warmup))
print()
print("| backend | steps | median ms/step | min | max | spread | tokens/s | vs PyTorch |")
print("|---|---|---|---|---|---|---|---|")
med = {}
for side in ("fsdp.c", "pytorch"):
    ms = timed_steps(side)
    if ms:
        med[side] = statistics.median(ms)
for side, name in (("fsdp.c", "fsdp.c (CPU, fp32)"), ("pytorch", "PyTorch %s eager (fp32)" % e["TORCH_VERSION"])):
    ms = timed_steps(side)
    if not ms:
        print("| %s | 0 | failed (see out/) | | | | | |" % name)
        continue
    m = med[side]
    tok = int(e["BATCH"]) * int(e["SEQ"]) / (m / 1000.0)
    ratio = "%.2fx" % (med["pytorch"] / m) if "pytorch" in med and side == "fsdp.c" else ("1.00x" if side == "pytorch" else "")
    print("| %s | %d | %.0f | %.0f | %.0f | %.0f%% | %.0f | %s |" % (name, len(ms), m, min(ms), max(ms),
          100.0 * (max(ms) - min(ms)) / m, tok, ratio))
print()
print("\"vs PyTorch\" is PyTorch's median step time over fsdp.c's (above 1: fsdp.c is faster). "
      "Spread is (max - min) / median.")
print()
print("Machine: %s, %s cores; load average (1, 5, 15 min) %s before, %s after. PyTorch intra-op "
      "threads: %s; its BLAS: %s. Commit %s, %s." % (e["CPU_MODEL"], e["CORES"], e["LOAD_BEFORE"],
                                      e["LOAD_AFTER"], e["TORCH_THREADS"], e["TORCH_BLAS_LIB"],
                                      e["COMMIT"], e["DATE"]))
EOF
cat "$OUT/results.md"
echo "results: $OUT/results.md"
exit $status
