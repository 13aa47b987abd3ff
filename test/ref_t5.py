#!/usr/bin/python3
"""ref_t5.py: checks fsdp.c's T5 (v1.0 and v1.1) against an independent PyTorch implementation.

The T5 twin of test/ref_gpt.py. Runs build/tool/t5_dump (test/tool_t5_dump.c;
`make build/tool/t5_dump`) for four small encoder-decoder models with odd shapes (CASES), loads
the dumped initial parameters into a T5 written here in plain torch (float32, own RMSNorm /
attention / relative position buckets / tanh-GELU, no torch.nn modules), and compares, per case:
  buckets      T5's relative position buckets (32 buckets, max distance 128): the C function
               relative_position_bucket for relative positions -300..300, bidirectional and
               one-directional, == the torch bucket function below (exactly); both == the
               hand-derived values of KNOWN_BUCKETS
  logits       of an evaluation forward, all Vp columns (padding columns included)
  loss         mean cross-entropy over the targets >= 0 (the -1 ones are ignored), over the
               first V logit columns only
  gradients    of every parameter (live elements): the shared embedding (fed by the encoder
               embedding, the decoder embedding and, v1.0, the tied lm_head), both relative
               position bias tables, every norm and matmul weight; plus: the vocabulary
               padding rows of shared / lm_head get exactly 0 in C
  grad_norm    the global L2 norm
  decay        fsdp.c's weight-decay flags == "2D weights inside blocks" (the torch groups;
               the tool runs with the default: embeddings and lm_head not decayed)
  adamw        K steps on the same batch: torch.optim.AdamW (betas 0.9/0.95, eps 1e-8, decay
               groups as above, constant lr) after torch.nn.utils.clip_grad_norm_; the K+1
               losses, the K+1 gradient norms, the clip decisions, the parameters after K steps
               (and the padding rows still exactly 0 in C)

The T5 reproduced here (Raffel et al. 2020; HF transformers' T5 / Mesh TensorFlow): shared
embedding without scaling; RMSNorm y = x * rsqrt(mean(x^2) + 1e-6) * w (no mean, no bias); no
biases anywhere; attention logits NOT scaled by 1/sqrt(d_kv); H heads of size D (H*D may differ
from C); a relative position bias from a [32 buckets, H] table per stack (encoder
bidirectional, decoder one-directional), computed once and added to every self-attention of
that stack, bias[h, i, j] = table[bucket(j - i), h]; causal decoder self-attention;
cross-attention (q from the decoder, k/v from the final-normed encoder output, no position
bias); feed-forward relu(wi x) (v1.0) or gelu_tanh(gate) * up (v1.1: wi rows [0, F) the gate,
[F, 2F) the linear part); pre-norm residual blocks; a final RMS norm per stack; v1.0: lm_head
tied to the shared embedding with the decoder output scaled by C^-0.5; v1.1: untied lm_head.

Error measures (c = fsdp.c, ref = torch): tensors rel = max|c - ref| / max|ref| per tensor;
scalars |c - ref| / |ref|; lists the worst element of that. Tolerances as ref_gpt.py, and why:
  1e-4  logits, loss, gradients, grad norms, losses (TOL). Both sides compute in fp32 in
        different orders; observed: logits <= 4.4e-7, loss <= 1.1e-7, gradients <= 1.5e-6
        (the position-bias tables, sums over many scores), norms <= 1e-6. Real bugs are far
        above (see Perturbations): attention scaled by 1/sqrt(D) 0.23 on the logits, the tied
        lm_head without C^-0.5 0.86, bidirectional decoder buckets 8e-2 (cases c, d only:
        with Td <= 9 the two bucketings agree on every causal distance), max_distance 64 4e-3,
        the encoder's bias added to cross-attention 2e-2, padded targets not ignored 2e-2 on
        the loss, wi's gate/linear halves swapped 0.64; the smallest, the erf GELU in v1.1:
        1.6e-4 / 1.0e-4 on the logits of b / d, up to 1.0e-3 on their gradients.
        Not visible at this tolerance: an RMSNorm eps of 1e-5 instead of 1e-6 (the activations
        have mean(x^2) ~ 1, so it changes a norm's output by ~5e-6); it shows only in the final
        parameters (3e-3..5e-3 > TOL_UPDATE, through the elements of the next paragraph).
  1e-3  final parameters after K AdamW steps, max|c - ref| / max|ref| (TOL_FINAL; observed
        <= 2.3e-4). Looser because Adam divides each gradient by its own running RMS: where a
        first-step gradient is tiny (~eps = 1e-8; the smallest of ~1e5 elements per case is,
        e.g. 2e-8 against 5e-2 for the largest of its tensor), its relative rounding error
        passes straight into an update of size ~lr.
  1e-3  final parameters, relative to the update: ||c - ref|| / ||ref - initial|| (L2 over the
        tensor, TOL_UPDATE; observed <= 4.1e-4, those same elements), which sees an update
        that is wrong by 10% on tensors like the norm gains (~1, moved by ~K*lr) where the
        first measure cannot (decaying the shared embedding / lm_head too gives 0.29..0.95).
  Unlike GPT there is no tensor with an exactly-zero gradient to leave out (no key bias).

Perturbations: REF_T5_PERTURB=<name> changes the torch reference (not fsdp.c) so a reviewer can
see that the check fails on a plausible bug (PERTURBATIONS lists the names; every one of them
makes some checks FAIL; the run then exits 1 as for a real mismatch).

Prints "ok <name> <error> (tol ..)" or "FAIL <name> <error> (tol ..)" per check, then
"<N> passed, <M> failed"; exits 1 when any check failed.
Usage: /usr/bin/python3 test/ref_t5.py [--keep DIR]   (DIR keeps the dumps; REF_T5_VERBOSE=1
prints the per-tensor errors of the final parameters)
"""
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import live_view, read_f32, read_i32, rel_err, report, split_params, summary  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "tool", "t5_dump")

# (name, model spec, B, Te, Td, seed, K AdamW steps, lr, weight decay, grad clip, init)
# a: v1.0 (ReLU, tied lm_head), T5's own initialization (the path training takes), H*D = 60
#    != C = 48; its gradient norm (~4.7) is above the clip 1.0, so every step clips.
# b: v1.1 (gated GELU, untied lm_head), decoder deeper than the encoder (M=2, L=1), V=200 ->
#    Vp=256, own initialization, a clip far above the norm (clip_grad_norm_ leaves it alone).
# c: v1.0, "wide" init (activations O(1): attention far from uniform, position bias O(1)),
#    Te=133 and Td=23 so the log-spaced buckets of both stacks are used, and encoder distances
#    beyond max_distance 128 (the clamped last bucket); encoder deeper than the decoder.
# d: v1.1, "wide" init (GELU gates in their curved region; with T5's own init an erf-GELU
#    model is within ~1e-4 of a tanh one), H*D = 32 = C with H=4 heads of 8, clipped.
# Every case pads the targets of some rows at the end (-1, ignored), as T5's padded labels.
# Weight decays 0.3 and 1.0 are larger than usual so that decay applied to the wrong tensors
# changes their update by well over TOL_UPDATE.
CASES = [
    ("a", "t5:L=2,M=2,C=48,H=3,D=20,F=96,V=131", 2, 19, 9, 7, 4, 1e-3, 0.3, 1.0, "t5"),
    ("b", "t5v1.1:L=1,M=2,C=32,H=2,D=24,F=40,V=200", 3, 13, 7, 11, 3, 2e-3, 1.0, 50.0, "t5"),
    ("c", "t5:L=2,M=1,C=40,H=2,D=16,F=64,V=77", 2, 133, 23, 5, 3, 1e-3, 0.3, 1.0, "wide"),
    ("d", "t5v1.1:L=2,M=1,C=32,H=4,D=8,F=48,V=150", 2, 17, 11, 3, 3, 2e-3, 1.0, 1.0, "wide"),
]
TOL = 1e-4          # logits, loss, gradients, gradient norms, AdamW losses
TOL_FINAL = 1e-3    # final parameters: max|c - ref| / max|ref|
TOL_UPDATE = 1e-3   # final parameters: ||c - ref|| / ||ref - initial|| (relative to the update)
NUM_BUCKETS, MAX_DISTANCE = 32, 128

# Hand-derived buckets (32 buckets, max distance 128), from the formula of bucket() below.
# Bidirectional (encoder): 16 buckets per sign, +16 when rel > 0; n = |rel|; max_exact = 8;
#   n < 8 -> n; else 8 + trunc(log(n/8) / log(128/8) * (16 - 8)) = 8 + trunc(2 log2(n/8))
#   (log 16 = 4 log 2), clamped to 15.
#   rel 0 -> 0; -1 -> 1; +1 -> 16 + 1 = 17; -7 -> 7;
#   -8: n = 8 = max_exact, log(1) = 0 -> 8;
#   +9: 2 log2(9/8) = 0.34 -> 16 + 8 + 0 = 24;
#   -15: 2 log2(15/8) = 1.81 -> 9;
#   -16: 2 log2(2) = 2 exactly (a boundary; fp32 could round it to 1.99999 -> 9: C and torch
#        both give 10, the exact-arithmetic value) -> 10;  -32: 2 log2(4) = 4 -> 12;
#   -127: 2 log2(15.875) = 7.98 -> 15;  -128: 2 log2(16) = 8 -> 16 -> clamp 15;
#   +200: 2 log2(25) = 9.29 -> 17 -> clamp 15 -> 16 + 15 = 31.
# One-directional (decoder): 32 buckets; n = max(-rel, 0) (keys after the query: n = 0);
#   max_exact = 16; n < 16 -> n; else 16 + trunc(log(n/16) / log(128/16) * 16)
#   = 16 + trunc(16/3 log2(n/16)), clamped to 31.
#   rel +5 -> n = 0 -> 0; -5 -> 5; -15 -> 15; -16 -> 16 + 0 = 16;
#   -17: 16/3 log2(17/16) = 0.47 -> 16;  -20: 16/3 log2(1.25) = 16/3 * 0.3219 = 1.72 -> 17;
#   -40: 16/3 log2(2.5) = 7.05 -> 23;  -100: 16/3 log2(6.25) = 14.10 -> 30;
#   -127: 16/3 log2(7.9375) = 15.94 -> 31;  -1000: 16/3 log2(62.5) = 31.8 -> 47 -> clamp 31.
KNOWN_BUCKETS = [  # (relative position, bidirectional, bucket)
    (0, True, 0), (-1, True, 1), (1, True, 17), (-7, True, 7), (-8, True, 8), (9, True, 24),
    (-15, True, 9), (-16, True, 10), (-32, True, 12), (-127, True, 15), (-128, True, 15),
    (200, True, 31),
    (5, False, 0), (-5, False, 5), (-15, False, 15), (-16, False, 16), (-17, False, 16),
    (-20, False, 17), (-40, False, 23), (-100, False, 30), (-127, False, 31), (-1000, False, 31),
]

# REF_T5_PERTURB=<name>: a deliberate error in the torch reference (see the docstring).
PERTURBATIONS = {
    "attn_scale": "attention logits scaled by 1/sqrt(D) (as GPT; T5 does not scale)",
    "no_lm_scale": "v1.0: the tied lm_head without the C^-0.5 scaling of its input",
    "dec_bidir": "bidirectional buckets in the decoder",
    "enc_onedir": "one-directional buckets in the encoder",
    "erf_gelu": "the erf GELU instead of the tanh approximation (v1.1)",
    "swap_gate": "v1.1: wi rows [0, F) the linear part and [F, 2F) the gate",
    "rms_eps": "RMSNorm eps 1e-5 instead of 1e-6",
    "cross_bias": "the encoder position bias added to the cross-attention too",
    "no_pad_ignore": "padded targets not ignored (cross-entropy over them as class 0)",
    "decay_embeddings": "weight decay on the shared embedding / lm_head as well",
    "max_distance": "max_distance 64 instead of 128 in the model's buckets",
}
PERTURB = os.environ.get("REF_T5_PERTURB", "")
if PERTURB and PERTURB not in PERTURBATIONS:
    raise SystemExit("REF_T5_PERTURB=%s: unknown; one of %s" % (PERTURB, ", ".join(PERTURBATIONS)))

torch.set_num_threads(1)  # tiny tensors: threads only add overhead and nondeterminism
DTYPE = torch.float32

# ---- the reference T5 ---------------------------------------------------------------------

def bucket(rel, bidirectional, num_buckets=NUM_BUCKETS, max_distance=MAX_DISTANCE):
    """T5's relative position bucket of rel = memory (key) position - query position, as HF
    transformers' T5Attention._relative_position_bucket / Mesh TensorFlow: half the buckets per
    sign when bidirectional; max_exact = num_buckets // 2 exact small distances, then
    log-spaced up to max_distance (the log in float32, truncated by .to(long)), clamped to
    num_buckets - 1. Unidirectional: only keys before the query (rel < 0) have n > 0."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        ret = ret + (rel > 0).to(torch.long) * num_buckets
        n = rel.abs()
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(is_small, n, large)


def position_bias(table, T, bidirectional):
    """table [num_buckets, H] -> bias [H, T, T], bias[h, i, j] = table[bucket(j - i), h]."""
    pos = torch.arange(T, dtype=torch.long)
    rel = pos[None, :] - pos[:, None]  # [i, j] = j - i
    md = 64 if PERTURB == "max_distance" else MAX_DISTANCE
    return table[bucket(rel, bidirectional, NUM_BUCKETS, md)].permute(2, 0, 1)


def rms_norm(x, w):
    eps = 1e-5 if PERTURB == "rms_eps" else 1e-6
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    if PERTURB == "erf_gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(q, k, v, H, D, bias, causal):
    """q [B, Tq, H*D], k / v [B, Tk, H*D], bias [H, Tq, Tk] or None -> [B, Tq, H*D]."""
    B, Tq, _ = q.shape
    Tk = k.shape[1]
    q = q.view(B, Tq, H, D).transpose(1, 2)
    k = k.view(B, Tk, H, D).transpose(1, 2)
    v = v.view(B, Tk, H, D).transpose(1, 2)
    att = q @ k.transpose(-2, -1)  # T5: no 1/sqrt(D)
    if PERTURB == "attn_scale":
        att = att * (1.0 / math.sqrt(D))
    if bias is not None:
        att = att + bias
    if causal:
        mask = torch.ones(Tq, Tk, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    att = att.softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, Tq, H * D)


def feed_forward(h, P, pre, meta):
    a = h @ P[pre + "mlp.wi.weight"].t()
    if meta["gated"]:
        F = meta["F"]
        gate, up = a[..., :F], a[..., F:]
        if PERTURB == "swap_gate":
            gate, up = up, gate
        a = gelu_tanh(gate) * up
    else:
        a = torch.relu(a)
    return a @ P[pre + "mlp.wo.weight"].t()


def t5_forward(P, meta, enc_tokens, dec_tokens, shared_parts=None):
    """enc_tokens [B, Te], dec_tokens [B, Td] -> logits [B, Td, Vp]. shared_parts: optional
    (encoder, decoder, lm_head) stand-ins for the shared embedding, so that the three sources of
    its gradient can be told apart."""
    L, Ld, C, H, D = meta["L"], meta["Ld"], meta["C"], meta["H"], meta["D"]
    I = H * D
    B, Te = enc_tokens.shape
    Td = dec_tokens.shape[1]
    s_enc, s_dec, s_head = shared_parts or (P["root.shared.weight"],) * 3
    # encoder
    x = s_enc[enc_tokens]
    bias = position_bias(P["root.encoder.rel_bias"], Te, PERTURB != "enc_onedir")
    for l in range(L):
        pre = "encoder.%d." % l
        h = rms_norm(x, P[pre + "ln1.weight"])
        q, k, v = (h @ P[pre + "attn.qkv.weight"].t()).split(I, dim=-1)
        x = x + attention(q, k, v, H, D, bias, False) @ P[pre + "attn.o.weight"].t()
        h = rms_norm(x, P[pre + "ln2.weight"])
        x = x + feed_forward(h, P, pre, meta)
    enc = rms_norm(x, P["root.encoder.final_norm.weight"])
    # decoder
    y = s_dec[dec_tokens]
    dbias = position_bias(P["root.decoder.rel_bias"], Td, PERTURB == "dec_bidir")
    for l in range(Ld):
        pre = "decoder.%d." % l
        h = rms_norm(y, P[pre + "ln1.weight"])
        q, k, v = (h @ P[pre + "attn.qkv.weight"].t()).split(I, dim=-1)
        y = y + attention(q, k, v, H, D, dbias, True) @ P[pre + "attn.o.weight"].t()
        h = rms_norm(y, P[pre + "ln2.weight"])
        q = h @ P[pre + "cross.q.weight"].t()
        k, v = (enc @ P[pre + "cross.kv.weight"].t()).split(I, dim=-1)
        cbias = None
        if PERTURB == "cross_bias" and Td <= Te:
            cbias = bias[:, :Td, :]
        y = y + attention(q, k, v, H, D, cbias, False) @ P[pre + "cross.o.weight"].t()
        h = rms_norm(y, P[pre + "ln3.weight"])
        y = y + feed_forward(h, P, pre, meta)
    y = rms_norm(y, P["root.decoder.final_norm.weight"])
    if meta["tied"]:
        if PERTURB != "no_lm_scale":
            y = y * (C ** -0.5)
        return y @ s_head.t()  # all Vp rows (padding rows are 0)
    return y @ P["root.lm_head.weight"].t()


def t5_loss(logits, targets, V):
    # Padding columns V..Vp-1 are not part of the vocabulary: the softmax is over :V only;
    # targets -1 are ignored and the mean is over the others.
    if PERTURB == "no_pad_ignore":
        targets = targets.clamp(min=0)
    return torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1),
                                             ignore_index=-1)


# ---- the bucket function --------------------------------------------------------------------

def check_buckets(out, meta):
    R = meta["bucket_range"]
    assert (meta["num_buckets"], meta["max_distance"]) == (NUM_BUCKETS, MAX_DISTANCE)
    c = read_i32(os.path.join(out, "buckets.bin"), 2 * (2 * R + 1)).view(2, 2 * R + 1)
    rel = torch.arange(-R, R + 1, dtype=torch.long)
    for row, bidir in ((0, True), (1, False)):
        ref = bucket(rel, bidir)
        bad = torch.nonzero(ref != c[row]).flatten()
        what = "bidirectional" if bidir else "one-directional"
        detail = "" if bad.numel() == 0 else " (first: rel %d c %d torch %d)" % (
            rel[bad[0]].item(), c[row][bad[0]].item(), ref[bad[0]].item())
        report("buckets %s rel -%d..%d: C == torch, mismatches%s" % (what, R, R, detail),
               float(bad.numel()), 0, ok=bad.numel() == 0)
    wrong_t, wrong_c = [], []
    for r, bidir, want in KNOWN_BUCKETS:
        t = bucket(torch.tensor([r]), bidir).item()
        cv = c[0 if bidir else 1][r + R].item() if -R <= r <= R else want
        if t != want:
            wrong_t.append((r, bidir, t, want))
        if cv != want:
            wrong_c.append((r, bidir, cv, want))
    report("buckets: torch == %d hand-derived values%s" % (len(KNOWN_BUCKETS), (" %s" % wrong_t) if wrong_t else ""),
           float(len(wrong_t)), 0, ok=not wrong_t)
    inrange = sum(1 for r, _, _ in KNOWN_BUCKETS if -R <= r <= R)
    report("buckets: C == %d hand-derived values%s" % (inrange, (" %s" % wrong_c) if wrong_c else ""),
           float(len(wrong_c)), 0, ok=not wrong_c)


# ---- one case -----------------------------------------------------------------------------

def grad_norm(P, order):
    return torch.sqrt(sum((P[k].grad.double() ** 2).sum() for k in order if P[k].grad is not None)).item()


def run_case(case, workdir, first):
    name, spec, B, Te, Td, seed, K, lr, wd, clip, init = case
    out = os.path.join(workdir, name)
    cmd = [TOOL, out, spec, str(B), str(Te), str(Td), str(seed), str(K), repr(lr), repr(wd), repr(clip), init]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        report("%s.t5_dump_runs" % name, float(r.returncode), 0, ok=False)
        return
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    V, Vp, C = meta["V"], meta["Vp"], meta["C"]
    assert (meta["B"], meta["Te"], meta["Td"]) == (B, Te, Td)
    assert meta["decay_embeddings"] == 0
    if first:
        check_buckets(out, meta)
    ntot = sum(p["live"] for p in meta["params"])
    P0 = split_params(read_f32(os.path.join(out, "params.bin"), ntot), meta)
    G_c = split_params(read_f32(os.path.join(out, "grads.bin"), ntot), meta)
    P_final_c = split_params(read_f32(os.path.join(out, "params_final.bin"), ntot), meta)
    enc_tokens = read_i32(os.path.join(out, "enc_tokens.bin"), B * Te).view(B, Te)
    dec_tokens = read_i32(os.path.join(out, "tokens.bin"), B * Td).view(B, Td)
    targets = read_i32(os.path.join(out, "targets.bin"), B * Td).view(B, Td)
    logits_c = read_f32(os.path.join(out, "logits.bin"), B * Td * Vp).view(B, Td, Vp)
    tag = "%s[%s B=%d Te=%d Td=%d %s]" % (name, spec, B, Te, Td, init)
    nvalid = int((targets >= 0).sum().item())
    report(tag + " targets: %d of %d valid, ids < V, some ignored" % (nvalid, B * Td), 0.0, 0,
           ok=(nvalid == meta["valid_targets"] and 0 < nvalid < B * Td and targets.max().item() < V
               and enc_tokens.max().item() < V and dec_tokens.max().item() < V))

    P = {k: v.clone().to(DTYPE).requires_grad_(True) for k, v in P0.items()}
    order = ["%s.%s" % (p["unit_name"], p["name"]) for p in meta["params"]]

    # forward: logits and loss
    logits = t5_forward(P, meta, enc_tokens, dec_tokens)
    report(tag + " logits", rel_err(logits_c, logits.detach()), TOL)
    loss = t5_loss(logits, targets, V)
    report(tag + " loss", abs(meta["loss"] - loss.item()) / abs(loss.item()), TOL)

    # backward: every gradient
    loss.backward()
    for p in meta["params"]:
        key = "%s.%s" % (p["unit_name"], p["name"])
        g = P[key].grad if P[key].grad is not None else torch.zeros_like(P[key])  # unused: 0
        report(tag + " grad " + key, rel_err(live_view(G_c[key], p), live_view(g, p)), TOL)
    pad = meta["pad_grad_maxabs"]
    report(tag + " shared/lm_head padding rows: grad exactly 0", pad, 0, ok=(pad == 0.0))
    ref_norm = grad_norm(P, order)
    report(tag + " grad_norm", abs(meta["grad_norm"] - ref_norm) / ref_norm, TOL)

    # The shared embedding's gradient has two (v1.1) or three (v1.0) sources; each must be large
    # enough that a C backward dropping it fails the gradient check above (> 10 TOL).
    parts = [P["root.shared.weight"].detach().clone().requires_grad_(True) for _ in range(3)]
    Pd = {k: v.detach() for k, v in P.items()}
    t5_loss(t5_forward(Pd, meta, enc_tokens, dec_tokens, parts), targets, V).backward()
    g_sum = P["root.shared.weight"].grad.double()
    names = ("encoder embedding", "decoder embedding", "tied lm_head")
    least, least_name = float("inf"), ""
    for part, pname in zip(parts[:3 if meta["tied"] else 2], names):
        e = (part.grad.double()).abs().max().item() / g_sum.abs().max().item()
        if e < least:
            least, least_name = e, pname
    report(tag + " shared grad: smallest source (%s), max|g_src|/max|g| > 10 TOL" % least_name,
           least, 10 * TOL, ok=least > 10 * TOL)

    # weight decay groups: matmul weights inside blocks (2D, unit > 0); never the shared
    # embedding, the lm_head, the position-bias tables (2D, unit 0) or the norms
    decay_keys = [k for k, p in zip(order, meta["params"]) if p["unit"] > 0 and len(p["shape"]) == 2]
    c_decay = [k for k, p in zip(order, meta["params"]) if p["decay"]]
    report(tag + " decay flags (%d tensors)" % len(decay_keys), 0.0 if c_decay == decay_keys else 1.0, 0,
           ok=(c_decay == decay_keys))
    if PERTURB == "decay_embeddings":
        decay_keys = decay_keys + [k for k in order if k in ("root.shared.weight", "root.lm_head.weight")]

    # K AdamW steps on the same batch, clipped as torch.nn.utils.clip_grad_norm_
    params = [P[k] for k in order]
    groups = [
        {"params": [P[k] for k in order if k in decay_keys], "weight_decay": wd},
        {"params": [P[k] for k in order if k not in decay_keys], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, norms, scales = [loss.item()], [ref_norm], []
    for k in range(K):
        if clip > 0:
            n = torch.nn.utils.clip_grad_norm_(params, clip).item()
            scales.append(min(1.0, clip / (n + 1e-6)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        l = t5_loss(t5_forward(P, meta, enc_tokens, dec_tokens), targets, V)
        l.backward()
        losses.append(l.item())
        norms.append(grad_norm(P, order))
    lc = torch.tensor(meta["losses"], dtype=torch.float64)
    report(tag + " adamw losses x%d" % (K + 1),
           ((lc - torch.tensor(losses, dtype=torch.float64)).abs() / torch.tensor(losses).double().abs()).max().item(), TOL)
    nc = torch.tensor(meta["grad_norms"], dtype=torch.float64)
    report(tag + " adamw grad norms x%d" % (K + 1),
           ((nc - torch.tensor(norms, dtype=torch.float64)).abs() / torch.tensor(norms).double()).max().item(), TOL)
    nclip = sum(1 for s in meta["clip_scales"] if s < 1.0)
    report(tag + " clipping active in %d/%d steps (expected %d)" % (nclip, K, sum(1 for s in scales if s < 1.0)),
           0.0, 0, ok=(nclip == sum(1 for s in scales if s < 1.0)))
    # Final parameters (see the module docstring): relative to the values (max) and to the
    # update (L2).
    worst_val, worst_upd, key_val, key_upd = 0.0, 0.0, "", ""
    for p in meta["params"]:
        key = "%s.%s" % (p["unit_name"], p["name"])
        c = live_view(P_final_c[key], p).double()
        ref = live_view(P[key].detach(), p).double()
        p0 = live_view(P0[key], p).double()
        diff = (c - ref).abs().max().item()
        e_val = diff / ref.abs().max().item()
        upd = (ref - p0).norm().item()
        e_upd = (c - ref).norm().item() / upd if upd > 0 else (c - ref).norm().item()
        if os.environ.get("REF_T5_VERBOSE"):
            print("   %s %s e_val %.2e e_upd %.2e" % (tag, key, e_val, e_upd))
        if not e_val < TOL_FINAL:
            report(tag + " final param " + key, e_val, TOL_FINAL)
        if not e_upd < TOL_UPDATE:
            i = int((c - ref).abs().argmax().item())
            report(tag + " final update %s (worst element %d: c %.9g ref %.9g initial %.9g grad %.3e)"
                   % (key, i, c[i].item(), ref[i].item(), p0[i].item(), live_view(G_c[key], p)[i].item()),
                   e_upd, TOL_UPDATE)
        if e_val > worst_val or e_val != e_val:
            worst_val, key_val = e_val, key
        if e_upd > worst_upd or e_upd != e_upd:
            worst_upd, key_upd = e_upd, key
    report(tag + " final params after %d steps, rel to values (worst: %s)" % (K, key_val), worst_val, TOL_FINAL)
    report(tag + " final params after %d steps, L2 rel to the update (worst: %s)" % (K, key_upd), worst_upd, TOL_UPDATE)
    pad = meta["pad_param_final_maxabs"]
    report(tag + " shared/lm_head padding rows: params still exactly 0", pad, 0, ok=(pad == 0.0))


def wanted(case):
    """TEST_FILTER (make test F=REGEX): whether a case runs, matched against its name and model."""
    f = os.environ.get("TEST_FILTER", "")
    return not f or re.search(f, " ".join(str(x) for x in case), re.IGNORECASE) is not None


def main():
    keep = None
    if len(sys.argv) == 3 and sys.argv[1] == "--keep":
        keep = sys.argv[2]
    elif len(sys.argv) != 1:
        raise SystemExit("usage: ref_t5.py [--keep DIR]")
    if not os.access(TOOL, os.X_OK):
        raise SystemExit("%s not found: run `make build/tool/t5_dump` first" % TOOL)
    print("ref_t5: fsdp.c T5 vs PyTorch %s (float32); tensors: rel error = max|c-ref|/max|ref|"
          " per tensor unless said otherwise%s" % (torch.__version__,
          ("; PERTURBED: " + PERTURBATIONS[PERTURB]) if PERTURB else ""))
    if keep:
        os.makedirs(keep, exist_ok=True)
        for i, c in enumerate(CASES):
            if wanted(c):
                run_case(c, keep, i == 0)
    else:
        with tempfile.TemporaryDirectory(prefix="ref_t5_") as d:
            for i, c in enumerate(CASES):
                if wanted(c):
                    run_case(c, d, i == 0)
    sys.exit(summary())


if __name__ == "__main__":
    main()
