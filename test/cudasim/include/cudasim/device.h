// cudasim/device.h: what simulated device code calls into the simulator for: the thread's
// coordinates, barriers, warp collectives, dynamic shared memory and kernel launch. The
// functions live in test/cudasim/exec.cpp, which is compiled without instrumentation, so the
// simulator's own bookkeeping is never mistaken for the kernel's memory accesses.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <tuple>
#include <type_traits>
#include <utility>

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

extern "C" {
uint3 cudasim_thread_idx(void);
uint3 cudasim_block_idx(void);
dim3 cudasim_block_dim(void);
dim3 cudasim_grid_dim(void);
int cudasim_lane(void);
// __syncthreads at file:line.
void cudasim_syncthreads(const char* file, int line);
// __syncwarp(mask): the lanes of mask meet; orders their shared-memory accesses.
void cudasim_syncwarp(unsigned int mask, const char* file, int line);
// A warp collective `op` over the lanes of mask: every lane gives `bytes` at `mine`; when all
// of them have arrived, each gets all 32 contributions at `all` (32 * bytes; lanes outside
// the mask are left as they were). Lanes of the mask must all reach the same op.
void cudasim_warp_exchange(unsigned int mask, const void* mine, void* all, size_t bytes, const char* op,
                           const char* file, int line);
unsigned char* cudasim_dynamic_smem(void);
void cudasim_nanosleep(unsigned int ns);
unsigned long long cudasim_globaltimer(void);
}

namespace cudasim {

// The <<<grid, block, smem, stream>>> of one launch.
struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  void* stream;  // cudaStream_t
};

// Runs `entry(params)` for every thread of the grid (exec.cpp). `kernel` identifies the
// function (its address, for cudaFuncSetAttribute), `name` is its source text for reports.
// The launch owns `params` and frees it with `destroy` when the kernel has run.
void launch_kernel(const void* kernel, const char* name, const LaunchConfig& cfg, void (*entry)(void*),
                   void* params, size_t params_bytes, void (*destroy)(void*));

// `kernel<<<cfg>>>(args)` is rewritten (test/cudasim/cu2cpp.sh) as
// `cudasim::launch(kernel, "kernel", cfg)(args)`: the arguments convert to the kernel's
// parameter types and are copied into the launch, as CUDA copies them to the parameter bank.
template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  const char* name;
  LaunchConfig cfg;
  struct Params {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> args;
  };
  static void entry(void* p) {
    Params* pp = static_cast<Params*>(p);
    std::apply(pp->kernel, pp->args);
  }
  static void destroy(void* p) { delete static_cast<Params*>(p); }
  void operator()(P... args) const {
    Params* p = new Params{kernel, std::tuple<std::decay_t<P>...>(args...)};
    launch_kernel(reinterpret_cast<const void*>(kernel), name, cfg, &entry, p, sizeof *p, &destroy);
  }
};
template <typename... P>
Launcher<P...> launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t smem = 0,
                      void* stream = nullptr) {
  return Launcher<P...>{kernel, name, LaunchConfig{grid, block, smem, stream}};
}

}  // namespace cudasim
