#!/usr/bin/env bash
# test_faults.sh: every checker of the CUDA simulator proven by a planted fault. Each fault is
# a mutated copy of a real kernel file (one Perl substitution that must match exactly once, so
# a change to the kernel cannot silently turn the fault into a no-op), built into
# fault_driver with the other kernels unchanged, and run: the simulator must report it with
# the expected kind, the kernel, the thread and the address (or, for launch limits, the
# kernel and the limit). The unmodified kernels run first as the control: no report.
# Usage: test_faults.sh BUILD_DIR (the simulator build, e.g. build/sim); prints one line per
# check and "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
source test/cases.sh
SIM=${1:-build/sim}
OUT=$SIM/faults
rm -rf "$OUT"
mkdir -p "$OUT"
CXX=${SIM_CXX:-g++}
# The kernel flags of the Makefile's simulator build (SIM_KERNEL_FLAGS), at -O1: quicker to build.
# (Not -O0: it keeps loads whose values are never used, such as fragments of a tile's padding
# rows, which the initcheck then reports before the planted fault.)
FLAGS=$(make -s --no-print-directory print-sim-kernel-flags SIM_OPT=-O1)
KEEP_GOING=0

cc -O1 -g -std=c11 -Wall -I. -D_GNU_SOURCE -DFSDP_CUDA -Itest/cudasim/include -c test/cudasim/fault_driver.c \
  -o "$OUT/fault_driver.o" || { echo "0 passed, 1 failed"; exit 1; }
link() {  # link OUT_BINARY MUTATED_OBJECT SOURCE_NAME
  local objs=()
  for o in "$SIM"/kernels/*.o; do
    [ "$(basename "$o" .o)" = "$3" ] || objs+=("$o")
  done
  $CXX "$OUT/fault_driver.o" ${2:+"$2"} "${objs[@]}" "$SIM/libcudasim.a" -o "$1" -lstdc++ -lm -fopenmp -ldl
}

# Control: the real kernels, every driver case, no report.
link "$OUT/control" "" none 2> "$OUT/control.link" || bad "control build" "$(tail -3 "$OUT/control.link")"
for c in add matmul sumsq classifier attention64 attention128 stream-ordered pinned-ordered host-ordered; do
  if out=$("$OUT/control" "$c" 2>&1) && ! grep -q '^cudasim:' <<< "$out"; then
    ok "control: $c runs on the unmodified kernels without a report"
  else
    bad "control: $c" "$(tail -3 <<< "$out")"
  fi
done

# fault NAME FILE PERL_SUBSTITUTION CASE EXPECT_REGEX...
# Builds kernels/cuda/FILE.cu with the substitution (in the background, two builds at a time),
# and queues the check: `fault_driver CASE` must produce a report matching every EXPECT_REGEX
# (extended grep) in the simulator's output. check_faults runs the queue once the builds are done.
QUEUE=()
BUILDS=0
fault() {
  local name=$1 file=$2 subst=$3
  local dir=$OUT/$name
  want "$name" || return
  mkdir -p "$dir"
  local n
  n=$(perl -0ne "\$n = ($subst); print \$n + 0" "kernels/cuda/$file.cu")
  if [ "$n" != 1 ]; then
    bad "$name" "the planted change matched $n times in kernels/cuda/$file.cu (must be exactly once)"
    return
  fi
  perl -0pe "$subst" "kernels/cuda/$file.cu" > "$dir/$file.cu"
  [ $BUILDS -ge 2 ] && { wait -n; BUILDS=$((BUILDS - 1)); }
  # Compile as if it were the real file (its includes are relative to the project root).
  ( sh test/cudasim/cu2cpp.sh "$dir/$file.cu" "$dir/$file.cpp" &&
      $CXX $FLAGS -c "$dir/$file.cpp" -o "$dir/$file.o" 2> "$dir/build.log" &&
      link "$dir/driver" "$dir/$file.o" "$file" 2>> "$dir/build.log" ) &
  BUILDS=$((BUILDS + 1))
  QUEUE+=("$(printf '%q ' "$KEEP_GOING" "$@")")
}
# check_fault KEEP_GOING NAME FILE SUBST CASE EXPECT_REGEX...
check_fault() {
  local keep=$1 name=$2 case=$5
  shift 5
  local dir=$OUT/$name
  if [ ! -x "$dir/driver" ]; then
    bad "$name" "build failed: $(tail -3 "$dir/build.log")"
    return
  fi
  local out rc
  out=$(CUDASIM_KEEP_GOING=$keep "$dir/driver" "$case" 2>&1)
  rc=$?
  echo "$out" > "$dir/run.log"
  local line
  if ! grep -q '^cudasim:' <<< "$out"; then
    bad "$name" "no simulator report (exit $rc)"
    return
  fi
  # The first report of the expected kind (with CUDASIM_KEEP_GOING there may be several).
  line=$(grep -m1 -E -- "$1" <<< "$out" || grep -m1 '^cudasim:' <<< "$out")
  for re in "$@"; do
    if ! grep -Eq -- "$re" <<< "$line"; then
      bad "$name" "report lacks /$re/: $line"
      return
    fi
  done
  [ $rc = 86 ] || { bad "$name" "exit code $rc, not the simulator's 86"; return; }
  ok "$name: ${line:0:240}"
}
check_faults() {
  wait
  local q
  for q in "${QUEUE[@]}"; do eval "check_fault $q"; done
}

THREAD='thread \([0-9]+,[0-9]+,[0-9]+\)'
ADDR='0x[0-9a-f]+'
# memcheck: a read one element past the end of a device allocation.
fault memcheck-global elementwise 's/act2f\(y\[i\]\) \+ act2f\(x\[i\]\)/act2f(y[i]) + act2f(x[i + 1])/' add \
  '^cudasim: memcheck:' 'add_act_kernel' "$THREAD" "$ADDR" 'past the end|no device allocation' 'elementwise.cu:[0-9]+'
# memcheck: host code dereferencing device memory.
fault memcheck-host elementwise 's/(void add_inplace\(.*?\{\n  if \(!n\) return;\n)/$1  if (*(volatile unsigned short*)y == 12345) n++;\n/s' add \
  '^cudasim: memcheck: host code reads' "$ADDR" 'device allocation'
# racecheck, read-after-write: thread 0 publishes the row's max and sum in shared memory; the
# barrier before the other threads read them removed.
fault racecheck-raw classifier 's/(\n  \}\n)  __syncthreads\(\);\n(  M = row\[0\], inv = 1\.0f \/ row\[1\];)/$1$2/' classifier \
  '^cudasim: racecheck: read-after-write' 'classifier_kernel' "$THREAD" 'static shared memory 0x' 'classifier.cu:[0-9]+'
# memcheck: a template kernel's static __shared__ variables, which g++ places outside the
# simulator's shared section (test/cudasim/README.md): the report must say what went wrong.
fault memcheck-template-shared classifier 's/__global__ void classifier_kernel\((.*?)\(classifier_kernel,(.*?)classifier_kernel<<</template <int Unused = 0> __global__ void classifier_kernel($1(classifier_kernel<0>,$2classifier_kernel<0><<</s' classifier \
  '^cudasim: memcheck:' 'classifier_kernel' "$THREAD" 'a static variable of the program' 'template kernel'
# racecheck, write-after-read: the barrier before the next tile overwrites the current one
# removed. The first hazard is a read of an entry a faster thread already overwrote; the run
# goes on (CUDASIM_KEEP_GOING) to the next: a thread overwriting an entry another has read.
KEEP_GOING=1
fault racecheck-war matmul 's/(acc \+= as\[ti\]\[kk\] \* bs\[kk\]\[tj\];\n)    __syncthreads\(\);\n/$1/' matmul \
  '^cudasim: racecheck: write-after-read' 'matmul_fallback_kernel' "$THREAD"
KEEP_GOING=0
# initcheck: one column of a shared tile never written, then read.
fault initcheck matmul 's/    as\[ti\]\[tj\] = \(ai/    if (tj != 3) as[ti][tj] = (ai/' matmul \
  '^cudasim: initcheck:' 'matmul_fallback_kernel' "$THREAD" 'before any thread of the block wrote it'
# divergence: a thread returns before a __syncthreads the others reach.
fault barrier-divergence matmul 's/(  float acc = 0\.0f;\n)(  for \(int k0)/$1  if (ti == 1 \&\& tj == 2) return;\n$2/' matmul \
  '^cudasim: divergence:' 'matmul_fallback_kernel' '__syncthreads not reached' 'exited'
# divergence: one lane skips a warp shuffle the others wait in.
fault warp-divergence adamw 's/(\n)(  for \(int o = 16; o > 0; o >>= 1\) s \+= __shfl_down_sync)/$1  if (lane != 5)\n$2/' sumsq \
  '^cudasim: divergence:' '__shfl_down_sync' 'lane 5|exited'
# misaligned: a 16-byte vector store one element off.
fault misaligned-vector attention 's/(\*reinterpret_cast<uint4\*>\(g \+ \(size_t\)r \* stride \+ cc \* 8)\)/$1 + 1)/' attention64 \
  '^cudasim: misaligned:' 'attn_' "$THREAD" 'writes 16 bytes' "$ADDR"
# misaligned: an ldmatrix row address one element off.
fault misaligned-ldmatrix attention 's/(ldsm_x4\(af, tile \+ \(r0 \+ \(lane & 15\)\) \* LD \+ c0 \+ \(lane >> 4\) \* 8)\)/$1 + 1)/' attention64 \
  '^cudasim: misaligned: ldmatrix' 'attn_' "$THREAD" 'not 16-byte aligned'
# misaligned: a cp.async destination one element off.
fault misaligned-cp-async attention 's/cp_async16\(dst, g/cp_async16(dst + 1, g/' attention64 \
  '^cudasim: misaligned: cp\.async' 'attn_' "$THREAD"
# launch limits: 104 KiB of dynamic shared memory without the opt-in attribute (attention_init).
fault smem-optin attention 's/    CUDA_CHECK\(cudaFuncSetAttribute\(k\[i\]\.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, \(int\)k\[i\]\.smem\)\);\n/    ;\n/' attention128 \
  '^cudasim: launch: kernel attn_' 'dynamic shared memory' '48 KiB' 'opt-in'
# cp.async: the forward's pipeline waiting for one group too few reads a key tile before its
# copies land.
fault cp-async-early-wait attention 's/cp_async_wait<ST - 2>\(\);  \/\/ key tile it has landed[^\n]*/cp_async_wait<ST - 1>();/' attention64 \
  '^cudasim: (initcheck|racecheck):' 'attn_fwd_kernel' "$THREAD"
# racecheck: the forward's one barrier per key tile removed: the next tile's copies land in the
# stage other warps still read, and they read copies other threads issued.
fault pipeline-barrier attention 's/      __syncthreads\(\);          \/\/ \.\.\. everyone.s; and every warp is done with tile it - 1\n//' attention64 \
  '^cudasim: (racecheck|initcheck):' 'attn_fwd_kernel' "$THREAD"
# racecheck: the backward's barrier between the warps' dS^T and the dQ product that reads all of it.
fault ds-barrier attention 's/    __syncthreads\(\);  \/\/ dS\^T \(and the diagonal sums\) of every warp\n//' attention64 \
  '^cudasim: (racecheck|initcheck):' 'attn_bwd_kernel' "$THREAD"
# The backward's ordered dq sum: a warp waiting for one adder more than precede it, or a CTA
# that never counts its turn, would hang a GPU; the simulator reports the wait.
fault dq-order-count attention 's/dq_turn_wait\(a\.dq_flag \+ PQ\(gq\) \+ it, seen, j\)/dq_turn_wait(a.dq_flag + PQ(gq) + it, seen, j + 1)/' attention64 \
  '^cudasim: divergence: deadlock' 'attn_bwd_kernel' "$THREAD" 'waits for its flag to reach 2, but it holds 1'
fault dq-order-release attention 's/      if \(J\(\) < jmax_of\(itp\)\) dq_turn_done\(a\.dq_flag \+ PQ\(gp\) \+ itp\);\n//' attention128 \
  '^cudasim: divergence: deadlock' 'attn_bwd_kernel' "$THREAD" 'waits for its flag to reach 1, but it holds 0'
# ... a CTA that adds without waiting for its turn reads partial sums another block wrote, with
# nothing ordering that write before its read (the blocks' happens-before: racecheck; the flag's
# early acquire load may have run before the release it needed).
fault dq-missing-wait attention 's/    if \(ncg > 0 && !first\) dq_turn_wait\(a\.dq_flag \+ PQ\(gq\) \+ it, seen, j\);\n//' attention64 \
  '^cudasim: racecheck: between blocks' 'attn_bwd_kernel' "$THREAD" 'no acquire of a release'
# ... tickets handed out in the wrong order (key tiles in decreasing order, while the sum adds
# them in increasing order): the first CTA waits for one that has not started (a deadlock on a
# GPU that runs it first, whatever the block order).
fault dq-ticket-order attention 's/work\[0\] = n \/ P,/work[0] = nk - 1 - n \/ P,/' attention64 \
  '^cudasim: divergence: deadlock' 'attn_bwd_kernel' "$THREAD" 'waits for its flag to reach 1, but it holds 0'
# ... the turn counted before the barrier that follows every warp's adds: the release then
# covers only the releasing thread's warp, and a later CTA reads the other warps' sums unordered.
fault dq-release-early attention 's/    if \(step > 0 && threadIdx\.x == 0\) \{  \/\/ the previous step.s turn[^\n]*\n[^\n]*\n[^\n]*\n    \}\n(.*?)\n      \}\n    \}\n  \}\n  cp_async_wait<0>\(\);\n/$1\n      }\n    }\n    if (threadIdx.x == 0 \&\& J() < jmax_of(it)) dq_turn_done(a.dq_flag + PQ(gq) + it);\n  }\n  cp_async_wait<0>();\n/s' attention64 \
  '^cudasim: racecheck: between blocks' 'attn_bwd_kernel' "$THREAD" 'no acquire of a release'

check_faults

# misuse NAME CASE REGEX: the driver's own misuse (on the unmodified kernels) is the planted
# fault; the first report must match REGEX.
misuse() {
  local out rc line
  want "$1" || return
  out=$("$OUT/control" "$2" 2>&1)
  rc=$?
  line=$(grep -m1 '^cudasim:' <<< "$out")
  if [ $rc = 86 ] && grep -Eq -- "$3" <<< "$line"; then ok "$1: ${line:0:240}"
  else bad "$1" "not reported as expected (exit $rc): $(tail -2 <<< "$out")"; fi
}
# streamcheck: a copy into a kernel's input on another stream with no event between them.
misuse streamcheck stream-race \
  '^cudasim: streamcheck: write after read between streams .* cudaMemcpyAsync on stream [0-9]+ and add_act_kernel on stream [0-9]+'
# streamcheck on pinned host memory: a copy out to it on one stream, read back on another.
misuse "streamcheck, pinned host memory" pinned-race \
  '^cudasim: streamcheck: read after write between streams on pinned host block #[0-9]+ .* cudaMemcpyAsync on stream [0-9]+ and cudaMemcpyAsync on stream [0-9]+'
# hostcheck: the host's own accesses to pinned memory while a copy on it is pending.
misuse "hostcheck, the host reads what a copy still fills" host-read-race \
  '^cudasim: hostcheck: the host read pinned host block #[0-9]+ at byte [0-9]+ while cudaMemcpyAsync on stream [0-9]+, which writes it'
misuse "hostcheck, the host writes what a copy still reads" host-write-race \
  '^cudasim: hostcheck: the host wrote pinned host block #[0-9]+ at byte [0-9]+ while cudaMemcpyAsync on stream [0-9]+, which reads it'
# memcheck: a kernel handed a host pointer.
misuse "memcheck, host pointer" host-pointer \
  "^cudasim: memcheck: .*add_act_kernel.*$THREAD reads 2 bytes at $ADDR .*in no device allocation \(host memory"

cases_summary
[ $fail = 0 ]
