# fsdp.c build
#   make train_gpt_cpu   CPU reference binary (C11 + OpenMP, MPI when mpicc is found)
#   make run             build and train on the built-in addition dataset
#   make test            the CPU test suite (unit, reference, multi-rank)
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
CPU_LIB_SRCS := $(wildcard kernels/cpu/*.c) $(filter-out %_nccl.c %_cuda.c,$(wildcard fsdp/*.c)) \
                $(wildcard layers/*.c) $(wildcard data/*.c) $(wildcard train/*.c)
CPU_LIB_OBJS := $(patsubst %.c,$(BUILD)/cpu/%.o,$(CPU_LIB_SRCS))
HEADERS := $(wildcard kernels/*.h fsdp/*.h layers/*.h data/*.h train/*.h test/*.h)

$(BUILD)/cpu/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) -c $< -o $@

train_gpt_cpu: $(BUILD)/cpu/train_gpt.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)

# ---- tests --------------------------------------------------------------------------
TEST_SRCS := $(wildcard test/test_*.c)
TEST_BINS := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRCS))
$(BUILD)/test/%: test/%.c $(CPU_LIB_OBJS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)
# tools the reference checks run (test/ref_gpt.py uses build/tool/gpt_dump)
$(BUILD)/tool/%: test/tool_%.c $(CPU_LIB_OBJS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)

test-bins: $(TEST_BINS) train_gpt_cpu $(BUILD)/tool/gpt_dump $(BUILD)/tool/t5_dump

test: test-bins data/addition/train_000.bin
	bash test/run_tests.sh

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
run: train_gpt_cpu data/addition/train_000.bin
	./train_gpt_cpu $(RUN_ARGS)

print-run-args:
	@echo $(RUN_ARGS)

clean:
	rm -rf $(BUILD) train_gpt_cpu train_gpt

.PHONY: test test-bins run print-run-args clean
