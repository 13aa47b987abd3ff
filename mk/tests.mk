# mk/tests.mk: the test programs (test/test_*.c), the tools the reference checks run, and the
# sanitizer build the fuzzer uses. test/run_tests.sh names what each part needs. Included by the
# Makefile.
TEST_SRCS := $(wildcard test/test_*.c)
TEST_BINS := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRCS))
$(BUILD)/test/%: test/%.c $(CPU_LIB_OBJS) $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)
# tools the reference checks run (test/ref_gpt.py uses build/tool/gpt_dump)
$(BUILD)/tool/%: test/tool_%.c $(CPU_LIB_OBJS) $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $< $(CPU_LIB_OBJS) -o $@ $(LDLIBS_CPU)

# The trainer and its tools with AddressSanitizer and UBSan, for the input fuzzer
# (test/fuzz_inputs.py).
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
$(BUILD)/asan/%.o: %.c $(HEADERS) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $(SAN_FLAGS) -c $< -o $@
$(BUILD)/asan/train_gpt_cpu $(BUILD)/asan/generate_cpu $(BUILD)/asan/export_weights_cpu: $(BUILD)/asan/%_cpu: \
    $(BUILD)/asan/%.o $(patsubst %.c,$(BUILD)/asan/%.o,$(CPU_LIB_SRCS))
	$(CC_CPU) $(SAN_FLAGS) $^ -o $@ $(LDLIBS_CPU)
# The CPU kernels' tests on the same build: the fuzz part runs the cases whose inputs are
# non-finite under UBSan.
$(BUILD)/asan/test/%: test/%.c $(patsubst %.c,$(BUILD)/asan/%.o,$(CPU_LIB_SRCS))
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS_CPU) $(SAN_FLAGS) $^ -o $@ $(LDLIBS_CPU)
