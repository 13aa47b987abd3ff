# fsdp.c build
#   make train_gpt_cpu   CPU reference binary (C11 + OpenMP, MPI when mpicc is found)
#   make train_gpt       CUDA binary (nvcc + cuBLASLt; compiles without a GPU)
#   make run             build and train on the built-in addition dataset
#   make test            the whole suite: CPU (unit, reference, multi-rank), the CUDA simulator
#                        (test-sim); also compiles the CUDA binary and GPU tests when nvcc is found
#   make test-sim        the CUDA kernels on the CUDA simulator (test/cudasim/), no GPU needed
#   make test-gpu        on a GPU: every CUDA kernel against the CPU reference, CUDA vs CPU
#                        training, reproducibility, compute-sanitizer
#   make bench           on a GPU: the benchmark sweep (scripts/bench.sh; BENCH_ARGS="--quick")
#   make cuda-config     print the CUDA/NCCL locations the build found
#   PRECISION=fp16       (with train_gpt, test-gpu, sim-bins, test-sim) the CUDA build with fp16
#                        activations instead of bf16 (see PRECISION below)
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
CFLAGS_CPU ?= -O3 -march=native -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -D_GNU_SOURCE $(MPI_FLAGS)
LDLIBS_CPU := -lm -fopenmp

BUILD := build
# The objects do not record whether they were compiled for MPI, and `make test` installs MPI
# after a first `make run` may have built without it: this stamp changes with the mpicc make
# found, and every object compiled with or for it depends on it, so none of the other mode is
# linked in.
MPI_STAMP := $(BUILD)/mpi
$(shell mkdir -p $(BUILD) && { [ -f $(MPI_STAMP) ] && [ "$$(cat $(MPI_STAMP))" = "$(MPICC)" ] || echo "$(MPICC)" > $(MPI_STAMP); })
CPU_LIB_SRCS := $(wildcard kernels/cpu/*.c) $(filter-out %_nccl.c %_cuda.c,$(wildcard fsdp/*.c)) \
                $(wildcard layers/*.c) $(wildcard data/*.c) $(wildcard train/*.c) $(wildcard weights/*.c)
CPU_LIB_OBJS := $(patsubst %.c,$(BUILD)/cpu/%.o,$(CPU_LIB_SRCS))
HEADERS := $(wildcard kernels/*.h kernels/cpu/*.h fsdp/*.h layers/*.h data/*.h train/*.h test/*.h weights/*.h)

$(BUILD)/cpu/%.o: %.c $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) -c $< -o $@
# The CPU kernels call sqrtf, expf and logf only where the value cannot fail; with no errno to
# set, GCC vectorizes their loops (sqrtf in AdamW). No result changes.
CPU_KERNEL_FLAGS := -fno-math-errno
$(BUILD)/cpu/kernels/cpu/%.o: CFLAGS_CPU += $(CPU_KERNEL_FLAGS)

train_gpt_cpu: $(BUILD)/cpu/train_gpt.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)

# Tools on trained models: generate_cpu (continuations) and export_weights_cpu (a checkpoint
# to a Hugging Face directory).
generate_cpu: $(BUILD)/cpu/generate.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)
export_weights_cpu: $(BUILD)/cpu/export_weights.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)

# ---- CUDA binary --------------------------------------------------------------------
# PRECISION: the 16-bit type of the CUDA build's activations and gathered parameters (act_t):
# bf16 (the default) or fp16 (-DFSDP_FP16: fp16 tensor cores and cuBLASLt types, fp16 NCCL
# reductions with --reduce-dtype fp16, the dynamic loss scale on by default). Each precision
# has its own objects (build/cuda, build/cuda-fp16; build/sim, build/sim-fp16); the binaries
# train_gpt, generate and export_weights are relinked when PRECISION changes (build/precision
# records the last one), and the simulator's fp16 trainer is train_gpt_sim_fp16.
PRECISION ?= bf16
ifeq ($(PRECISION),fp16)
  PRECISION_FLAGS := -DFSDP_FP16
  PSUF := -fp16
else ifeq ($(PRECISION),bf16)
  PRECISION_FLAGS :=
  PSUF :=
else
  $(error PRECISION=$(PRECISION): expected bf16 (the default) or fp16)
endif
CUDA_BUILD := $(BUILD)/cuda$(PSUF)
PRECISION_STAMP := $(BUILD)/precision
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(PRECISION_STAMP) 2>/dev/null)" = "$(PRECISION)" ] || echo $(PRECISION) > $(PRECISION_STAMP); })
# kernels/cuda/*.cu with nvcc; the host C files (train_gpt.c, fsdp/ without *_cpu.c, layers/,
# data/, train/) with the C compiler and -DFSDP_CUDA (act_t = bf16 bits).
# Communication (CUDA_COMM): nccl (fsdp/comm_nccl.c, linked with NCCL, compiled with mpicc when
# found) when NCCL is found, else single (comm_mpi.c's single-rank mode, -DNO_MPI: one GPU).
# After changing CUDA_COMM, `make clean` (the objects do not record it).
# CUDA_HOME: /usr/local/cuda when it has nvcc, else the prefix of the nvcc on PATH, else the
# pip wheels (python3 site-packages/nvidia/{cu13,cuda_nvcc}). Libraries are looked up in
# CUDA_HOME, then in the pip wheels (nvidia/{cu13,cublas,cuda_runtime}/lib); the binary gets
# an rpath to the directories found. NCCL_HOME (nccl.h, libnccl) is found the same way.
CUDA_ARCH ?= 90
comma := ,
py_nvidia = $(shell python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
ifeq ($(origin CUDA_HOME),undefined)
  ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
    CUDA_HOME := /usr/local/cuda
  else ifneq ($(shell command -v nvcc 2>/dev/null),)
    CUDA_HOME := $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v nvcc)))
  else
    PY_NVIDIA := $(py_nvidia)
    CUDA_HOME := $(patsubst %/bin/nvcc,%,$(firstword $(wildcard $(PY_NVIDIA)/cu13/bin/nvcc $(PY_NVIDIA)/cuda_nvcc/bin/nvcc)))
  endif
endif
NVCC := $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc))
# find_so NAME DIRS: the first libNAME.so, else the first versioned libNAME.so.* (pip wheels
# ship only those), as a path to link with.
find_so = $(firstword $(wildcard $(addsuffix /lib$(1).so,$(2))) $(sort $(wildcard $(addsuffix /lib$(1).so.*,$(2)))))
CUDA_LIB_DIRS := $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/targets/$(shell uname -m)-linux/lib)
CUDA_INC_DIRS := $(wildcard $(CUDA_HOME)/include)
ifeq ($(and $(call find_so,cublasLt,$(CUDA_LIB_DIRS)),$(call find_so,cudart,$(CUDA_LIB_DIRS))),)
  PY_NVIDIA ?= $(py_nvidia)
  CUDA_LIB_DIRS += $(wildcard $(addprefix $(PY_NVIDIA)/,cu13/lib cublas/lib cuda_runtime/lib))
  CUDA_INC_DIRS += $(wildcard $(addprefix $(PY_NVIDIA)/,cu13/include cublas/include cuda_runtime/include))
endif
CUBLASLT_SO := $(call find_so,cublasLt,$(CUDA_LIB_DIRS))
CUBLAS_SO := $(call find_so,cublas,$(CUDA_LIB_DIRS))
CUDART_SO := $(call find_so,cudart,$(CUDA_LIB_DIRS))
CUDA_RPATH := $(sort $(dir $(CUBLASLT_SO) $(CUBLAS_SO) $(CUDART_SO)))
ifeq ($(origin NCCL_HOME),undefined)
  NCCL_HOME := $(firstword $(patsubst %/include/nccl.h,%,$(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)))
  ifeq ($(NCCL_HOME),)
    PY_NVIDIA ?= $(py_nvidia)
    NCCL_HOME := $(patsubst %/include/nccl.h,%,$(firstword $(wildcard $(PY_NVIDIA)/nccl/include/nccl.h $(PY_NVIDIA)/cu13/include/nccl.h)))
  endif
endif
NCCL_SO := $(call find_so,nccl,$(wildcard $(NCCL_HOME)/lib64 $(NCCL_HOME)/lib /usr/lib/$(shell uname -m)-linux-gnu))

# -gencode for the GPU's own code (sm_90: H100/H200) plus PTX of the same level, which the
# driver can compile for newer GPUs. No Hopper-only (sm_90a) instructions are used.
NVCC_FLAGS ?= -O3 -std=c++17 -lineinfo -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
  -gencode arch=compute_$(CUDA_ARCH),code=compute_$(CUDA_ARCH) -Xcompiler -Wall,-Wextra $(PRECISION_FLAGS)
ifeq ($(origin CUDA_COMM),undefined)
  CUDA_COMM := $(if $(and $(NCCL_SO),$(wildcard fsdp/comm_nccl.c)),nccl,single)
endif
ifeq ($(CUDA_COMM),nccl)
  CC_CUDA_HOST := $(or $(MPICC),$(CC),cc)
  CUDA_MPI_FLAGS := $(MPI_FLAGS) $(addprefix -I,$(filter-out $(CUDA_INC_DIRS),$(wildcard $(NCCL_HOME)/include)))
  CUDA_COMM_EXCLUDE := %_cpu.c fsdp/comm_mpi.c
  NCCL_LIBS := $(NCCL_SO)
else
  CC_CUDA_HOST := $(or $(CC),cc)
  CUDA_MPI_FLAGS := -DNO_MPI
  CUDA_COMM_EXCLUDE := %_cpu.c %_nccl.c
  NCCL_LIBS :=
endif
CFLAGS_CUDA_HOST ?= -O3 -march=native -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -D_GNU_SOURCE \
  -DFSDP_CUDA $(PRECISION_FLAGS) $(CUDA_MPI_FLAGS) $(addprefix -I,$(CUDA_INC_DIRS))
CUDA_RPATH += $(dir $(NCCL_LIBS))
LDLIBS_CUDA := $(CUBLASLT_SO) $(CUBLAS_SO) $(CUDART_SO) $(NCCL_LIBS) \
  $(addprefix -Wl$(comma)-rpath$(comma),$(patsubst %/,%,$(sort $(CUDA_RPATH)))) -lstdc++ -lm -fopenmp

CUDA_KERNEL_SRCS := $(wildcard kernels/cuda/*.cu)
CUDA_KERNEL_OBJS := $(patsubst %.cu,$(CUDA_BUILD)/%.o,$(CUDA_KERNEL_SRCS))
CUDA_HOST_SRCS := train_gpt.c $(filter-out $(CUDA_COMM_EXCLUDE),$(wildcard fsdp/*.c)) $(wildcard layers/*.c) \
                  $(wildcard data/*.c) $(wildcard train/*.c) $(wildcard weights/*.c) $(wildcard kernels/host/*.c)
CUDA_HOST_OBJS := $(patsubst %.c,$(CUDA_BUILD)/%.o,$(CUDA_HOST_SRCS))
CUDA_HEADERS := $(HEADERS) $(wildcard kernels/cuda/*.cuh kernels/cuda/*.h)

$(CUDA_BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -I. -DFSDP_CUDA -c $< -o $@

$(CUDA_BUILD)/%.o: %.c $(CUDA_HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CUDA_HOST) $(CFLAGS_CUDA_HOST) -c $< -o $@
# The host AdamW of --offload optim: vectorized sqrtf as in the CPU kernels (see CPU_KERNEL_FLAGS).
$(CUDA_BUILD)/kernels/host/%.o: CFLAGS_CUDA_HOST += -fno-math-errno

ifneq ($(NVCC),)
train_gpt: $(CUDA_HOST_OBJS) $(CUDA_KERNEL_OBJS) $(PRECISION_STAMP)
	$(CC_CUDA_HOST) $(filter %.o,$^) -o $@ $(LDLIBS_CUDA)
# the tools of generate_cpu / export_weights_cpu on the CUDA backend
generate export_weights: %: $(filter-out $(CUDA_BUILD)/train_gpt.o,$(CUDA_HOST_OBJS)) $(CUDA_BUILD)/%.o \
                            $(CUDA_KERNEL_OBJS) $(PRECISION_STAMP)
	$(CC_CUDA_HOST) $(filter %.o,$^) -o $@ $(LDLIBS_CUDA)
else
.PHONY: train_gpt
train_gpt:
	@echo "error: nvcc not found: set CUDA_HOME to a CUDA toolkit (or build train_gpt_cpu)"; exit 1
endif

cuda-config:
	@echo "CUDA_HOME   $(CUDA_HOME)"
	@echo "NVCC        $(NVCC)"
	@echo "cublasLt    $(CUBLASLT_SO)"
	@echo "cublas      $(CUBLAS_SO)"
	@echo "cudart      $(CUDART_SO)"
	@echo "includes    $(CUDA_INC_DIRS)"
	@echo "rpath       $(sort $(CUDA_RPATH))"
	@echo "NCCL_HOME   $(NCCL_HOME)"
	@echo "nccl        $(NCCL_SO)"
	@echo "CUDA_COMM   $(CUDA_COMM) (host compiler $(CC_CUDA_HOST))"
	@echo "CUDA_ARCH   $(CUDA_ARCH)"
	@echo "PRECISION   $(PRECISION) (objects in $(CUDA_BUILD))"

# ---- tests --------------------------------------------------------------------------
TEST_SRCS := $(wildcard test/test_*.c)
TEST_BINS := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRCS))
$(BUILD)/test/%: test/%.c $(CPU_LIB_OBJS) $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)
# tools the reference checks run (test/ref_gpt.py uses build/tool/gpt_dump)
$(BUILD)/tool/%: test/tool_%.c $(CPU_LIB_OBJS) $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)

# The trainer with AddressSanitizer and UBSan, for the input fuzzer (test/fuzz_inputs.py).
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
$(BUILD)/asan/%.o: %.c $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $(SAN_FLAGS) -c $< -o $@
$(BUILD)/asan/train_gpt_cpu: $(patsubst %.c,$(BUILD)/asan/%.o,train_gpt.c $(CPU_LIB_SRCS))
	$(CC_CPU) $(SAN_FLAGS) $^ -o $@ $(LDLIBS_CPU)

test-bins: $(TEST_BINS) train_gpt_cpu generate_cpu export_weights_cpu $(BUILD)/tool/gpt_dump $(BUILD)/tool/t5_dump \
           $(BUILD)/tool/weights_logits $(BUILD)/asan/train_gpt_cpu

# CI has nvcc but no GPU: `make test` compiles the CUDA binary and GPU tests when it can.
ifneq ($(NVCC),)
  TEST_CUDA_BUILD := train_gpt generate export_weights $(BUILD)/test-gpu/test_kernels_gpu cuda-fp16-build
else
  TEST_CUDA_BUILD := cuda-skip-note
endif
cuda-skip-note:
	@echo "note: nvcc not found (set CUDA_HOME): skipping the CUDA build"

# `make test` first installs what the suite needs when it is missing (test/setup.sh), then builds
# and runs it in a fresh make, which sees the compilers and MPI just installed.
test:
	@bash test/setup.sh
	@$(MAKE) --no-print-directory test-suite

test-suite: test-bins sim-bins sim-bins-fp16 predict-bins $(TEST_CUDA_BUILD) data/addition/train_000.bin
	bash test/run_tests.sh
# The fp16 builds, from a make of their own (PRECISION is read once per make): the simulator's
# fp16 kernels and trainer for the suite, and the fp16 CUDA binary objects (compiled, not run).
sim-bins-fp16:
	@$(MAKE) --no-print-directory PRECISION=fp16 sim-bins
cuda-fp16-build:
	@$(MAKE) --no-print-directory PRECISION=fp16 $(BUILD)/cuda-fp16/train_gpt $(BUILD)/test-gpu-fp16/test_kernels_gpu

# ---- GPU tests (run on a machine with a GPU) ----------------------------------------
# test_kernels_gpu holds both backends: the CUDA kernels, and the CPU reference kernels compiled
# as C with act_t = float, whose kernels.h symbols objcopy renames to cpu_<name> (the list is
# generated from kernels.h; test/gpu/cpu_ref.h declares them, checked against kernels.h).
# The CPU reference objects are the same for both precisions (build/test-gpu/cpu_ref); the
# test binary is build/test-gpu/test_kernels_gpu, or build/test-gpu-fp16/ for PRECISION=fp16.
CPU_REF := $(BUILD)/test-gpu
GPU_TEST := $(BUILD)/test-gpu$(PSUF)
CPU_REF_OBJS := $(patsubst kernels/cpu/%.c,$(CPU_REF)/cpu_ref/%.o,$(wildcard kernels/cpu/*.c))
CFLAGS_CPU_REF := -O3 -march=native -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -D_GNU_SOURCE

$(CPU_REF)/cpu_syms.txt: kernels/kernels.h
	@mkdir -p $(dir $@)
	grep -oE '^[A-Za-z_][A-Za-z_0-9 ]*[ *]+[a-z_][a-z_0-9]*\(' $< | sed -E 's/.*[ *]([a-z_][a-z_0-9]*)\($$/\1 cpu_\1/' > $@

$(CPU_REF)/cpu_ref/%.o: kernels/cpu/%.c $(HEADERS) $(CPU_REF)/cpu_syms.txt
	@mkdir -p $(dir $@)
	$(CC_CUDA_HOST) $(CFLAGS_CPU_REF) $(CPU_KERNEL_FLAGS) -c $< -o $@.plain.o
	objcopy --redefine-syms=$(CPU_REF)/cpu_syms.txt $@.plain.o $@
	@rm -f $@.plain.o

# cpu_ref.h's prototypes must be kernels.h's with act_t = float: compiled together, they
# conflict if they ever differ.
$(CPU_REF)/cpu_ref_check.o: test/gpu/cpu_ref_check.c test/gpu/cpu_ref.h kernels/kernels.h
	@mkdir -p $(dir $@)
	$(CC_CUDA_HOST) $(CFLAGS_CPU_REF) -c $< -o $@

$(GPU_TEST)/test_kernels_gpu: test/gpu/test_kernels_gpu.c test/gpu/cpu_ref.h $(CPU_REF)/cpu_ref_check.o \
                              $(CUDA_KERNEL_OBJS) $(CPU_REF_OBJS) $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(CC_CUDA_HOST) $(CFLAGS_CUDA_HOST) $< $(CUDA_KERNEL_OBJS) $(CPU_REF_OBJS) -o $@ $(LDLIBS_CUDA)

test-gpu: $(GPU_TEST)/test_kernels_gpu train_gpt train_gpt_cpu data/addition/train_000.bin
	GPU_TEST=$(GPU_TEST) bash test/gpu/test_gpu.sh
# The benchmark sweep on this machine's GPU (scripts/bench.sh: fsdp.c, PyTorch eager and compiled,
# simulated links; results.md). BENCH_ARGS passes its options, e.g. BENCH_ARGS="--quick".
bench: train_gpt data/addition/train_000.bin
	bash scripts/bench.sh $(BENCH_ARGS)
# The fp16 binary for the fp16 build's checks, beside train_gpt (not overwriting it).
$(BUILD)/cuda-fp16/train_gpt: $(CUDA_HOST_OBJS) $(CUDA_KERNEL_OBJS)
	$(CC_CUDA_HOST) $^ -o $@ $(LDLIBS_CUDA)

# ---- CUDA simulator (test/cudasim/README.md) ------------------------------------------
# kernels/cuda/*.cu compiled by g++ against test/cudasim/include (the simulator's CUDA headers)
# after cu2cpp.sh rewrites the <<<>>> launches. The kernel files get GCC's thread-sanitizer
# instrumentation (no runtime library: test/cudasim/check.cpp implements its per-access calls
# as memcheck, racecheck, initcheck and alignment checks); vectorization and store merging are
# off so every access is the size the source wrote. The simulator's own files are plain C++.
SIM_OPT ?= -O2
# build/sim, or build/sim-O0 for SIM_OPT=-O0 (kernels without optimization, for gdb)
# The simulator's runtime (libcudasim.a, test_ptx, test_cublaslt) serves both precisions
# (SIM_RT); the kernels, the host code and what links them are per precision (SIM: build/sim or
# build/sim-fp16; the fp16 trainer is ./train_gpt_sim_fp16).
SIM_RT := $(BUILD)/sim$(subst -O2,,$(SIM_OPT))
SIM := $(SIM_RT)$(PSUF)
SIM_BIN_SUFFIX := $(subst -,_,$(PSUF))
SIM_CXX ?= g++
SIM_INC := -I. -Itest/cudasim/include
SIM_INSTRUMENT := -fsanitize=thread --param tsan-instrument-func-entry-exit=0 -fno-tree-vectorize \
  -fno-tree-slp-vectorize -fno-store-merging
SIM_KERNEL_FLAGS := -std=c++17 $(SIM_OPT) -g -gdwarf-4 -DFSDP_CUDA $(PRECISION_FLAGS) $(SIM_INC) $(SIM_INSTRUMENT) \
  -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas
SIM_RT_FLAGS := -std=c++17 -O2 -g $(SIM_INC) -Wall -Wextra -Wno-unused-parameter
SIM_HEADERS := $(wildcard test/cudasim/*.h test/cudasim/include/*.h test/cudasim/include/*/*.h \
  test/cudasim/include/cub/*/*.cuh)
SIM_RT_SRCS := $(filter-out test/cudasim/test_% test/cudasim/nccl.cpp,$(wildcard test/cudasim/*.cpp))
SIM_RT_OBJS := $(patsubst test/cudasim/%.cpp,$(SIM_RT)/rt/%.o,$(SIM_RT_SRCS))
SIM_KERNEL_OBJS := $(patsubst kernels/cuda/%.cu,$(SIM)/kernels/%.o,$(CUDA_KERNEL_SRCS))
SIM_LIBS := -lstdc++ -lm -fopenmp -ldl

$(SIM)/kernels/%.cpp: kernels/cuda/%.cu test/cudasim/cu2cpp.sh
	@mkdir -p $(dir $@)
	sh test/cudasim/cu2cpp.sh $< $@
$(SIM)/kernels/%.o: $(SIM)/kernels/%.cpp $(CUDA_HEADERS) $(SIM_HEADERS) Makefile
	$(SIM_CXX) $(SIM_KERNEL_FLAGS) -c $< -o $@
$(SIM_RT)/rt/%.o: test/cudasim/%.cpp $(SIM_HEADERS)
	@mkdir -p $(dir $@)
	$(SIM_CXX) $(SIM_RT_FLAGS) -c $< -o $@
$(SIM_RT)/libcudasim.a: $(SIM_RT_OBJS)
	rm -f $@ && ar rcs $@ $^

# test/gpu/test_kernels_gpu.c itself, on the simulator (--profile small in the suite).
$(SIM)/test_kernels_gpu: test/gpu/test_kernels_gpu.c test/gpu/cpu_ref.h $(CPU_REF)/cpu_ref_check.o $(SIM_KERNEL_OBJS) \
                         $(CPU_REF_OBJS) $(SIM_RT)/libcudasim.a $(HEADERS)
	$(or $(CC),cc) -O2 -g -std=c11 -Wall -Wextra -Wno-unused-parameter -I. -D_GNU_SOURCE -DFSDP_CUDA $(PRECISION_FLAGS) \
	  $(SIM_INC) -c $< -o $@.o
	$(SIM_CXX) $@.o $(SIM_KERNEL_OBJS) $(CPU_REF_OBJS) $(SIM_RT)/libcudasim.a -o $@ $(SIM_LIBS)

$(SIM_RT)/test_ptx: test/cudasim/test_ptx.cpp $(SIM_RT)/libcudasim.a test/test.h
	$(SIM_CXX) $(SIM_RT_FLAGS) $< $(SIM_RT)/libcudasim.a -o $@ $(SIM_LIBS)
$(SIM_RT)/test_cublaslt: test/cudasim/test_cublaslt.cpp $(SIM_RT)/libcudasim.a test/test.h
	$(SIM_CXX) $(SIM_RT_FLAGS) $< $(SIM_RT)/libcudasim.a -o $@ $(SIM_LIBS)
print-sim-kernel-flags:
	@echo $(SIM_KERNEL_FLAGS)
print-sim-host-objs:
	@echo $(SIM_HOST_OBJS)
.PRECIOUS: $(SIM)/kernels/%.cpp

# ./train_gpt_sim: the CUDA trainer (train_gpt.c, fsdp/ with comm_nccl.c and device_cuda.c,
# layers/, data/, train/) on the simulator, NCCL over MPI (test/cudasim/nccl.cpp). Same options
# as train_gpt; run it under mpirun for several ranks.
SIM_HOST_SRCS := train_gpt.c $(filter-out %_cpu.c fsdp/comm_mpi.c,$(wildcard fsdp/*.c)) $(wildcard layers/*.c) \
                 $(wildcard data/*.c) $(wildcard train/*.c) $(wildcard weights/*.c) $(wildcard kernels/host/*.c)
SIM_HOST_OBJS := $(patsubst %.c,$(SIM)/host/%.o,$(SIM_HOST_SRCS))
MPI_COMPILE_FLAGS := $(if $(MPICC),$(shell $(MPICC) --showme:compile 2>/dev/null))
$(SIM)/host/%.o: %.c $(HEADERS) $(SIM_HEADERS) test/cudasim/include/nccl.h $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) -O2 -g -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -D_GNU_SOURCE -DFSDP_CUDA \
	  $(PRECISION_FLAGS) $(SIM_INC) -c $< -o $@
$(SIM_RT)/rt/nccl.o: test/cudasim/nccl.cpp $(SIM_HEADERS) test/cudasim/include/nccl.h $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(SIM_CXX) $(SIM_RT_FLAGS) $(MPI_COMPILE_FLAGS) -c $< -o $@
ifneq ($(MPICC),)
train_gpt_sim$(SIM_BIN_SUFFIX): $(SIM_HOST_OBJS) $(SIM_KERNEL_OBJS) $(SIM_RT)/rt/nccl.o $(SIM_RT)/libcudasim.a
	$(MPICC) $^ -o $@ $(SIM_LIBS) -lpthread
# generate.c's CUDA build on the simulator (bf16 logits), for test/test_weights.py
generate_sim: $(filter-out $(SIM)/host/train_gpt.o,$(SIM_HOST_OBJS)) $(SIM)/host/generate.o $(SIM_KERNEL_OBJS) \
              $(SIM_RT)/rt/nccl.o $(SIM_RT)/libcudasim.a
	$(MPICC) $^ -o $@ $(SIM_LIBS) -lpthread
else
train_gpt_sim$(SIM_BIN_SUFFIX):
	@echo "error: train_gpt_sim needs MPI (mpicc): the simulated NCCL runs over it"; exit 1
endif

SIM_TESTS := $(SIM)/test_kernels_gpu $(SIM_RT)/test_ptx $(SIM_RT)/test_cublaslt $(SIM_KERNEL_OBJS)
# (PRECISION=fp16: the fp16 kernels, their test and train_gpt_sim_fp16; generate_sim is bf16 only)
sim-bins: $(SIM_TESTS) $(if $(MPICC),train_gpt_sim$(SIM_BIN_SUFFIX) $(if $(PSUF),,generate_sim)) train_gpt_cpu
test-sim: sim-bins sim-bins-fp16
	bash test/cudasim/run_sim_tests.sh

# ---- prediction binary (timeline/timeline.h) ----------------------------------------
# predict_gpt: the same layers/, fsdp/ (without its device, comm and initialization files),
# data/ and train/ code on the timeline backend (timeline/*.c), which computes nothing and
# advances modelled clocks. Built like the CUDA trainer's host code (-DFSDP_CUDA: act_t is bf16
# bits, so the memory plan is train_gpt's), single-process (-DNO_MPI). The trainers re-execute
# it for --predict (train/predict_exec.c).
PREDICT_LIB_SRCS := $(filter-out timeline/predict_main.c,$(wildcard timeline/*.c)) \
                    $(filter-out fsdp/device_% fsdp/comm_% fsdp/init.c,$(wildcard fsdp/*.c)) \
                    $(wildcard layers/*.c) $(wildcard data/*.c) $(wildcard train/*.c)
PREDICT_LIB_OBJS := $(patsubst %.c,$(BUILD)/predict/%.o,$(PREDICT_LIB_SRCS))
CFLAGS_PREDICT := -O2 -std=c11 -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -I. -D_GNU_SOURCE \
  -DFSDP_CUDA -DNO_MPI
PREDICT_HEADERS := $(HEADERS) $(wildcard timeline/*.h)
$(BUILD)/predict/%.o: %.c $(PREDICT_HEADERS)
	@mkdir -p $(dir $@)
	$(or $(CC),cc) $(CFLAGS_PREDICT) -c $< -o $@
predict_gpt: $(BUILD)/predict/timeline/predict_main.o $(PREDICT_LIB_OBJS)
	$(or $(CC),cc) $^ -o $@ -lm
# The timeline's own tests (collective models, a toy model's timeline against a hand-drawn one).
$(BUILD)/predict/test_timeline: test/predict/test_timeline.c $(PREDICT_LIB_OBJS) $(PREDICT_HEADERS) test/test.h
	$(or $(CC),cc) $(CFLAGS_PREDICT) $< $(PREDICT_LIB_OBJS) -o $@ -lm
# train_gpt_cpu with its kernels, device and communication entry points logged by name
# (test/predict/call_log.c, -finstrument-functions), to compare call sequences with predict_gpt.
CALLS_INSTRUMENTED := $(wildcard kernels/cpu/*.c) fsdp/device_cpu.c fsdp/comm_mpi.c
CALLS_OBJS := $(patsubst %.c,$(BUILD)/calls/%.o,$(CALLS_INSTRUMENTED)) \
              $(filter-out $(patsubst %.c,$(BUILD)/cpu/%.o,$(CALLS_INSTRUMENTED)),$(CPU_LIB_OBJS))
$(BUILD)/calls/%.o: %.c $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) -finstrument-functions -c $< -o $@
$(BUILD)/calls/train_gpt_cpu: $(BUILD)/cpu/train_gpt.o $(CALLS_OBJS) test/predict/call_log.c
	$(CC_CPU) $(CFLAGS_CPU) -rdynamic $(BUILD)/cpu/train_gpt.o $(CALLS_OBJS) test/predict/call_log.c -o $@ $(LDLIBS_CPU) -ldl
predict-bins: predict_gpt $(BUILD)/predict/test_timeline $(BUILD)/calls/train_gpt_cpu

# ---- built-in dataset: synthetic addition problems as byte tokens -------------------
$(BUILD)/make_addition: scripts/make_addition.c data/shard.c data/shard.h
	@mkdir -p $(BUILD)
	$(or $(CC),cc) -O2 -std=c11 -Wall -I. -D_GNU_SOURCE scripts/make_addition.c data/shard.c -o $@ -lm

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

clean:
	rm -rf $(BUILD) train_gpt_cpu train_gpt train_gpt_sim train_gpt_sim_fp16 generate_sim predict_gpt

.PHONY: predict-bins test test-suite test-bins test-gpu bench test-sim sim-bins sim-bins-fp16 cuda-fp16-build train_gpt_sim cuda-config cuda-skip-note run print-run-args clean
