#!/usr/bin/env bash
# run_tests.sh: the suite of `make test`. Each part is one program or script that prints a line
# per case and ends with "N passed, M failed"; test/suite.sh builds what the selected parts
# need, runs them three at a time and adds up their counts.
#
#   make test                    every part
#   make test T=multirank        one part (T='sim-*': the CUDA simulator's parts)
#   make test T=fsdp F=hybrid    the cases of a part whose names match a regex
#   make test T=list             the parts, with what each checks
#
# Each claim is checked once, where it is cheapest: the CPU backend proves the arithmetic (the
# bit-exactness of every strategy, recompute, wrapping and offload setting across world
# sizes), the simulator proves the CUDA path (kernels against the CPU reference, stream order,
# NCCL); test/README.md lists the parts and what each one owns.
set -u
cd "$(dirname "$0")/.."
source test/suite.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

CPU="train_gpt_cpu data/addition/train_000.bin"
TOOLS="generate_cpu export_weights_cpu"
SIM="sim-bins"
SIM16="sim-bins-fp16"

# Registered roughly by how long they take, longest first (the CUDA compile and the simulator's
# trainer by CPU; trust, fuzz and bench-scripts mostly wait), so the last to finish are short.
part sim-nccl "the CUDA trainer's NCCL on the simulator: 2 to 4 ranks, launches, checkpoints, stalls, planted faults" \
  "$CPU $SIM" bash test/cudasim/test_trainer.sh "NCCL|stall|planted"
part sim-trainer "the CUDA trainer on the simulator against the CPU trainer: GPT, T5, stream orders, offload, memory, launches" \
  "$CPU $SIM" bash test/cudasim/test_trainer.sh "vs CPU|interleavings|offload|memory|launches"
part cuda-build "the CUDA binaries and GPU tests compile with nvcc (bf16 and fp16)" "" bash test/test_cuda_build.sh
part trust "faults and bad input: checkpoints, shards, output paths, hangs, non-finite steps" "$CPU $TOOLS" bash test/test_trust.sh
part fuzz "mutated inputs (shards, checkpoints, weights, tokenizers, prompts, multiple-choice files) on the sanitizer builds" \
  "$CPU build/asan/train_gpt_cpu build/asan/generate_cpu build/asan/export_weights_cpu build/asan/test/test_kernels" \
  python3 test/fuzz_inputs.py --cases 100
part work "never losing work: checkpoints owned by their run, outputs against inputs, links, non-finite weights, ranks that disagree, start-up hangs, sizes" \
  "$CPU $TOOLS" bash test/test_work.sh
part sim-fp16 "the fp16 CUDA trainer and its loss scaler on the simulator" "$CPU $SIM $SIM16" bash test/cudasim/test_fp16.sh
part multirank "FSDP over MPI: W ranks equal one rank with accumulation, every strategy, GPT, T5 and Llama" \
  "$CPU build/test/test_fsdp" bash test/test_multirank.sh
part gpu-bundle "the GPU bundle built, its run script end to end on the simulator, planted failures, its report" \
  "gpu-bundle gpu-bundle-sim" bash test/test_gpu_bundle.sh
part sim-faults "every simulator checker proven by a planted fault in a kernel" "$SIM" bash test/cudasim/test_faults.sh build/sim
part bench-scripts "the benchmark scripts and their reports" "$CPU predict_gpt" bash test/test_bench_scripts.sh
part sim-kernels-fp16 "the same for the fp16 build, and the fp16 bounds failing the bf16 kernels" \
  "$SIM $SIM16" bash test/cudasim/test_kernels.sh build/sim-fp16
part e2e "make run learns addition" "$CPU" bash test/test_e2e.sh
part vec-widths "the CPU trainer built for AVX-512, AVX2 and plain C: the same bits" \
  "build/vec/avx512/train_gpt_cpu build/vec/avx2/train_gpt_cpu build/vec/plain/train_gpt_cpu data/addition/train_000.bin" \
  bash test/test_vec_widths.sh
part readme "every command block of README.md runs as written (FSDP_STEPS_LIMIT shortens the runs); the files it names exist" \
  "$CPU $TOOLS predict_gpt" python3 test/test_readme.py
part sim-kernels "every CUDA kernel against the CPU reference on the simulator (bf16, shuffled threads, both matmul paths)" \
  "$SIM" bash test/cudasim/test_kernels.sh build/sim
part plan "--plan against hand-computed layouts, --bench" "$CPU predict_gpt $SIM" python3 test/test_plan.py
part hf "exported GPT-2, T5 and Llama against transformers" "$CPU $TOOLS build/tool/weights_logits" /usr/bin/python3 test/test_hf_parity.py
part weights "--init-from and --export, pretrained weights in and out" "$CPU $TOOLS $SIM" /usr/bin/python3 test/test_weights.py
part cli "the command line: options, refusals, usage" "$CPU predict_gpt" bash test/test_cli.sh
part choices "--eval-choices: llm.c's multiple-choice files, written here, against a plain-torch reference, on 1 to 3 ranks" \
  "$CPU" /usr/bin/python3 test/test_choices.py
part plot "scripts/plot_log.py on a run's log (the built-in renderer's PNG decoded and looked at), the step line's progress" \
  "$CPU" python3 test/test_plot.py
part tokenizer "the byte-level BPE trained here: round trips, merges, determinism, the model's vocabulary, samples, generate.py, exports" \
  "$CPU $TOOLS" python3 test/test_tokenizer.py
part resume "--resume restores the run's settings and refuses contradictions; --resume-if-present; --init-from a checkpoint" \
  "$CPU" bash test/test_resume.sh
part fsdp "the FSDP runtime's unit tests: layout, schedule, optimizer, checkpoints" "build/test/test_fsdp" build/test/test_fsdp
part ref-gpt "the CPU GPT against PyTorch" "$CPU build/tool/gpt_dump" /usr/bin/python3 test/ref_gpt.py
part ref-t5 "the CPU T5 against PyTorch" "$CPU build/tool/t5_dump" /usr/bin/python3 test/ref_t5.py
part ref-llama "the CPU Llama against transformers' LlamaForCausalLM" "$CPU build/tool/llama_dump" \
  /usr/bin/python3 test/ref_llama.py
part launch "launchers, rank discovery, the NCCL id exchange" "build/test/test_launch" build/test/test_launch
part files "the strict JSON reader, input files, output names, the directory lock" "build/test/test_files" build/test/test_files
part data "token shards and the sampler" "build/test/test_data" build/test/test_data
part span "T5 span corruption" "build/test/test_span" build/test/test_span
part kernels "the CPU kernels against finite differences" "build/test/test_kernels" build/test/test_kernels
part timeline "the timeline backend's models against hand-drawn timelines" "build/predict/test_timeline" build/predict/test_timeline
part table "predict/README.md's seed table is current" "predict_gpt" bash test/predict/test_table.sh
part plan-table "docs/performance.md's plan table is current" "$CPU predict_gpt" bash test/test_plan_table.sh
part build "the build's MPI stamp" "" bash test/test_build.sh
part includes "dependencies point down: infra/ and kernels/ include nothing from fsdp/, layers/ or train/, fsdp/ nothing from layers/ or train/" \
  "" bash test/test_includes.sh
part sim-ptx "the simulator's PTX fragment tables against the ISA" "$SIM" build/sim/test_ptx
part sim-cublaslt "the simulator's cuBLASLt and cub subset" "$SIM" build/sim/test_cublaslt

if [ "${T:-}" = list ]; then
  for id in "${PART_IDS[@]}"; do printf '  %-16s %s\n' "$id" "${PART_DESC[$id]}"; done
  exit 0
fi
run_suite
