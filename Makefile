# fsdp.c: what a user types.
#   make run              build and train on the built-in addition dataset (train_gpt_cpu, or
#                         train_gpt on a machine with a GPU)
#   make test             install what the tests need when missing (make deps), build, and run the
#                         suite; ends with "N passed, M failed". T=PART runs one part (T=list: the
#                         parts; T='sim-*': the CUDA simulator's), F=REGEX the matching cases
#   make train_gpt_cpu    the CPU reference trainer (C11 + OpenMP; MPI when mpicc is found)
#   make train_gpt        the CUDA trainer (nvcc + cuBLASLt + NCCL; compiles without a GPU);
#                         PRECISION=fp16 for fp16 activations instead of bf16
#   make generate_cpu export_weights_cpu    continuations of a prompt; a checkpoint to Hugging Face
#   make bench            on a GPU: the benchmark sweep (BENCH_ARGS="--quick")
#   make gpu-report       on a GPU: everything that needs one, into one folder (GPU_REPORT_DIR)
#   make gpu-bundle       without a GPU: build/gpu-bundle/, everything a short GPU window needs,
#                         prebuilt, and its run.sh (LLMC_DIR=ext/llm.c adds llm.c; docs/performance.md)
#   make test-gpu         on a GPU: every CUDA kernel and the trainer against the CPU reference
#   make kernel-report    registers, spills, shared memory and occupancy of every CUDA kernel for
#                         sm_90, from ptxas, and the main loops' machine code, from cuobjdump (no
#                         GPU): docs/kernel_report.md
#   make deps             install OpenMPI, g++ and PyTorch (for /usr/bin/python3) when missing
# Every binary is the same core sources plus one backend folder of kernels/ (CORE_SRCS below).
# The variants are in mk/: cuda.mk (the CUDA build, fp16, GPU tests, cuda-config), sim.mk (the
# CUDA simulator), predict.mk (the timeline backend), tests.mk (test programs, sanitizer builds),
# bundle.mk (the GPU bundle; bundle-gpu.conf and bundle-sim.conf: what its run script runs).
.DEFAULT_GOAL := train_gpt_cpu

# ---- CPU binary ---------------------------------------------------------------------
# mpicc gives the multi-rank build; without it the binary is single-rank (NO_MPI).
MPICC := $(shell command -v mpicc 2>/dev/null)
ifeq ($(MPICC),)
  CC_CPU := $(or $(CC),cc)
  MPI_FLAGS := -DNO_MPI
else
  CC_CPU := $(MPICC)
  MPI_FLAGS :=
endif
# CPU_ARCH: the instruction set of the CPU build. kernels/cpu/vec.h takes its vector registers
# from it: AVX-512, AVX2 + FMA, or plain C (-DVEC_PLAIN forces that one); all three give the
# same bits. The default is the building machine's own; CPU_ARCH='-march=native -mno-avx512f'
# builds here what an AVX2 machine would, CPU_ARCH=-march=x86-64-v3 a binary for any AVX2 one.
CPU_ARCH ?= -march=native
CFLAGS_CPU ?= -O3 $(CPU_ARCH) -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -D_GNU_SOURCE $(MPI_FLAGS)
LDLIBS_CPU := -lm -fopenmp

BUILD := build
# The objects do not record whether they were compiled for MPI, and `make test` installs MPI
# after a first `make run` may have built without it: this stamp changes with the mpicc make
# found, and every object compiled with or for it depends on it, so none of the other mode is
# linked in.
MPI_STAMP := $(BUILD)/mpi
$(shell mkdir -p $(BUILD) && { [ -f $(MPI_STAMP) ] && [ "$$(cat $(MPI_STAMP))" = "$(MPICC)" ] || echo "$(MPICC)" > $(MPI_STAMP); })
# The same for CPU_ARCH: objects of another instruction set are recompiled, not linked in.
ARCH_STAMP := $(BUILD)/cpu-arch
$(shell { [ -f $(ARCH_STAMP) ] && [ "$$(cat $(ARCH_STAMP))" = "$(CPU_ARCH)" ] || echo "$(CPU_ARCH)" > $(ARCH_STAMP); })
# Every binary is the same core (the FSDP algorithm, the models, the loop around them and what
# they stand on) plus one backend folder of kernels/, which holds all three parts of a backend:
# its compute kernels, its device (memory, streams, events) and its communication.
#   train_gpt_cpu  core + kernels/cpu/       (fp32, OpenMP, MPI)
#   train_gpt      core + kernels/cuda/      (nvcc, cuBLASLt, NCCL; mk/cuda.mk)
#   train_gpt_sim  core + kernels/cuda/ on the CUDA simulator (mk/sim.mk)
#   predict_gpt    core + kernels/timeline/  (modelled clocks; predict/, mk/predict.mk)
CORE_SRCS := $(wildcard fsdp/*.c infra/*.c layers/*.c data/*.c train/*.c weights/*.c)
CPU_LIB_SRCS := $(CORE_SRCS) $(wildcard kernels/cpu/*.c)
CPU_LIB_OBJS := $(patsubst %.c,$(BUILD)/cpu/%.o,$(CPU_LIB_SRCS))
HEADERS := $(wildcard kernels/*.h kernels/*/*.h fsdp/*.h infra/*.h layers/*.h data/*.h train/*.h test/*.h weights/*.h \
  predict/*.h)

$(BUILD)/cpu/%.o: %.c $(HEADERS) $(MPI_STAMP) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) -c $< -o $@
# The CPU kernels call sqrtf, expf and logf only where the value cannot fail; with no errno to
# set, GCC vectorizes their loops (sqrtf in AdamW). Nor do they read floating-point exception
# flags: with no traps to preserve, GCC may compute both sides of a clamp and select, which is
# what vectorizes GELU without AVX-512's masked instructions. No result changes.
CPU_KERNEL_FLAGS := -fno-math-errno -fno-trapping-math
$(BUILD)/cpu/kernels/cpu/%.o: CFLAGS_CPU += $(CPU_KERNEL_FLAGS)

train_gpt_cpu: $(BUILD)/cpu/train_gpt.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)

# Tools on trained models: generate_cpu (continuations) and export_weights_cpu (a checkpoint
# to a Hugging Face directory).
generate_cpu: $(BUILD)/cpu/generate.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)
export_weights_cpu: $(BUILD)/cpu/export_weights.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)

include mk/cuda.mk mk/sim.mk mk/predict.mk mk/tests.mk mk/bundle.mk

# ---- built-in dataset: synthetic addition problems as byte tokens -------------------
$(BUILD)/make_addition: scripts/make_addition.c data/shard.c data/shard.h infra/files.c infra/files.h
	@mkdir -p $(BUILD)
	$(or $(CC),cc) -O2 -std=c11 -Wall -I. -D_GNU_SOURCE scripts/make_addition.c data/shard.c infra/files.c -o $@ -lm

data/addition/train_000.bin: $(BUILD)/make_addition
	$(BUILD)/make_addition data/addition --digits 2

# ---- run ----------------------------------------------------------------------------
# One 10-token problem per sequence ("12+34=640\n"), so every problem sits at the same positions.
RUN_ARGS ?= --model gpt:L=2,C=96,H=4,V=256,T=10 --data 'data/addition/train_*.bin' \
  --val-data 'data/addition/val_*.bin' --batch 64 --seq 10 --steps 1000 --lr 3e-3 --warmup 50 \
  --weight-decay 0.0 --eval-every 250 --eval-prompts data/addition/val_problems.txt
# The CUDA binary when this machine has a GPU (and nvcc to build it), else the CPU one.
HAVE_GPU := $(shell nvidia-smi -L > /dev/null 2>&1 && echo yes)
RUN_BIN := $(if $(and $(HAVE_GPU),$(NVCC)),train_gpt,train_gpt_cpu)
run: $(RUN_BIN) data/addition/train_000.bin
	./$(RUN_BIN) $(RUN_ARGS)

print-run-args:
	@echo $(RUN_ARGS)

# `make test` installs what the suite needs when it is missing, then test/run_tests.sh builds the
# selected parts' targets in a make of its own, which sees the compilers and MPI just installed.
deps:
	@bash test/setup.sh
test: deps
	@T='$(T)' F='$(F)' JOBS='$(JOBS)' bash test/run_tests.sh
test-sim: deps
	@T='sim-*' F='$(F)' JOBS='$(JOBS)' bash test/run_tests.sh

bench: train_gpt data/addition/train_000.bin
	bash scripts/bench.sh $(BENCH_ARGS)
# scripts/gpu_report.sh: builds, test-gpu in both precisions, llm.c beside fsdp.c (LLMC_DIR),
# PyTorch, ncu, --peak; results.md, from which the README's results are regenerated.
gpu-report:
	bash scripts/gpu_report.sh $(if $(GPU_REPORT_DIR),--out $(GPU_REPORT_DIR)) $(if $(GPU_REPORT_PARTS),--parts $(GPU_REPORT_PARTS))

clean:
	rm -rf $(BUILD) train_gpt_cpu train_gpt train_gpt_sim train_gpt_sim_fp16 generate_sim predict_gpt generate export_weights \
	  generate_cpu export_weights_cpu

.PHONY: deps test test-sim test-gpu kernel-report bench gpu-report sim-bins sim-bins-fp16 predict-bins train_gpt_sim cuda-config run print-run-args \
  print-sim-kernel-flags print-sim-host-objs print-nvcc clean
