# mk/predict.mk: predict_gpt, the timeline backend's binary (--predict, and --plan for the CUDA
# dtypes from the CPU binary). Included by the Makefile.
# ---- prediction binary (timeline/timeline.h) ----------------------------------------
# predict_gpt: the same layers/, fsdp/ (without its device, comm and initialization files),
# data/ and train/ code on the timeline backend (timeline/*.c), which computes nothing and
# advances modelled clocks. Built like the CUDA trainer's host code (-DFSDP_CUDA: act_t is bf16
# bits, so the memory plan is train_gpt's), single-process (-DNO_MPI). The trainers re-execute
# it for --predict (train/predict_exec.c).
PREDICT_LIB_SRCS := $(filter-out timeline/predict_main.c,$(wildcard timeline/*.c)) \
                    $(filter-out fsdp/device_% fsdp/comm_% fsdp/init.c,$(wildcard fsdp/*.c)) $(wildcard infra/*.c) \
                    $(wildcard layers/*.c) $(wildcard data/*.c) $(wildcard train/*.c) $(wildcard weights/*.c)
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
predict-bins: predict_gpt $(BUILD)/predict/test_timeline
