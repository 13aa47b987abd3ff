# mk/cuda.mk: the CUDA build (train_gpt, generate, export_weights; PRECISION=fp16) and the GPU
# tests (make test-gpu). Included by the Makefile.
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
# The core and kernels/cuda/: its *.cu kernels with nvcc; the host C files (train_gpt.c, the core,
# the backend's device and NCCL files) with the C compiler and -DFSDP_CUDA (act_t = bf16 bits).
# Communication (CUDA_COMM): nccl (kernels/cuda/comm_nccl.c, linked with NCCL, compiled with
# mpicc when found) when NCCL is found, else single (kernels/cpu/comm_mpi.c's single-rank mode,
# -DNO_MPI: one GPU).
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
  CUDA_COMM := $(if $(and $(NCCL_SO),$(wildcard kernels/cuda/comm_nccl.c)),nccl,single)
endif
ifeq ($(CUDA_COMM),nccl)
  CC_CUDA_HOST := $(or $(MPICC),$(CC),cc)
  CUDA_MPI_FLAGS := $(MPI_FLAGS) $(addprefix -I,$(filter-out $(CUDA_INC_DIRS),$(wildcard $(NCCL_HOME)/include)))
  CUDA_COMM_SRCS := kernels/cuda/comm_nccl.c
  NCCL_LIBS := $(NCCL_SO)
else
  CC_CUDA_HOST := $(or $(CC),cc)
  CUDA_MPI_FLAGS := -DNO_MPI
  CUDA_COMM_SRCS := kernels/cpu/comm_mpi.c
  NCCL_LIBS :=
endif
CFLAGS_CUDA_HOST ?= -O3 -march=native -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -D_GNU_SOURCE \
  -DFSDP_CUDA $(PRECISION_FLAGS) $(CUDA_MPI_FLAGS) $(addprefix -I,$(CUDA_INC_DIRS))
CUDA_RPATH += $(dir $(NCCL_LIBS))
LDLIBS_CUDA := $(CUBLASLT_SO) $(CUBLAS_SO) $(CUDART_SO) $(NCCL_LIBS) \
  $(addprefix -Wl$(comma)-rpath$(comma),$(patsubst %/,%,$(sort $(CUDA_RPATH)))) -lstdc++ -lm -fopenmp

CUDA_KERNEL_SRCS := $(wildcard kernels/cuda/*.cu)
CUDA_KERNEL_OBJS := $(patsubst %.cu,$(CUDA_BUILD)/%.o,$(CUDA_KERNEL_SRCS))
CUDA_BACKEND_SRCS := $(filter-out kernels/cuda/comm_nccl.c,$(wildcard kernels/cuda/*.c)) $(CUDA_COMM_SRCS)
CUDA_HOST_SRCS := train_gpt.c $(CORE_SRCS) $(CUDA_BACKEND_SRCS)
CUDA_HOST_OBJS := $(patsubst %.c,$(CUDA_BUILD)/%.o,$(CUDA_HOST_SRCS))
CUDA_HEADERS := $(HEADERS) $(wildcard kernels/cuda/*.cuh)

# Each kernel object keeps ptxas's resource report beside it (OBJ.ptxas: registers, spills, shared
# memory per kernel), which test/test_kernel_report.sh checks for spills; nvcc's other messages
# still go to the terminal.
$(CUDA_BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -Xptxas -v -I. -DFSDP_CUDA -c $< -o $@ 2> $@.ptxas; s=$$?; \
	  grep -v -e '^ptxas info' -e 'bytes stack frame' $@.ptxas >&2; exit $$s

$(CUDA_BUILD)/%.o: %.c $(CUDA_HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CUDA_HOST) $(CFLAGS_CUDA_HOST) -c $< -o $@
# The host AdamW of --offload optim: vectorized sqrtf as in the CPU kernels (see CPU_KERNEL_FLAGS).
$(CUDA_BUILD)/kernels/cuda/adamw_host.o: CFLAGS_CUDA_HOST += -fno-math-errno

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

# The fp16 trainer beside train_gpt (not overwriting it), for the suite's compile check.
# ---- GPU tests (run on a machine with a GPU) ----------------------------------------
# test_kernels_gpu holds both backends: the CUDA kernels, and the CPU reference kernels compiled
# as C with act_t = float, whose kernels.h symbols objcopy renames to cpu_<name> (the list is
# generated from kernels.h; test/gpu/cpu_ref.h declares them, checked against kernels.h).
# The CPU reference objects are the same for both precisions (build/test-gpu/cpu_ref); the
# test binary is build/test-gpu/test_kernels_gpu, or build/test-gpu-fp16/ for PRECISION=fp16.
CPU_REF := $(BUILD)/test-gpu
GPU_TEST := $(BUILD)/test-gpu$(PSUF)
# (kernels/cpu/'s compute kernels: its device and MPI files stay out)
CPU_KERNEL_SRCS := $(filter-out kernels/cpu/device.c kernels/cpu/comm_mpi.c,$(wildcard kernels/cpu/*.c))
CPU_REF_OBJS := $(patsubst kernels/cpu/%.c,$(CPU_REF)/cpu_ref/%.o,$(CPU_KERNEL_SRCS))
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
# The static kernel report (scripts/kernel_report.py, no GPU needed): registers, spills, shared
# memory and occupancy of every kernel for sm_90, bf16 and fp16, into docs/kernel_report.md.
# The nvcc make found (empty without one), for test/test_kernel_report.sh.
print-nvcc:
	@echo $(NVCC)
kernel-report: $(GPU_TEST)/test_kernels_gpu
	python3 scripts/kernel_report.py --out docs/kernel_report.md --table-bin $(GPU_TEST)/test_kernels_gpu --print-attention
$(BUILD)/cuda-fp16/train_gpt: $(CUDA_HOST_OBJS) $(CUDA_KERNEL_OBJS)
	$(CC_CUDA_HOST) $^ -o $@ $(LDLIBS_CUDA)
