// predict_exec.c: --predict from either trainer, and --plan for the CUDA backend from the CPU
// one. The prediction runs on the timeline backend (kernels/timeline/), a third build of the same
// layers/, fsdp/ and train/ code, linked into its own binary, predict_gpt, beside train_gpt and
// train_gpt_cpu; its act_t is bf16, so it also plans train_gpt's memory. A backend is chosen at
// link time, so a trainer cannot switch to it; it re-executes predict_gpt with its own
// arguments instead, before MPI or a GPU is touched.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

// Re-executes predict_gpt (next to this binary, or FSDP_PREDICT_BIN) with these arguments; `what`
// names the option that asked, for the messages.
static void exec_predict_gpt(char** argv, const char* what) {
  char path[4096];
  const char* env = getenv("FSDP_PREDICT_BIN");
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    // predict_gpt next to this binary.
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n < 0) n = 0;
    path[n] = 0;
    char* slash = strrchr(path, '/');
    if (slash) slash[1] = 0;
    else path[0] = 0;
    strcat(path, "predict_gpt");
  }
  if (access(path, X_OK)) {
    fprintf(stderr, "error: %s runs the prediction binary %s, which is not there: build it with `make predict_gpt` "
                    "(or set FSDP_PREDICT_BIN)\n", what, path);
    exit(2);
  }
  const char* ranks = getenv("OMPI_COMM_WORLD_SIZE");
  if (ranks && atoi(ranks) > 1) {
    fprintf(stderr, "error: %s works for all --world N ranks from one process: run it without mpirun\n", what);
    exit(2);
  }
  argv[0] = path;
  execv(path, argv);
  fprintf(stderr, "error: %s: cannot run the prediction binary %s: %s\n", what, path, strerror(errno));
  exit(2);
}

void predict_exec_if_asked(int argc, char** argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--predict") || !strncmp(argv[i], "--predict=", 10) || !strcmp(argv[i], "--predict-sweep"))
      exec_predict_gpt(argv, "--predict");
}

void plan_exec_if_asked(int argc, char** argv) {
  if (strcmp(kernels_backend(), "cpu")) return;  // the CUDA binary plans its own backend
  int plan = 0;
  const char* backend = "cuda";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--plan")) plan = 1;
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[i + 1];
    if (!strncmp(argv[i], "--backend=", 10)) backend = argv[i] + 10;
  }
  if (plan && !strcmp(backend, "cuda")) exec_predict_gpt(argv, "--plan (for the cuda backend; --backend cpu plans this binary's fp32)");
}
