#!/usr/bin/env bash
# test_vec_widths.sh: the CPU backend gives the same bits on every vector target of
# kernels/cpu/vec.h. The trainer is built three times (mk/tests.mk): for AVX-512, for AVX2 + FMA
# (-mno-avx512f, what an AVX2 machine builds) and as the plain C fallback (-DVEC_PLAIN), each in
# build/vec/<target>/. All three train the same runs; their loss logs (every field but the
# timings) and parameter digests must be equal, bit for bit.
#
# Runs: make run's model and options for 30 steps, with validation and exact match (C = 96,
# whole 16-lane steps); a GPT with odd shapes (C = 72, head size 24, V = 509: every lane tail
# and tile edge); T5 v1.1 (RMSNorm, gated GELU, the position bias). Before comparing, each build
# must be what its name says, so that a build that fell back to another path cannot compare a
# target with itself: its device line names its target, the AVX2 build holds no zmm register,
# and the matmul's dot tile computes in zmm, ymm and xmm registers respectively. On a machine
# without AVX-512 the avx512 build is an AVX2 one, and the cases say which targets they compared.
#
# Sections (TEST_FILTER): "targets", "make run", "odd shapes", "t5".
set -u
cd "$(dirname "$0")/.."
source test/cases.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

TARGETS="avx512 avx2 plain"
has_flag() { grep -qw "$1" /proc/cpuinfo 2> /dev/null; }
# The target each build should have: what vec.h picks from the flags it was built with on this CPU.
expected_target() {
  case $1 in
    avx512) if has_flag avx512f; then echo avx512; elif has_flag avx2 && has_flag fma; then echo avx2; else echo plain; fi ;;
    avx2) if has_flag avx2 && has_flag fma; then echo avx2; else echo plain; fi ;;
    plain) echo plain ;;
  esac
}
# fn_asm BIN FUNCTION: the disassembly of one function
fn_asm() { objdump -d --no-show-raw-insn "$1" | awk -v f="<$2>:" '$2 == f { on = 1; next } on && /^$/ { exit } on'; }

if want targets; then
  for t in $TARGETS; do
    bin=build/vec/$t/train_gpt_cpu want=$(expected_target $t)
    got=$($bin --model gpt:L=1,C=32,H=2,V=64,T=8 --data data/addition/train_000.bin --batch 1 --seq 8 --steps 1 2>&1 |
      grep -o 'cpu ([a-z0-9]* vectors)' | head -1)
    if [ "$got" = "cpu ($want vectors)" ]; then ok "$t build: device line '$got'"; else bad "$t build: device line '$got', want 'cpu ($want vectors)'"; fi
  done
  if command -v objdump > /dev/null; then
    n=$(objdump -d --no-show-raw-insn build/vec/avx2/train_gpt_cpu | grep -c '%zmm')
    if [ "$n" = 0 ]; then ok "avx2 build: no zmm register in the binary"; else bad "avx2 build: $n instructions use zmm registers"; fi
    for t in avx512 avx2 plain; do
      want=$(expected_target $t)
      case $want in avx512) reg='zmm' ;; avx2) reg='ymm' ;; plain) reg='xmm' ;; esac
      if [ $want = plain ] && ! has_flag fma; then
        echo "note: no FMA on this CPU: the plain build's fused multiply-adds are fmaf calls"
        continue
      fi
      n=$(fn_asm build/vec/$t/train_gpt_cpu dot_tile_full | grep -c "vfmadd[0-9]*ps.*%$reg")
      if [ "$n" -gt 0 ]; then ok "$t build: the dot tile's fused multiply-adds are packed in $reg registers ($n)"
      else bad "$t build: no packed fused multiply-add on $reg registers in dot_tile_full"; fi
    done
  else
    echo "note: no objdump here; the register checks need binutils"
  fi
fi

# same_bits NAME ARGS...: every target trains ARGS; the logs without timings and the digests agree.
same_bits() {
  local name=$1 t ref="" refd="" d differ=""
  shift
  want "$name" || return 0
  for t in $TARGETS; do
    spawn "$TMP/$name.$t.out" build/vec/$t/train_gpt_cpu "$@" --digest --log "$TMP/$name.$t.json"
  done
  settle
  for t in $TARGETS; do
    if [ "$(rc_of "$TMP/$name.$t.out")" != 0 ]; then
      bad "$name: the $t build failed" "$(tail -2 "$TMP/$name.$t.out")"
      return
    fi
    sed -E 's/, "(ms|tokens_per_s|tflops|mfu|exposed_comm_ms|memory_bytes|elapsed_s)": [^,}]*//g' "$TMP/$name.$t.json" > "$TMP/$name.$t.bits"
    d=$(grep params_digest "$TMP/$name.$t.out" | awk '{print $2}')
    if [ -z "$ref" ]; then
      ref=$t refd=$d
    elif [ "$d" != "$refd" ] || ! cmp -s "$TMP/$name.$ref.bits" "$TMP/$name.$t.bits"; then
      differ="$differ $t (digest $d, its first differing log line: $(diff "$TMP/$name.$ref.bits" "$TMP/$name.$t.bits" | grep -m1 '^>' | cut -c3-160))"
    fi
  done
  local lines
  lines=$(wc -l < "$TMP/$name.$ref.bits")
  if [ -z "$refd" ] || [ "$lines" = 0 ]; then
    bad "$name: no digest or no log lines from the $ref build"
  elif [ -n "$differ" ]; then
    bad "$name: differs from the $ref build ($refd):$differ"
  else
    local seen
    seen=$(for t in $TARGETS; do expected_target $t; done | sort -u | tr '\n' ' ')
    ok "$name: ${seen% } targets give the same $lines log lines and parameters ($refd)"
  fi
}

same_bits "make run" $(make -s --no-print-directory print-run-args | sed -E 's/--steps [0-9]+/--steps 30/; s/--eval-every [0-9]+/--eval-every 15/')
same_bits "odd shapes" --model gpt:L=2,C=72,H=3,V=509,T=32 --data data/addition/train_000.bin \
  --val-data data/addition/val_000.bin --eval-every 4 --batch 3 --seq 32 --steps 8 --lr 1e-2 --warmup 2 --grad-clip 0.5
same_bits "t5" --model t5v1.1:L=1,M=2,C=40,H=3,D=12,F=56,V=509 --data data/addition/train_000.bin --batch 2 \
  --enc-len 30 --dec-len 12 --steps 4 --lr 1e-2 --warmup 2
cases_summary
[ $fail = 0 ]
