# mk/predict.mk: predict_gpt, the timeline backend's binary (--predict, and --plan for the CUDA
# dtypes from the CPU binary). Included by the Makefile.
# ---- prediction binary (kernels/timeline/timeline.h) ------------------------------------
# predict_gpt: the core on the timeline backend (kernels/timeline/), which computes nothing and
# advances modelled clocks, and predict/ (the run, the report and the sweep). Built like the
# CUDA trainer's host code (-DFSDP_CUDA: act_t is bf16 bits, so the memory plan is train_gpt's),
# single-process (-DNO_MPI). The trainers re-execute it for --predict (train/predict_exec.c).
PREDICT_LIB_SRCS := $(CORE_SRCS) $(wildcard kernels/timeline/*.c) predict/predict.c
PREDICT_LIB_OBJS := $(patsubst %.c,$(BUILD)/predict/%.o,$(PREDICT_LIB_SRCS))
CFLAGS_PREDICT := -O2 -std=c11 -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -I. -D_GNU_SOURCE \
  -DFSDP_CUDA -DNO_MPI
$(BUILD)/predict/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(or $(CC),cc) $(CFLAGS_PREDICT) -c $< -o $@
predict_gpt: $(BUILD)/predict/predict/predict_gpt.o $(PREDICT_LIB_OBJS)
	$(or $(CC),cc) $^ -o $@ -lm
# The timeline's own tests (collective models, a toy model's timeline against a hand-drawn one).
$(BUILD)/predict/test_timeline: test/predict/test_timeline.c $(PREDICT_LIB_OBJS) $(HEADERS)
	$(or $(CC),cc) $(CFLAGS_PREDICT) $< $(PREDICT_LIB_OBJS) -o $@ -lm
predict-bins: predict_gpt $(BUILD)/predict/test_timeline
