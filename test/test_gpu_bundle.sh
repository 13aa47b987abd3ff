#!/usr/bin/env bash
# test_gpu_bundle.sh: the GPU bundle (make gpu-bundle, scripts/gpu_bundle.sh as its run.sh,
# scripts/gpu_bundle_report.py) without a GPU. Sections (F=REGEX picks them):
#   built     make gpu-bundle's folder: every file the run script needs, under 64 MiB (what a GPU
#             machine is sent), train_gpt linked without MPI and with host code for any x86-64
#             (no AVX register in it), the CPU reference losses, the predictions for both GPUs
#   dry-run   run.sh --dry-run prints every step's commands, in order, and runs nothing
#   sim       the simulator's bundle (make gpu-bundle-sim) end to end: each step's status
#             (nvidia-smi and ncu absent: "not available"), at most 8 files in OUT, the report's
#             tables, the report made again from results.tgz alone
#   planted   one step exits non-zero and one times out: both recorded, the later steps still run,
#             exit status 1
#   report    gpu_bundle_report.py on the simulator's run made to look like a GPU's (a GPU name,
#             an ncu profile): the per-group table beside the prediction, the README's GPU block
#             and docs/performance.md's table written between their markers; refused: a run
#             without a GPU, an inverted ratio (the README left as it was)
# Prints ok/FAIL per check and "N passed, M failed".
set -u
cd "$(dirname "$0")/.." || exit 2
source test/cases.sh
PY=python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
B=build/gpu-bundle
S=build/gpu-bundle-sim
check() {  # check NAME COMMAND...: ok when the command succeeds
  local name=$1
  shift
  if "$@" > /dev/null 2>&1; then ok "$name"; else bad "$name"; fi
}

if want built; then
  missing=""
  for f in run.sh bundle.conf train_gpt bin/test_kernels_gpu data/bench.bin data/addition/train_000.bin \
           scripts/gpu_bundle_report.py scripts/bench_llmc.sh scripts/side_by_side.py scripts/bench_report.py \
           scripts/results_section.py scripts/bench_torch.py scripts/compare_losses.py \
           ref/GPT.cpu.jsonl ref/T5.cpu.jsonl ref/T5V11.cpu.jsonl ref/LLAMA.cpu.jsonl ref/GPT.args \
           predict/h100-sxm/fsdp.c-gpt2-124m-B8.trace.json predict/h200/fsdp.c-gpt2-124m-B32.txt \
           predict/h100-sxm/fsdp.c-t5-base-B8.trace.json predict/h200/fsdp.c-gpt2-350m-B8.trace.json \
           predict/h100-sxm/fsdp.c-llama3.2-1b-B4.txt; do
    [ -e "$B/$f" ] || missing+=" $f"
  done
  [ -z "$missing" ] && ok "built: the bundle holds every file the run script reads" || bad "built: missing:$missing"
  kib=$(du -sk "$B" | cut -f1)
  check "built: the bundle is under 64 MiB, what a GPU machine is sent (${kib} KiB)" test "$kib" -lt 65536
  check "built: train_gpt is linked without MPI (it starts where OpenMPI is not installed)" \
    bash -c "! ldd $B/train_gpt | grep -q libmpi"
  check "built: train_gpt's host code is for any x86-64 (no AVX register in its machine code)" \
    bash -c "! objdump -d --no-show-raw-insn $B/train_gpt | grep -qE '%[yz]mm'"
  check "built: the CPU reference losses are 10 steps of each train-check model" bash -c \
    "for m in GPT T5 T5V11 LLAMA; do test \$(grep -c '\"loss\"' $B/ref/\$m.cpu.jsonl) = 10 || exit 1; done"
  check "built: bundle.conf names the commit, the toolkit and the runs" bash -c \
    "grep -qE '^BUNDLE_COMMIT=[0-9a-f]{7}' $B/bundle.conf && grep -q '^BUNDLE_TOOLKIT=.CUDA 1[0-9]' $B/bundle.conf &&
     grep -q '^BENCH_MODEL=gpt2-124m' $B/bundle.conf && grep -q \"^BENCH_BATCHES='8 32'\" $B/bundle.conf"
  check "built: the predictions are the runs' (gpt2-124m B=8 on an H100: a step time)" \
    grep -qE '^\| step time \(ms\) +\| +[0-9.]+ \|' "$B/predict/h100-sxm/fsdp.c-gpt2-124m-B8.txt"
fi

if want dry-run; then
  bash "$B/run.sh" --dry-run "$TMP/dry" > "$TMP/dry.txt" 2>&1
  rc=$?
  check "dry-run: exits 0 and creates nothing" bash -c "test $rc = 0 && ! test -e '$TMP/dry'"
  check "dry-run: every step, in order" diff <(grep -o '^step [a-z0-9-]*' "$TMP/dry.txt") \
    <(printf 'step %s\n' machine kernels train-check llmc profile profile-llmc detail gelu-off torch t5 larger llama report)
  check "dry-run: the commands: the kernel test, train-check, fsdp.c at B=8 and 32 and without the GELU epilogue, ncu on step 4 and on attention, Llama 3.2 1B at 4x2048" bash -c "
    grep -q 'bin/test_kernels_gpu --profile full' '$TMP/dry.txt' &&
    test \$(grep -c './train_gpt --model gpt:L=2.*--steps 10' '$TMP/dry.txt') = 1 &&
    test \$(grep -cE './train_gpt --model gpt2-124m .*--batch (8|32) --seq 1024 --steps 10 --bench' '$TMP/dry.txt') = 3 &&
    grep -qE './train_gpt --model gpt2-124m .*--batch 8 .*--gelu-epilogue off' '$TMP/dry.txt' &&
    grep -q 'ncu --nvtx --nvtx-include step..4/ .* --model gpt2-124m --batch 8' '$TMP/dry.txt' &&
    grep -q 'regex:attn_bwd --launch-count 1' '$TMP/dry.txt' &&
    grep -qE './train_gpt --model llama3.2-1b --data data/bench.bin --batch 4 --seq 2048 --steps 13 --bench' '$TMP/dry.txt'"
  expect "dry-run: an unknown step is refused" 2 "unknown step 'bogus'" bash "$B/run.sh" --only bogus "$TMP/x"
  expect "dry-run: no output folder is refused" 2 "needs the output folder" bash "$B/run.sh"
fi

# counts STEPS.TSV: "step=status" lines, in order
statuses() { awk -F'\t' 'NR > 1 {print $1 "=" $2}' "$1" | paste -sd' '; }

if want sim; then
  O=$TMP/sim/out
  bash "$S/run.sh" "$O" > "$TMP/sim.txt" 2>&1
  rc=$?
  want_st="machine=not available kernels=ok train-check=ok llmc=ok profile=not available profile-llmc=not available"
  want_st+=" detail=not available gelu-off=ok torch=not available t5=not available larger=ok llama=ok report=ok"
  got=$(statuses "$O/steps.tsv")
  [ "$got" = "$want_st" ] && ok "sim: every step's status (no nvidia-smi, ncu, llm.c or CUDA torch here)" ||
    bad "sim: statuses '$got'"
  check "sim: exit 0 (nothing failed)" test $rc = 0
  n=$(find "$O" -type f | wc -l)
  check "sim: at most 8 files in the output folder (what comes back), $n" test "$n" -le 8
  check "sim: results.tgz holds the work folder: logs, the side by side, the kernel test, the predictions" bash -c "
    tar -tzf '$O/results.tgz' > '$TMP/list' && grep -q 'logs/kernels.txt' '$TMP/list' && grep -q 'llmc/results.json' '$TMP/list' &&
    grep -q 'kernels.txt' '$TMP/list' && grep -q 'predict/h100-sxm/' '$TMP/list' && grep -q 'steps.tsv' '$TMP/list'"
  check "sim: the report: the steps, the kernel test's count, fsdp.c's side by side rows at B=2 and 4" bash -c "
    grep -q '^| kernels | ok |' '$O/report.md' && grep -qE '^- kernels .*: [1-9][0-9]* passed, 0 failed' '$O/report.md' &&
    grep -qE '^- train-check .*: 3 passed, 0 failed' '$O/report.md' &&
    test \$(grep -cE '^\| gpt:L=2,C=64,H=2,V=512,T=32 \| (2|4)x32 \| fsdp.c \| ' '$O/report.md') = 2 &&
    grep -qE '^gpt:L=2,C=64,H=2,V=512,T=32 B=2: [0-9.]+ ms with .--gelu-epilogue off.*, [0-9.]+ ms with the epilogue' '$O/report.md'"
  $PY scripts/gpu_bundle_report.py "$O/results.tgz" --out "$TMP/again.md" > /dev/null 2>&1
  check "sim: the report made again from results.tgz alone is the same (with the report step's own row)" \
    diff <(grep -v '^| report | ok |' "$TMP/again.md") "$O/report.md"
fi

if want planted; then
  P=$TMP/planted-bundle
  cp -r "$S" "$P"
  printf '#!/bin/sh\necho "a planted failure"\nexit 5\n' > "$P/bin/test_kernels_gpu"
  echo "T_TRAIN_CHECK=3" >> "$P/bundle.conf"  # the simulator's train-check takes longer: a timeout
  bash "$P/run.sh" --only machine,kernels,train-check,profile,report "$TMP/planted/out" > "$TMP/planted.txt" 2>&1
  rc=$?
  got=$(statuses "$TMP/planted/out/steps.tsv")
  [ "$got" = "machine=not available kernels=failed train-check=timeout profile=not available report=ok" ] &&
    ok "planted: a failing and a timed-out step recorded, the later steps still run" || bad "planted: statuses '$got'"
  check "planted: exit status 1" test $rc = 1
  check "planted: the failure's exit code and the timeout in the notes" bash -c "
    grep -qP '^kernels\tfailed\t[0-9]+\texit 5' '$TMP/planted/out/steps.tsv' &&
    grep -qP '^train-check\ttimeout\t[0-9]+\tstopped after 3s' '$TMP/planted/out/steps.tsv'"
  check "planted: no process of the timed-out step is left" bash -c "! pgrep -f '$TMP/planted/[o]ut.work' > /dev/null"
fi

if want report && [ -d "$TMP/sim/out.work" ]; then
  R=$TMP/sim/out.work
  # a GPU's run: the meta as nvidia-smi gives it, and ncu's CSV of one step of the bench model
  sed -i 's/^gpu: none$/gpu: NVIDIA H100 80GB HBM3\ngpu_memory: 81559 MiB\ndriver: 580.1/' "$R/meta.txt"
  mkdir -p "$R/profile"
  {
    echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    for i in 1 2; do
      echo "\"$i\",\"1\",\"train_gpt\",\"h\",\"attn_fwd_kernel(AttnArgs)\",\"1\",\"7\",\"(128, 1, 1)\",\"(8, 2, 2)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"usecond\",\"100.00\""
      echo "\"$((i + 2))\",\"1\",\"train_gpt\",\"h\",\"attn_bwd_kernel(AttnArgs)\",\"1\",\"7\",\"(256, 1, 1)\",\"(8, 2, 2)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"usecond\",\"250.00\""
    done
    echo '"5","1","train_gpt","h","nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTT","1","7","(384, 1, 1)","(2, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1.50"'
  } > "$R/profile/fsdp.c-gpt_L_2_C_64_H_2_V_512_T_32-B2.csv"
  echo "steps: 1" > "$R/profile/fsdp.c-gpt_L_2_C_64_H_2_V_512_T_32-B2.steps"
  $PY scripts/gpu_bundle_report.py "$R" --out "$TMP/gpu-report.md" > /dev/null 2>&1
  check "report: the per-group table: attention measured 0.700 ms in 4 launches beside its prediction" \
    grep -qE '^\| attention \| [0-9.]+ \| 0\.700 \| [0-9.]+ \| 4 \| - \| - \|$' "$TMP/gpu-report.md"
  check "report: matmuls 1.500 ms measured; every kernel 2.200 ms; the step's gaps from fsdp.c's median" bash -c "
    grep -qE '^\| matmuls \(cuBLASLt\) and bias gradients \| [0-9.]+ \| 1\.500 \|' '$TMP/gpu-report.md' &&
    grep -qE '^\| every kernel \| [0-9.]+ \| 2\.200 \|' '$TMP/gpu-report.md' &&
    grep -qE '^\| gaps between kernels \(step less its kernels\) \| [0-9.-]+ \| [0-9.]+ \|' '$TMP/gpu-report.md'"
  check "report: the Llama run measured and beside its H100 prediction, with the ratio" bash -c "
    grep -qE '^\| llama:L=2,C=64,H=4,KV=2,F=96,V=512,T=32 \| 2x32 \| measured \(median of [0-9]+\) \| [0-9.]+ \| [0-9]+ \| ' '$TMP/gpu-report.md' &&
    grep -qE '^\| llama:L=2,C=64,H=4,KV=2,F=96,V=512,T=32 \| 2x32 \| predicted \(h100-sxm\) \| [0-9.]+ \| [0-9]+ \| [0-9.]+% \|' '$TMP/gpu-report.md' &&
    grep -qE '^Measured / predicted step time: [0-9.]+\.' '$TMP/gpu-report.md'"
  check "report: the attention kernels' TFLOPS per launch at this shape" \
    grep -qE '^- attention forward: 2 launches per step, median 100\.0 us, [0-9.]+ TFLOPS' "$TMP/gpu-report.md"
  cp README.md "$TMP/README.md"
  cp docs/performance.md "$TMP/performance.md"
  $PY scripts/gpu_bundle_report.py "$R" --out /dev/null --write-readme "$TMP/README.md" --write-performance "$TMP/performance.md" \
    > "$TMP/write.txt" 2>&1
  check "report: the README's GPU block written, leading with the GPU, driver and commits; the CPU block kept" bash -c "
    sed -n '/<!-- gpu results -->/,/<!-- end of gpu results -->/p' '$TMP/README.md' | grep -q 'NVIDIA H100 80GB HBM3 (81559 MiB, driver 580.1' &&
    grep -q 'On the GPU, the attention and step-control kernels against the CPU reference: [0-9]* passed, 0 failed' '$TMP/README.md' &&
    diff <(sed -n '/<!-- cpu results -->/,/<!-- end of cpu results -->/p' README.md) \
         <(sed -n '/<!-- cpu results -->/,/<!-- end of cpu results -->/p' '$TMP/README.md')"
  check "report: docs/performance.md's per-group table written between its markers" bash -c "
    sed -n '/<!-- gpu groups -->/,/<!-- end of gpu groups -->/p' '$TMP/performance.md' | grep -qE '^\| attention \| [0-9.]+ \| 0\.700 \|'"
  cp "$TMP/README.md" "$TMP/README.before"
  $PY - "$R/llmc/results.json" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["configs"][0]["sides"]["fsdp.c"]["fsdp_over_this"] = 0.5  # the plant: not what the medians give
json.dump(r, open(sys.argv[1], "w"))
PY
  expect "report: a planted stale ratio is refused, naming the file" 1 "llmc/results.json: .*inverted or stale ratio" \
    $PY scripts/gpu_bundle_report.py "$R" --write-readme "$TMP/README.md"
  check "report: ... and the README is left as it was" cmp -s "$TMP/README.md" "$TMP/README.before"
  expect "report: the simulator's own run (no GPU) is refused as README figures" 1 "had no GPU" \
    $PY scripts/gpu_bundle_report.py "$TMP/sim/out" --write-readme "$TMP/README.md"
fi
cases_summary
