// catalogue.c: the GPUs and networks a prediction can run on, each constant with its source.
//
// Rates are datasheet figures; efficiencies are the fractions of them that published
// microbenchmarks reach, never values chosen to match a training result. Where no published
// measurement was at hand, the comment says "assumed" and why the value is plausible; the
// prediction README lists those as the first suspects when a prediction is off.
#include <stdio.h>
#include <string.h>

#include "kernels/timeline/timeline.h"

#define GiB 1073741824.0

// Sources:
//  [A100]  NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOPS dense BF16; HBM2 1,555 GB/s (40GB)
//          and HBM2e 2,039 GB/s (80GB SXM); NVLink 600 GB/s per GPU (both directions together).
//  [H100]  NVIDIA H100 datasheet (SXM5): 989 TFLOPS dense BF16 (1,979 with sparsity); HBM3
//          3.35 TB/s, 80GB; NVLink 900 GB/s per GPU (both directions together).
//  [H200]  NVIDIA H200 datasheet (SXM): same compute as H100; HBM3e 4.8 TB/s, 141GB.
//  [MAMF]  S. Bekman, ml-engineering, compute/accelerator, "Maximum Achievable Matmul FLOPS"
//          table (BF16 matmul, best shape): A100 SXM 267.9 of 312 (85.9%), H100 SXM 792.1 of
//          989 (80.1%), H100/H200 SXM 794.5 of 989 (80.3%).
//  [FA2]   T. Dao, FlashAttention-2 (2023), section 4: 50-73% of the A100's peak in the
//          forward pass, less in the backward; we take the low end, 0.50, for both.
//  [FA3]   Shah et al., FlashAttention-3 (2024), section 4.1, the speed figures on an H100 80GB
//          SXM5 (bf16, FLOPs of the kept scores only, as pairs() counts them): FlashAttention-2
//          at head dim 64 and sequence length 1k runs its causal forward at 229 TFLOPS (0.232 of
//          989) and its backward at 238 (0.241); our kernels are FlashAttention-2-style, and
//          gpt2's head dim and length are those. (At head dim 128, 1k: 350 forward, 260
//          backward, without the causal mask.) The H200, the same GH100 part, takes the same.
//  [RUN]   this project's own H100 run (docs/results-history.md, 2026-11-25, ncu's kernel
//          times of a gpt2-124m step, B=8, T=1024): cuBLASLt's matmuls take 9.2 ms for the
//          step's 6.07 TFLOP (6 x 8192 tokens x 123.5M weights in products), 660 TFLOPS: 0.667
//          of 989, below the 0.801 of the best shape [MAMF] (the step's products are smaller).
//  [HBM]   Streaming kernels, measured at full occupancy (RRZE-HPC gpu-benches, gpu-stream, 2025):
//          on the A100-40GB the scale kernel (one load and one store stream, the shape of our
//          elementwise kernels) reaches 1382 of 1555 GB/s: 0.89, taken for the 80GB part too.
//          Hopper SXM: BabelStream on Azure's ND H100 v5 and ND H200 v5 (github.com/Azure/
//          AI-benchmarking-guide, "Azure Results/ND_H100_v5_results.md" and "Azure_Results/
//          ND_H200_v5_results.md", HBM Bandwidth): its scale kernel ("Mul") reaches 2.90 of the
//          H100's 3.35 TB/s, 0.87, and 4.00 of the H200's 4.8 TB/s, 0.83.
//  [NCCL]  NCCL's bus bandwidth inside a node, measured (all_reduce_perf, 1 GiB): a
//          p4d(n).24xlarge, the AWS post's 8 A100 node, reaches 230.8 of the 300 GB/s per
//          direction (github.com/NVIDIA/nccl issue 527, 2022): 0.77 for the A100. On the H100 an
//          NCCL maintainer gives ~20% protocol overhead, 370 of 450 GB/s (github.com/NVIDIA/
//          nccl-tests issue 212, 2024): 0.82, for the H200's same NVLink too.
//  [LAUNCH] NVIDIA developer blog, "Getting Started with CUDA Graphs" (2019): a few
//          microseconds per launch of a short kernel on the host, and 1-2 us of gap between
//          dependent kernels on the device.
//  [SM]    NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, 12 third-
//          generation NVLinks (600 GB/s); NVIDIA H100 Tensor Core GPU Architecture whitepaper
//          (2022): 132 SMs on the SXM5 part, 18 fourth-generation NVLinks (900 GB/s). The H200
//          is the same GH100 part.
//  [CTA]   NCCL runs one block (CTA) per channel, and "NCCL CTAs won't share an SM with
//          compute kernels" (NCCL maintainers, github.com/NVIDIA/nccl issue 689, 2023, which
//          also gives 2 SMs for a one-NIC system and 16 for a DGX with 8 NICs); two channels
//          per NIC keep it busy (issue 438); two CTAs per NVLink saturate it (issue 1703); at
//          most MAXCHANNELS = 32 channels (NCCL 2.x, src/include/devcomm.h). collective.c
//          turns these into the SMs each collective holds.
static const GpuSpec gpus[] = {
    {"a100-40gb", "timeline A100-SXM4-40GB", 312e12 /*[A100]*/, 0.859 /*[MAMF]*/, 0.50 /*[FA2]*/, 0.50 /*[FA2]*/,
     1555e9 /*[A100]*/, 0.89 /*[HBM]*/, 40 * GiB, 300e9 /*[A100] 600 GB/s / 2*/, 0.77 /*[NCCL]*/,
     2e-6 /*[LAUNCH]*/, "efa400", 108 /*[SM]*/, 12 /*[SM]*/},
    {"a100-80gb", "timeline A100-SXM4-80GB", 312e12 /*[A100]*/, 0.859 /*[MAMF]*/, 0.50 /*[FA2]*/, 0.50 /*[FA2]*/,
     2039e9 /*[A100]*/, 0.89 /*[HBM]*/, 80 * GiB, 300e9 /*[A100]*/, 0.77 /*[NCCL]*/,
     2e-6 /*[LAUNCH]*/, "roce", 108 /*[SM]*/, 12 /*[SM]*/},
    {"h100-sxm", "timeline H100-SXM5-80GB", 989e12 /*[H100]*/, 0.667 /*[RUN]*/, 0.232 /*[FA3]*/, 0.241 /*[FA3]*/,
     3350e9 /*[H100]*/, 0.87 /*[HBM]*/, 80 * GiB, 450e9 /*[H100] 900 GB/s / 2*/, 0.82 /*[NCCL]*/,
     2e-6 /*[LAUNCH]*/, "ib3200", 132 /*[SM]*/, 18 /*[SM]*/},
    {"h200", "timeline H200-SXM-141GB", 989e12 /*[H200]*/, 0.667 /*[RUN]*/, 0.232 /*[FA3]*/, 0.241 /*[FA3]*/,
     4800e9 /*[H200]*/, 0.83 /*[HBM]*/, 141e9, 450e9 /*[H100]*/, 0.82 /*[NCCL]*/,
     2e-6 /*[LAUNCH]*/, "ib3200", 132 /*[SM]*/, 18 /*[SM]*/},
};

// Sources:
//  [AWS]   the AWS 175B/1T post (seeds): p4d.24xlarge, 8 A100-40GB, 4 EFA interfaces of
//          100 Gb/s = 400 Gb/s = 50 GB/s per node.
//  [FSDP]  the FSDP paper (seeds), section 5: A100-80GB nodes on a 2 Tb/s RoCE network
//          = 250 GB/s per node. It does not say how many interfaces; assumed 8, one per GPU,
//          as A100 nodes are built (DGX A100: 8 compute NICs).
//  [IBM]   the IBM T5 post (seeds): 2 x 100 Gb/s Ethernet (2 interfaces), 120 Gb/s usable
//          = 15 GB/s per node, TCP/IP (SR-IOV); NVLink 600 GB/s card to card.
//  [NDR]   current H100/H200 nodes (e.g. DGX H100): 8 ConnectX-7 NDR 400 Gb/s ports,
//          3.2 Tb/s = 400 GB/s per node.
//  [BUSBW] NCCL's bus bandwidth across nodes, measured with all_reduce_perf on large messages:
//          InfiniBand: a DGX A100 with 8 x 200 Gb/s reaches 192 of 200 GB/s (an NCCL maintainer,
//          github.com/NVIDIA/nccl issue 812, 2023): 0.96, taken for NDR too. RoCE: the same
//          verbs transport of NCCL on the same NICs, assumed the same 0.96 (the FSDP paper
//          publishes no measurement; congestion on a large Ethernet fabric is not in it). EFA:
//          four p4dn.24xlarge reach 29.6 of 50 GB/s (github.com/NVIDIA/nccl issue 527, 2022):
//          0.59; earlier EFA measurements fell further from 2 to 8-32 nodes (nccl issue 235),
//          which one figure per network does not model. TCP sockets: the IBM post's "usable"
//          120 Gb/s is already a measured rate, so 1.0 of it.
//  [LAT]   NCCL's own latency model (src/graph/tuning.cc, ring with the Simple protocol it
//          uses for large messages): 8.4 us per collective (baseLat), then per ring step
//          3.4 us over NVLink and 14 us over the network (hwLat). The model has one network
//          figure; EFA's SRD and kernel TCP are slower transports than RDMA verbs, assumed
//          15 and 30 us a step.
static const NetSpec nets[] = {
    {"efa400", 8, 50e9 /*[AWS]*/, 0.59 /*[BUSBW]*/, 15e-6 /*[LAT]*/, 3.4e-6 /*[LAT]*/, 4 /*[AWS]*/, 8.4e-6 /*[LAT]*/},
    {"roce", 8, 250e9 /*[FSDP]*/, 0.96 /*[BUSBW]*/, 14e-6 /*[LAT]*/, 3.4e-6 /*[LAT]*/, 8 /*[FSDP]*/, 8.4e-6 /*[LAT]*/},
    {"eth120", 8, 15e9 /*[IBM]*/, 1.00 /*[BUSBW]*/, 30e-6 /*[LAT]*/, 3.4e-6 /*[LAT]*/, 2 /*[IBM]*/, 8.4e-6 /*[LAT]*/},
    {"ib3200", 8, 400e9 /*[NDR]*/, 0.96 /*[BUSBW]*/, 14e-6 /*[LAT]*/, 3.4e-6 /*[LAT]*/, 8 /*[NDR]*/, 8.4e-6 /*[LAT]*/},
};

// [LAUNCH] for the host's issue cost; [PCIE] PCIe 4.0 x16: 32 GB/s per direction, of which an
// A100 reaches a measured peak of 25 GB/s (Qureshi et al., BaM, ASPLOS 2023; its authors confirm
// the figure is measured, github.com/ZaidQureshi/bam issue 54); a synchronous small copy ~10 us
// ([LAUNCH]).
// [HOSTMEM] the host optimizer of --offload optim streams its shards through host memory: a
// p4d.24xlarge (the AWS post's node) has two Xeon P-8275CL, 6 channels of DDR4-2933 each
// (Intel ARK: 140.8 GB/s per socket), 281.6 GB/s for 8 ranks = 35.2 GB/s each; STREAM-like
// loops reach ~0.8 of the peak (assumed): 28 GB/s per rank.
static const HostSpec host = {4e-6, 10e-6, 25e9, 28e9};

const GpuSpec* catalogue_gpu(const char* name) {
  for (size_t i = 0; i < sizeof gpus / sizeof *gpus; i++)
    if (!strcmp(gpus[i].name, name)) return &gpus[i];
  return NULL;
}

const NetSpec* catalogue_net(const char* name) {
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++)
    if (!strcmp(nets[i].name, name)) return &nets[i];
  return NULL;
}

int catalogue_cluster(const char* spec, int world, Cluster* out, char* err, size_t errlen) {
  char gpu[64];
  const char* colon = strchr(spec, ':');
  size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
  if (n >= sizeof gpu) n = sizeof gpu - 1;
  memcpy(gpu, spec, n);
  gpu[n] = 0;
  const GpuSpec* g = catalogue_gpu(gpu);
  if (!g) {
    snprintf(err, errlen, "--predict: unknown GPU '%s'; choose one of a100-40gb, a100-80gb, h100-sxm, h200 "
                          "(optionally :NETWORK, one of efa400, roce, eth120, ib3200; --predict list shows their figures)", gpu);
    return -1;
  }
  const char* netname = colon ? colon + 1 : g->network;
  const NetSpec* net = catalogue_net(netname);
  if (!net) {
    snprintf(err, errlen, "--predict: unknown network '%s'; choose one of efa400, roce, eth120, ib3200", netname);
    return -1;
  }
  if (world < 1) {
    snprintf(err, errlen, "--predict needs --world N (the number of GPUs), N >= 1");
    return -1;
  }
  out->gpu = *g;
  out->net = *net;
  out->host = host;
  out->world = world;
  out->alloc_retry_s = 0.0;
  out->attention = ATTENTION_FUSED;
  out->comm_sms_max = -1;
  return 0;
}

// --predict list: every GPU and network with the figures a prediction uses (the sources are
// the comments above).
void catalogue_print(FILE* f) {
  fprintf(f, "| %-10s | %11s | %6s | %9s | %9s | %8s | %4s | %7s | %12s | %6s | %4s | %-8s |\n", "GPU",
          "bf16 TFLOPS", "matmul", "attn fwd", "attn bwd", "HBM GB/s", "HBM", "mem GiB", "NVLink GB/s", "NVLink", "SMs",
          "network");
  for (size_t i = 0; i < sizeof gpus / sizeof *gpus; i++) {
    const GpuSpec* g = &gpus[i];
    fprintf(f, "| %-10s | %11.0f | %5.1f%% | %8.1f%% | %8.1f%% | %8.0f | %3.0f%% | %7.0f | %12.0f | %5.1f%% | %4d | %-8s |\n",
            g->name, g->peak_flops / 1e12, 100 * g->matmul_eff, 100 * g->attn_fwd_eff, 100 * g->attn_bwd_eff,
            g->hbm_bytes_s / 1e9, 100 * g->hbm_eff,
            g->memory_bytes / GiB, g->nvlink_bytes_s / 1e9, 100 * g->nvlink_eff, g->sms, g->network);
  }
  fprintf(f, "\n| %-8s | %13s | %13s | %7s | %4s | %15s | %15s |\n", "network", "GPUs per node", "node GB/s",
          "bus bw", "NICs", "step latency us", "base latency us");
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    const NetSpec* n = &nets[i];
    fprintf(f, "| %-8s | %13d | %13.0f | %6.0f%% | %4d | %15.1f | %15.1f |\n", n->name, n->gpus_per_node,
            n->node_bytes_s / 1e9, 100 * n->net_eff, n->nics, n->latency_s * 1e6, n->base_latency_s * 1e6);
  }
  fprintf(f, "(percentages: the share of each rate kernels and NCCL reach, measured where kernels/timeline/catalogue.c cites a\n"
             "measurement, assumed where it says so)\n");
}
