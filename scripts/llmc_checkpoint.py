#!/usr/bin/env python3
"""llmc_checkpoint.py: a randomly initialized GPT-2 written as an llm.c checkpoint.

    python3 scripts/llmc_checkpoint.py --model gpt2-124m [--seed 1337] OUT.bin

llm.c's CPU trainer (train_gpt2.c) starts only from a checkpoint file (gpt2_124M.bin, which
llm.c's train_gpt2.py writes from Hugging Face's GPT-2). This writes one of any GPT shape
without a download, so scripts/bench_llmc.sh --cpu can give fsdp.c (--init-from OUT.bin) and
llm.c the same weights, and check that both compute the same loss on the same batch.

Format (llm.c train_gpt2.py write_model; weights/tensor_file.c reads it): 256 int32 header
(magic 20240326, version 3 = fp32, maxT, V, L, H, C, Vp), then fp32 wte [Vp, C] (rows V..Vp
zero), wpe [maxT, C], each per-layer tensor stacked over the layers (ln1w, ln1b, qkvw, qkvb,
attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb), then lnfw, lnfb.
Initialization: GPT-2's (normal 0.02; the two residual projections 0.02 / sqrt(2L); wpe 0.01
as fsdp.c; biases 0; LayerNorm weights 1), drawn with numpy from --seed, so the same
arguments give the same bytes. Needs numpy (Debian: python3-numpy, with /usr/bin/python3).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import parse_model  # noqa: E402

LLMC_MAGIC, LLMC_FP32 = 20240326, 3


def tensors(cfg, rng, np):
    """The checkpoint's tensors in file order, as float32 arrays."""
    L, C, V, Vp, T = cfg["L"], cfg["C"], cfg["V"], cfg["Vp"], cfg["T"]
    normal = lambda std, *shape: (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))
    proj = 0.02 / math.sqrt(2 * L)
    wte = np.zeros((Vp, C), dtype=np.float32)
    wte[:V] = normal(0.02, V, C)
    yield wte
    yield normal(0.01, T, C)
    per_layer = [
        lambda: np.ones(C, np.float32), lambda: np.zeros(C, np.float32),          # ln1w, ln1b
        lambda: normal(0.02, 3 * C, C), lambda: np.zeros(3 * C, np.float32),      # qkvw, qkvb
        lambda: normal(proj, C, C), lambda: np.zeros(C, np.float32),              # attprojw, attprojb
        lambda: np.ones(C, np.float32), lambda: np.zeros(C, np.float32),          # ln2w, ln2b
        lambda: normal(0.02, 4 * C, C), lambda: np.zeros(4 * C, np.float32),      # fcw, fcb
        lambda: normal(proj, C, 4 * C), lambda: np.zeros(C, np.float32),          # fcprojw, fcprojb
    ]
    for make in per_layer:
        yield np.stack([make() for _ in range(L)])
    yield np.ones(C, np.float32)
    yield np.zeros(C, np.float32)


def main(argv):
    p = argparse.ArgumentParser(description="write a randomly initialized GPT-2 as an llm.c checkpoint (fp32)")
    p.add_argument("--model", required=True, help="a GPT preset (gpt2-124m ...) or gpt:L=..,C=..,H=..,V=..,T=..")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("out", help="the .bin file to write (written to OUT.tmp, then renamed)")
    a = p.parse_args(argv)
    try:
        cfg = parse_model(a.model)
    except ValueError as e:
        print("error: --model: %s" % e, file=sys.stderr)
        return 2
    if cfg["kind"] != "gpt":
        print("error: --model %s: llm.c checkpoints hold GPT-2 models only" % a.model, file=sys.stderr)
        return 2
    try:
        import numpy as np
    except ImportError:
        print("error: %s has no numpy: run it with a python that has (Debian: apt install python3-numpy, "
              "then /usr/bin/python3)" % sys.executable, file=sys.stderr)
        return 2
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [LLMC_MAGIC, LLMC_FP32, cfg["T"], cfg["V"], cfg["L"], cfg["H"], cfg["C"], cfg["Vp"]]
    rng = np.random.default_rng(a.seed)
    tmp = a.out + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            for t in tensors(cfg, rng, np):
                f.write(t.tobytes())
        os.replace(tmp, a.out)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        print("error: cannot write %s: %s" % (a.out, e), file=sys.stderr)
        return 1
    print("wrote %s: %s, seed %d, %d bytes" % (a.out, a.model, a.seed, os.path.getsize(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
