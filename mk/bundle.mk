# mk/bundle.mk: the GPU bundle (make gpu-bundle): one folder with everything a short GPU window
# needs, prebuilt on a machine without a GPU, and its run script (scripts/gpu_bundle.sh, run.sh
# there). Included by the Makefile. docs/performance.md says how to send it and read what
# comes back.
#
#   make gpu-bundle [LLMC_DIR=ext/llm.c]   build/gpu-bundle/: train_gpt (bf16, sm_90, NCCL
#                                          without MPI, host code for any x86-64), the GPU kernel
#                                          test, llm.c's train_gpt2cu (plain and cuDNN, when
#                                          LLMC_DIR is given), the token shard, the CPU trainer's
#                                          reference losses, the timeline's predictions
#   make gpu-bundle-sim                    build/gpu-bundle-sim/: the same folder around the CUDA
#                                          simulator (train_gpt_sim, the kernel test's simulator
#                                          build), at tiny shapes: the run script end to end
#                                          without a GPU (test/test_gpu_bundle.sh)
# The bundle's host objects are compiled for a generic x86-64 (never -march=native: the GPU
# machine has another CPU) and without MPI (train_gpt starts where OpenMPI is not installed; one
# rank, or several through NCCL_COMM_ID / --init-dir). The CUDA kernel objects are the build's
# own (nvcc's host code never targets the build machine's CPU). Libraries: the run script
# finds cuBLASLt, NCCL, the CUDA runtime and cuDNN on the GPU machine (its CUDA, or the NVIDIA
# packages PyTorch brings); the bundle carries libgomp as a fallback.
GPU_BUNDLE := $(BUILD)/gpu-bundle
GPU_BUNDLE_SIM := $(BUILD)/gpu-bundle-sim
BUNDLE_OBJ := $(BUILD)/bundle-obj$(PSUF)
BUNDLE_ARCH := -march=x86-64 -mtune=generic
BUNDLE_CFLAGS := $(filter-out -march=native -DNO_MPI,$(CFLAGS_CUDA_HOST)) $(BUNDLE_ARCH) -DNO_MPI
BUNDLE_HOST_OBJS := $(patsubst %.c,$(BUNDLE_OBJ)/%.o,$(CUDA_HOST_SRCS))
BUNDLE_CPU_REF_OBJS := $(patsubst kernels/cpu/%.c,$(BUNDLE_OBJ)/cpu_ref/%.o,$(CPU_KERNEL_SRCS))
$(BUNDLE_OBJ)/%.o: %.c $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(or $(CC),cc) $(BUNDLE_CFLAGS) -c $< -o $@
$(BUNDLE_OBJ)/kernels/cuda/adamw_host.o: BUNDLE_CFLAGS += -fno-math-errno
$(BUNDLE_OBJ)/cpu_ref/%.o: kernels/cpu/%.c $(HEADERS) $(CPU_REF)/cpu_syms.txt
	@mkdir -p $(dir $@)
	$(or $(CC),cc) $(filter-out -march=native,$(CFLAGS_CPU_REF)) $(BUNDLE_ARCH) $(CPU_KERNEL_FLAGS) -c $< -o $@.plain.o
	objcopy --redefine-syms=$(CPU_REF)/cpu_syms.txt $@.plain.o $@
	@rm -f $@.plain.o

ifneq ($(NVCC),)
$(BUNDLE_OBJ)/train_gpt: $(BUNDLE_HOST_OBJS) $(CUDA_KERNEL_OBJS)
	$(or $(CC),cc) $^ -o $@ $(LDLIBS_CUDA) -ldl
$(BUNDLE_OBJ)/test_kernels_gpu: test/gpu/test_kernels_gpu.c test/gpu/cpu_ref.h $(CPU_REF)/cpu_ref_check.o \
                                $(CUDA_KERNEL_OBJS) $(BUNDLE_CPU_REF_OBJS) $(CUDA_HEADERS)
	$(or $(CC),cc) $(BUNDLE_CFLAGS) $< $(CUDA_KERNEL_OBJS) $(BUNDLE_CPU_REF_OBJS) -o $@ $(LDLIBS_CUDA)
endif

# scripts/gpu_bundle_build.sh assembles the folder from the binaries (the conf in mk/ says what
# the run script runs, and so what the bundle predicts and which shard it writes).
gpu-bundle: $(BUNDLE_OBJ)/train_gpt $(BUNDLE_OBJ)/test_kernels_gpu train_gpt_cpu predict_gpt data/addition/train_000.bin
	@[ "$(PRECISION)" = bf16 ] || { echo "error: the GPU bundle is the bf16 build (got PRECISION=$(PRECISION))"; exit 1; }
	LLMC_DIR='$(LLMC_DIR)' NVCC='$(NVCC)' CC='$(or $(CC),cc)' bash scripts/gpu_bundle_build.sh --kind gpu \
	  --conf mk/bundle-gpu.conf --trainer $(BUNDLE_OBJ)/train_gpt --kernel-test $(BUNDLE_OBJ)/test_kernels_gpu $(GPU_BUNDLE)

gpu-bundle-sim: train_gpt_sim $(SIM)/test_kernels_gpu train_gpt_cpu predict_gpt data/addition/train_000.bin
	LLMC_DIR= NVCC='$(NVCC)' CC='$(or $(CC),cc)' bash scripts/gpu_bundle_build.sh --kind sim \
	  --conf mk/bundle-sim.conf --trainer train_gpt_sim --kernel-test $(SIM)/test_kernels_gpu $(GPU_BUNDLE_SIM)

.PHONY: gpu-bundle gpu-bundle-sim
