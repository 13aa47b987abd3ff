# mk/sim.mk: the CUDA simulator (test/cudasim/README.md): the project's kernels/cuda/*.cu and the
# CUDA trainer's host code compiled against the simulator's CUDA, cuBLASLt and NCCL. Included by
# the Makefile.
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
$(SIM)/kernels/%.o: $(SIM)/kernels/%.cpp $(CUDA_HEADERS) $(SIM_HEADERS) mk/sim.mk
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

# ./train_gpt_sim: the CUDA trainer (train_gpt.c, the core, kernels/cuda/'s device and NCCL
# files) on the simulator, NCCL over MPI (test/cudasim/nccl.cpp). Same options as train_gpt;
# run it under mpirun for several ranks.
SIM_HOST_SRCS := train_gpt.c $(CORE_SRCS) $(wildcard kernels/cuda/*.c)
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
# The fp16 simulator build, from a make of its own (PRECISION is read once per make). What both
# precisions share (the runtime, the CPU reference objects, the CPU trainer) is built first, by
# this make, so the two makes never write the same file.
sim-bins-fp16: $(SIM_RT)/libcudasim.a $(SIM_RT)/test_ptx $(SIM_RT)/test_cublaslt $(SIM_RT)/rt/nccl.o $(CPU_REF_OBJS) \
               $(CPU_REF)/cpu_ref_check.o train_gpt_cpu
	@$(MAKE) --no-print-directory PRECISION=fp16 sim-bins
