#!/usr/bin/env bash
# bench_adamw.sh: the host AdamW step of --offload optim against PyTorch's CPU AdamW (the step a
# CPU-offloaded PyTorch FSDP unit runs), the same elements, fp32 state and threads, interleaved
# round by round (fsdp.c, torch single-tensor, torch foreach, fsdp.c, ...). Prints a markdown
# table: per side the median, min and max time per step of N elements, the bandwidth it reaches
# (AdamW moves 28 bytes per element: reads p, g, m, v, writes p, m, v) and each side's median
# over fsdp.c's.
#
#   scripts/bench_adamw.sh [--elements N] [--threads T] [--rounds R] [--trials K]
#
# Defaults: 50,000,000 elements (a 50M-parameter shard: 1.4 GB of traffic per step), 2 threads,
# 3 rounds of 3 timed steps each. PyTorch is Debian's (/usr/bin/python3, or BENCH_PYTHON).
set -u
cd "$(dirname "$0")/.." || exit 2
N=50000000 THREADS=2 ROUNDS=3 TRIALS=3
while [ $# -gt 0 ]; do
  case $1 in
    --elements) N=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --trials) TRIALS=$2; shift ;;
    *) echo "error: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
for v in "$N" "$THREADS" "$ROUNDS" "$TRIALS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "error: options take positive integers (got '$v')" >&2; exit 2; }
done
PY=${BENCH_PYTHON:-/usr/bin/python3}
BIN=build/bench/adamw_host
mkdir -p build/bench
cc -O3 -march=native -std=c11 -fopenmp -fno-math-errno -I. -D_GNU_SOURCE scripts/bench_adamw.c kernels/cuda/adamw_host.c \
  -o "$BIN" -lm || exit 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for r in $(seq "$ROUNDS"); do
  OMP_NUM_THREADS=$THREADS "$BIN" "$N" "$TRIALS" >> "$TMP/fsdp.c" || exit 1
  "$PY" scripts/bench_adamw_torch.py "$N" "$TRIALS" "$THREADS" single >> "$TMP/torch" || exit 1
  "$PY" scripts/bench_adamw_torch.py "$N" "$TRIALS" "$THREADS" foreach >> "$TMP/torch-foreach" || exit 1
done
echo "host AdamW, $N fp32 elements, $THREADS threads, $ROUNDS rounds x $TRIALS steps ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); torch $("$PY" -c 'import torch; print(torch.__version__)'))"
echo
echo "| side | median ms | min ms | max ms | GB/s (28 B/element) | median / fsdp.c |"
echo "|---|---:|---:|---:|---:|---:|"
python3 - "$TMP" "$N" <<'PY'
import statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
ref = None
for side, label in (("fsdp.c", "fsdp.c adamw_update_host"), ("torch", "torch.optim.AdamW (single tensor)"),
                    ("torch-foreach", "torch.optim.AdamW (foreach)")):
    t = [float(l.split()[1]) for l in open("%s/%s" % (tmp, side))]
    med = statistics.median(t)
    ref = ref or med
    print("| %s | %.1f | %.1f | %.1f | %.1f | %.2f |" % (label, med * 1e3, min(t) * 1e3, max(t) * 1e3, 28 * n / med / 1e9, med / ref))
PY
