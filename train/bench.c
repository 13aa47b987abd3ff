// bench.c: how fast a run is: the device's dense peak (the datasheet's, or --peak's measured
// matmul rate), the --bench summary (medians over the timed steps, TFLOPS, MFU, --bench-json),
// and the process's resident memory (the CPU backend's measured footprint).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/clock.h"
#include "infra/dist.h"
#include "train/train.h"

// Dense bf16 peak of known GPUs (H100/H200 SXM 989 TFLOPS, A100 312); 0 when unknown.
double device_peak_flops(const char* device_name) {
  if (strstr(device_name, "H100") || strstr(device_name, "H200")) return 989e12;
  if (strstr(device_name, "A100")) return 312e12;
  return 0.0;
}

// --peak: the rate of this backend's own matmul on a large square-ish product, the best of a
// few timed repetitions (what the chip delivers to our kernels, not its datasheet).
// Operands in [-1, 1), from a fixed-seed generator: tensor cores multiplying zeros draw less
// power and run faster than on real data, which would overstate the peak.
static void fill_random(KernelCtx* k, act_t* x, size_t n, uint64_t state) {
  const size_t chunk = (size_t)1 << 20;
  float* host = xmalloc(chunk * sizeof(float), "--peak operands");
  float* dev = device_alloc_zeroed(chunk * sizeof(float), "--peak operands");
  for (size_t i = 0; i < n; i += chunk) {
    size_t m = n - i < chunk ? n - i : chunk;
    for (size_t j = 0; j < m; j++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      host[j] = (float)((double)(state >> 40) * 0x1p-23 - 1.0);
    }
    device_copy_to_device(dev, host, m * sizeof(float));
    cast_f32_to_act(k, x + i, dev, m);
    device_synchronize();  // before the next chunk overwrites dev
  }
  device_free(dev);
  free(host);
}

double measure_peak_flops(KernelCtx* k) {
  int n = strcmp(kernels_backend(), "cpu") ? 8192 : 768;
  size_t elems = (size_t)n * n;
  act_t* a = device_alloc_zeroed(elems * sizeof(act_t), "--peak operands");
  act_t* b = device_alloc_zeroed(elems * sizeof(act_t), "--peak operands");
  act_t* c = device_alloc_zeroed(elems * sizeof(act_t), "--peak operands");
  fill_random(k, a, elems, 1);
  fill_random(k, b, elems, 2);
  matmul_forward(k, c, a, b, NULL, n, n, n);  // warm-up: algorithm choice, caches
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    device_synchronize();
    double t0 = now_seconds();
    matmul_forward(k, c, a, b, NULL, n, n, n);
    device_synchronize();
    double dt = now_seconds() - t0;
    if (dt < best) best = dt;
  }
  device_free(a);
  device_free(b);
  device_free(c);
  return 2.0 * n * (double)n * n / best;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// --bench: median and spread over the measured steps (the warm-up steps are not in ms[]).
void bench_report(const Options* o, const Model* m, const FSDP* fs, int A, const double* ms, const double* comm_ms,
                  int n, double peak, const char* peak_source, const char* device) {
  if (n < 1) return;
  double* sorted = xmalloc((size_t)n * sizeof(double), "bench");
  memcpy(sorted, ms, (size_t)n * sizeof(double));
  qsort(sorted, n, sizeof(double), cmp_double);
  double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double lo = sorted[0], hi = sorted[n - 1];
  memcpy(sorted, comm_ms, (size_t)n * sizeof(double));
  qsort(sorted, n, sizeof(double), cmp_double);
  double comm = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  free(sorted);
  int W = fs->world_size;
  double tokens = (double)W * A * m->B * (m->cfg.kind == MODEL_T5 ? m->Te + m->T : m->T);
  double flops = W * A * model_flops(&m->cfg, m->B, m->T, m->Te);
  double tflops = flops / W / (median / 1e3) / 1e12;  // per rank, model FLOPs (MFU counts these)
  double hw_flops = flops + W * A * model_recompute_flops(&m->cfg, m->B, m->T, m->Te, o->fsdp.recompute);
  double hw_tflops = hw_flops / W / (median / 1e3) / 1e12;
  double mfu = peak > 0 ? tflops * 1e12 / peak : NAN;
  log0("bench | %s | %s | %d rank%s | %s | median of %d steps\n", m->cfg.name, device, W, W > 1 ? "s" : "",
       strategy_name(o->fsdp.strategy), n);
  log0("| %-28s | %14s |\n", "metric", "value");
  log0("| %-28s | %14.2f |\n", "step time median (ms)", median);
  log0("| %-28s | %14.2f |\n", "step time min (ms)", lo);
  log0("| %-28s | %14.2f |\n", "step time max (ms)", hi);
  log0("| %-28s | %14.0f |\n", "tokens/s per rank", tokens / W / (median / 1e3));
  log0("| %-28s | %14.4f |\n", "model TFLOPS per rank", tflops);
  log0("| %-28s | %14.4f |\n", "hardware TFLOPS per rank", hw_tflops);
  if (peak > 0) log0("| %-28s | %13.2f%% |\n", "MFU", 100 * mfu);
  else log0("| %-28s | %14s |\n", "MFU", "n/a (--peak)");
  log0("| %-28s | %14.2f |\n", "exposed comm median (ms)", comm);
  log0("| %-28s | %14.2f |\n", "memory per rank (GiB)", fs->plan.total / 1073741824.0);
  if (peak > 0) log0("MFU against %.4g TFLOPS (%s)\n", peak / 1e12, peak_source);
  if (o->bench_json && fs->world_rank == 0) {
    FILE* f = fopen(o->bench_json, "w");
    if (!f) fatal("--bench-json: cannot open '%s': %s", o->bench_json, strerror(errno));
    char mfu_s[32];
    if (peak > 0) snprintf(mfu_s, sizeof mfu_s, "%.6g", mfu);
    else snprintf(mfu_s, sizeof mfu_s, "null");
    fprintf(f, "{\"model\": \"%s\", \"device\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"shard\": \"%s\", "
               "\"batch\": %d, \"seq\": %d, \"enc_len\": %d, \"accum\": %d, \"steps\": %d, "
               "\"step_ms_median\": %.6g, \"step_ms_min\": %.6g, \"step_ms_max\": %.6g, "
               "\"tokens_per_s_per_rank\": %.6g, \"model_tflops_per_rank\": %.6g, \"hardware_tflops_per_rank\": %.6g, "
               "\"mfu\": %s, \"peak_tflops\": %.6g, \"peak_source\": \"%s\", \"exposed_comm_ms_median\": %.6g, "
               "\"memory_bytes_per_rank\": %zu}\n",
            m->cfg.name, device, kernels_backend(), W, strategy_name(o->fsdp.strategy), m->B, m->T, m->Te, A, n,
            median, lo, hi, tokens / W / (median / 1e3), tflops, hw_tflops, mfu_s, peak / 1e12, peak_source, comm,
            fs->plan.total);
    if (fflush(f) != 0 || ferror(f)) fatal("--bench-json %s: writing failed: %s", o->bench_json, strerror(errno));
    if (fclose(f) != 0) fatal("--bench-json %s: writing failed: %s", o->bench_json, strerror(errno));
  }
}

size_t resident_bytes(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}
