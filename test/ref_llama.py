#!/usr/bin/python3
"""ref_llama.py: checks fsdp.c's Llama against Hugging Face transformers' LlamaForCausalLM.

The Llama twin of test/ref_gpt.py, with transformers' model as the reference instead of one
written here. Runs build/tool/llama_dump (test/tool_llama_dump.c) for small models with odd
shapes (CASES), copies the dumped initial parameters into a LlamaForCausalLM of the same
configuration (float32, eager attention), and compares, per case:
  logits       of an evaluation forward, the V real columns; the Vp - V padding columns of
               fsdp.c exactly 0 (the lm_head's padding rows are)
  loss         mean cross-entropy over the B*T tokens
  gradients    of every parameter: fsdp.c's fused tensors against transformers' parts, q_proj,
               k_proj and v_proj stacked as attn.qkv's rows, gate_proj and up_proj as
               mlp.gate_up's (the rotary pairs are a head's halves on both sides, so no
               permutation); plus the embedding's (and the lm_head's) padding rows exactly 0
  grad_norm    the global L2 norm
  decay        fsdp.c's weight-decay flags == the block matmul weights
  adamw        K steps on the same batch: torch.optim.AdamW (betas 0.9/0.95, eps 1e-8, decay
               groups as above, constant lr) after torch.nn.utils.clip_grad_norm_ on
               transformers' parameters; the K+1 losses and gradient norms, the clip decisions,
               the parameters after K steps
Tolerances and error measures as ref_gpt.py's (TOL 1e-4 on logits, loss, gradients and norms;
1e-3 on the final parameters, relative to their values and to the update). Both sides compute
in fp32 in different orders; observed: logits <= 6.5e-7, loss <= 1.3e-7, gradients <= 1.2e-6,
norms <= 4.1e-7, final parameters <= 6.5e-5 (values) and 4.2e-5 (update).

What the cases cover: grouped-query attention 4:1 and 1:1 (and 3:1), the lm_head tied and
untied, rotary theta 500000 and 10000, Llama 3.1's frequency scaling (factor 8 and 32, on head
sizes where kept, blended and slowed pairs all occur), transformers' own initialization (std
0.02: nearly uniform attention) and a "wide" one (O(1) activations: attention far from uniform,
SiLU curved, the rotary angles visible in every score).

Perturbations: REF_LLAMA_PERTURB=<name> changes the transformers side (not fsdp.c) so a reviewer
can see the check fail on a plausible bug (PERTURBATIONS lists them). Each fails from 51 to 185
of the checks: theta 10% off 2e-3 on the logits of d; the 3.1 scaling left out 1.8e-3 (d); eps
1e-6 1.4e-2 (a, whose small activations make eps matter); the key/value heads of a group swapped
1.09 (d); gate and up swapped 0.81 (d).

Runs under the python with transformers that test/test_hf_parity.py makes (build/hfenv).
Prints "ok <name> <error> (tol ..)" or "FAIL ..." per check, then "<N> passed, <M> failed".
Usage: /usr/bin/python3 test/ref_llama.py [--keep DIR]
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "tool", "llama_dump")

# (name, model spec, B, T, seed, K AdamW steps, lr, weight decay, grad clip, init)
# a: GQA 4:1, tied lm_head, theta 500000 without scaling, transformers' initialization, clipped.
# b: GQA 1:1 (plain multi-head), untied, theta 10000, V=130 -> Vp=256, "wide", unclipped.
# c: GQA 2:1, untied, Llama 3.1's scaling (factor 8) on heads of 16: of the 8 pairs, one is
#    blended and three are slowed; "wide", clipped.
# d: GQA 3:1, tied, the 3.2 scaling (factor 32), heads of 8, T=11, "wide", clipped.
CASES = [
    ("a", "llama:L=2,C=64,H=4,KV=1,F=96,V=61,T=16,theta=500000,tied=1", 2, 16, 7, 3, 1e-3, 0.3, 1.0, "llama"),
    ("b", "llama:L=1,C=48,H=3,KV=3,F=80,V=130,T=8,theta=10000,tied=0", 3, 7, 11, 3, 2e-3, 1.0, 50.0, "wide"),
    ("c", "llama:L=2,C=64,H=4,KV=2,F=72,V=77,T=16,theta=500000,scaling=8", 2, 13, 5, 3, 1e-3, 0.3, 1.0, "wide"),
    ("d", "llama:L=2,C=48,H=6,KV=2,F=64,V=90,T=12,scaling=32,tied=1", 2, 11, 3, 3, 2e-3, 1.0, 1.0, "wide"),
]
TOL = 1e-4
TOL_FINAL = 1e-3
TOL_UPDATE = 1e-3

# Bugs planted on the transformers side, each of which must fail some checks.
PERTURBATIONS = {
    "theta": "rope_theta 10% off",
    "no_scaling": "Llama 3.1's frequency scaling left out",
    "eps": "rms_norm_eps 1e-6 instead of the model's",
    "kv_order": "the key/value heads of a group taken in the other order",
    "gate_up": "gate_proj and up_proj swapped",
}
PERTURB = os.environ.get("REF_LLAMA_PERTURB", "")


def hf_model(meta):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    scaling = None
    if meta["rope_factor"] > 0 and PERTURB != "no_scaling":
        scaling = {"rope_type": "llama3", "factor": meta["rope_factor"], "low_freq_factor": meta["rope_low_freq_factor"],
                   "high_freq_factor": meta["rope_high_freq_factor"],
                   "original_max_position_embeddings": meta["rope_original_context"]}
    cfg = LlamaConfig(vocab_size=meta["V"], hidden_size=meta["C"], intermediate_size=meta["F"],
                      num_hidden_layers=meta["L"], num_attention_heads=meta["H"], num_key_value_heads=meta["KV"],
                      max_position_embeddings=meta["T_model"], rms_norm_eps=1e-6 if PERTURB == "eps" else meta["norm_eps"],
                      rope_theta=meta["rope_theta"] * (1.1 if PERTURB == "theta" else 1.0), rope_scaling=scaling,
                      tie_word_embeddings=bool(meta["tied"]), attention_bias=False, mlp_bias=False,
                      attn_implementation="eager", torch_dtype=torch.float32)
    model = LlamaForCausalLM(cfg).float()
    model.train()  # no dropout in Llama: train() only keeps autograd's view of it honest
    return model


def our_parts(meta):
    """fsdp.c's parameter key -> [(transformers' name, first row, rows)]: the parts of a fused
    tensor as transformers' separate ones, rows in order."""
    H, KV, D, F, V = meta["H"], meta["KV"], meta["D"], meta["F"], meta["V"]
    parts = {"root.embed.weight": [("model.embed_tokens.weight", 0, V)], "root.norm.weight": [("model.norm.weight", 0, None)]}
    if not meta["tied"]:
        parts["root.lm_head.weight"] = [("lm_head.weight", 0, V)]
    for p in meta["params"]:
        u = p["unit_name"]
        if not u.startswith("block."):
            continue
        l = int(u.split(".")[1])
        pre = "model.layers.%d." % l
        key = "%s.%s" % (u, p["name"])
        if p["name"] == "attn_norm.weight":
            parts[key] = [(pre + "input_layernorm.weight", 0, None)]
        elif p["name"] == "attn.qkv.weight":
            parts[key] = [(pre + "self_attn.q_proj.weight", 0, H * D), (pre + "self_attn.k_proj.weight", H * D, KV * D),
                          (pre + "self_attn.v_proj.weight", (H + KV) * D, KV * D)]
        elif p["name"] == "attn.o.weight":
            parts[key] = [(pre + "self_attn.o_proj.weight", 0, None)]
        elif p["name"] == "mlp_norm.weight":
            parts[key] = [(pre + "post_attention_layernorm.weight", 0, None)]
        elif p["name"] == "mlp.gate_up.weight":
            parts[key] = [(pre + "mlp.gate_proj.weight", 0, F), (pre + "mlp.up_proj.weight", F, F)]
        elif p["name"] == "mlp.down.weight":
            parts[key] = [(pre + "mlp.down_proj.weight", 0, None)]
        else:
            raise SystemExit("ref_llama: unknown parameter " + key)
    return parts


def load_into(model, P0, parts, meta):
    import torch
    named = dict(model.named_parameters())
    KV, D = meta["KV"], meta["D"]
    with torch.no_grad():
        for key, plist in parts.items():
            for hf, r0, n in plist:
                src = P0[key] if n is None else P0[key][r0:r0 + n]
                if PERTURB == "kv_order" and hf.endswith(("k_proj.weight", "v_proj.weight")) and KV > 1:
                    src = src.view(KV, D, -1).flip(0).reshape(src.shape)
                if PERTURB == "gate_up" and hf.endswith(("gate_proj.weight", "up_proj.weight")):
                    F = meta["F"]
                    src = P0[key][F - r0:2 * F - r0]
                named[hf].copy_(src)


def fused(model, parts, key, what):
    """The transformers tensors (or their .grad) of one fsdp.c key, stacked as fsdp.c holds them."""
    import torch
    named = dict(model.named_parameters())
    ts = []
    for hf, _, _ in parts[key]:
        t = named[hf] if what == "param" else named[hf].grad
        ts.append((t if t is not None else torch.zeros_like(named[hf])).detach())
    return torch.cat(ts, 0)


def run_case(case, workdir):
    import torch
    from refcheck import live_view, read_f32, read_i32, rel_err, report, split_params
    name, spec, B, T, seed, K, lr, wd, clip, init = case
    out = os.path.join(workdir, name)
    cmd = [TOOL, out, spec, str(B), str(T), str(seed), str(K), repr(lr), repr(wd), repr(clip), init]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        report("%s.llama_dump_runs" % name, float(r.returncode), 0, ok=False)
        return
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    V, Vp = meta["V"], meta["Vp"]
    ntot = sum(p["live"] for p in meta["params"])
    P0 = split_params(read_f32(os.path.join(out, "params.bin"), ntot), meta)
    G_c = split_params(read_f32(os.path.join(out, "grads.bin"), ntot), meta)
    P_final_c = split_params(read_f32(os.path.join(out, "params_final.bin"), ntot), meta)
    tokens = read_i32(os.path.join(out, "tokens.bin")).view(B, T)
    targets = read_i32(os.path.join(out, "targets.bin")).view(B, T)
    logits_c = read_f32(os.path.join(out, "logits.bin"), B * T * Vp).view(B, T, Vp)
    tag = "%s[%s B=%d T=%d %s]" % (name, spec.split(":")[1], B, T, init)

    model = hf_model(meta)
    parts = our_parts(meta)
    load_into(model, P0, parts, meta)
    order = ["%s.%s" % (p["unit_name"], p["name"]) for p in meta["params"]]
    live = {"%s.%s" % (p["unit_name"], p["name"]): p for p in meta["params"]}

    def forward():
        return model(input_ids=tokens.long()).logits

    def loss_of(logits):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    logits = forward()
    report(tag + " logits", rel_err(logits_c[..., :V], logits.detach()), TOL)
    pad_cols = logits_c[..., V:].abs().max().item() if Vp > V else 0.0
    report(tag + " logits' padding columns exactly 0", pad_cols, 0, ok=(pad_cols == 0.0))
    loss = loss_of(logits)
    report(tag + " loss", abs(meta["loss"] - loss.item()) / abs(loss.item()), TOL)

    loss.backward()
    for key in order:
        p = live[key]
        g = fused(model, parts, key, "grad")
        report(tag + " grad " + key, rel_err(live_view(G_c[key], p), g.reshape(-1)[:p["live"]]), TOL)
    pad = meta["pad_grad_maxabs"]
    report(tag + " vocabulary padding rows: grad exactly 0", pad, 0, ok=(pad == 0.0))
    params = [q for q in model.parameters()]  # tied: the embedding once

    def norm():
        return torch.sqrt(sum((q.grad.double() ** 2).sum() for q in params if q.grad is not None)).item()

    ref_norm = norm()
    report(tag + " grad_norm", abs(meta["grad_norm"] - ref_norm) / ref_norm, TOL)

    decay_keys = [k for k in order if live[k]["unit"] > 0 and len(live[k]["shape"]) == 2]
    c_decay = [k for k in order if live[k]["decay"]]
    report(tag + " decay flags (%d tensors)" % len(decay_keys), 0.0 if c_decay == decay_keys else 1.0, 0,
           ok=(c_decay == decay_keys))
    named = dict(model.named_parameters())
    decay_hf = {hf for k in decay_keys for hf, _, _ in parts[k]}
    groups = [{"params": [named[n] for n in named if n in decay_hf], "weight_decay": wd},
              {"params": [named[n] for n in named if n not in decay_hf], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, norms, scales = [loss.item()], [ref_norm], []
    for k in range(K):
        if clip > 0:
            n = torch.nn.utils.clip_grad_norm_(params, clip).item()
            scales.append(min(1.0, clip / (n + 1e-6)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        l = loss_of(forward())
        l.backward()
        losses.append(l.item())
        norms.append(norm())
    lc = torch.tensor(meta["losses"], dtype=torch.float64)
    lr_ = torch.tensor(losses, dtype=torch.float64)
    report(tag + " adamw losses x%d" % (K + 1), ((lc - lr_).abs() / lr_.abs()).max().item(), TOL)
    nc = torch.tensor(meta["grad_norms"], dtype=torch.float64)
    nr = torch.tensor(norms, dtype=torch.float64)
    report(tag + " adamw grad norms x%d" % (K + 1), ((nc - nr).abs() / nr).max().item(), TOL)
    nclip = sum(1 for s in meta["clip_scales"] if s < 1.0)
    want = sum(1 for s in scales if s < 1.0)
    report(tag + " clipping active in %d/%d steps (expected %d)" % (nclip, K, want), 0.0, 0, ok=(nclip == want))
    worst_val, worst_upd, key_val, key_upd = 0.0, 0.0, "", ""
    for key in order:
        p = live[key]
        c = live_view(P_final_c[key], p).double()
        ref = fused(model, parts, key, "param").reshape(-1)[:p["live"]].double()
        p0 = live_view(P0[key], p).double()
        e_val = (c - ref).abs().max().item() / ref.abs().max().item()
        e_upd = (c - ref).norm().item() / (ref - p0).norm().item()
        if not e_val < TOL_FINAL:
            report(tag + " final param " + key, e_val, TOL_FINAL)
        if not e_upd < TOL_UPDATE:
            report(tag + " final update " + key, e_upd, TOL_UPDATE)
        if e_val > worst_val or e_val != e_val:
            worst_val, key_val = e_val, key
        if e_upd > worst_upd or e_upd != e_upd:
            worst_upd, key_upd = e_upd, key
    report(tag + " final params after %d steps, rel to values (worst: %s)" % (K, key_val), worst_val, TOL_FINAL)
    report(tag + " final params after %d steps, L2 rel to the update (worst: %s)" % (K, key_upd), worst_upd, TOL_UPDATE)
    pad = meta["pad_param_final_maxabs"]
    report(tag + " vocabulary padding rows: params still exactly 0", pad, 0, ok=(pad == 0.0))


def wanted(case):
    """TEST_FILTER (make test F=REGEX): whether a case runs, matched against its name and model."""
    f = os.environ.get("TEST_FILTER", "")
    return not f or re.search(f, " ".join(str(x) for x in case), re.IGNORECASE) is not None


def inner(keep):
    import torch
    import transformers
    from refcheck import summary
    transformers.logging.set_verbosity_error()
    if PERTURB and PERTURB not in PERTURBATIONS:
        raise SystemExit("REF_LLAMA_PERTURB=%s: expected one of %s" % (PERTURB, ", ".join(PERTURBATIONS)))
    print("ref_llama: fsdp.c Llama vs transformers %s LlamaForCausalLM on PyTorch %s (float32)%s"
          % (transformers.__version__, torch.__version__, ", perturbed: " + PERTURBATIONS[PERTURB] if PERTURB else ""))
    torch.manual_seed(0)
    if keep:
        os.makedirs(keep, exist_ok=True)
        for c in filter(wanted, CASES):
            run_case(c, keep)
    else:
        with tempfile.TemporaryDirectory(prefix="ref_llama_") as d:
            for c in filter(wanted, CASES):
                run_case(c, d)
    sys.exit(summary())


def main():
    keep = None
    args = [a for a in sys.argv[1:] if a != "--inner"]
    if len(args) == 2 and args[0] == "--keep":
        keep = args[1]
    elif args:
        raise SystemExit("usage: ref_llama.py [--keep DIR]")
    if not os.access(TOOL, os.X_OK):
        raise SystemExit("%s not found: run `make build/tool/llama_dump` first" % TOOL)
    if "--inner" in sys.argv:
        inner(keep)
    from test_hf_parity import bootstrap, VENV, PIP_ARGS
    py = bootstrap()
    if py is None:
        print("FAIL ref_llama: could not install transformers (no network or no rights). Run:\n"
              f"  /usr/bin/python3 -m venv --system-site-packages {VENV} && {VENV}/bin/pip install "
              + " ".join(f"'{a}'" for a in PIP_ARGS))
        print("0 passed, 1 failed")
        sys.exit(1)
    sys.exit(subprocess.run([py, os.path.abspath(__file__), "--inner"] + sys.argv[1:]).returncode)


if __name__ == "__main__":
    main()
