#!/usr/bin/env python3
"""bench_torch.py: the PyTorch baseline of the fsdp.c benchmarks, same shapes, same FLOP count.

    python3 scripts/bench_torch.py --model gpt2-124m --batch 8 --seq 1024 --steps 10 --warmup 3 \
        [--compile | --tuned] [--data GLOB] [--json FILE] [--log FILE]
    python3 scripts/bench_torch.py --model t5-base --batch 16 --enc-len 512 --dec-len 114 ...
    python3 scripts/bench_torch.py --model gpt:L=2,C=64,H=4,V=256,T=64 --batch 4 --seq 64 --device cpu

The models are written here with the shapes of fsdp.c's (layers/gpt.c, layers/t5.c):
  GPT-2  learned positions, pre-LayerNorm blocks (eps 1e-5) with a fused qkv projection (with
         biases), causal F.scaled_dot_product_attention, tanh-GELU MLP of 4C; the lm_head tied
         to the token embedding over the vocabulary padded to a multiple of 128 (Vp rows); the
         cross-entropy over the first V logit columns.
  T5     v1.0 / v1.1: RMSNorm (eps 1e-6), no biases, fused qkv [3*H*D, C], unscaled attention
         logits (scale=1), a relative position bias (32 buckets, max distance 128) per stack
         added as an additive float mask to SDPA (the decoder's with the causal mask folded
         in), cross-attention with a fused kv projection, ReLU (v1.0) or gated-GELU (v1.1)
         feed-forward, the tied lm_head (v1.0, input scaled by C^-0.5) or an untied one.
Training: bf16 mixed precision. With FSDP2 (torch.distributed.fsdp.fully_shard, torch >= 2.6, or
torch.distributed._composable.fsdp) every block and then the root are fully_shard-ed on a
1-rank process group with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); without
it, fp32 parameters under bf16 autocast ("no FSDP2 in this torch"). AdamW (fused on CUDA;
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the block matmul weights), global-norm clipping
at 1.0 and fsdp.c's learning-rate schedule (cosine to 0.1 x lr over warm-up + measured steps).
--compile wraps every block in torch.compile (as torchtitan) before sharding.
These FSDP2 runs on one rank measure FSDP2's own per-unit overhead and a host-bound Python loop
beside fsdp.c's, not what a user with one GPU would run. --tuned is that run: one GPU without
FSDP, the whole model and its loss under one torch.compile, SDPA restricted to its flash
backend (GPT; T5's position bias is an additive mask, which the flash kernel does not take, so
T5 gets flash or memory-efficient, never the math fallback), fused AdamW, clip_grad_norm_ with
foreach=True, fp32 parameters under bf16 autocast; backend "pytorch-tuned".

Timing: --warmup untimed steps, then --steps timed ones (synchronized per step); the median,
min and max step time; tokens/s (B*T, or B*(enc+dec) for T5, as fsdp.c); model TFLOPS from the
exact matmul count of layers/config.c (gpt_flops / t5_flops, ported in bench_report.py); MFU
against 989 TFLOPS on H100/H200, 312 on A100 (--peak-tflops overrides; none on CPU).
--json writes the fields of fsdp.c's --bench-json with backend "pytorch", "pytorch+compile" or
"pytorch-tuned";
--log one JSON object per step (step, loss, lr, grad_norm, ms, tokens_per_s), as --log.

Data: --data GLOB reads llm.c token shards (as fsdp.c). GPT micro-batches are fsdp.c's
windows (window (s*A + j) mod windows of B*T+1 tokens), so loss curves can be compared. T5
gets plain continuations (encoder: Te tokens, decoder: the next Td), not span corruption: the
same shapes and work, not the same task. Without --data: random tokens.

On CPU (--device cpu, tiny custom shapes) it runs float32 by default (or --dtype bf16
autocast); with a torch without torch.compile, --compile and --tuned print a skip line and exit
0. An out-of-memory error prints "skip: out of memory ..." and exits 0 without JSON.
"""
import argparse
import contextlib
import glob
import json
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import (MAX_DISTANCE, NUM_BUCKETS, datasheet_peak_flops, model_flops,  # noqa: E402
                          param_count, parse_model, tokens_per_micro_batch)


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch baseline for fsdp.c's benchmarks (same shapes and FLOP count)")
    p.add_argument("--model", required=True, help="preset or custom spec, as train_gpt --model")
    p.add_argument("--batch", type=int, default=4, help="micro-batch (sequences)")
    p.add_argument("--seq", type=int, default=0, help="GPT sequence length (default: the model's T)")
    p.add_argument("--enc-len", type=int, default=512, help="T5 encoder length")
    p.add_argument("--dec-len", type=int, default=114, help="T5 decoder length")
    p.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--compile", action="store_true", help="torch.compile every block")
    p.add_argument("--tuned", action="store_true",
                   help="one GPU without FSDP: whole model and loss compiled, flash SDPA, fused AdamW, foreach clipping")
    p.add_argument("--no-fsdp", action="store_true", help="do not use FSDP2 even when it exists")
    p.add_argument("--fsdp-cpu", action="store_true",
                   help="use FSDP2 on CPU too (gloo process group): tests the FSDP2 path without a GPU")
    p.add_argument("--device", default="auto", help="auto | cuda | cpu")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU) | bf16 | fp32")
    p.add_argument("--data", default=None, help="llm.c token shards (glob)")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="peak for MFU (default: datasheet by device)")
    p.add_argument("--json", default=None, help="write the benchmark JSON here")
    p.add_argument("--log", default=None, help="one JSON object per step")
    a = p.parse_args(argv)
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.accum < 1:
        p.error("--batch, --steps, --accum must be >= 1 and --warmup >= 0")
    if a.tuned and a.compile:
        p.error("--tuned compiles the whole model; --compile (per block, under FSDP2) is the other baseline")
    return a


# ---- data ---------------------------------------------------------------------------------

def load_tokens(pattern):
    """llm.c shards: 256 int32 header (magic 20240520, version 1, count), count uint16 tokens."""
    import struct
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit("error: --data %s matches no file" % pattern)
    parts = []
    for path in files:
        with open(path, "rb") as f:
            header = struct.unpack("<256i", f.read(1024))
            if header[0] != 20240520 or header[1] != 1:
                raise SystemExit("error: %s: not an llm.c token shard (magic %d, version %d)" % (path, header[0], header[1]))
            raw = f.read()
        if len(raw) != 2 * header[2]:
            raise SystemExit("error: %s: %d token bytes, header says %d tokens" % (path, len(raw), header[2]))
        try:
            import numpy as np
            parts.append(np.frombuffer(raw, dtype=np.uint16).astype(np.int64))
        except ImportError:
            import array
            arr = array.array("H")
            arr.frombytes(raw)
            parts.append(arr)
    import torch
    return torch.cat([torch.as_tensor(p, dtype=torch.long) if not hasattr(p, "typecode") else
                      torch.tensor(list(p), dtype=torch.long) for p in parts])


class Batches:
    def __init__(self, torch, cfg, args, B, T, Te):
        self.torch, self.cfg, self.B, self.T, self.Te = torch, cfg, B, T, Te
        self.tokens = load_tokens(args.data) if args.data else None
        if self.tokens is not None and int(self.tokens.max()) >= cfg["V"]:
            self.tokens = self.tokens % cfg["V"]
        self.gen = torch.Generator().manual_seed(args.seed)
        self.span = B * T if cfg["kind"] == "gpt" else B * (Te + T)
        if self.tokens is not None and self.tokens.numel() < self.span + 1:
            raise SystemExit("error: --data has %d tokens, fewer than one micro-batch (%d)" % (self.tokens.numel(), self.span + 1))

    def get(self, g):
        """Micro-batch number g: (inputs, targets) for GPT, (enc, dec_in, targets) for T5."""
        torch, B, T, Te = self.torch, self.B, self.T, self.Te
        if self.tokens is None:
            w = torch.randint(0, self.cfg["V"], (self.span + 1,), generator=self.gen)
        else:
            windows = (self.tokens.numel() - 1) // self.span
            start = (g % windows) * self.span
            w = self.tokens[start:start + self.span + 1]
        if self.cfg["kind"] == "gpt":
            return w[:-1].view(B, T), w[1:].view(B, T)
        w = w[:-1].view(B, Te + T)
        enc, tgt = w[:, :Te], w[:, Te:]
        dec_in = torch.cat([torch.zeros(B, 1, dtype=torch.long), tgt[:, :-1]], dim=1)
        return enc, dec_in, tgt


# ---- models -------------------------------------------------------------------------------

def build(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    ver = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    sdpa_scale = has_sdpa and ver >= (2, 1)

    def attention(q, k, v, mask, causal, scale):
        """q [B,H,Tq,D], k/v [B,H,Tk,D]; mask additive float [1,H,Tq,Tk] or None."""
        if mask is not None:
            mask = mask.to(q.dtype)
        if has_sdpa:
            if sdpa_scale:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                                      scale=scale)
            q = q * (scale * math.sqrt(q.shape[-1]))  # SDPA scales by 1/sqrt(D)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
        s = torch.matmul(q, k.transpose(-1, -2)) * scale  # torch < 2.0: no SDPA
        if mask is not None:
            s = s + mask
        if causal and mask is None:
            Tq, Tk = s.shape[-2:]
            s = s.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        return torch.matmul(torch.softmax(s.float(), dim=-1).to(v.dtype), v)

    def param(*shape, std=None, fill=None):
        t = torch.empty(*shape)
        if std is not None:
            nn.init.normal_(t, 0.0, std)
        else:
            t.fill_(fill)
        return nn.Parameter(t)

    def heads(x, H):
        B, T, _ = x.shape
        return x.view(B, T, H, -1).transpose(1, 2)

    def merge(x):
        B, H, T, D = x.shape
        return x.transpose(1, 2).reshape(B, T, H * D)

    C, H, D, Fh, V, Vp = cfg["C"], cfg["H"], cfg["D"], cfg["F"], cfg["V"], cfg["Vp"]

    if cfg["kind"] == "gpt":
        L = cfg["L"]
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * L)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1_w, self.ln1_b = param(C, fill=1.0), param(C, fill=0.0)
                self.qkv_w, self.qkv_b = param(3 * C, C, std=std), param(3 * C, fill=0.0)
                self.proj_w, self.proj_b = param(C, C, std=proj_std), param(C, fill=0.0)
                self.ln2_w, self.ln2_b = param(C, fill=1.0), param(C, fill=0.0)
                self.fc_w, self.fc_b = param(4 * C, C, std=std), param(4 * C, fill=0.0)
                self.fcp_w, self.fcp_b = param(C, 4 * C, std=proj_std), param(C, fill=0.0)

            def forward(self, x):
                h = F.layer_norm(x, (C,), self.ln1_w, self.ln1_b, 1e-5)
                q, k, v = F.linear(h, self.qkv_w, self.qkv_b).split(C, dim=-1)
                y = attention(heads(q, H), heads(k, H), heads(v, H), None, True, 1.0 / math.sqrt(D))
                x = x + F.linear(merge(y), self.proj_w, self.proj_b)
                h = F.layer_norm(x, (C,), self.ln2_w, self.ln2_b, 1e-5)
                return x + F.linear(F.gelu(F.linear(h, self.fc_w, self.fc_b), approximate="tanh"), self.fcp_w, self.fcp_b)

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte = param(Vp, C, std=0.02)
                with torch.no_grad():
                    self.wte[V:].zero_()
                self.wpe = param(cfg["T"], C, std=0.01)
                self.blocks = nn.ModuleList([Block() for _ in range(L)])
                self.lnf_w, self.lnf_b = param(C, fill=1.0), param(C, fill=0.0)

            def forward(self, idx, targets):
                T = idx.shape[1]
                x = F.embedding(idx, self.wte) + self.wpe[:T]
                for b in self.blocks:
                    x = b(x)
                x = F.layer_norm(x, (C,), self.lnf_w, self.lnf_b, 1e-5)
                logits = F.linear(x, self.wte)  # [B, T, Vp], tied lm_head
                return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.reshape(-1), ignore_index=-1)

        return GPT()

    I, FI, gated, tied = H * D, (2 * Fh if cfg["gated"] else Fh), cfg["gated"], cfg["tied"]
    sq, skv, so = 1.0 / math.sqrt(C * D), 1.0 / math.sqrt(C), 1.0 / math.sqrt(I)

    def rms(x, w):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype) * w

    def qkv_param():
        t = param(3 * I, C, std=skv)
        with torch.no_grad():
            t[:I].normal_(0.0, sq)
        return t

    def feed_forward(blk, h):
        u = F.linear(h, blk.wi)
        if gated:
            g, lin = u.split(Fh, dim=-1)
            u = F.gelu(g, approximate="tanh") * lin
        else:
            u = F.relu(u)
        return F.linear(u, blk.wo)

    class EncBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.qkv, self.o = param(C, fill=1.0), qkv_param(), param(C, I, std=so)
            self.ln2, self.wi, self.wo = param(C, fill=1.0), param(FI, C, std=skv), param(C, Fh, std=1.0 / math.sqrt(Fh))

        def forward(self, x, bias):
            h = rms(x, self.ln1)
            q, k, v = F.linear(h, self.qkv).split(I, dim=-1)
            x = x + F.linear(merge(attention(heads(q, H), heads(k, H), heads(v, H), bias, False, 1.0)), self.o)
            return x + feed_forward(self, rms(x, self.ln2))

    class DecBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.qkv, self.o = param(C, fill=1.0), qkv_param(), param(C, I, std=so)
            self.ln2, self.cq, self.ckv = param(C, fill=1.0), param(I, C, std=sq), param(2 * I, C, std=skv)
            self.co, self.ln3 = param(C, I, std=so), param(C, fill=1.0)
            self.wi, self.wo = param(FI, C, std=skv), param(C, Fh, std=1.0 / math.sqrt(Fh))

        def forward(self, y, enc, bias):
            h = rms(y, self.ln1)
            q, k, v = F.linear(h, self.qkv).split(I, dim=-1)
            y = y + F.linear(merge(attention(heads(q, H), heads(k, H), heads(v, H), bias, False, 1.0)), self.o)
            q = F.linear(rms(y, self.ln2), self.cq)
            k, v = F.linear(enc, self.ckv).split(I, dim=-1)
            y = y + F.linear(merge(attention(heads(q, H), heads(k, H), heads(v, H), None, False, 1.0)), self.co)
            return y + feed_forward(self, rms(y, self.ln3))

    def bucket(rel, bidirectional):
        """HF T5Attention._relative_position_bucket (see test/ref_t5.py), rel = key - query."""
        nb = NUM_BUCKETS
        ret = torch.zeros_like(rel)
        if bidirectional:
            nb //= 2
            ret = ret + (rel > 0).long() * nb
            n = rel.abs()
        else:
            n = -torch.min(rel, torch.zeros_like(rel))
        max_exact = nb // 2
        large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact) / math.log(MAX_DISTANCE / max_exact)
                             * (nb - max_exact)).long()
        large = torch.min(large, torch.full_like(large, nb - 1))
        return ret + torch.where(n < max_exact, n, large)

    class T5(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = param(Vp, C, std=1.0)
            with torch.no_grad():
                self.shared[V:].zero_()
            self.enc_bias = param(NUM_BUCKETS, H, std=skv)
            self.dec_bias = param(NUM_BUCKETS, H, std=skv)
            self.enc_norm, self.dec_norm = param(C, fill=1.0), param(C, fill=1.0)
            if not tied:
                self.lm_head = param(Vp, C, std=1.0)
                with torch.no_grad():
                    self.lm_head[V:].zero_()
            self.encoder = nn.ModuleList([EncBlock() for _ in range(cfg["L"])])
            self.decoder = nn.ModuleList([DecBlock() for _ in range(cfg["Ld"])])
            self._buckets = {}

        def position_bias(self, table, T, bidirectional):
            key = (T, bidirectional, table.device)
            if key not in self._buckets:
                pos = torch.arange(T, device=table.device)
                rel = pos[None, :] - pos[:, None]
                b = bucket(rel, bidirectional)
                causal = torch.zeros(T, T, device=table.device)
                if not bidirectional:
                    causal = causal.masked_fill(torch.ones(T, T, dtype=torch.bool, device=table.device).triu(1),
                                                float("-inf"))
                self._buckets[key] = (b, causal)
            b, causal = self._buckets[key]
            return (F.embedding(b, table).permute(2, 0, 1) + causal).unsqueeze(0)  # [1, H, T, T]

        def forward(self, enc_ids, dec_ids, targets):
            x = F.embedding(enc_ids, self.shared)
            bias = self.position_bias(self.enc_bias, enc_ids.shape[1], True)
            for b in self.encoder:
                x = b(x, bias)
            enc = rms(x, self.enc_norm)
            y = F.embedding(dec_ids, self.shared)
            dbias = self.position_bias(self.dec_bias, dec_ids.shape[1], False)
            for b in self.decoder:
                y = b(y, enc, dbias)
            y = rms(y, self.dec_norm)
            if tied:
                logits = F.linear(y * (C ** -0.5), self.shared)
            else:
                logits = F.linear(y, self.lm_head)
            return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.reshape(-1), ignore_index=-1)

    return T5()


def restrict_sdpa(torch, cfg, device):
    """--tuned: SDPA may use its flash backend only (GPT: causal, no mask), or flash and the
    memory-efficient one (T5: an additive bias mask), never the math fallback; a shape the
    allowed kernels cannot take then fails loudly instead of running slowly. Returns a note."""
    if device != "cuda":
        return ""
    b = torch.backends.cuda
    if not hasattr(b, "enable_flash_sdp"):
        return "this torch cannot restrict SDPA's backends"
    b.enable_flash_sdp(True)
    b.enable_math_sdp(False)
    b.enable_mem_efficient_sdp(cfg["kind"] == "t5")
    if hasattr(b, "enable_cudnn_sdp"):
        b.enable_cudnn_sdp(False)
    return "flash only" if cfg["kind"] == "gpt" else "flash or memory-efficient (T5's bias mask)"


def blocks_of(model):
    return ("blocks",) if hasattr(model, "blocks") else ("encoder", "decoder")


def find_fsdp2(torch):
    """(fully_shard, MixedPrecisionPolicy, module) or None. FSDP2 appeared in torch 2.4 (as
    torch.distributed._composable.fsdp; torch.distributed.fsdp from 2.6); older versions are
    not even imported (Debian's 1.13 fails to import its FSDP package on Python 3.11)."""
    ver = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    if ver < (2, 4) or not torch.distributed.is_available():
        return None
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        return fully_shard, MixedPrecisionPolicy, "torch.distributed.fsdp"
    except Exception:  # noqa: BLE001 (ImportError, or a broken package)
        pass
    try:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        return fully_shard, MixedPrecisionPolicy, "torch.distributed._composable.fsdp"
    except Exception:  # noqa: BLE001
        return None


def learning_rate(lr, step, total, final_frac=0.1):
    """train/schedule_lr.c without warm-up: cosine from lr to final_frac x lr over total steps."""
    if total <= 1:
        return lr
    cosine = 0.5 * (1.0 + math.cos(math.pi * step / (total - 1)))
    return lr * (final_frac + (1.0 - final_frac) * cosine)


def main(argv):
    args = parse_args(argv)
    try:
        cfg = parse_model(args.model)
    except ValueError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("skip: no torch in %s" % sys.executable)
        return 0
    if (args.compile or args.tuned) and not hasattr(torch, "compile"):
        print("skip: %s requested but torch %s has no torch.compile" % ("--tuned" if args.tuned else "--compile",
                                                                        torch.__version__))
        return 0
    backend = "pytorch-tuned" if args.tuned else "pytorch+compile" if args.compile else "pytorch"
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
        return 2
    dtype = args.dtype if args.dtype != "auto" else ("bf16" if device == "cuda" else "fp32")
    if dtype not in ("bf16", "fp32"):
        print("error: --dtype expects auto, bf16 or fp32", file=sys.stderr)
        return 2
    t5 = cfg["kind"] == "t5"
    B, Te = args.batch, (args.enc_len if t5 else 0)
    T = args.dec_len if t5 else (args.seq or cfg["T"])
    if not t5 and T > cfg["T"]:
        print("error: --seq %d exceeds the model's T=%d" % (T, cfg["T"]), file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    notes = []
    dev = torch.device(device)
    if device == "cuda":
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        device_name = torch.cuda.get_device_name(0)
    else:
        device_name = "cpu"

    fsdp2 = find_fsdp2(torch)
    use_fsdp2 = False
    if fsdp2 is None:
        notes.append("no FSDP2 in this torch (%s): plain %s%s" % (
            torch.__version__, "bf16 autocast" if dtype == "bf16" else "fp32",
            " (fp32 parameters)" if dtype == "bf16" else ""))
    elif args.no_fsdp or args.tuned:
        notes.append("FSDP2 available (%s) but not used (%s)" % (fsdp2[2], "--tuned" if args.tuned else "--no-fsdp"))
    elif device != "cuda" and not args.fsdp_cpu:
        notes.append("FSDP2 available (%s) but not used on CPU (--fsdp-cpu): plain %s" % (fsdp2[2], dtype))
    else:
        use_fsdp2 = True
        dtype = "bf16"  # MixedPrecisionPolicy(param_dtype=bf16)

    pg_file = None
    try:
        # build (and initialize) the parameters on the device itself where torch allows it
        build_ctx = dev if device == "cuda" and hasattr(torch.device, "__enter__") else contextlib.nullcontext()
        with build_ctx:
            model = build(torch, cfg)
        nparams = sum(p.numel() for p in model.parameters())
        if args.compile:
            # every block instance is compiled: let dynamo keep one entry per block rather than
            # fall back to eager after its default of 8
            import torch._dynamo
            nblocks = cfg["L"] + cfg["Ld"]
            dc = torch._dynamo.config
            if hasattr(dc, "cache_size_limit"):
                dc.cache_size_limit = max(dc.cache_size_limit, 2 * nblocks + 8)
            if hasattr(dc, "accumulated_cache_size_limit"):
                dc.accumulated_cache_size_limit = max(dc.accumulated_cache_size_limit, 4 * nblocks + 16)
            for name in blocks_of(model):
                lst = getattr(model, name)
                for i in range(len(lst)):
                    lst[i] = torch.compile(lst[i])
            notes.append("torch.compile on every block")
        if args.tuned:
            sdpa_backends = restrict_sdpa(torch, cfg, device)
            if sdpa_backends:
                notes.append("SDPA backends: " + sdpa_backends)
        if use_fsdp2:
            import torch.distributed as dist
            fully_shard, MixedPrecisionPolicy, where = fsdp2
            if not dist.is_initialized():
                fd, pg_file = tempfile.mkstemp(prefix="bench_torch_pg_")
                os.close(fd)
                os.unlink(pg_file)
                dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method="file://" + pg_file,
                                        world_size=1, rank=0)
            model.to(dev)
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for name in blocks_of(model):
                for blk in getattr(model, name):
                    fully_shard(blk, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
            notes.append("FSDP2 fully_shard (%s) on 1 rank, param bf16, reduce fp32" % where)
        else:
            model.to(dev)
        if args.tuned:
            model = torch.compile(model)  # forward and the loss in one graph
            notes.append("torch.compile on the whole model and loss")

        # AdamW with fsdp.c's groups: weight decay on the matrices inside blocks only.
        def make_groups():
            decay, no_decay = [], []
            # a whole-model torch.compile wraps the module: its names gain an "_orig_mod." prefix
            for name, p in getattr(model, "_orig_mod", model).named_parameters():
                inside = name.split(".")[0] in ("blocks", "encoder", "decoder")
                (decay if inside and p.dim() == 2 else no_decay).append(p)
            return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]

        opt_kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
        optimizer, opt_kind = None, "AdamW"
        if device == "cuda":
            try:
                optimizer, opt_kind = torch.optim.AdamW(make_groups(), fused=True, **opt_kw), "AdamW fused"
            except (TypeError, RuntimeError, ValueError) as e:
                notes.append("fused AdamW unavailable (%s): foreach" % str(e).split("\n")[0][:80])
        if optimizer is None:
            optimizer = torch.optim.AdamW(make_groups(), **opt_kw)
        notes.append(opt_kind)
        params = [p for p in model.parameters()]

        def clip(max_norm=1.0):
            """torch.nn.utils.clip_grad_norm_ on the local tensors (exact on 1 rank)."""
            if args.tuned:
                return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
            grads = [p.grad for p in params if p.grad is not None]
            grads = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
            if hasattr(torch, "_foreach_norm"):
                norms = [n.float() for n in torch._foreach_norm(grads)]
            else:
                norms = [torch.linalg.vector_norm(g.float()) for g in grads]
            norm = torch.linalg.vector_norm(torch.stack(norms))
            scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            for g in grads:
                g.mul_(scale.to(g.dtype))
            return norm

        batches = Batches(torch, cfg, args, B, T, Te)
        autocast = dtype == "bf16" and not use_fsdp2
        total = args.warmup + args.steps
        flops_micro = model_flops(cfg, B, T, Te)
        flops_step = args.accum * flops_micro
        tokens_step = args.accum * tokens_per_micro_batch(cfg, B, T, Te)
        peak = args.peak_tflops * 1e12 if args.peak_tflops > 0 else datasheet_peak_flops(device_name)
        peak_source = "--peak-tflops" if args.peak_tflops > 0 else ("datasheet dense bf16" if peak else "unknown")
        print("bench_torch | %s | %s | torch %s | %s | %s" % (args.model, device_name, torch.__version__, backend,
                                                                 "; ".join(notes)))
        print("parameters %d (fsdp.c count %d) | matmul FLOPs per step %.4g | tokens per step %d"
              % (nparams, param_count(cfg), flops_step, tokens_step))
        logf = open(args.log, "w") if args.log else None
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = []
        for step in range(total):
            lr = learning_rate(args.lr, step, total)
            for g in optimizer.param_groups:
                g["lr"] = lr
            sync()
            t0 = time.perf_counter()
            loss_sum = 0.0
            for j in range(args.accum):
                mb = [t.to(dev, non_blocking=True) for t in batches.get(step * args.accum + j)]
                ctx = torch.autocast(device_type=device, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
                with ctx:
                    loss = model(*mb)
                (loss / args.accum).backward()
                loss_sum += loss.detach()
            norm = clip(1.0)
            try:
                optimizer.step()
            except (RuntimeError, NotImplementedError) as e:
                if step != 0 or opt_kind != "AdamW fused":
                    raise
                # fused AdamW on these (sharded) parameters may be missing in this torch
                opt_kind = "AdamW foreach (fused failed: %s)" % str(e).split("\n")[0][:80]
                notes.append(opt_kind)
                print("note: %s" % opt_kind)
                optimizer = torch.optim.AdamW(make_groups(), foreach=True, **opt_kw)
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
            ms = (time.perf_counter() - t0) * 1e3
            loss_val = float(loss_sum) / args.accum
            if step >= args.warmup:
                times.append(ms)
            tflops = flops_step / (ms / 1e3) / 1e12
            print("step %4d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %.3g TFLOPS%s"
                  % (step + 1, total, loss_val, lr, float(norm), ms, tokens_step / (ms / 1e3), tflops,
                     " | MFU %.1f%%" % (100 * tflops * 1e12 / peak) if peak else ""))
            if not math.isfinite(loss_val):
                print("error: loss is %f at step %d" % (loss_val, step + 1), file=sys.stderr)
                return 1
            if logf:
                logf.write(json.dumps({"step": step + 1, "loss": loss_val, "lr": lr, "grad_norm": float(norm), "ms": ms,
                                       "tokens_per_s": tokens_step / (ms / 1e3), "tflops": tflops,
                                       "mfu": tflops * 1e12 / peak if peak else None}) + "\n")
                logf.flush()
        if logf:
            logf.close()
        memory = torch.cuda.max_memory_allocated() if device == "cuda" else None
    except Exception as e:  # noqa: BLE001
        oom = getattr(torch.cuda, "OutOfMemoryError", None)
        if (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower():
            print("skip: out of memory: %s at batch %d (%s)" % (args.model, B, str(e).split("\n")[0][:200]))
            return 0
        raise
    finally:
        try:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        if pg_file and os.path.exists(pg_file):
            os.unlink(pg_file)

    med = statistics.median(times)
    tflops = flops_step / (med / 1e3) / 1e12
    result = {
        "model": args.model, "device": device_name, "backend": backend,
        "ranks": 1, "shard": "full" if use_fsdp2 else "none", "batch": B, "seq": T, "enc_len": Te,
        "accum": args.accum, "steps": args.steps, "step_ms_median": med, "step_ms_min": min(times),
        "step_ms_max": max(times), "tokens_per_s_per_rank": tokens_step / (med / 1e3),
        "model_tflops_per_rank": tflops, "hardware_tflops_per_rank": tflops,
        "mfu": tflops * 1e12 / peak if peak else None, "peak_tflops": peak / 1e12, "peak_source": peak_source,
        "exposed_comm_ms_median": None, "memory_bytes_per_rank": memory,
        # beyond fsdp.c's fields
        "params": param_count(cfg), "flops_per_step": flops_step, "fsdp2": use_fsdp2, "compile": bool(args.compile or args.tuned),
        "dtype": dtype, "torch_version": torch.__version__, "notes": notes,
        "data": "llm.c shards %s%s" % (args.data, " (T5: plain continuations)" if t5 else "") if args.data else "random tokens",
    }
    print("bench | %s | %s | %s | median of %d steps: %.2f ms (%.2f-%.2f) | %.0f tokens/s | %.4g TFLOPS | MFU %s"
          % (args.model, device_name, result["backend"], len(times), med, min(times), max(times),
             result["tokens_per_s_per_rank"], tflops, "%.1f%%" % (100 * result["mfu"]) if peak else "n/a"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
