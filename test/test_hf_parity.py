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

Tokenizers (scripts/prepare_text.py, scripts/generate.py): a SentencePiece model trained here
on a small text: the shards hold sp.encode's ids and tokenizer.bin decodes them to sp.decode's
text; tiktoken's gpt2 encoding: the decode table's pieces of the shard ids give back the text's
bytes (its vocabulary is fetched once into build/tiktoken_cache); scripts/generate.py on a
SentencePiece-vocabulary GPT-2 prints the decoded ids generate_cpu produced; the byte-level BPE
prepare_text.py trains (scripts/bpe.py): its tokenizer.json, loaded by transformers' tokenizers
and AutoTokenizer, gives our ids and decodes them back.

transformers, safetensors, sentencepiece and tiktoken come from PyPI into a virtual environment build/hfenv that sees
Debian's torch (--system-site-packages); transformers is pinned to 4.44.2, a release that
still runs on Debian's torch 1.13. The environment is made here when it is missing; without a
network this part FAILs with the command to run, it never passes silently.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "build", "hfenv")
PIP_ARGS = ["transformers==4.44.2", "safetensors>=0.4", "sentencepiece", "tiktoken"]
TOL = 1e-4


def has_transformers(python):
    return subprocess.run([python, "-c", "import transformers, safetensors, torch, sentencepiece, tiktoken"],
                          capture_output=True).returncode == 0


def bootstrap():
    """The python to run the checks with, making build/hfenv when needed; None when it cannot.
    Parts that run at once (hf, ref-llama) take turns: the first makes it, the others wait."""
    import fcntl
    os.makedirs(os.path.dirname(VENV), exist_ok=True)
    with open(VENV + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _bootstrap()


def _bootstrap():
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
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration
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
                elif "layers." in name:  # Llama block weights ([out, in]): unit-variance activations
                    p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
                elif "embed_tokens" in name:
                    p.copy_(torch.randn_like(p))

    def case(name, model, extra, tokens, B, T, Te, save_args=None):
        src, out = os.path.join(tmp, name + "_src"), os.path.join(tmp, name + "_export")
        model.eval()
        model.save_pretrained(src, safe_serialization=True, **(save_args or {}))
        if save_args:
            shards = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
            check(f"{name}: save_pretrained wrote a sharded model ({len(shards)} shards and the index)",
                  len(shards) > 1 and os.path.exists(os.path.join(src, "model.safetensors.index.json")), str(shards))
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
        same = all(torch.equal(a[k].float(), b[k]) for k in a if k in b) and set(a) == set(b)
        check(f"{name}: the exported model's tensors == the original's (fp32)", same)
        d = os.path.join(tmp, name + "_tokens")
        os.makedirs(d)
        for k, v in tokens.items():
            v.numpy().astype(np.int32).tofile(os.path.join(d, k + ".bin"))
        r = subprocess.run([os.path.join(ROOT, "build", "tool", "weights_logits"), out, str(B), str(T), str(Te), d],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            check(f"{name}: weights_logits", False, r.stderr.strip()[-400:])
            return
        digest = [l for l in r.stdout.splitlines() if l.startswith("params_digest")]
        r2 = subprocess.run([os.path.join(ROOT, "build", "tool", "weights_logits"), src, str(B), str(T), str(Te), d],
                            capture_output=True, text=True, env=env)
        digest_src = [l for l in r2.stdout.splitlines() if l.startswith("params_digest")]
        check(f"{name}: the export read back holds the parameters the original gave (the same params_digest)",
              digest and digest == digest_src, f"{digest} vs {digest_src} {r2.stderr.strip()[-200:]}")
        r = subprocess.run([os.path.join(ROOT, "build", "tool", "weights_logits"), out, str(B), str(T), str(Te), d],
                           capture_output=True, text=True, env=env)  # the export's logits again, in d
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
    # Llama: grouped-query attention with Llama 3.1's rotary scaling and an untied lm_head, read
    # from a sharded save (model-0000X-of-0000N.safetensors and the index); and a tied 4:1 model
    # saved in bf16 (the import widens it exactly, so the export's fp32 equals the original).
    B, T = 2, 12
    for name, kv, tied, dtype, save in (("llama_sharded", 2, False, torch.float32, {"max_shard_size": 60000}),
                                        ("llama_tied_bf16", 1, True, torch.bfloat16, None)):
        cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=kv, max_position_embeddings=T, rms_norm_eps=1e-5, rope_theta=500000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                          tie_word_embeddings=tied, attn_implementation="eager")
        m = LlamaForCausalLM(cfg)
        redraw(m)
        m = m.to(dtype)
        toks = torch.randint(0, 97, (B, T), dtype=torch.int32)
        targets = torch.full((B, T), -1, dtype=torch.int32)
        targets[:, :-1] = toks[:, 1:]
        case(name, m, ["--seq", str(T)], {"tokens": toks, "targets": targets}, B, T, 0, save)
    tokenizers(tmp, env, check)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def read_shards(d, split):
    import numpy as np
    ids = []
    for fn in sorted(os.listdir(d)):
        if fn.startswith(split + "_") and fn.endswith(".bin"):
            raw = open(os.path.join(d, fn), "rb").read()
            ids += np.frombuffer(raw[1024:], dtype=np.uint16).tolist()
    return ids


def read_table(path):
    import struct
    raw = open(path, "rb").read()
    magic, version, n, eot = struct.unpack("<4I", raw[:16])
    table, at = [], 1024
    for _ in range(n):
        k = raw[at]
        table.append(raw[at + 1:at + 1 + k])
        at += 1 + k
    return magic, version, eot, table


def tokenizers(tmp, env, check):
    import sentencepiece
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    words = ["fully", "sharded", "data", "parallel", "units", "gather", "reduce", "scatter", "shard", "slot",
             "prefetch", "optimizer", "naïve", "über"]
    rng = torch.Generator().manual_seed(3)
    lines = [" ".join(words[int(i)] for i in torch.randint(0, len(words), (12,), generator=rng)) for _ in range(300)]
    text = "\n".join(lines) + "\n"
    txt = os.path.join(tmp, "text.txt")
    open(txt, "w", encoding="utf-8").write(text)
    prefix = os.path.join(tmp, "sp")
    sentencepiece.SentencePieceTrainer.train(input=txt, model_prefix=prefix, vocab_size=400, model_type="bpe",
                                             byte_fallback=True, minloglevel=2)
    sp = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
    out = os.path.join(tmp, "sp_shards")
    prep = os.path.join(ROOT, "scripts", "prepare_text.py")
    r = subprocess.run([sys.executable, prep, txt, out, "--tokenizer", "sentencepiece", "--sp-model", prefix + ".model",
                        "--val-fraction", "0.1"], capture_output=True, text=True)
    ids = read_shards(out, "train") + read_shards(out, "val")
    check("prepare_text.py sentencepiece: the shards hold sp.encode's ids", r.returncode == 0 and ids == sp.encode(text),
          r.stderr.strip()[-300:])
    magic, version, eot, table = read_table(os.path.join(out, "tokenizer.bin"))
    decoded = b"".join(table[i] for i in ids).decode("utf-8")
    check("prepare_text.py sentencepiece: tokenizer.bin decodes the ids to sp.decode's text",
          magic == 20240328 and version == 2 and eot == sp.eos_id() and decoded.lstrip(" ") == sp.decode(ids),
          repr(decoded[:60]))

    # tiktoken's gpt2. Its vocabulary files come from openaipublic.blob.core.windows.net, not
    # PyPI: fetched once into build/tiktoken_cache where that host is reachable; where it is
    # not, the check says so ("skip", counted neither way) and the same code path runs on a
    # small byte-pair encoding with tiktoken's interface (below).
    genv = dict(env, TIKTOKEN_CACHE_DIR=os.path.join(ROOT, "build", "tiktoken_cache"))
    out2 = os.path.join(tmp, "gpt2_shards")
    r = subprocess.run([sys.executable, prep, txt, out2, "--tokenizer", "gpt2"], capture_output=True, text=True, env=genv)
    if r.returncode and "could not load the gpt2 encoding" in r.stderr:
        print("skip prepare_text.py gpt2 with the real vocabulary: tiktoken cannot fetch it here (" +
              r.stderr.strip()[-160:] + ")")
    else:
        ids2 = read_shards(out2, "train") + read_shards(out2, "val") if r.returncode == 0 else []
        _, _, eot2, table2 = read_table(os.path.join(out2, "tokenizer.bin")) if r.returncode == 0 else (0, 0, 0, [])
        check("prepare_text.py gpt2: tokenizer.bin's pieces of the shard ids give back the text's bytes",
              r.returncode == 0 and b"".join(table2[i] for i in ids2) == text.encode("utf-8") and len(table2) == 50257
              and eot2 == 50256, r.stderr.strip()[-300:])
    # The gpt2 path on an encoding with tiktoken's interface: bytes 0..255, merges "th" 256,
    # " s" 257, "ar" 258 applied left to right, end of text 259.
    fake = os.path.join(tmp, "fake_tiktoken")
    os.makedirs(fake)
    open(os.path.join(fake, "tiktoken.py"), "w").write(
        "MERGES = {b'th': 256, b' s': 257, b'ar': 258}\n"
        "class Encoding:\n"
        "    n_vocab, eot_token = 260, 259\n"
        "    def encode_ordinary(self, text):\n"
        "        b, out, i = text.encode('utf-8'), [], 0\n"
        "        while i < len(b):\n"
        "            if b[i:i + 2] in MERGES: out.append(MERGES[b[i:i + 2]]); i += 2\n"
        "            else: out.append(b[i]); i += 1\n"
        "        return out\n"
        "    def decode_single_token_bytes(self, i):\n"
        "        inv = {v: k for k, v in MERGES.items()}\n"
        "        return bytes([i]) if i < 256 else inv.get(i, b'<|endoftext|>')\n"
        "def get_encoding(name):\n"
        "    assert name == 'gpt2'\n"
        "    return Encoding()\n")
    out3 = os.path.join(tmp, "bpe_shards")
    r = subprocess.run([sys.executable, prep, txt, out3, "--tokenizer", "gpt2"], capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=fake))
    ids3 = read_shards(out3, "train") + read_shards(out3, "val") if r.returncode == 0 else []
    _, _, eot3, table3 = read_table(os.path.join(out3, "tokenizer.bin")) if r.returncode == 0 else (0, 0, 0, [])
    merged = sum(1 for i in ids3 if i >= 256)
    check("prepare_text.py gpt2 path (tiktoken's interface, a small BPE): merged ids in the shards, tokenizer.bin "
          "gives back the text's bytes", r.returncode == 0 and merged > 100 and len(table3) == 260 and eot3 == 259 and
          b"".join(table3[i] for i in ids3) == text.encode("utf-8"), f"{merged} merged ids; {r.stderr.strip()[-200:]}")

    # The byte-level BPE trained here (scripts/bpe.py): its tokenizer.json in transformers'
    # tokenizers gives our ids, and back the text, for text the BPE never saw.
    import tokenizers as hf_tokenizers
    from transformers import AutoTokenizer
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bpe
    out4 = os.path.join(tmp, "bpe_own")
    r = subprocess.run([sys.executable, prep, txt, out4, "--tokenizer", "bpe", "--vocab-size", "500"], capture_output=True,
                       text=True)
    ours = bpe.load(os.path.join(out4, "tokenizer.json"))
    theirs = hf_tokenizers.Tokenizer.from_file(os.path.join(out4, "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(out4)
    samples = [text, "héllo   wörld\n\n  x  \t\ty 12345 a1b2 ——— 日本語 \u00a0 end  ", " leading", "trailing   ",
               "\r\n\r\n", "it's naïve-über_data!? (shard #3)", open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()]
    bad = [s[:40] for s in samples if theirs.encode(s).ids != ours.encode(s.encode("utf-8")) or
           auto(s)["input_ids"] != ours.encode(s.encode("utf-8")) or auto.decode(auto(s)["input_ids"]) != s]
    check("prepare_text.py bpe: transformers' tokenizers and AutoTokenizer load tokenizer.json, give our ids and "
          "decode them to the text (7 texts, most not seen in training)", r.returncode == 0 and not bad,
          (bad, r.stderr.strip()[-200:]))

    llama3_tokenizer(tmp, text, env, check)

    # scripts/generate.py on a GPT-2 with the SentencePiece vocabulary: text in, text out.
    cfg = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=sp.get_piece_size(), n_positions=32)
    src = os.path.join(tmp, "sp_gpt")
    GPT2LMHeadModel(cfg).save_pretrained(src, safe_serialization=True)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "generate.py"), src, "sharded data",
                        "--tokenizer", "sentencepiece", "--sp-model", prefix + ".model",
                        "--binary", os.path.join(ROOT, "generate_cpu"), "--", "--tokens", "8", "--seed", "4"],
                       capture_output=True, text=True, env=env)
    got = dict(l.split(": ", 1) for l in r.stdout.splitlines() if ": " in l)
    ids3 = [int(x) for x in got.get("ids", "").split()]
    want = sp.decode([i for i in ids3 if i != sp.eos_id()])
    check("scripts/generate.py: 8 new ids, printed as the SentencePiece text they decode to",
          r.returncode == 0 and len(ids3) == 8 and got.get("continuation") == want, (r.stdout + r.stderr).strip()[-300:])


def llama3_tokenizer(tmp, text, env, check):
    """--tokenizer llama3: Llama 3's tokenizer in both of its files (Meta's tokenizer.model, Hugging
    Face's tokenizer.json), made here from one small byte-level BPE trained on the text with Llama
    3's split pattern (the real one is not fetched): the shards are llm.c's Llama 3 format and
    hold <|begin_of_text|> and the ids of the `tokenizers` library's own encoding of the
    tokenizer.json, and tokenizer.bin decodes them back to the text."""
    import base64
    import tokenizers
    from tiktoken._educational import bpe_train
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from llama3_tokenizer import LLAMA3_PATTERN, NUM_SPECIAL, byte_chars
    ranks = bpe_train(text, 300, LLAMA3_PATTERN, visualise=None)
    n = len(ranks)
    names = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(NUM_SPECIAL - 2)]
    model_file = os.path.join(tmp, "tokenizer.model")
    with open(model_file, "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(token).decode() + " %d\n" % rank)
    chars = byte_chars()
    as_text = lambda b: "".join(chars[x] for x in b)
    merges = []  # every split of a token into two tokens, as transformers' conversion from tiktoken lists them
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        merges += sorted(((ranks[token[:i]], ranks[token[i:]], as_text(token[:i]) + " " + as_text(token[i:]))
                          for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks))
    doc = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
           "added_tokens": [{"id": n + i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, name in enumerate(names)],
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                     "vocab": {as_text(t): r for t, r in ranks.items()}, "merges": [m[2] for m in merges]}}
    json_file = os.path.join(tmp, "tokenizer.json")
    json.dump(doc, open(json_file, "w"), ensure_ascii=False)
    theirs = [n] + tokenizers.Tokenizer.from_file(json_file).encode(text, add_special_tokens=False).ids
    prep = os.path.join(ROOT, "scripts", "prepare_text.py")
    shards = {}
    for name, path in (("tokenizer.model", model_file), ("tokenizer.json", json_file)):
        out = os.path.join(tmp, "llama3_" + name.replace(".", "_"))
        r = subprocess.run([sys.executable, prep, os.path.join(tmp, "text.txt"), out, "--tokenizer", "llama3",
                            "--tokenizer-file", path], capture_output=True, text=True, env=env)
        ids, magics = [], set()
        for fn in sorted(os.listdir(out)) if r.returncode == 0 else []:
            if fn.endswith(".bin") and fn != "tokenizer.bin":
                raw = open(os.path.join(out, fn), "rb").read()
                magics.add(struct.unpack_from("<2i", raw))
        for split in ("train", "val"):
            for fn in sorted(os.listdir(out)) if r.returncode == 0 else []:
                if fn.startswith(split + "_"):
                    raw = open(os.path.join(out, fn), "rb").read()
                    ids += list(struct.unpack_from(f"<{(len(raw) - 1024) // 4}I", raw, 1024))
        shards[name] = ids
        check(f"prepare_text.py llama3 from {name}: llm.c's Llama 3 shards (20240801, 7, uint32) holding "
              f"<|begin_of_text|> and the ids of transformers' tokenizers on the tokenizer.json",
              r.returncode == 0 and magics == {(20240801, 7)} and ids == theirs,
              f"{len(ids)} ids vs {len(theirs)}; {r.stderr.strip()[-300:]}")
        if r.returncode == 0:
            _, _, eot, table = read_table(os.path.join(out, "tokenizer.bin"))
            check(f"prepare_text.py llama3 from {name}: tokenizer.bin of {n + NUM_SPECIAL} tokens decodes the ids to "
                  f"the text (end of text {n + 1})", len(table) == n + NUM_SPECIAL and eot == n + 1 and
                  b"".join(table[i] for i in ids).decode("utf-8") == text)
    copied = os.path.join(tmp, "llama3_tokenizer_json", "tokenizer.json")
    check("prepare_text.py llama3: the tokenizer.json given is copied beside the shards (so --export carries it); "
          "from tokenizer.model none is written",
          os.path.exists(copied) and open(copied, "rb").read() == open(json_file, "rb").read() and
          not os.path.exists(os.path.join(tmp, "llama3_tokenizer_model", "tokenizer.json")))
    check("prepare_text.py llama3: tokenizer.model and tokenizer.json give the same shards",
          shards["tokenizer.model"] == shards["tokenizer.json"] and len(shards["tokenizer.model"]) > 100)
    # scripts/generate.py on a Llama directory holding its tokenizer.json, without --tokenizer:
    # read as Llama 3's tokenizer (the prompt after <|begin_of_text|>), not as our BPE's.
    from transformers import LlamaConfig, LlamaForCausalLM
    src = os.path.join(tmp, "llama_with_tokenizer")
    LlamaForCausalLM(LlamaConfig(vocab_size=n + NUM_SPECIAL, hidden_size=32, intermediate_size=56, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                 rms_norm_eps=1e-5, rope_theta=500000.0)).save_pretrained(src, safe_serialization=True)
    shutil.copyfile(json_file, os.path.join(src, "tokenizer.json"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "generate.py"), src, "sharded data",
                        "--binary", os.path.join(ROOT, "generate_cpu"), "--", "--tokens", "4", "--temperature", "0"],
                       capture_output=True, text=True, env=env)
    got = dict(l.split(": ", 1) for l in r.stdout.splitlines() if ": " in l)
    from llama3_tokenizer import Llama3Tokenizer
    gen_ids = [int(x) for x in got.get("ids", "").split()]
    check("scripts/generate.py on a Llama directory takes its tokenizer.json as Llama 3's: 4 new ids and their text",
          r.returncode == 0 and len(gen_ids) == 4 and got.get("continuation") == Llama3Tokenizer(json_file).decode(gen_ids),
          (r.stdout + r.stderr).strip()[-300:])
    # The tokenizer.json given, in the output folder itself, is the user's: kept, not removed as
    # an earlier run's tokenizer.
    own = os.path.join(tmp, "llama3_own")
    os.makedirs(own)
    own_json = os.path.join(own, "tokenizer.json")
    shutil.copyfile(json_file, own_json)
    r = subprocess.run([sys.executable, prep, os.path.join(tmp, "text.txt"), own, "--tokenizer", "llama3",
                        "--tokenizer-file", own_json], capture_output=True, text=True, env=env)
    check("prepare_text.py llama3: a tokenizer.json given from the output folder is kept",
          r.returncode == 0 and os.path.exists(own_json) and open(own_json, "rb").read() == open(json_file, "rb").read(),
          (r.stdout + r.stderr).strip()[-300:])


if __name__ == "__main__":
    inner() if "--inner" in sys.argv else outer()
