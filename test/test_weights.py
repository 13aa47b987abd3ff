#!/usr/bin/python3
"""test_weights.py: --init-from and --export (weights/) on files this script writes.

Offline, no transformers needed (test/test_hf_parity.py checks against the real library).
Writes tiny random GPT-2 weights as an llm.c checkpoint (fp32 version 3, bf16 version 5) and as
Hugging Face safetensors directories (GPT-2 with Conv1D [in, out] weights; T5 v1.0 and v1.1 with
separate q/k/v/o, wi / wi_0 + wi_1, relative attention bias in block 0, embed_tokens copies and
a tied-model lm_head to be ignored), with its own safetensors writer, then checks:
  values     train_gpt_cpu --init-from F --steps 0 --dump-params: every loaded value equals the
             value written (exactly; bf16 ones as bf16), in our layout (transposes, fused q|k|v)
  ranks      the params_digest of a load on 1, 2 and 3 ranks is the same
  export     --export D from 1 and 3 ranks: the same bytes; its tensors (read by this script's
             own safetensors reader) equal the weights written; --init-from D gives the same digest
  tools      export_weights_cpu turns a checkpoint into the same model; generate_cpu gives the
             same greedy tokens from the llm.c file, its checkpoint and its export on 1 and 2
             ranks, top-k 1 is greedy, a seed repeats, a tokenizer file decodes
  sharded    a model split over model-0000X-of-0000N.safetensors with its index loads the values
             of the single file; an index that names a tensor in the wrong shard, omits one, names
             a shard outside the directory or one that is missing is refused, naming it
  llama      a Llama directory (separate q/k/v and gate/up, untied lm_head, GQA 2:1, the llama3
             rope_scaling): loaded values == written in our fused layout, on 1 and 3 ranks; its
             config's unsupported settings (activation, scaling type, norm eps) refused by name
  refused    wrong magic, truncated tensors (llm.c, safetensors), a header that lies about its
             offsets (overlap, hole, size), a wrong shape, a missing and an extra tensor, a --model
             that differs: exit != 0, the message names the file and the tensor, and the --export
             directory of that run is not created
Prints ok/FAIL lines and "N passed, M failed".
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train_gpt_cpu")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    print(("ok " if ok else "FAIL ") + name + (f" ({detail})" if detail else ""), flush=True)
    passed += ok
    failed += not ok


# ---- files ------------------------------------------------------------------------------

def bf16_bits(a):
    """fp32 -> bf16 bits, round to nearest even (as torch's .to(bfloat16))."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, lie=None):
    """tensors: list of (name, float32 array). lie: a function changing the header dict."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    if lie:
        lie(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        assert e["dtype"] == "F32"
        out[name] = np.frombuffer(data[8 + n + b:8 + n + end], dtype=np.float32).reshape(e["shape"])
    return out


def gpt_weights(rng, L, C, V, T):
    """Our GPT parameters (names of layers/gpt.c, [out, in] weights), random O(1)-ish values."""
    r = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.3
    w = {"wte": r(V, C), "wpe": r(T, C), "lnf.weight": 1 + r(C), "lnf.bias": r(C)}
    for l in range(L):
        for k, s in [("ln1.weight", (C,)), ("ln1.bias", (C,)), ("attn.qkv.weight", (3 * C, C)), ("attn.qkv.bias", (3 * C,)),
                     ("attn.proj.weight", (C, C)), ("attn.proj.bias", (C,)), ("ln2.weight", (C,)), ("ln2.bias", (C,)),
                     ("mlp.fc.weight", (4 * C, C)), ("mlp.fc.bias", (4 * C,)), ("mlp.proj.weight", (C, 4 * C)),
                     ("mlp.proj.bias", (C,))]:
            w[f"block.{l}.{k}"] = r(*s) + (1 if k.startswith("ln") and k.endswith("weight") else 0)
    return w


GPT_BLOCK = ["ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
             "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"]
HF_GPT = dict(zip(GPT_BLOCK, ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                              "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                              "mlp.c_proj.weight", "mlp.c_proj.bias"]))
LLMC = dict(zip(GPT_BLOCK, ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                            "fcprojw", "fcprojb"]))


def gpt_order(w, L):
    return [w["wte"], w["wpe"], w["lnf.weight"], w["lnf.bias"]] + [w[f"block.{l}.{k}"] for l in range(L) for k in GPT_BLOCK]


def write_llmc(path, w, L, H, C, V, T, bf16):
    Vp = (V + 127) // 128 * 128
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 5 if bf16 else 3, T, V, L, H, C, Vp]
    wte = np.zeros((Vp, C), dtype=np.float32)
    wte[:V] = w["wte"]
    parts = [wte, w["wpe"]]
    for k in GPT_BLOCK:
        parts.append(np.stack([w[f"block.{l}.{k}"] for l in range(L)]))
    parts += [w["lnf.weight"], w["lnf.bias"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for p in parts:
            f.write(bf16_bits(p).tobytes() if bf16 else p.astype(np.float32).tobytes())


def hf_gpt_tensors(w, L, prefix=""):
    t = [(prefix + "wte.weight", w["wte"]), (prefix + "wpe.weight", w["wpe"]), (prefix + "ln_f.weight", w["lnf.weight"]),
         (prefix + "ln_f.bias", w["lnf.bias"])]
    for l in range(L):
        for k in GPT_BLOCK:
            a = w[f"block.{l}.{k}"]
            conv1d = k.endswith("weight") and not k.startswith("ln")
            t.append((f"{prefix}h.{l}.{HF_GPT[k]}", a.T.copy() if conv1d else a))
    return t


def write_gpt_config(d, L, H, C, V, T):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": L, "n_head": H, "n_embd": C, "vocab_size": V, "n_positions": T,
                   "activation_function": "gelu_new"}, f)


def t5_weights(rng, L, M, C, H, D, F, V, gated):
    r = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.3
    I, FI = H * D, (2 * F if gated else F)
    w = {"shared.weight": r(V, C), "encoder.rel_bias": r(32, H), "decoder.rel_bias": r(32, H),
         "encoder.final_norm.weight": 1 + r(C), "decoder.final_norm.weight": 1 + r(C)}
    if gated:
        w["lm_head.weight"] = r(V, C)
    for l in range(L):
        for k, s in [("ln1.weight", (C,)), ("attn.qkv.weight", (3 * I, C)), ("attn.o.weight", (C, I)), ("ln2.weight", (C,)),
                     ("mlp.wi.weight", (FI, C)), ("mlp.wo.weight", (C, F))]:
            w[f"encoder.{l}.{k}"] = r(*s)
    for l in range(M):
        for k, s in [("ln1.weight", (C,)), ("attn.qkv.weight", (3 * I, C)), ("attn.o.weight", (C, I)), ("ln2.weight", (C,)),
                     ("cross.q.weight", (I, C)), ("cross.kv.weight", (2 * I, C)), ("cross.o.weight", (C, I)),
                     ("ln3.weight", (C,)), ("mlp.wi.weight", (FI, C)), ("mlp.wo.weight", (C, F))]:
            w[f"decoder.{l}.{k}"] = r(*s)
    return w


T5_ENC = ["ln1.weight", "attn.qkv.weight", "attn.o.weight", "ln2.weight", "mlp.wi.weight", "mlp.wo.weight"]
T5_DEC = ["ln1.weight", "attn.qkv.weight", "attn.o.weight", "ln2.weight", "cross.q.weight", "cross.kv.weight",
          "cross.o.weight", "ln3.weight", "mlp.wi.weight", "mlp.wo.weight"]


def t5_order(w, L, M, gated):
    root = ["shared.weight", "encoder.rel_bias", "decoder.rel_bias", "encoder.final_norm.weight",
            "decoder.final_norm.weight"] + (["lm_head.weight"] if gated else [])
    return ([w[k] for k in root] + [w[f"encoder.{l}.{k}"] for l in range(L) for k in T5_ENC] +
            [w[f"decoder.{l}.{k}"] for l in range(M) for k in T5_DEC])


def hf_t5_tensors(w, L, M, I, F, gated):
    t = [("shared.weight", w["shared.weight"]), ("encoder.embed_tokens.weight", w["shared.weight"]),
         ("encoder.final_layer_norm.weight", w["encoder.final_norm.weight"]),
         ("decoder.final_layer_norm.weight", w["decoder.final_norm.weight"]),
         ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", w["encoder.rel_bias"]),
         ("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", w["decoder.rel_bias"]),
         ("lm_head.weight", w["lm_head.weight"] if gated else w["shared.weight"]),
         # t5-small's checkpoint carries this unused table; it is ignored, as transformers does
         ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight", np.zeros((32, 2), np.float32))]
    for stack, n in (("encoder", L), ("decoder", M)):
        for l in range(n):
            g = lambda k: w[f"{stack}.{l}.{k}"]
            b = f"{stack}.block.{l}.layer"
            qkv = g("attn.qkv.weight")
            t += [(f"{b}.0.layer_norm.weight", g("ln1.weight")), (f"{b}.0.SelfAttention.q.weight", qkv[:I]),
                  (f"{b}.0.SelfAttention.k.weight", qkv[I:2 * I]), (f"{b}.0.SelfAttention.v.weight", qkv[2 * I:]),
                  (f"{b}.0.SelfAttention.o.weight", g("attn.o.weight")), (f"{b}.1.layer_norm.weight", g("ln2.weight"))]
            ff = 1
            if stack == "decoder":
                kv = g("cross.kv.weight")
                t += [(f"{b}.1.EncDecAttention.q.weight", g("cross.q.weight")), (f"{b}.1.EncDecAttention.k.weight", kv[:I]),
                      (f"{b}.1.EncDecAttention.v.weight", kv[I:]), (f"{b}.1.EncDecAttention.o.weight", g("cross.o.weight")),
                      (f"{b}.2.layer_norm.weight", g("ln3.weight"))]
                ff = 2
            wi = g("mlp.wi.weight")
            if gated:
                t += [(f"{b}.{ff}.DenseReluDense.wi_0.weight", wi[:F]), (f"{b}.{ff}.DenseReluDense.wi_1.weight", wi[F:])]
            else:
                t += [(f"{b}.{ff}.DenseReluDense.wi.weight", wi)]
            t += [(f"{b}.{ff}.DenseReluDense.wo.weight", g("mlp.wo.weight"))]
    return t


def write_t5_config(d, L, M, C, H, D, F, V, gated):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "t5", "num_layers": L, "num_decoder_layers": M, "d_model": C, "num_heads": H, "d_kv": D,
                   "d_ff": F, "vocab_size": V, "feed_forward_proj": "gated-gelu" if gated else "relu",
                   "tie_word_embeddings": not gated}, f)


def write_sharded(d, tensors, nshards, lie=None):
    """save_pretrained's sharded layout: model-0000X-of-0000N.safetensors and the index.
    lie: a function changing the index's weight map."""
    names = [f"model-{i + 1:05d}-of-{nshards:05d}.safetensors" for i in range(nshards)]
    weight_map = {}
    for i in range(nshards):
        part = tensors[i::nshards]
        write_safetensors(os.path.join(d, names[i]), part)
        weight_map.update({n: names[i] for n, _ in part})
    if lie:
        lie(weight_map)
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))


def llama_weights(rng, L, C, H, KV, F, V):
    D = C // H
    w = {"model.embed_tokens.weight": rng.standard_normal((V, C)), "model.norm.weight": 1 + 0.3 * rng.standard_normal(C),
         "lm_head.weight": rng.standard_normal((V, C))}
    for l in range(L):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = 1 + 0.3 * rng.standard_normal(C)
        w[p + "self_attn.q_proj.weight"] = rng.standard_normal((H * D, C))
        w[p + "self_attn.k_proj.weight"] = rng.standard_normal((KV * D, C))
        w[p + "self_attn.v_proj.weight"] = rng.standard_normal((KV * D, C))
        w[p + "self_attn.o_proj.weight"] = rng.standard_normal((C, H * D))
        w[p + "post_attention_layernorm.weight"] = 1 + 0.3 * rng.standard_normal(C)
        w[p + "mlp.gate_proj.weight"] = rng.standard_normal((F, C))
        w[p + "mlp.up_proj.weight"] = rng.standard_normal((F, C))
        w[p + "mlp.down_proj.weight"] = rng.standard_normal((C, F))
    return {k: v.astype(np.float32) for k, v in w.items()}


def llama_order(w, L):
    """Our parameters in order: the root's, then each block's with q|k|v and gate|up fused."""
    out = [w["model.embed_tokens.weight"], w["model.norm.weight"], w["lm_head.weight"]]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [w[p + "input_layernorm.weight"], w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                w[p + "self_attn.v_proj.weight"], w[p + "self_attn.o_proj.weight"], w[p + "post_attention_layernorm.weight"],
                w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"]]
    return out


def write_llama_config(d, L, C, H, KV, F, V, T, **override):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
           "max_position_embeddings": T, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
           "tie_word_embeddings": False, "torch_dtype": "float32"}
    cfg.update(override)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))


def write_tokens(path, n, vocab, rng):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, n]
    with open(path, "wb") as f:
        f.write(header.tobytes() + rng.integers(0, vocab, n).astype(np.uint16).tobytes())


# ---- runs -------------------------------------------------------------------------------

def run(args, ranks=1, model_args=()):
    cmd = [TRAIN] + list(args)
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV)


def digest_of(p):
    m = re.search(r"params_digest ([0-9a-f]+)", p.stdout)
    return m.group(1) if m else None


def load(path, data, extra, tmp, ranks=1, tag="dump"):
    dump = os.path.join(tmp, tag + ".bin")
    p = run(["--init-from", path, "--data", data, "--steps", "0", "--batch", "1", "--digest", "--dump-params", dump] + extra,
            ranks)
    values = np.fromfile(dump, dtype=np.float32) if p.returncode == 0 else None
    return p, values


def concat(arrays):
    return np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays])


def main():
    rng = np.random.default_rng(12)
    tmp = tempfile.mkdtemp(prefix="fsdp_weights_")
    data = os.path.join(tmp, "tokens.bin")
    write_tokens(data, 8192, 60, rng)
    gpt_args = ["--seq", "16"]
    t5_args = ["--enc-len", "16", "--dec-len", "8"]

    # GPT: llm.c fp32 / bf16 and Hugging Face, the same weights.
    L, H, C, V, T = 2, 3, 48, 101, 16
    w = gpt_weights(rng, L, C, V, T)
    want = concat(gpt_order(w, L))
    f32 = os.path.join(tmp, "gpt_f32.bin")
    b16 = os.path.join(tmp, "gpt_bf16.bin")
    write_llmc(f32, w, L, H, C, V, T, bf16=False)
    write_llmc(b16, w, L, H, C, V, T, bf16=True)
    hf = os.path.join(tmp, "gpt_hf")
    os.mkdir(hf)
    write_gpt_config(hf, L, H, C, V, T)
    # A checkpoint saved by GPT2Model: no prefix, plus the old attention-mask buffers (ignored).
    buffers = [(f"h.{l}.attn.bias", np.ones((1, 1, T, T), np.float32)) for l in range(L)]
    write_safetensors(os.path.join(hf, "model.safetensors"), hf_gpt_tensors(w, L) + buffers)

    p, got = load(f32, data, gpt_args, tmp)
    check("llm.c fp32 (version 3): loaded values == written", got is not None and np.array_equal(got, want),
          p.stderr.strip()[-300:] if p.returncode else "")
    digest = digest_of(p)
    p, got = load(b16, data, gpt_args, tmp)
    check("llm.c bf16 (version 5): loaded values == the written bf16 values",
          got is not None and np.array_equal(got, from_bf16(bf16_bits(want))), p.stderr.strip()[-300:])
    p, got = load(hf, data, gpt_args, tmp)
    check("Hugging Face GPT-2 (Conv1D [in, out]): loaded values == written", got is not None and np.array_equal(got, want),
          p.stderr.strip()[-300:])
    check("llm.c and Hugging Face GPT-2: the same digest", digest is not None and digest_of(p) == digest)
    for ranks in (2, 3):
        p = run(["--init-from", f32, "--data", data, "--steps", "0", "--batch", "1", "--digest"] + gpt_args, ranks)
        check(f"llm.c on {ranks} ranks: the digest of 1 rank", digest_of(p) == digest, p.stderr.strip()[-300:])

    # The same GPT-2 as a sharded model (three shards and the index), and indexes that lie.
    sh = os.path.join(tmp, "gpt_sharded")
    os.mkdir(sh)
    write_gpt_config(sh, L, H, C, V, T)
    write_sharded(sh, hf_gpt_tensors(w, L), 3)
    p, got = load(sh, data, gpt_args, tmp)
    check("sharded Hugging Face GPT-2 (3 shards and the index): loaded values == written, the single file's digest",
          got is not None and np.array_equal(got, want) and digest_of(p) == digest, p.stderr.strip()[-300:])
    for label, lie, needles in (
            ("a tensor in another shard than the index says",
             lambda m: m.update({"wpe.weight": min(set(m.values()) - {m["wpe.weight"]})}), ["tensor wpe.weight is not in"]),
            ("a tensor the index does not name", lambda m: m.pop("h.1.ln_2.bias"), ["h.1.ln_2.bias", "does not name"]),
            ("a shard outside the directory", lambda m: m.update({"wpe.weight": "../x.safetensors"}),
             ["not a file name of a shard"]),
            ("a shard that is not there", lambda m: m.update({"h.0.ln_1.bias": "model-00009-of-00009.safetensors"}),
             ["model-00009-of-00009.safetensors"])):
        bad = os.path.join(tmp, "sharded_" + re.sub(r"\W", "_", label))
        os.mkdir(bad)
        write_gpt_config(bad, L, H, C, V, T)
        write_sharded(bad, hf_gpt_tensors(w, L), 3, lie)
        p = run(["--init-from", bad, "--data", data, "--steps", "0", "--batch", "1"] + gpt_args)
        check(f"refused: a sharded model's index with {label}", p.returncode != 0 and
              "model.safetensors.index.json" in p.stderr and all(n in p.stderr for n in needles),
              p.stderr.strip()[-300:])

    # Llama: separate q, k, v (GQA 2:1) and gate, up become our fused rows; on 1 and 3 ranks.
    LL, LC, LH, LKV, LF, LV, LT = 2, 32, 4, 2, 40, 61, 16
    lw = llama_weights(rng, LL, LC, LH, LKV, LF, LV)
    ld = os.path.join(tmp, "llama")
    os.mkdir(ld)
    write_llama_config(ld, LL, LC, LH, LKV, LF, LV, LT)
    write_safetensors(os.path.join(ld, "model.safetensors"), sorted(lw.items()))
    lwant = concat(llama_order(lw, LL))
    p, got = load(ld, data, gpt_args, tmp)
    check("Hugging Face Llama (q/k/v, gate/up separate): loaded values == written, fused in our layout",
          got is not None and np.array_equal(got, lwant), p.stderr.strip()[-300:])
    check("Hugging Face Llama: the model line names the shape, GQA and the 3.1 scaling",
          "Llama | L=2 C=32 H=4 KV=2 D=8 F=40 V=61" in p.stdout and "3.1 scaling untied" in p.stdout, p.stdout[:300])
    p3, got3 = load(ld, data, gpt_args, tmp, ranks=3, tag="dump3")
    check("Hugging Face Llama on 3 ranks: the values and digest of 1 rank",
          got3 is not None and np.array_equal(got3, lwant) and digest_of(p3) == digest_of(p), p3.stderr.strip()[-300:])
    for label, override, needles in (("hidden_act gelu", {"hidden_act": "gelu"}, ["hidden_act \"gelu\""]),
                                     ("rope_scaling of type dynamic", {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
                                      ["rope_scaling of type \"dynamic\""]),
                                     ("rms_norm_eps 3e-06", {"rms_norm_eps": 3e-06}, ["rms_norm_eps 3e-06"])):
        bad = os.path.join(tmp, "llama_" + re.sub(r"\W", "_", label))
        os.mkdir(bad)
        write_llama_config(bad, LL, LC, LH, LKV, LF, LV, LT, **override)
        write_safetensors(os.path.join(bad, "model.safetensors"), sorted(lw.items()))
        p = run(["--init-from", bad, "--data", data, "--steps", "0", "--batch", "1"] + gpt_args)
        check(f"refused: a Llama config.json with {label}", p.returncode != 0 and all(n in p.stderr for n in needles),
              p.stderr.strip()[-300:])

    # T5 v1.0 (tied) and v1.1 (gated, untied lm_head).
    t5dirs = {}
    for tag, (TL, TM, TC, TH, TD, TF, TV, gated) in {"v1.0": (2, 2, 32, 2, 24, 40, 131, 0),
                                                     "v1.1": (1, 2, 32, 2, 16, 40, 150, 1)}.items():
        tw = t5_weights(rng, TL, TM, TC, TH, TD, TF, TV, gated)
        d = os.path.join(tmp, "t5_" + tag)
        os.mkdir(d)
        write_t5_config(d, TL, TM, TC, TH, TD, TF, TV, gated)
        write_safetensors(os.path.join(d, "model.safetensors"), hf_t5_tensors(tw, TL, TM, TH * TD, TF, gated))
        p, got = load(d, data, t5_args, tmp)
        check(f"Hugging Face T5 {tag}: loaded values == written (q|k|v, wi_0|wi_1, block-0 position bias)",
              got is not None and np.array_equal(got, concat(t5_order(tw, TL, TM, gated))), p.stderr.strip()[-300:])
        t5dirs[tag] = (d, digest_of(p), tw, (TL, TM, TH * TD, TF, gated))
        p3 = run(["--init-from", d, "--data", data, "--steps", "0", "--batch", "1", "--digest"] + t5_args, 3)
        check(f"T5 {tag} on 3 ranks: the digest of 1 rank", digest_of(p3) == digest_of(p), p3.stderr.strip()[-300:])

    # Export from 1 and 3 ranks; read back by this script and by --init-from.
    cases = [("GPT-2", hf, digest, gpt_args, dict(hf_gpt_tensors(w, L, "transformer.")))]
    for tag, (d, dg, tw, (TL, TM, I, TF, gated)) in t5dirs.items():
        tensors = dict(hf_t5_tensors(tw, TL, TM, I, TF, gated))
        for k in ["encoder.embed_tokens.weight", "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"] + \
                ([] if gated else ["lm_head.weight"]):
            del tensors[k]
        cases.append(("T5 " + tag, d, dg, t5_args, tensors))
    for name, src, dg, extra, tensors in cases:
        outs = []
        for ranks in (1, 3):
            out = os.path.join(tmp, f"export_{name.replace(' ', '_')}_{ranks}")
            p = run(["--init-from", src, "--data", data, "--steps", "0", "--batch", "1", "--export", out] + extra, ranks)
            outs.append(out)
            if p.returncode:
                check(f"{name}: --export on {ranks} ranks", False, p.stderr.strip()[-300:])
        if not all(os.path.exists(os.path.join(o, "model.safetensors")) for o in outs):
            continue
        same = open(os.path.join(outs[0], "model.safetensors"), "rb").read() == \
            open(os.path.join(outs[1], "model.safetensors"), "rb").read()
        check(f"{name}: the export of 3 ranks == the export of 1 rank (byte for byte)", same)
        got = read_safetensors(os.path.join(outs[1], "model.safetensors"))
        equal = set(got) == set(tensors) and all(np.array_equal(got[k], tensors[k]) for k in tensors)
        check(f"{name}: exported tensors == the weights written (names, shapes, values)", equal,
              f"extra {sorted(set(got) - set(tensors))[:3]} missing {sorted(set(tensors) - set(got))[:3]}")
        p = run(["--init-from", outs[1], "--data", data, "--steps", "0", "--batch", "1", "--digest"] + extra, 2)
        check(f"{name}: --init-from the export (2 ranks) gives the same digest", digest_of(p) == dg, p.stderr.strip()[-300:])

    # The CUDA trainer on the simulator (built by make test): the same loaded master weights
    # (fp32 on both backends) and the same export bytes as the CPU trainer.
    sim = os.path.join(ROOT, "train_gpt_sim")
    if os.path.exists(sim):
        out = os.path.join(tmp, "export_sim")
        r = subprocess.run([sim, "--init-from", hf, "--data", data, "--steps", "0", "--batch", "1", "--digest",
                            "--export", out] + gpt_args, capture_output=True, text=True, env=MPI_ENV)
        same = os.path.exists(os.path.join(out, "model.safetensors")) and \
            open(os.path.join(out, "model.safetensors"), "rb").read() == \
            open(os.path.join(tmp, "export_GPT-2_1", "model.safetensors"), "rb").read()
        check("CUDA trainer (simulator): --init-from gives the CPU digest, --export the CPU bytes",
              r.returncode == 0 and digest_of(r) == digest and same, r.stderr.strip()[-300:])
    else:
        print(f"skip CUDA trainer on the simulator: {sim} not built (make train_gpt_sim)")

    # A finished run's checkpoint to a Hugging Face directory (export_weights_cpu, 2 ranks).
    ck, ck_out = os.path.join(tmp, "ck"), os.path.join(tmp, "ck_export")
    # (one step at learning rate 0: a checkpoint holding the loaded weights unchanged)
    p = run(["--init-from", f32, "--data", data, "--steps", "1", "--lr", "0", "--batch", "1", "--save", ck] + gpt_args)
    q = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", os.path.join(ROOT, "export_weights_cpu"), ck, ck_out],
                       capture_output=True, text=True, env=MPI_ENV)
    p = run(["--init-from", ck_out, "--data", data, "--steps", "0", "--batch", "1", "--digest"] + gpt_args)
    check("export_weights_cpu: checkpoint -> Hugging Face directory -> the same digest", digest_of(p) == digest,
          (q.stderr + p.stderr).strip()[-300:])

    # Generation: the same continuation from the llm.c file, its checkpoint and its export, on
    # 1 and 2 ranks; top-k 1 is greedy; a seed repeats; a tokenizer file decodes the ids.
    def generate(src, *args, ranks=1):
        cmd = [os.path.join(ROOT, "generate_cpu"), src, "--prompt-ids", "5 17 3", "--tokens", "9"] + list(args)
        if ranks > 1:
            cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV)
        m = re.search(r"^ids:(.*)$", r.stdout, re.M)
        return (m.group(1).split() if m else None), r
    greedy, r = generate(f32, "--temperature", "0")
    check("generate: 9 greedy tokens from an llm.c file", greedy is not None and len(greedy) == 9, r.stderr.strip()[-300:])
    same = [generate(s, "--temperature", "0", ranks=k)[0] for s, k in ((ck, 1), (ck_out, 1), (ck_out, 2))]
    check("generate: the same greedy tokens from its checkpoint, its export, and on 2 ranks", all(g == greedy for g in same),
          str(same))
    check("generate: --top-k 1 samples the greedy tokens", generate(f32, "--temperature", "1.5", "--top-k", "1")[0] == greedy)
    a, b = generate(f32, "--temperature", "2", "--seed", "5")[0], generate(f32, "--temperature", "2", "--seed", "5")[0]
    c = generate(f32, "--temperature", "2", "--seed", "6")[0]
    check("generate: a seed repeats its sample, another seed draws another", a == b and a != c, f"{a} {b} {c}")
    tokf = os.path.join(tmp, "tokenizer.bin")
    header = np.zeros(256, dtype=np.uint32)
    header[:4] = [20240328, 2, V, V - 1]
    with open(tokf, "wb") as f:
        f.write(header.tobytes())
        for i in range(V):
            piece = f"<t{i}>".encode()
            f.write(bytes([len(piece)]) + piece)
    _, r = generate(f32, "--temperature", "0", "--tokenizer", tokf)
    check("generate: a tokenizer file decodes the tokens", f"text: {''.join(f'<t{g}>' for g in greedy)}" in r.stdout,
          r.stdout.strip()[-200:])

    # A Llama vocabulary past 16 bits (Llama 3's is 128256): prompt ids, generated ids and the
    # tokenizer table's pieces all above 65535. The final norm keeps only the hidden state's first
    # component and the lm_head reads it into ids 69998 (-) and 69999 (+) alone, so greedy
    # decoding can only produce those two, whatever the random blocks compute.
    BV = 70000
    bw = llama_weights(rng, 1, 16, 2, 1, 24, BV)
    bw["model.norm.weight"] = np.zeros(16, np.float32)
    bw["model.norm.weight"][0] = 1.0
    bw["lm_head.weight"] = np.zeros((BV, 16), np.float32)
    bw["lm_head.weight"][BV - 2, 0], bw["lm_head.weight"][BV - 1, 0] = -10.0, 10.0
    bd = os.path.join(tmp, "llama_v70000")
    os.mkdir(bd)
    write_llama_config(bd, 1, 16, 2, 1, 24, BV, 16)
    write_safetensors(os.path.join(bd, "model.safetensors"), sorted(bw.items()))
    btok = os.path.join(tmp, "tokenizer_v70000.bin")
    header = np.zeros(256, dtype=np.uint32)
    header[:4] = [20240328, 2, BV, BV - 2]
    with open(btok, "wb") as f:
        f.write(header.tobytes())
        for i in range(BV):
            piece = f"<t{i}>".encode()
            f.write(bytes([len(piece)]) + piece)
    r = subprocess.run([os.path.join(ROOT, "generate_cpu"), bd, "--prompt-ids", "65536 69999 7", "--tokens", "5",
                        "--temperature", "0", "--tokenizer", btok], capture_output=True, text=True, env=MPI_ENV)
    m = re.search(r"^ids:(.*)$", r.stdout, re.M)
    bids = [int(x) for x in m.group(1).split()] if m else []
    check("generate: a Llama of vocabulary 70000 takes prompt ids past 65535 and produces ids past 65535",
          "prompt ids: 65536 69999 7" in r.stdout and len(bids) == 5 and all(i in (BV - 2, BV - 1) for i in bids),
          (r.stdout + r.stderr).strip()[-300:])
    check("generate: a tokenizer table of 70000 pieces decodes them",
          bool(bids) and f"text: {''.join(f'<t{i}>' for i in bids)}" in r.stdout, r.stdout.strip()[-200:])
    # Without a prompt a Llama 3 text starts with <|begin_of_text|> (128000); a Llama of another
    # vocabulary has no known one and asks for the prompt's ids.
    r = subprocess.run([os.path.join(ROOT, "generate_cpu"), bd, "--tokens", "2"], capture_output=True, text=True,
                       env=MPI_ENV)
    check("generate: a Llama of vocabulary 70000 without a prompt is refused, asking for --prompt-ids",
          r.returncode != 0 and "vocabulary 70000" in r.stderr and "--prompt-ids" in r.stderr, r.stderr.strip()[-300:])
    l3w = llama_weights(rng, 1, 16, 2, 1, 24, 128256)
    del l3w["lm_head.weight"]
    l3d = os.path.join(tmp, "llama_v128256")
    os.mkdir(l3d)
    write_llama_config(l3d, 1, 16, 2, 1, 24, 128256, 16, tie_word_embeddings=True)
    write_safetensors(os.path.join(l3d, "model.safetensors"), sorted(l3w.items()))
    r = subprocess.run([os.path.join(ROOT, "generate_cpu"), l3d, "--tokens", "2", "--temperature", "0"],
                       capture_output=True, text=True, env=MPI_ENV)
    check("generate: a Llama 3 without a prompt starts from <|begin_of_text|> (128000)",
          r.returncode == 0 and "prompt ids: 128000\n" in r.stdout, (r.stdout + r.stderr).strip()[-300:])

    # generate.c's CUDA build on the simulator: bf16 logits; its greedy argmax (logits read as
    # bf16) and its top-k 1 draw (through softmax_row) must agree, and 2 ranks repeat 1.
    gsim = os.path.join(ROOT, "generate_sim")
    if os.path.exists(gsim):
        def generate_sim(*args, ranks=1):
            cmd = [gsim, f32, "--prompt-ids", "5 17 3", "--tokens", "5"] + list(args)
            if ranks > 1:
                cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
            r = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV)
            m = re.search(r"^ids:(.*)$", r.stdout, re.M)
            return (m.group(1).split() if m else None), r
        g1, r = generate_sim("--temperature", "0")
        gk, _ = generate_sim("--temperature", "1", "--top-k", "1")
        g2, _ = generate_sim("--temperature", "0", ranks=2)
        check("generate on the CUDA simulator: 5 greedy tokens, the same by top-k 1 and on 2 ranks",
              g1 is not None and len(g1) == 5 and g1 == gk == g2, f"{g1} {gk} {g2} {r.stderr.strip()[-200:]}")
    else:
        print(f"skip generate on the CUDA simulator: {gsim} not built (make generate_sim)")

    # Refused files: the message names the file and the tensor; the run's --export is not made.
    def refused(label, path, needles, extra=gpt_args, model=None):
        out = os.path.join(tmp, "never_" + re.sub(r"\W", "_", label))
        args = ["--init-from", path, "--data", data, "--steps", "0", "--batch", "1", "--export", out] + extra
        if model:
            args += ["--model", model]
        p = run(args)
        msg = p.stderr
        ok = p.returncode != 0 and all(n in msg for n in needles) and not os.path.exists(out)
        check(f"refused: {label}", ok, msg.strip().splitlines()[-1][:300] if msg.strip() else "no message")

    def variant(label, tensors, lie=None, cut=0):
        d = os.path.join(tmp, "bad_" + re.sub(r"\W", "_", label))
        os.mkdir(d)
        write_gpt_config(d, L, H, C, V, T)
        f = os.path.join(d, "model.safetensors")
        write_safetensors(f, tensors, lie)
        if cut:
            os.truncate(f, os.path.getsize(f) - cut)
        return d, f

    bad = os.path.join(tmp, "bad_magic.bin")
    blob = bytearray(open(f32, "rb").read())
    blob[0:4] = struct.pack("<i", 20240325)
    open(bad, "wb").write(blob)
    refused("llm.c wrong magic", bad, [bad, "magic"])
    cut = os.path.join(tmp, "cut.bin")
    open(cut, "wb").write(open(f32, "rb").read()[:-1000])
    refused("llm.c truncated", cut, [cut, "tensor fcprojw.1", "truncated"])
    base = hf_gpt_tensors(w, L)
    d, f = variant("safetensors truncated", base, cut=4)
    refused("safetensors truncated tensor", d, [f, "tensor h.1.mlp.c_proj.bias", "truncated"])
    d, f = variant("missing", [t for t in base if t[0] != "h.0.ln_1.bias"])
    refused("missing tensor", d, [f, "missing tensor h.0.ln_1.bias"])
    d, f = variant("extra", base + [("h.2.ln_1.weight", np.ones(C, np.float32))])
    refused("extra tensor", d, [f, "unexpected tensor h.2.ln_1.weight"])
    d, f = variant("shape", [(n, a.T.copy() if n == "h.1.mlp.c_fc.weight" else a) for n, a in base])
    refused("wrong shape (an untransposed Conv1D)", d, [f, "tensor h.1.mlp.c_fc.weight has shape [192, 48]"])

    def overlap(h):
        h["wpe.weight"]["data_offsets"] = [x - 8 for x in h["wpe.weight"]["data_offsets"]]
    d, f = variant("overlap", base, lie=overlap)
    refused("header lies: overlapping offsets", d, [f, "wpe.weight", "lies about offsets"])

    def size(h):
        h["ln_f.bias"]["data_offsets"][1] += 4
    d, f = variant("size", base, lie=size)
    refused("header lies: offsets that do not hold the shape", d, [f, "ln_f.bias", "lies about offsets"])

    def shape_lie(h):
        h["ln_f.bias"]["shape"] = [C + 1]
    d, f = variant("shape lie", base, lie=shape_lie)
    refused("header lies: a shape bigger than the data", d, [f, "ln_f.bias"])
    refused("--model other than the weights", f32, ["--model gpt:L=3", "blocks L"], model="gpt:L=3,C=48,H=3,V=101,T=16")

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
