# mk/tests.mk: the test programs (test/test_*.c), the tools the reference checks run, and the
# sanitizer build the fuzzer uses. test/run_tests.sh names what each part needs. Included by the
# Makefile.
TEST_SRCS := $(wildcard test/test_*.c)
TEST_BINS := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRCS))
$(BUILD)/test/%: test/%.c $(CPU_LIB_OBJS) $(HEADERS) $(MPI_STAMP) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)
# tools the reference checks run (test/ref_gpt.py uses build/tool/gpt_dump)
$(BUILD)/tool/%: test/tool_%.c $(CPU_LIB_OBJS) $(HEADERS) $(MPI_STAMP) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)

# The trainer and its tools with AddressSanitizer and UBSan, for the input fuzzer
# (test/fuzz_inputs.py).
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
$(BUILD)/asan/%.o: %.c $(HEADERS) $(MPI_STAMP) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $(SAN_FLAGS) -c $< -o $@
$(BUILD)/asan/train_gpt_cpu $(BUILD)/asan/generate_cpu $(BUILD)/asan/export_weights_cpu: $(BUILD)/asan/%_cpu: \
    $(BUILD)/asan/%.o $(patsubst %.c,$(BUILD)/asan/%.o,$(CPU_LIB_SRCS))
	$(CC_CPU) $(SAN_FLAGS) $^ -o $@ $(LDLIBS_CPU)

# The CPU trainer for each vector target of kernels/cpu/vec.h, each in a build folder of its
# own, for test/test_vec_widths.sh: $(BUILD)/vec/avx512/train_gpt_cpu (on a machine without
# AVX-512 that one is AVX2 too, and the test says so), .../avx2/ (what an AVX2 machine
# builds), .../plain/ (the C fallback). Each is a make of its own with that CPU_ARCH.
VEC_ARCH_avx512 := -march=native
VEC_ARCH_avx2 := -march=native -mno-avx512f
VEC_ARCH_plain := -march=native -DVEC_PLAIN
$(BUILD)/vec/%/train_gpt_cpu: FORCE
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/vec/$* CPU_ARCH='$(VEC_ARCH_$*)' $@
$(BUILD)/train_gpt_cpu: $(BUILD)/cpu/train_gpt.o $(CPU_LIB_OBJS)
	$(CC_CPU) $^ -o $@ $(LDLIBS_CPU)
FORCE:
