// The simulator's NVTX (nvtx3/nvToolsExt.h): the push/pop ranges the project uses, implemented in
// test/cudasim/stats.cpp, which opens and closes its per-step counts with the "step N" ranges.
#ifndef CUDASIM_NVTOOLSEXT_H
#define CUDASIM_NVTOOLSEXT_H
#ifdef __cplusplus
extern "C" {
#endif
int nvtxRangePushA(const char* message);
int nvtxRangePop(void);
#ifdef __cplusplus
}
#endif
#endif
