#!/usr/bin/env python3
"""Fuzzing every file the trainer and its tools read, on builds with AddressSanitizer and UBSan
(build/asan/train_gpt_cpu, build/asan/generate_cpu, and the kernels' tests build/asan/test/test_kernels).

Every case must end with no crash (a sanitizer report or a signal), no hang (a time limit) and
no corrupt input accepted. What must be accepted is decided by independent validators here
(Python's json and struct, not the C code's logic):
  - a shard, GPT-2's (uint16) or Llama 3's (uint32), is accepted exactly when it is valid (a
    magic and its version, a count that matches the size in that format's tokens, every id
    below the vocabulary, and enough tokens for one micro-batch);
  - a checkpoint is either refused, or it loads exactly what the intact one loads (the same
    params_digest after one more step, which also depends on the AdamW state);
  - pretrained weights (--init-from: a safetensors header, a config.json, an llm.c header) are
    accepted exactly when valid (strict JSON: no duplicate keys, whole numbers where whole
    numbers are meant; offsets that tile the data; the tensors of the model config.json
    describes), and a valid file that holds the same tensors loads the same params_digest;
  - a tokenizer.bin (generate --tokenizer) is accepted exactly when it is well formed and its
    ids fit the model's vocabulary;
  - an --eval-prompts file is accepted exactly when every line is a non-empty prompt, a TAB and
    a non-empty answer of the model's byte tokens that fit a sequence;
  - an --eval-choices file (llm.c's multiple-choice format) is accepted exactly when
    test/choices_file.py's validator says it is well formed for the model, and then evaluated.
Before the random cases, each failure once found in these inputs is a named case.

Usage: fuzz_inputs.py [--cases N] [--seed S]. N cases of shards and checkpoints, N/3 of each
other kind, two at a time. Prints one line per named case and per kind of input and ends with
"N passed, M failed"; each failing case is printed with its mutation and the program's output.
TEST_FILTER (make test F=REGEX) picks groups by name: "named cases", "config.json", "safetensors",
"llm.c", "tokenizer", "eval-prompts", "eval-choices", "token shards" (both formats), "Llama 3 token
shards", "checkpoints".
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAN_BIN = os.path.join(ROOT, "build", "asan", "train_gpt_cpu")
SAN_GENERATE = os.path.join(ROOT, "build", "asan", "generate_cpu")
SAN_KERNELS = os.path.join(ROOT, "build", "asan", "test", "test_kernels")
RELEASE_BIN = os.path.join(ROOT, "train_gpt_cpu")
MODEL = ["--model", "gpt:L=1,C=32,H=2,V=256,T=16", "--batch", "2", "--seq", "16"]
VOCAB, WINDOW = 256, 2 * 16 + 1
SAN_EXIT = 86  # the sanitizers' exit code, so a report is never mistaken for a refusal
ENV = dict(os.environ, OMP_NUM_THREADS="1",
           ASAN_OPTIONS=f"detect_leaks=0:exitcode={SAN_EXIT}:abort_on_error=0",
           UBSAN_OPTIONS=f"halt_on_error=1:exitcode={SAN_EXIT}:print_stacktrace=1")
TIME_LIMIT = 60


def run(args, binary=SAN_BIN, limit=TIME_LIMIT, memory=None):
    """Runs a program; (exit code or "hang", its output). memory: an address-space limit in bytes."""
    pre = (lambda: resource.setrlimit(resource.RLIMIT_AS, (memory, memory))) if memory else None
    try:
        p = subprocess.run([binary] + args, capture_output=True, text=True, errors="replace", env=ENV, timeout=limit,
                           preexec_fn=pre)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        return "hang", out


def in_parallel(fn, items):
    """fn over items, two at a time (each case is one process); results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(fn, items))


def verdict(case, rc, out, valid, digest_ok=True):
    """The failure of one case, or None: no crash or hang, accepted exactly when valid, a refusal
    with a message, and (digest_ok) the digest a valid file must give."""
    if rc == "hang" or rc not in (0, 1, 2):
        return (case, f"crash or hang (exit {rc})", out)
    if valid and rc != 0:
        return (case, "a valid input was refused", out)
    if not valid and rc == 0:
        return (case, "an invalid input was accepted", out)
    if not valid and "error:" not in out:
        return (case, "refused without an error message", out)
    if valid and not digest_ok:
        return (case, "a valid input holding the same tensors loaded other parameters", out)
    return None


def digest(out):
    m = re.search(r"params_digest ([0-9a-f]+)", out)
    return m.group(1) if m else None


def mutated_files(rng, cases, tmp, prefix, mutate, base):
    """`cases` mutations of base, each written to tmp/<prefix>_<i>: [(i, what, path, data)]."""
    items = []
    for i in range(cases):
        what, data = mutate(rng, base)
        path = os.path.join(tmp, f"{prefix}_{i}")
        with open(path, "wb") as f:
            f.write(data)
        items.append((i, what, path, data))
    return items


# ---- shards -----------------------------------------------------------------------------------

# llm.c's two formats: magic -> (version, token struct code, bytes per token)
SHARD_FORMATS = {20240520: (1, "H", 2), 20240801: (7, "I", 4)}


def shard_bytes(tokens, magic=20240520):
    version, code, _ = SHARD_FORMATS[magic]
    header = struct.pack("<256i", magic, version, len(tokens), *([0] * 253))
    return header + struct.pack(f"<{len(tokens)}{code}", *tokens)


def shard_valid(data):
    """The reference validator: what the trainer must accept, and nothing else."""
    if len(data) < 1024:
        return False
    magic, version, count = struct.unpack_from("<3i", data)
    if magic not in SHARD_FORMATS:
        return False
    want_version, code, width = SHARD_FORMATS[magic]
    if version != want_version or count < 0 or len(data) != 1024 + width * count:
        return False
    ids = struct.unpack_from(f"<{count}{code}", data, 1024)
    return all(i < VOCAB for i in ids) and count >= WINDOW


def mutate_shard(rng, data):
    data = bytearray(data)
    magic = struct.unpack_from("<i", data)[0]
    _, code, width = SHARD_FORMATS[magic]
    kind = rng.choice(["flip", "truncate", "extend", "count", "magic", "version", "token", "tokens"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 3, 64])))
    elif kind == "count":
        struct.pack_into("<i", data, 8, rng.choice([-1, 0, 1, 32, 33, 1 << 30, -(1 << 31),
                                                    (len(data) - 1024) // width + rng.choice([-1, 1]),
                                                    (len(data) - 1024) // (6 - width)]))  # the other format's count
    elif kind == "magic":  # the other format's magic among them: the tokens read at the wrong width
        struct.pack_into("<i", data, 0, rng.choice([0, 20240326, 20240521, -20240520, 20240520, 20240801]))
    elif kind == "version":
        struct.pack_into("<i", data, 4, rng.choice([0, 1, 2, 7, -1, 1 << 30]))
    elif kind == "token":
        at = 1024 + width * rng.randrange((len(data) - 1024) // width)
        big = [65536, 128255, (1 << 31) - 1, 1 << 31, (1 << 32) - 1] if width == 4 else []
        struct.pack_into(f"<{code}", data, at, rng.choice([VOCAB, VOCAB + 1, 65535, rng.randrange(65536)] + big))
    else:  # a valid shard of another length (it must be accepted when long enough)
        n = rng.choice([0, 1, WINDOW - 1, WINDOW, 100])
        data = bytearray(shard_bytes([rng.randrange(VOCAB) for _ in range(n)], magic))
    return kind, bytes(data)


def fuzz_shards(rng, cases, tmp, magic=20240520):
    base = shard_bytes([rng.randrange(VOCAB) for _ in range(300)], magic)
    items = mutated_files(rng, cases, tmp, "shard%d" % magic, mutate_shard, base)

    def one(item):
        i, kind, path, data = item
        rc, out = run(MODEL + ["--data", path, "--steps", "2"])
        os.remove(path)
        return verdict(f"shard {i} ({kind})", rc, out, shard_valid(data))

    return [f for f in in_parallel(one, items) if f]


# ---- checkpoints ------------------------------------------------------------------------------

META_VALUES = ["-1", "3.7", "abc", '""', "99999999999999999999", "0", "2", "1e3", "-0", "null", "[]", "2 2"]


def mutate_text(rng, text):
    kind = rng.choice(["value", "flip", "delete", "insert", "truncate"])
    if kind == "value":
        fields = list(re.finditer(r'"([a-z_.]+)": ([^,\]}\n]+)', text))
        m = rng.choice(fields)
        return f"value {m.group(1)}", text[:m.start(2)] + rng.choice(META_VALUES) + text[m.end(2):]
    b = bytearray(text.encode())
    at = rng.randrange(len(b))
    if kind == "flip":
        b[at] ^= 1 << rng.randrange(7)
    elif kind == "delete":
        del b[at:at + rng.randint(1, 4)]
    elif kind == "insert":
        b[at:at] = rng.choice([b"0", b"-", b"\"", b"}", b",", b" ", b"\x00"])
    else:
        del b[at:]
    return kind, b.decode(errors="replace")


def mutate_checkpoint(rng, ck):
    target = rng.choice(["meta.json", "complete.json", "params.bin", "adam_m.bin", "adam_v.bin", "remove"])
    if target == "remove":
        name = rng.choice(["meta.json", "complete.json", "params.bin", "adam_v.bin"])
        os.remove(os.path.join(ck, name))
        return f"removed {name}"
    path = os.path.join(ck, target)
    if target.endswith(".json"):
        with open(path) as f:
            text = f.read()
        kind, text = mutate_text(rng, text)
        with open(path, "w") as f:
            f.write(text)
        return f"{target}: {kind}"
    size = os.path.getsize(path)
    kind = rng.choice(["flip", "flip", "truncate", "extend"])
    with open(path, "r+b") as f:
        if kind == "flip":
            at = rng.randrange(size)
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        elif kind == "truncate":
            f.truncate(rng.randrange(size))
        else:
            f.seek(size)
            f.write(b"\0" * 4)
    return f"{target}: {kind}"


def fuzz_checkpoints(rng, cases, tmp):
    data = os.path.join(tmp, "train.bin")
    with open(data, "wb") as f:
        f.write(shard_bytes([rng.randrange(VOCAB) for _ in range(2000)]))
    good = os.path.join(tmp, "good")
    rc, out = run(MODEL + ["--data", data, "--steps", "2", "--save", good])
    if rc != 0:
        return [("setup", "the intact checkpoint could not be written", out)]
    resume = MODEL + ["--data", data, "--steps", "3", "--digest", "--resume"]
    rc, out = run(resume + [good])
    intact = digest(out)
    if rc != 0 or not intact:
        return [("setup", "the intact checkpoint could not be resumed", out)]
    items = []
    for i in range(cases):
        ck = os.path.join(tmp, f"ck_{i}")
        shutil.copytree(good, ck)
        items.append((i, mutate_checkpoint(rng, ck), ck))

    def one(item):
        i, what, ck = item
        rc, out = run(resume + [ck])
        shutil.rmtree(ck)
        if rc == "hang" or rc not in (0, 1, 2):
            return (f"checkpoint {i} ({what})", f"crash or hang (exit {rc})", out)
        if rc == 0 and digest(out) != intact:
            return (f"checkpoint {i} ({what})", "a corrupt checkpoint was accepted", out)
        if rc != 0 and "error:" not in out:
            return (f"checkpoint {i} ({what})", "refused without an error message", out)
        return None

    return [f for f in in_parallel(one, items) if f]


# ---- an independent strict JSON reader ---------------------------------------------------------

MAX_DEPTH = 64  # infra/json.h's JSON_MAX_DEPTH


class Duplicate(Exception):
    pass


def strict_json(data, max_bytes):
    """The value of a JSON document as RFC 8259 reads it, or None: strict UTF-8, no duplicate key
    in any object, no NaN or Infinity, no unpaired surrogate or NUL in a string, at most MAX_DEPTH
    levels of nesting, at most max_bytes."""
    if len(data) > max_bytes:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None

    def pairs(ps):
        if len({k for k, _ in ps}) != len(ps):
            raise Duplicate()
        return dict(ps)

    def constant(c):
        raise ValueError(c)

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, Duplicate, RecursionError):
        return None

    def clean(v, depth):
        if isinstance(v, str):
            return "\0" not in v and not any(0xD800 <= ord(c) <= 0xDFFF for c in v)
        if isinstance(v, (list, dict)):
            if depth >= MAX_DEPTH:
                return False
            items = list(v.items()) if isinstance(v, dict) else [(None, x) for x in v]
            return all((k is None or clean(k, 0)) and clean(x, depth + 1) for k, x in items)
        return True

    return value if clean(value, 0) else None


def whole(v, lo, hi):
    return type(v) is int and lo <= v <= hi


# ---- pretrained weights: a tiny GPT-2 in Hugging Face and llm.c files ----------------------

GL, GC, GH, GV, GT = 1, 8, 2, 64, 16  # layers, width, heads, vocabulary, positions
DATA_MAX = 32                          # the data's ids are below this, so any V >= 32 reads them
INT64_MAX = (1 << 63) - 1
GPT2_BLOCK = [("ln_1.weight", (GC,)), ("ln_1.bias", (GC,)), ("attn.c_attn.weight", (GC, 3 * GC)),
              ("attn.c_attn.bias", (3 * GC,)), ("attn.c_proj.weight", (GC, GC)), ("attn.c_proj.bias", (GC,)),
              ("ln_2.weight", (GC,)), ("ln_2.bias", (GC,)), ("mlp.c_fc.weight", (GC, 4 * GC)),
              ("mlp.c_fc.bias", (4 * GC,)), ("mlp.c_proj.weight", (4 * GC, GC)), ("mlp.c_proj.bias", (GC,))]


def gpt2_expected(L, C, V, T, prefix=""):
    """The tensors (name -> shape) a GPT-2 safetensors file of that model holds."""
    out = {prefix + "wte.weight": [V, C], prefix + "wpe.weight": [T, C], prefix + "ln_f.weight": [C],
           prefix + "ln_f.bias": [C]}
    for l in range(L):
        for name, shape in GPT2_BLOCK:
            out[f"{prefix}h.{l}.{name}"] = [C * s // GC for s in shape]
    return out


def gpt2_ignorable(name):
    """Tensors a GPT-2 file may carry beside ours: a tied lm_head and old attention buffers."""
    suffix = "." + name.rsplit(".", 1)[1] if "." in name else ""
    return name == "lm_head.weight" or ("attn." in name and suffix in (".bias", ".masked_bias") and
                                        "c_attn" not in name and "c_proj" not in name)


def gpt2_weights(rng):
    """name -> (shape, float32 bytes) of random weights for the tiny model."""
    out = {}
    for name, shape in gpt2_expected(GL, GC, GV, GT).items():
        n = 1
        for d in shape:
            n *= d
        out[name] = (shape, struct.pack(f"<{n}f", *[rng.uniform(-0.5, 0.5) for _ in range(n)]))
    return out


def safetensors_file(header, blobs):
    """header: a dict (serialized) or bytes; blobs: the data section."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + blobs


def gpt2_safetensors(weights):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (shape, data) in weights.items():
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    return header, b"".join(blobs)


GPT2_CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": GV, "n_positions": GT,
               "n_ctx": GT, "n_embd": GC, "n_layer": GL, "n_head": GH, "n_inner": None,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "tie_word_embeddings": True,
               "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}}


def transpose(data, rows, cols):
    v = struct.unpack(f"<{rows * cols}f", data)
    return struct.pack(f"<{rows * cols}f", *[v[i * cols + j] for j in range(cols) for i in range(rows)])


def gpt2_llmc(weights):
    """The same model as an llm.c fp32 checkpoint (version 3): [out, in] weights, padded wte."""
    Vp = (GV + 127) // 128 * 128
    header = struct.pack("<256i", 20240326, 3, GT, GV, GL, GH, GC, Vp, *([0] * 248))
    w = lambda n: weights[n][1]
    parts = [w("wte.weight") + b"\0" * 4 * (Vp - GV) * GC, w("wpe.weight")]
    order = [("ln_1.weight", None), ("ln_1.bias", None), ("attn.c_attn.weight", (GC, 3 * GC)), ("attn.c_attn.bias", None),
             ("attn.c_proj.weight", (GC, GC)), ("attn.c_proj.bias", None), ("ln_2.weight", None), ("ln_2.bias", None),
             ("mlp.c_fc.weight", (GC, 4 * GC)), ("mlp.c_fc.bias", None), ("mlp.c_proj.weight", (4 * GC, GC)),
             ("mlp.c_proj.bias", None)]
    for name, conv in order:  # stacked over layers; Conv1D weights transposed to [out, in]
        parts += [transpose(w(f"h.{l}.{name}"), *conv) if conv else w(f"h.{l}.{name}") for l in range(GL)]
    return header + b"".join(parts + [w("ln_f.weight"), w("ln_f.bias")])


def float32(x):
    """x rounded to a float, as the C code compares it (None when it does not fit one)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except (OverflowError, struct.error):
        return None


def config_model(cfg):
    """(L, C, H, V, T) of a GPT-2 config.json as fsdp.c must read it, or None when it must be refused."""
    if not isinstance(cfg, dict) or cfg.get("model_type") != "gpt2":
        return None
    dims = {}
    for key in ("n_layer", "n_embd", "n_head", "vocab_size", "n_positions"):
        if cfg.get(key) is None or not whole(cfg[key], 1, 1 << 24):
            return None
        dims[key] = cfg[key]
    C = dims["n_embd"]
    if cfg.get("n_inner") is not None and cfg["n_inner"] != 4 * C:
        return None
    if "activation_function" in cfg and cfg["activation_function"] not in ("gelu_new", "gelu_pytorch_tanh"):
        return None
    if "tie_word_embeddings" in cfg and cfg["tie_word_embeddings"] is not True:
        return None
    if C % dims["n_head"]:
        return None
    # Fields that change the model without changing its tensors: only fsdp.c's values load.
    eps = cfg.get("layer_norm_epsilon")
    if eps is not None and (type(eps) not in (int, float) or float32(eps) != float32(1e-5)):
        return None
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if key in cfg and cfg[key] is not want:
            return None
    return dims["n_layer"], C, dims["n_head"], dims["vocab_size"], dims["n_positions"]


def safetensors_check(data, model, original):
    """(valid, same tensors as `original`) for a model.safetensors beside a config of `model`."""
    if len(data) < 8:
        return False, False
    n = struct.unpack_from("<Q", data)[0]
    if n < 2 or n > 100 << 20 or 8 + n > len(data):
        return False, False
    header = strict_json(data[8:8 + n], 100 << 20)
    if not isinstance(header, dict):
        return False, False
    sizes, table = {"F32": 4, "BF16": 2, "F16": 2}, {}
    for name, e in header.items():
        if name == "__metadata__":
            if not isinstance(e, dict) or not all(isinstance(x, str) for x in e.values()):
                return False, False
            continue
        if len(name.encode()) >= 128 or not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            return False, False
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in sizes or not isinstance(shape, list) or len(shape) > 4 or not isinstance(offs, list) or len(offs) != 2:
            return False, False
        numel = 1
        for d in shape:
            if not whole(d, 0, INT64_MAX) or numel * d > INT64_MAX:
                return False, False
            numel *= d
        if not all(whole(o, 0, INT64_MAX) for o in offs) or numel * sizes[dtype] > INT64_MAX:
            return False, False
        if offs[1] < offs[0] or offs[1] - offs[0] != numel * sizes[dtype] or offs[1] > len(data) - 8 - n:
            return False, False
        table[name] = (dtype, shape, offs[0], offs[1])
    at = 0
    for _, _, b, e in sorted(table.values(), key=lambda t: (t[2], t[3] - t[2])):
        if b != at:
            return False, False
        at = e
    if at != len(data) - 8 - n:
        return False, False
    L, C, H, V, T = model
    prefix = "transformer." if "transformer.wte.weight" in table else ""
    expected = gpt2_expected(L, C, V, T, prefix)
    if any(name not in table or table[name][1] != shape for name, shape in expected.items()):
        return False, False
    if any(name not in expected and not gpt2_ignorable(name) for name in table):
        return False, False
    same = all(table[name][0] == "F32" and data[8 + n + table[name][2]:8 + n + table[name][3]] == original[name[len(prefix):]][1]
               for name in expected)
    return True, same


def llmc_check(data):
    """(valid, (L, C, H, V, T, version, Vp)) of an llm.c checkpoint."""
    if len(data) < 1024:
        return False, None
    magic, version, T, V, L, H, C, Vp = struct.unpack_from("<8i", data)
    if magic != 20240326 or version not in (3, 5) or not all(1 <= x <= 1 << 24 for x in (T, V, L, H, C, Vp)) or L > 4096:
        return False, None
    if Vp < V or C % H or V <= DATA_MAX - 1:
        return False, None
    es = 4 if version == 3 else 2
    if len(data) != 1024 + es * (Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C):
        return False, None
    return True, (L, C, H, V, T, version, Vp)


# Values to put where a number is expected.
JSON_VALUES = [0, 1, 2, 3, 4, 7, 8, 16, 17, 64, 65, -1, -8, 32.5, 8.0, 2.5, True, False, None, "8", [8], {},
               16777216, 16777217, 4611686018427387904, 99999999999999999999, 1 << 40]


def mutate_config(rng, cfg):
    """A mutated config.json: (what, bytes)."""
    c = dict(cfg)
    kind = rng.choice(["value", "value", "remove", "duplicate", "nested", "pad", "escape", "type", "text", "text",
                       "truncate", "bom"])
    key = rng.choice(["n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "n_inner", "tie_word_embeddings",
                      "activation_function", "model_type", "layer_norm_epsilon", "scale_attn_weights"])
    if kind == "value":
        c[key] = rng.choice(JSON_VALUES + ["gelu_new", "relu", "gpt2", "t5"])
        return f"{key} = {c[key]!r}", json.dumps(c).encode()
    if kind == "remove":
        c.pop(key, None)
        return f"no {key}", json.dumps(c).encode()
    if kind == "duplicate":
        text = json.dumps(c)
        return f"{key} twice", (text[:-1] + f', "{key}": {json.dumps(rng.choice([cfg.get(key), 4]))}}}').encode()
    if kind == "nested":  # a nested object with the model's keys, before the real ones
        inner = {k: rng.choice(JSON_VALUES) for k in ("n_head", "n_layer", "n_embd")}
        return "nested model keys", json.dumps({"nested_params": {"x": inner}, **c}).encode()
    if kind == "pad":  # valid JSON of another size
        return "padded", json.dumps(c, indent=rng.choice([1, 4000, 40000])).encode()
    if kind == "escape":  # the same key written with escapes
        text = json.dumps(c)
        return f"escaped {key}", text.replace(f'"{key}"', '"' + "".join(f"\\u{ord(ch):04x}" for ch in key) + '"').encode()
    if kind == "type":
        c[key] = str(c.get(key))
        return f"{key} as a string", json.dumps(c).encode()
    if kind == "bom":
        return "BOM", b"\xef\xbb\xbf" + json.dumps(c).encode()
    b = bytearray(json.dumps(c).encode())
    at = rng.randrange(len(b))
    if kind == "truncate":
        return f"cut at {at}", bytes(b[:at])
    op = rng.choice(["flip", "delete", "insert"])
    if op == "flip":
        b[at] ^= 1 << rng.randrange(8)
    elif op == "delete":
        del b[at:at + rng.randint(1, 3)]
    else:
        b[at:at] = rng.choice([b"0", b"-", b'"', b"}", b",", b" ", b"\x00", b"\\", b"\xff", b".5", b"e1"])
    return f"text {op} at {at}", bytes(b)


def mutate_header(rng, header, blobs):
    """A mutated model.safetensors: (what, bytes)."""
    h = json.loads(json.dumps(header))
    names = [n for n in h if n != "__metadata__"]
    name = rng.choice(names)
    kind = rng.choice(["shape", "shape", "offset", "offset", "dtype", "swap", "drop", "extra", "rename", "field",
                       "metadata", "order", "escape", "duplicate", "text", "text", "length", "data"])
    e = h[name]
    if kind == "shape":
        i = rng.randrange(len(e["shape"]))
        e["shape"][i] = rng.choice(JSON_VALUES + [e["shape"][i] + 1, e["shape"][i] - 1, 1 << 62])
        if rng.random() < 0.3:
            e["shape"] = rng.choice([[1 << 40, 1 << 40], [1 << 31, 1 << 31, 4], [], e["shape"] + [1], [0] + e["shape"]])
        return f"{name} shape {e['shape']}", safetensors_file(h, blobs)
    if kind == "offset":
        i = rng.randrange(2)
        e["data_offsets"][i] = rng.choice([e["data_offsets"][i] + d for d in (-8, -4, -1, 1, 4)] + JSON_VALUES + [INT64_MAX, 1 << 63])
        return f"{name} offsets {e['data_offsets']}", safetensors_file(h, blobs)
    if kind == "dtype":
        e["dtype"] = rng.choice(["BF16", "F16", "F64", "I64", "f32", "", 32, None])
        return f"{name} dtype {e['dtype']!r}", safetensors_file(h, blobs)
    if kind == "swap":  # two tensors of one size trade places: valid, other values
        same = [n for n in names if n != name and h[n]["shape"] == e["shape"]]
        other = rng.choice(same) if same else rng.choice(names)
        e["data_offsets"], h[other]["data_offsets"] = h[other]["data_offsets"], e["data_offsets"]
        return f"{name} <-> {other}", safetensors_file(h, blobs)
    if kind == "drop":
        del h[name]
        return f"no {name}", safetensors_file(h, blobs)
    if kind == "extra":
        extra = rng.choice(["lm_head.weight", "h.0.attn.bias", "h.0.attn.masked_bias", "h.1.ln_1.weight", "x"])
        size = 4 * GC
        h[extra] = {"dtype": "F32", "shape": [GC], "data_offsets": [len(blobs), len(blobs) + size]}
        return f"extra {extra}", safetensors_file(h, blobs + b"\0" * size)
    if kind == "rename":
        h[rng.choice(["transformer." + name, name + "x", name.replace(".", "_"), "a" * 130])] = h.pop(name)
        return f"renamed {name}", safetensors_file(h, blobs)
    if kind == "field":
        e[rng.choice(["dtype_", "offsets", "x"])] = 1
        return f"{name} unknown field", safetensors_file(h, blobs)
    if kind == "metadata":
        h["__metadata__"] = rng.choice([{}, {"format": 1}, {"format": "pt", "x": "y"}, [], "pt", {"a": {"b": "c"}}])
        if rng.random() < 0.3:
            del h["__metadata__"]
        return f"metadata {h.get('__metadata__')!r}", safetensors_file(h, blobs)
    if kind == "order":
        items = list(h.items())
        rng.shuffle(items)
        return "keys reordered", safetensors_file(dict(items), blobs)
    text = json.dumps(h)
    if kind == "escape":
        return f"escaped {name}", safetensors_file(text.replace(f'"{name}"', '"' + "".join(f"\\u{ord(c):04x}" for c in name) + '"', 1).encode(), blobs)
    if kind == "duplicate":
        key = rng.choice(["__metadata__", name])
        return f"{key} twice", safetensors_file((text[:-1] + f', "{key}": {json.dumps(h[key])}}}').encode(), blobs)
    data = bytearray(safetensors_file(h, blobs))
    if kind == "length":
        struct.pack_into("<Q", data, 0, rng.choice([0, 1, 2, len(text) - 1, len(text) + 1, len(data), 1 << 63, 100 << 20]))
        return "header length", bytes(data)
    if kind == "data":
        cut = rng.choice([-4, -1, 1, 4])
        return f"data {cut:+d} bytes", bytes(data[:cut] if cut < 0 else data + b"\0" * cut)
    at = 8 + rng.randrange(len(text))
    op = rng.choice(["flip", "delete", "insert"])
    if op == "flip":
        data[at] ^= 1 << rng.randrange(8)
    elif op == "delete":
        del data[at]
    else:
        data[at:at] = rng.choice([b"0", b'"', b"}", b",", b"\x00", b"\\"])
    return f"header {op} at {at - 8}", bytes(data)


def mutate_llmc(rng, data):
    b = bytearray(data)
    kind = rng.choice(["field", "field", "field", "truncate", "extend"])
    if kind == "field":
        i = rng.randrange(8)
        old = struct.unpack_from("<i", b, 4 * i)[0]
        new = rng.choice([0, -1, 1, old + 1, old - 1, 2 * old, (1 << 31) - 1, -(1 << 31), 1 << 24, (1 << 24) + 1, 3, 5,
                          20240326])
        struct.pack_into("<i", b, 4 * i, new)
        return f"header[{i}] {old} -> {new}", bytes(b)
    if kind == "truncate":
        at = rng.randrange(len(b))
        return f"cut at {at}", bytes(b[:at])
    n = rng.choice([1, 2, 4, 64])
    return f"{n} more bytes", bytes(b) + b"\0" * n


class Weights:
    """The fixture of the weight cases: the tiny GPT-2 as a Hugging Face directory and an llm.c
    file, the data it trains on, and the digest every intact copy loads."""

    def __init__(self, rng, tmp):
        self.tmp = tmp
        self.weights = gpt2_weights(rng)
        self.header, self.blobs = gpt2_safetensors(self.weights)
        self.data = os.path.join(tmp, "data64.bin")
        with open(self.data, "wb") as f:
            f.write(shard_bytes([rng.randrange(DATA_MAX) for _ in range(200)]))
        self.hf = self.write_hf("intact")
        self.llmc = os.path.join(tmp, "intact.bin")
        with open(self.llmc, "wb") as f:
            f.write(gpt2_llmc(self.weights))
        self.digest = None

    def write_hf(self, name, config=None, tensors=None):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.write(config if config is not None else json.dumps(GPT2_CONFIG).encode())
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(tensors if tensors is not None else safetensors_file(self.header, self.blobs))
        return d

    def args(self, path):
        return ["--init-from", path, "--data", self.data, "--batch", "1", "--steps", "0", "--digest"]

    def setup(self):
        """The intact directory and llm.c file load, to one digest; failures if not."""
        rc, out = run(self.args(self.hf))
        rc2, out2 = run(self.args(self.llmc))
        self.digest = digest(out)
        if rc != 0 or rc2 != 0 or not self.digest or digest(out2) != self.digest:
            return [("setup", "the intact weights (Hugging Face, llm.c) do not load to one digest", out + out2)]
        return []


# ---- named cases: each failure once found in these inputs --------------------------------------

SANITIZER = re.compile(r"ERROR: AddressSanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer")


def named_cases(w, tmp):
    """(name, passed, output) of each named case."""
    results = []

    def case(name, ok, out):
        results.append((name, bool(ok), out))

    def refused(rc, out, *needles):
        return rc in (1, 2) and not SANITIZER.search(out) and "error:" in out and all(n in out for n in needles)

    def hf_with(name, config=None, tensors=None):
        return w.write_hf(name, None if config is None else json.dumps(config).encode() if isinstance(config, dict)
                          else config, tensors)

    # llm.c: a truncated file and a header that does not describe it were a use-after-free in
    # the error path (the release build printed the right message).
    llmc = open(w.llmc, "rb").read()
    cut = os.path.join(tmp, "cut.bin")
    open(cut, "wb").write(llmc[:-100])
    rc, out = run(w.args(cut))
    case("llm.c: a truncated file is refused, naming the tensor, with no sanitizer report (was a heap use-after-free)",
         refused(rc, out, "cut.bin", "tensor fcprojw.0", "truncated"), out)
    lie = bytearray(llmc)
    struct.pack_into("<i", lie, 16, GL + 1)  # L
    open(cut, "wb").write(bytes(lie))
    rc, out = run(w.args(cut))
    case("llm.c: a header that does not describe the file's size is refused, no sanitizer report",
         refused(rc, out, "cut.bin", "truncated"), out)
    big = bytearray(llmc)
    struct.pack_into("<8i", big, 0, 20240326, 5, 1, (1 << 31) - 1, 1, 1, (1 << 31) - 1, (1 << 31) - 1)
    open(cut, "wb").write(bytes(big))
    rc, out = run(w.args(cut))
    case("llm.c: header fields near 2^31 are refused, no signed overflow", refused(rc, out, "implausible llm.c header"), out)
    # safetensors shapes whose element count overflows.
    h = json.loads(json.dumps(w.header))
    h["wpe.weight"]["shape"] = [1 << 40, 1 << 40]
    rc, out = run(w.args(hf_with("shape40", tensors=safetensors_file(h, w.blobs))))
    case("safetensors: shape [2^40, 2^40] is refused, no signed overflow", refused(rc, out, "wpe.weight"), out)
    rc, out = run(w.args(hf_with("embd62", config={**GPT2_CONFIG, "n_embd": 4611686018427387904})))
    case("config.json: n_embd 4611686018427387904 is refused naming the field, no signed overflow",
         refused(rc, out, '"n_embd" is 4611686018427387904, out of range'), out)
    # A config whose tensors do not match it is refused before anything of its size is
    # allocated (no memory plan is made), in 4 GiB of address space: the allocations were
    # 14.6 GB and 80 GB.
    for key, needle, by in (("n_positions", "wpe.weight has shape [16, 8], the model needs [16777216, 8]", "the tensor table"),
                            ("n_layer", "16777216 blocks, more than the 4096", "the model's bound")):
        d = hf_with("huge_" + key, config={**GPT2_CONFIG, key: 16777216})
        rc, out = run(w.args(d) + ["--seq", str(GT)], binary=RELEASE_BIN, limit=30, memory=4 << 30)
        case(f"config.json: {key} 16777216 is refused by {by} before anything model-sized is allocated",
             refused(rc, out, needle) and "out of host memory" not in out and "memory plan" not in out, out)
    # config.json read as JSON: nesting, duplicates, whole numbers, size, regular files.
    nested = json.dumps({"task_specific_params": {"n_head": 4},
                         **{k: v for k, v in GPT2_CONFIG.items() if k != "task_specific_params"}}).encode()
    rc, out = run(w.args(hf_with("nested", config=nested)))
    case("config.json: a nested {\"n_head\": 4} before the real n_head 2 loads the 2-head model",
         rc == 0 and re.search(r"gpt:L=1,C=8,H=2,", out) and digest(out) == w.digest, out)
    rc, out = run(w.args(hf_with("dup", config=(json.dumps(GPT2_CONFIG)[:-1] + ', "n_head": 4}').encode())))
    case("config.json: n_head twice is refused", refused(rc, out, '"n_head" appears twice'), out)
    rc, out = run(w.args(hf_with("frac", config=json.dumps(GPT2_CONFIG).replace('"n_head": 2', '"n_head": 2.5').encode())))
    case("config.json: n_head 2.5 is refused, not read as 2", refused(rc, out, '"n_head" is 2.5, not a whole number'), out)
    rc, out = run(w.args(hf_with("bool", config={**GPT2_CONFIG, "n_layer": True})))
    case("config.json: n_layer true is refused, not read as 1", refused(rc, out, '"n_layer" is true, not a whole number'), out)
    padded = ('{' + " " * (100 << 10) + json.dumps(GPT2_CONFIG)[1:]).encode()
    rc, out = run(w.args(hf_with("padded", config=padded)))
    rc2, out2 = run(w.args(hf_with("huge", config=b" " * (2 << 20) + json.dumps(GPT2_CONFIG).encode())))
    case("config.json: 100 KiB (valid, padded) loads the same model; 2 MiB is refused by its size",
         rc == 0 and digest(out) == w.digest and refused(rc2, out2, "more than the 1048576 bytes"), out + out2)
    d = hf_with("fifo")
    os.remove(os.path.join(d, "config.json"))
    os.mkfifo(os.path.join(d, "config.json"))
    rc, out = run(w.args(d), limit=20)
    case("config.json: a FIFO is refused at once, not waited on", refused(rc, out, "FIFO"), out)
    # The safetensors header through the same reader.
    text = json.dumps(w.header)
    rc, out = run(w.args(hf_with("metadup", tensors=safetensors_file((text[:-1] + ', "__metadata__": {}}').encode(), w.blobs))))
    case("safetensors: a header with __metadata__ twice is refused", refused(rc, out, '"__metadata__" appears twice'), out)
    h = json.loads(text)
    h["ln_f.bias"]["shape_"] = [1]
    rc, out = run(w.args(hf_with("field", tensors=safetensors_file(h, w.blobs))))
    case("safetensors: a tensor entry with an unknown field is refused", refused(rc, out, 'unknown field "shape_"'), out)
    # Non-finite values inside the kernels: gelu's clamp let a NaN through to a float-to-int
    # conversion and a shift of a negative int (UBSan).
    try:
        p = subprocess.run([SAN_KERNELS], capture_output=True, text=True, errors="replace", timeout=TIME_LIMIT,
                           env=dict(ENV, TEST_FILTER="activations_nonfinite"))
        rc, out = p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        rc, out = "error", str(e)
    case("kernels: gelu, geglu and swiglu of NaN and infinities, and their gradients, reach no undefined behaviour "
         "(UBSan fired in gelu and in swiglu's SiLU)",
         rc == 0 and not SANITIZER.search(out) and "2 passed, 0 failed" in out, out)
    return results


def named_generate_cases(w, tmp):
    """generate_cpu: token ids from every source checked against the vocabulary, options validated."""
    results = []
    gen = lambda args, limit=TIME_LIMIT: run([w.hf, "--tokens", "2", "--temperature", "0"] + args, binary=SAN_GENERATE,
                                             limit=limit)

    def case(name, ok, out):
        results.append((name, bool(ok), out))

    def refused(rc, out, *needles):
        return rc in (1, 2) and not SANITIZER.search(out) and "error:" in out and all(n in out for n in needles)

    tok = os.path.join(tmp, "tok.bin")
    open(tok, "wb").write(tokenizer_bytes(GV, 2, (1 << 31) - 1))
    rc, out = gen(["--tokenizer", tok])
    case("generate: a tokenizer whose end-of-text is 2^31-1 is refused, naming it (was SIGSEGV in the embedding)",
         refused(rc, out, "tok.bin", "end-of-text id 2147483647"), out)
    open(tok, "wb").write(tokenizer_bytes(50257, 1, 0))
    rc, out = gen(["--tokenizer", tok])
    case("generate: a GPT-2 tokenizer with a 64-token model is refused (it started from id 50256)",
         refused(rc, out, "tok.bin", "50257 tokens", "vocabulary has 64"), out)
    rc, out = gen(["--prompt", "a~z"])
    case("generate: --prompt bytes at or above the vocabulary are refused (read outside the embedding)",
         refused(rc, out, "byte 97 (at position 0)", "vocabulary of 64"), out)
    rc, out = gen(["--prompt-ids", "1 2 64"])
    case("generate: --prompt-ids beyond the vocabulary name the id", refused(rc, out, "id 64 (the 3rd)", "0..63"), out)
    rc, out = gen(["--prompt-ids", "1", "--temperature", "nan"])
    case("generate: --temperature nan is refused", refused(rc, out, "--temperature 'nan'"), out)
    rc, out = gen(["--prompt-ids", "1", "--tokens", "2147483647"])
    case("generate: --tokens 2147483647 is refused, no overflow", refused(rc, out, "--tokens '2147483647'"), out)
    fifo = os.path.join(tmp, "fifo_tok.bin")
    os.mkfifo(fifo)
    rc, out = gen(["--tokenizer", fifo], limit=20)
    case("generate: a FIFO tokenizer is refused at once", refused(rc, out, "FIFO"), out)
    # --eval-prompts: lines checked when read (an empty prompt read the logits of position -1
    # and reported 0.00%, exit 0).
    data = os.path.join(tmp, "data100_named.bin")
    with open(data, "wb") as f:
        f.write(shard_bytes([i % PV for i in range(400)]))
    prompts = os.path.join(tmp, "named_prompts.txt")
    with open(prompts, "wb") as f:
        f.write(b"12+34=\t640\n\t77\n")
    rc, out = run(PROMPT_MODEL + ["--data", data, "--steps", "1", "--eval-prompts", prompts])
    case("--eval-prompts: an empty prompt is refused, naming the file and the line (was 0.00%, exit 0)",
         refused(rc, out, "named_prompts.txt: line 2 has an empty prompt"), out)
    os.remove(prompts)
    os.mkfifo(prompts)
    rc, out = run(PROMPT_MODEL + ["--data", data, "--steps", "1", "--eval-prompts", prompts], limit=20)
    case("--eval-prompts: a FIFO is refused at once", refused(rc, out, "FIFO"), out)
    return results


# ---- tokenizer.bin (generate --tokenizer) ------------------------------------------------------

def tokenizer_bytes(vocab, version, eot, pieces=None):
    header = struct.pack("<256I", 20240328, version, vocab, eot & 0xffffffff, *([0] * 252))
    if pieces is None:
        pieces = [bytes([65 + i % 26]) * (1 + i % 3) for i in range(vocab)]
    return header + b"".join(bytes([len(p)]) + p for p in pieces)


def tokenizer_check(data, model_vocab):
    """(valid, eot): a well-formed tokenizer whose ids fit a model of model_vocab tokens."""
    if len(data) < 1024:
        return False, None
    magic, version, vocab, eot = struct.unpack_from("<4I", data)
    if magic != 20240328 or version not in (1, 2) or not 1 <= vocab <= 1 << 20:
        return False, None
    eot = eot if version == 2 else 50256
    at = 1024
    for _ in range(vocab):
        if at >= len(data) or at + 1 + data[at] > len(data):
            return False, None
        at += 1 + data[at]
    if at != len(data) or eot >= vocab or vocab > model_vocab:
        return False, None
    return True, eot


def mutate_tokenizer(rng, data):
    b = bytearray(data)
    kind = rng.choice(["field", "field", "truncate", "extend", "flip"])
    if kind == "field":
        i = rng.randrange(4)
        old = struct.unpack_from("<I", b, 4 * i)[0]
        new = rng.choice([0, 1, 2, 3, old + 1, old - 1 if old else 0, 63, 64, 65, 50256, 50257, 1 << 20, (1 << 20) + 1,
                          (1 << 31) - 1, (1 << 32) - 1])
        struct.pack_into("<I", b, 4 * i, new)
        return f"header[{i}] {old} -> {new}", bytes(b)
    if kind == "truncate":
        at = rng.randrange(len(b))
        return f"cut at {at}", bytes(b[:at])
    if kind == "extend":
        return "one more byte", bytes(b) + b"\x01"
    at = 1024 + rng.randrange(len(b) - 1024)
    b[at] ^= 1 << rng.randrange(8)
    return f"flip at {at}", bytes(b)


def fuzz_tokenizers(rng, cases, tmp, w):
    items = mutated_files(rng, cases, tmp, "tok", mutate_tokenizer, tokenizer_bytes(GV, 2, GV - 1))

    def one(item):
        i, what, path, data = item
        rc, out = run([w.hf, "--tokenizer", path, "--tokens", "2", "--temperature", "0"], binary=SAN_GENERATE)
        valid, eot = tokenizer_check(data, GV)
        ok_start = not valid or f"prompt ids: {eot}\n" in out
        return verdict(f"tokenizer {i} ({what})", rc, out, valid, ok_start)

    return [f for f in in_parallel(one, items) if f]


# ---- --eval-prompts files ----------------------------------------------------------------------

PV, PT = 100, 16  # the prompt cases' model: vocabulary and sequence
PROMPT_MODEL = ["--model", f"gpt:L=1,C=16,H=2,V={PV},T={PT}", "--batch", "2", "--seq", str(PT)]


def prompts_valid(data):
    """Whether fsdp.c must take the file: each non-empty line (cut at the first CR or LF) is a
    prompt, a TAB and an answer, both non-empty, their bytes below the vocabulary, fitting a
    sequence; no NUL anywhere; at least one prompt."""
    n = 0
    for raw in data.split(b"\n"):
        if b"\0" in raw:
            return False
        line = re.split(b"[\r\n]", raw, maxsplit=1)[0]
        if not line:
            continue
        if b"\t" not in line:
            return False
        prompt, answer = line.split(b"\t", 1)
        if not prompt or not answer or len(prompt) + len(answer) + 1 > PT or any(c >= PV for c in prompt + answer):
            return False
        n += 1
    return n > 0


def mutate_prompts(rng, lines):
    lines = list(lines)
    kind = rng.choice(["empty prompt", "empty answer", "no tab", "high byte", "nul", "crlf", "blank", "long", "two tabs",
                       "no newline", "empty file", "cr inside", "flip"])
    i = rng.randrange(len(lines))
    p, a = lines[i].split(b"\t")
    if kind == "empty prompt":
        lines[i] = b"\t" + a
    elif kind == "empty answer":
        lines[i] = p + b"\t"
    elif kind == "no tab":
        lines[i] = p + a
    elif kind == "high byte":
        lines[i] = p + b"\t" + a[:-1] + bytes([rng.choice([99, 100, 122, 200, 255])])
    elif kind == "nul":
        lines[i] = p + b"\0\t" + a
    elif kind == "crlf":
        lines = [l + b"\r" for l in lines]
    elif kind == "blank":
        lines.insert(i, rng.choice([b"", b"\r", b" "]))
    elif kind == "long":
        lines[i] = p * rng.choice([1, 2, 3]) + b"\t" + a
    elif kind == "two tabs":
        lines[i] = p + b"\t" + a + b"\t" + a
    elif kind == "cr inside":
        lines[i] = p + b"\r" + b"\t" + a
    elif kind == "empty file":
        return kind, b""
    elif kind == "flip":
        b = bytearray(b"\n".join(lines) + b"\n")
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return kind, bytes(b)
    text = b"\n".join(lines)
    return kind, text if kind == "no newline" else text + b"\n"


def fuzz_prompts(rng, cases, tmp):
    data = os.path.join(tmp, "data100.bin")
    with open(data, "wb") as f:
        f.write(shard_bytes([rng.randrange(PV) for _ in range(400)]))
    base = [f"{a}+{b}=".encode() + b"\t" + str(a + b)[::-1].encode() for a, b in
            ((rng.randrange(10, 99), rng.randrange(10, 99)) for _ in range(6))]
    items = mutated_files(rng, cases, tmp, "prompts", mutate_prompts, base)

    def one(item):
        i, what, path, text = item
        rc, out = run(PROMPT_MODEL + ["--data", data, "--steps", "1", "--eval-prompts", path])
        valid = prompts_valid(text)
        named = valid or os.path.basename(path) in out
        failure = verdict(f"prompts {i} ({what})", rc, out, valid)
        if not failure and not named:
            failure = (f"prompts {i} ({what})", "refused without naming the file", out)
        if not failure and valid and "exact-match accuracy" not in out:
            failure = (f"prompts {i} ({what})", "accepted but not evaluated", out)
        return failure

    return [f for f in in_parallel(one, items) if f]


# ---- --eval-choices files (llm.c's multiple-choice format) ---------------------------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from choices_file import choices_bytes, choices_valid  # noqa: E402


def mutate_choices(rng, data):
    data = bytearray(data)
    words = (len(data) - 1024) // 2
    kind = rng.choice(["flip", "truncate", "extend", "count", "longest", "magic", "field", "token", "rewrite"])
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 12, 40])))
    elif kind == "count":
        struct.pack_into("<i", data, 8, rng.choice([0, -1, 1, 2, 5, 7, 65537, 1 << 30]))
    elif kind == "longest":
        struct.pack_into("<i", data, 12, rng.choice([0, 17, 18, 20, 30, 65536, -4]))
    elif kind == "magic":
        struct.pack_into("<i", data, rng.choice([0, 4]), rng.choice([20240520, 2, 0]))
    elif kind == "field":  # any uint16 field to a value near a limit
        struct.pack_into("<H", data, 1024 + 2 * rng.randrange(words), rng.choice([0, 1, 3, 4, 5, 16, 17, 65535]))
    elif kind == "token":
        struct.pack_into("<H", data, 1024 + 2 * rng.randrange(words), rng.choice([CV - 1, CV, CV + 1, 65534]))
    else:  # a file of other, valid or not, examples written whole
        exs = []
        for _ in range(rng.randint(1, 6)):
            ctx = [rng.randrange(CV) for _ in range(rng.choice([0, 1, 3, CT - 1, CT]))]
            comps = [[rng.randrange(CV) for _ in range(rng.choice([0, 1, 2, 4]))] for _ in range(rng.choice([1, 2, 4]))]
            exs.append((ctx, comps, rng.randrange(len(comps) + rng.choice([0, 0, 1]))))
        data = bytearray(choices_bytes(exs))
    return kind, bytes(data)


CV, CT = 100, 16  # the multiple-choice cases' model: vocabulary and sequence


def fuzz_choices(rng, cases, tmp):
    data = os.path.join(tmp, "data100c.bin")
    with open(data, "wb") as f:
        f.write(shard_bytes([rng.randrange(CV) for _ in range(400)]))
    exs = [([rng.randrange(CV) for _ in range(rng.randint(1, 8))],
            [[rng.randrange(CV) for _ in range(rng.randint(1, 8))] for _ in range(4)], rng.randrange(4)) for _ in range(5)]
    items = mutated_files(rng, cases, tmp, "choices", mutate_choices, choices_bytes(exs))

    def one(item):
        i, what, path, blob = item
        rc, out = run(["--model", f"gpt:L=1,C=16,H=2,V={CV},T={CT}", "--batch", "3", "--seq", str(CT), "--data", data,
                       "--steps", "1", "--eval-choices", path])
        valid = choices_valid(blob, CV, CT)
        failure = verdict(f"choices {i} ({what})", rc, out, valid)
        if not failure and not valid and os.path.basename(path) not in out:
            failure = (f"choices {i} ({what})", "refused without naming the file", out)
        if not failure and valid and "multiple-choice accuracy" not in out:
            failure = (f"choices {i} ({what})", "accepted but not evaluated", out)
        return failure

    return [f for f in in_parallel(one, items) if f]


# ---- mutated weights ---------------------------------------------------------------------------

def fuzz_configs(rng, cases, tmp, w):
    items = []
    for i in range(cases):
        what, text = mutate_config(rng, GPT2_CONFIG)
        items.append((i, what, w.write_hf(f"cfg_{i}", config=text), text))

    def one(item):
        i, what, d, text = item
        rc, out = run(w.args(d))
        model = config_model(strict_json(text, 1 << 20))
        valid = model is not None and (model[0], model[1], model[3], model[4]) == (GL, GC, GV, GT)
        return verdict(f"config.json {i} ({what})", rc, out, valid, digest(out) == w.digest)

    return [f for f in in_parallel(one, items) if f]


def fuzz_headers(rng, cases, tmp, w):
    items = []
    for i in range(cases):
        what, data = mutate_header(rng, w.header, w.blobs)
        items.append((i, what, w.write_hf(f"st_{i}", tensors=data), data))

    def one(item):
        i, what, d, data = item
        rc, out = run(w.args(d))
        valid, same = safetensors_check(data, (GL, GC, GH, GV, GT), w.weights)
        return verdict(f"safetensors {i} ({what})", rc, out, valid, not same or digest(out) == w.digest)

    return [f for f in in_parallel(one, items) if f]


def fuzz_llmc(rng, cases, tmp, w):
    items = mutated_files(rng, cases, tmp, "llmc", mutate_llmc, open(w.llmc, "rb").read())

    def one(item):
        i, what, path, data = item
        rc, out = run(w.args(path))
        valid, model = llmc_check(data)
        same = valid and model == (GL, GC, model[2], GV, GT, 3, 128)
        return verdict(f"llm.c {i} ({what})", rc, out, valid, not same or digest(out) == w.digest)

    return [f for f in in_parallel(one, items) if f]


def wanted(name):
    """TEST_FILTER (make test F=REGEX): whether the group of cases `name` runs."""
    f = os.environ.get("TEST_FILTER", "")
    return not f or re.search(f, name, re.IGNORECASE) is not None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=120, help="cases of shards and checkpoints; a third as many of the rest")
    ap.add_argument("--seed", type=int, default=20261123)
    a = ap.parse_args()
    for binary in (SAN_BIN, SAN_GENERATE, SAN_KERNELS, RELEASE_BIN):
        if not os.access(binary, os.X_OK):
            print(f"FAIL {binary} is missing (make test T=fuzz builds it)\n0 passed, 1 failed")
            return 1
    rng = random.Random(a.seed)
    passed = failed = 0

    def report(name, failures, start):
        nonlocal passed, failed
        for case, why, out in failures:
            print(f"FAIL {case}: {why}\n" + "\n".join("     " + l for l in out.strip().splitlines()[-6:]))
        ok = not failures
        print(f"{'ok  ' if ok else 'FAIL'} {name}: no crash, no hang, accepted exactly when valid ({len(failures)} failing) "
              f"({time.time() - start:.1f} s)", flush=True)
        passed += ok
        failed += not ok

    third = max(1, a.cases // 3)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.time()
        w = Weights(rng, tmp)
        setup = w.setup()
        if setup:
            report("pretrained weights: the intact files", setup, start)
        else:
            named = named_cases(w, tmp) + named_generate_cases(w, tmp) if wanted("named cases") else []
            for name, ok, out in named:
                print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else "\n" + "\n".join(
                    "     " + l for l in out.strip().splitlines()[-6:])), flush=True)
                passed += ok
                failed += not ok
            for name, fn in ((f"{third} mutated config.json files", fuzz_configs),
                             (f"{third} mutated safetensors files", fuzz_headers),
                             (f"{third} mutated llm.c files", fuzz_llmc),
                             (f"{third} mutated tokenizer.bin files", fuzz_tokenizers)):
                if not wanted(name):
                    continue
                start = time.time()
                report(name, fn(rng, third, tmp, w), start)
        start = time.time()
        if wanted("mutated --eval-prompts files"):
            report(f"{third} mutated --eval-prompts files", fuzz_prompts(rng, third, tmp), start)
        start = time.time()
        if wanted("mutated --eval-choices files"):
            report(f"{third} mutated --eval-choices files", fuzz_choices(rng, third, tmp), start)
        for name, fn, n in ((f"{a.cases} mutated token shards", fuzz_shards, a.cases),
                            (f"{third} mutated Llama 3 token shards (uint32)",
                             lambda r, n, t: fuzz_shards(r, n, t, 20240801), third),
                            (f"{a.cases} mutated checkpoints", fuzz_checkpoints, a.cases)):
            if not wanted(name):
                continue
            start = time.time()
            report(name, fn(rng, n, tmp), start)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
