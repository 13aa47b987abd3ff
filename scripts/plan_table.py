#!/usr/bin/env python3
"""plan_table.py: what it takes to fit the AWS post's two runs and torchtitan's Llama runs, from --plan.

Runs ./train_gpt_cpu --plan (the CUDA backend's plan: bf16 activations and unsharded
parameters, fp32 shards and AdamW state) for the AWS post's runs, gpt3-175b at batch 20 x 512 on
128 GPUs and the 1T model (gpt-1t) at batch 4 x 2048 on 32, 128 and 512 GPUs, with the memory
techniques added one at a time, and prints a markdown table: device and pinned host memory per
rank, whether the device part fits a 40 GB and an 80 GB A100, and the pinned host memory of an
8-GPU node beside a p4d.24xlarge's 1152 GiB. The Llama table: llama3.1-8b at torchtitan's
settings (local batch 2 x 8192 on one node of 8 GPUs, selective recomputation) and llama3.1-70b at
batch 1 x 8192 on 64 and 256 GPUs, against an 80 GB H100. With --write FILE it replaces the tables
between the markers "<!-- plan table -->" and "<!-- end of plan table -->", and "<!-- llama plan
table -->" and "<!-- end of llama plan table -->", in FILE (docs/performance.md).

usage: scripts/plan_table.py [--bin ./train_gpt_cpu] [--write docs/performance.md]
"""
import argparse
import re
import subprocess
import sys

RUNS = [("gpt3-175b", 20, 512, [128]), ("gpt-1t", 4, 2048, [32, 128, 512])]
STEPS = [
    "",
    "--recompute block",
    "--recompute block --wrap linear",
    "--recompute block --wrap linear --offload optim",
    "--recompute block --wrap linear --offload optim,activations",
    "--recompute block --wrap linear --offload all",
    "--recompute block --wrap linear --offload all --limit-all-gathers 1",
]
LLAMA_RUNS = [("llama3.1-8b", 2, 8192, [8]), ("llama3.1-70b", 1, 8192, [64, 256])]
LLAMA_STEPS = [
    "",
    "--recompute selective",
    "--recompute block",
    "--recompute block --wrap linear",
    "--recompute block --wrap linear --offload optim",
]
GIB = 2**30
P4D_HOST_GIB = 1152  # p4d.24xlarge: 8 x A100 40 GB, 1152 GiB of host memory


def plan(binary, model, batch, seq, world, opts):
    cmd = [binary, "--plan", "--model", model, "--batch", str(batch), "--seq", str(seq), "--world", str(world)] + opts.split()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("plan_table: %s failed:\n%s%s" % (" ".join(cmd), out.stdout, out.stderr))
    dev = int(re.search(r"^plan_bytes_per_rank (\d+)", out.stdout, re.M).group(1))
    host = int(re.search(r"^plan_host_bytes_per_rank (\d+)", out.stdout, re.M).group(1))
    return dev, host


def table(binary):
    rows = ["| model, batch x seq, GPUs | options | device GiB per rank | fits 40 GB | fits 80 GB | pinned host GiB per rank | per 8-GPU node (p4d: %d) |" % P4D_HOST_GIB,
            "|---|---|---:|:-:|:-:|---:|---:|"]
    for model, batch, seq, worlds in RUNS:
        for world in worlds:
            for opts in STEPS:
                dev, host = plan(binary, model, batch, seq, world, opts)
                rows.append("| %s, %d x %d, %d | %s | %.1f | %s | %s | %.1f | %.0f |" % (
                    model, batch, seq, world, "`%s`" % opts if opts else "none", dev / GIB,
                    "yes" if dev <= 40 * GIB else "no", "yes" if dev <= 80 * GIB else "no", host / GIB, 8 * host / GIB))
    return "\n".join(rows) + "\n"


def llama_table(binary):
    rows = ["| model, batch x seq, GPUs | options | device GiB per rank | fits 80 GB | pinned host GiB per rank |",
            "|---|---|---:|:-:|---:|"]
    for model, batch, seq, worlds in LLAMA_RUNS:
        for world in worlds:
            for opts in LLAMA_STEPS:
                dev, host = plan(binary, model, batch, seq, world, opts)
                rows.append("| %s, %d x %d, %d | %s | %.1f | %s | %.1f |" % (
                    model, batch, seq, world, "`%s`" % opts if opts else "none", dev / GIB,
                    "yes" if dev <= 80 * GIB else "no", host / GIB))
    return "\n".join(rows) + "\n"


def replace(text, start, end, table, path):
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        sys.exit("plan_table: %s has no '%s' ... '%s' markers" % (path, start.strip(), end))
    return text[: i + len(start)] + table + text[j:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="./train_gpt_cpu")
    ap.add_argument("--write")
    a = ap.parse_args()
    t, lt = table(a.bin), llama_table(a.bin)
    sys.stdout.write(t + "\n" + lt)
    if a.write:
        text = open(a.write).read()
        text = replace(text, "<!-- plan table -->\n", "<!-- end of plan table -->", t, a.write)
        text = replace(text, "<!-- llama plan table -->\n", "<!-- end of llama plan table -->", lt, a.write)
        open(a.write, "w").write(text)


if __name__ == "__main__":
    main()
