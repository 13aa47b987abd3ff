#!/usr/bin/env python3
"""bench_adamw_torch.py: PyTorch's CPU AdamW on one flat fp32 parameter of N elements (what a
CPU-offloaded FSDP unit's optimizer step is), timed like scripts/bench_adamw.c.

usage: bench_adamw_torch.py N TRIALS THREADS {single|foreach}
Prints one line per trial: "seconds <s> elements <N>".
"""
import sys
import time

import torch

n, trials, threads, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
p = torch.nn.Parameter(torch.rand(n, generator=g) * 2 - 1)
p.grad = 0.01 * (torch.rand(n, generator=g) * 2 - 1)
opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=(mode == "foreach"))
opt.step()  # untimed: creates m and v
for _ in range(trials):
    t0 = time.perf_counter()
    opt.step()
    print("seconds %.6f elements %d" % (time.perf_counter() - t0, n))
