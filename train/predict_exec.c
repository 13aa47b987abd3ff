// predict_exec.c: --predict from either trainer. The prediction runs on the timeline backend
// (timeline/), a third build of the same layers/, fsdp/ and train/ code, linked into its own
// binary, predict_gpt, beside train_gpt and train_gpt_cpu: a backend is chosen at link time,
// so a trainer cannot switch to it; it re-executes predict_gpt with its own arguments instead,
// before MPI or a GPU is touched.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

void predict_exec_if_asked(int argc, char** argv) {
  int asked = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--predict") || !strncmp(argv[i], "--predict=", 10) || !strcmp(argv[i], "--predict-sweep")) asked = 1;
  if (!asked) return;
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
    fprintf(stderr, "error: --predict runs the prediction binary %s, which is not there: build it with `make predict_gpt` "
                    "(or set FSDP_PREDICT_BIN)\n", path);
    exit(2);
  }
  const char* ranks = getenv("OMPI_COMM_WORLD_SIZE");
  if (ranks && atoi(ranks) > 1) {
    fprintf(stderr, "error: --predict simulates all --world N ranks from one process: run it without mpirun\n");
    exit(2);
  }
  argv[0] = path;
  execv(path, argv);
  perror("error: --predict: cannot run the prediction binary");
  exit(2);
}
