#!/usr/bin/python3
"""test_hf_parity.py: our exports load in Hugging Face transformers and compute what we compute.

For GPT-2, T5 v1.0 (ReLU, tied lm_head, H*D != C) and T5 v1.1 (gated-GELU, untied lm_head):
  1. transformers builds a tiny random model (layer-norm gains, biases and embeddings redrawn
     so every tensor matters) and save_pretrained writes it (safetensors);
  2. train_gpt_cpu --init-from that directory --steps 0 --export OUT (weights/);
  3. from_pretrained(OUT) must load with no missing or unexpected keys and hold exactly the
     original tensors;
  4. on the same tokens, transformers' logits and loss (labels as ours: GPT-2 shifts them, T5
     ignores -100 where we ignore -1) against ours (build/tool/weights_logits on OUT);
  5. greedy continuations of generate_cpu OUT against transformers' generate (exact ids; T5
     both stop at its end id 1).
Tolerance 1e-4, relative (max|ours - theirs| / max|theirs| for logits, |a - b| / |b| for the
loss), the one of test/ref_gpt.py: both sides compute in fp32, in different orders (our
matmuls and attention against torch's), which moves logits by ~1e-6 relative here; a wrong
mapping (a missed transpose, q/k swapped, the v1.0 lm_head scale, wi_0/wi_1 swapped) moves
them by 1e-2 or more.

transformers and safetensors come from PyPI into a virtual environment build/hfenv that sees
Debian's torch (--system-site-packages); transformers is pinned to 4.44.2, a release that
still runs on Debian's torch 1.13. The environment is made here when it is missing; without a
network this part FAILs with the command to run, it never passes silently.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "build", "hfenv")
PIP_ARGS = ["transformers==4.44.2", "safetensors>=0.4"]
TOL = 1e-4


def has_transformers(python):
    return subprocess.run([python, "-c", "import transformers, safetensors, torch"], capture_output=True).returncode == 0


def bootstrap():
    """The python to run the checks with, making build/hfenv when needed; None when it cannot."""
    vpy = os.path.join(VENV, "bin", "python")
    for py in ("/usr/bin/python3", vpy):
        if os.path.exists(py) and has_transformers(py):
            return py
    print(f"making {VENV} (transformers and safetensors from PyPI, over Debian's torch)", flush=True)
    if not os.path.exists(vpy):
        r = subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", VENV], capture_output=True, text=True)
        if r.returncode:
            print(r.stderr.strip()[-500:])
            return None
    r = subprocess.run([vpy, "-m", "pip", "install", "-q"] + PIP_ARGS, capture_output=True, text=True, timeout=900)
    if r.returncode or not has_transformers(vpy):
        print(r.stderr.strip()[-800:])
        return None
    return vpy


def outer():
    py = bootstrap()
    if py is None:
        print("FAIL transformers parity: could not install transformers/safetensors (no network or no rights). Run:\n"
              f"  /usr/bin/python3 -m venv --system-site-packages {VENV} && {VENV}/bin/pip install "
              + " ".join(f"'{a}'" for a in PIP_ARGS))
        print("0 passed, 1 failed")
        sys.exit(1)
    sys.exit(subprocess.run([py, os.path.abspath(__file__), "--inner"]).returncode)


# ---- the checks, under a python with transformers ----------------------------------------

def inner():
    import numpy as np
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration
    transformers.logging.set_verbosity_error()
    torch.manual_seed(12)
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(("ok " if ok else "FAIL ") + name + (f" ({detail})" if detail else ""), flush=True)
        passed += bool(ok)
        failed += not ok

    tmp = tempfile.mkdtemp(prefix="fsdp_hf_")
    data = os.path.join(tmp, "tokens.bin")
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, 4096]
    with open(data, "wb") as f:
        f.write(header.tobytes() + (np.arange(4096) % 50).astype(np.uint16).tobytes())
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def redraw(model):
        """Norm gains, biases and embeddings away from their 1 / 0 / tiny defaults."""
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.copy_((1.0 if "weight" in name else 0.0) + 0.3 * torch.randn_like(p))
                elif "wte" in name or "wpe" in name:
                    p.copy_(0.3 * torch.randn_like(p))
                elif "relative_attention_bias" in name:
                    p.copy_(torch.randn_like(p))
                elif "h." in name:  # GPT-2 block weights: unit-variance activations
                    p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5)

    def case(name, model, extra, tokens, B, T, Te):
        src, out = os.path.join(tmp, name + "_src"), os.path.join(tmp, name + "_export")
        model.eval()
        model.save_pretrained(src, safe_serialization=True)
        r = subprocess.run([os.path.join(ROOT, "train_gpt_cpu"), "--init-from", src, "--data", data, "--steps", "0",
                            "--batch", "1", "--export", out] + extra, capture_output=True, text=True, env=env)
        if r.returncode:
            check(f"{name}: --init-from save_pretrained + --export", False, r.stderr.strip()[-400:])
            return
        cls = type(model)
        loaded, info = cls.from_pretrained(out, output_loading_info=True)
        loaded.eval()
        bad = info["missing_keys"] + info["unexpected_keys"] + info["mismatched_keys"]
        check(f"{name}: from_pretrained(export) with no missing/unexpected/mismatched keys", not bad, str(bad[:4]))
        a, b = model.state_dict(), loaded.state_dict()
        same = all(torch.equal(a[k], b[k]) for k in a if k in b) and set(a) == set(b)
        check(f"{name}: the exported model's tensors == the original's", same)
        d = os.path.join(tmp, name + "_tokens")
        os.makedirs(d)
        for k, v in tokens.items():
            v.numpy().astype(np.int32).tofile(os.path.join(d, k + ".bin"))
        r = subprocess.run([os.path.join(ROOT, "build", "tool", "weights_logits"), out, str(B), str(T), str(Te), d],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            check(f"{name}: weights_logits", False, r.stderr.strip()[-400:])
            return
        V = model.config.vocab_size
        ours = torch.from_numpy(np.fromfile(os.path.join(d, "logits.bin"), dtype=np.float32).reshape(B, T, V))
        our_loss = float(open(os.path.join(d, "loss.txt")).read())
        with torch.no_grad():
            if Te:
                labels = tokens["targets"].clone().long()
                labels[labels < 0] = -100
                o = loaded(input_ids=tokens["enc_tokens"].long(), decoder_input_ids=tokens["tokens"].long(), labels=labels)
            else:
                o = loaded(input_ids=tokens["tokens"].long(), labels=tokens["tokens"].long())
        err = float((ours - o.logits).abs().max() / o.logits.abs().max())
        check(f"{name}: logits, ours vs transformers", err <= TOL, f"rel {err:.2e}, tol {TOL:g}")
        lerr = abs(our_loss - float(o.loss)) / abs(float(o.loss))
        check(f"{name}: loss, ours vs transformers", lerr <= TOL,
              f"ours {our_loss:.6f} transformers {float(o.loss):.6f} rel {lerr:.2e}, tol {TOL:g}")
        # Greedy generation: generate_cpu on the export against transformers' generate.
        prompt = (tokens["enc_tokens"] if Te else tokens["tokens"])[0, :5].long()
        r = subprocess.run([os.path.join(ROOT, "generate_cpu"), out, "--prompt-ids", " ".join(map(str, prompt.tolist())),
                            "--tokens", "6", "--temperature", "0"], capture_output=True, text=True, env=env)
        line = [l for l in r.stdout.splitlines() if l.startswith("ids:")]
        ours_ids = [int(x) for x in line[0].split()[1:]] if line else None
        with torch.no_grad():
            g = loaded.generate(prompt[None], max_new_tokens=6, do_sample=False, num_beams=1, pad_token_id=0)[0].tolist()
        theirs = g[1:] if Te else g[len(prompt):]  # T5: after the decoder start id 0; GPT: after the prompt
        ok = ours_ids is not None and len(theirs) >= 1 and ours_ids[:len(theirs)] == theirs
        check(f"{name}: greedy generation, generate_cpu vs transformers' generate", ok,
              f"ours {ours_ids} transformers {theirs} {r.stderr.strip()[-200:]}")

    # GPT-2: targets are the next tokens (the last one ignored), as transformers shifts labels.
    B, T = 2, 16
    cfg = GPT2Config(n_layer=2, n_head=3, n_embd=48, vocab_size=101, n_positions=T, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = GPT2LMHeadModel(cfg)
    redraw(m)
    toks = torch.randint(0, 101, (B, T), dtype=torch.int32)
    targets = torch.full((B, T), -1, dtype=torch.int32)
    targets[:, :-1] = toks[:, 1:]
    case("gpt2", m, ["--seq", str(T)], {"tokens": toks, "targets": targets}, B, T, 0)

    # T5 v1.0 and v1.1; the targets of the second row end in ignored padding.
    B, Te, Td = 2, 13, 7
    for name, ff, tied, D in (("t5_v1.0", "relu", True, 24), ("t5_v1.1", "gated-gelu", False, 16)):
        cfg = T5Config(d_model=32, d_kv=D, d_ff=40, num_layers=2, num_decoder_layers=1, num_heads=2, vocab_size=131,
                       feed_forward_proj=ff, tie_word_embeddings=tied, dropout_rate=0.0, decoder_start_token_id=0)
        m = T5ForConditionalGeneration(cfg)
        redraw(m)
        enc = torch.randint(0, 131, (B, Te), dtype=torch.int32)
        dec = torch.randint(0, 131, (B, Td), dtype=torch.int32)
        tg = torch.randint(0, 131, (B, Td), dtype=torch.int32)
        tg[1, -2:] = -1
        case(name, m, ["--enc-len", str(Te), "--dec-len", str(Td)], {"tokens": dec, "targets": tg, "enc_tokens": enc},
             B, Td, Te)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    inner() if "--inner" in sys.argv else outer()
