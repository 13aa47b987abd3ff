#!/usr/bin/env python3
"""The byte-level BPE of scripts/bpe.py and its path through prepare_text.py, the trainer,
generate.py and --export, without network or packages (transformers' own loading of the
tokenizer.json is checked in test_hf_parity.py, where transformers is installed).

  - every byte sequence round-trips: all 1- and 2-byte sequences, random bytes (most of them
    not UTF-8), every byte repeated, text with multi-byte characters;
  - the merges are learned as defined: a text whose pair counts are worked out here by hand;
  - the same text gives the same tokenizer and shards on every run (and under other hash seeds);
  - the vocabulary fits the model: ids below --vocab-size, a model of that V trains on them and
    one smaller is refused; refused --vocab-size values;
  - tokenizer.bin holds each token's bytes, the trainer's samples decode with it, generate.py
    encodes a prompt with tokenizer.json and decodes what generate_cpu continues, --export and
    export_weights_cpu carry the tokenizer files, re-preparing with bytes removes them.
Prints ok/FAIL per check and "N passed, M failed".
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bpe  # noqa: E402

PREP = os.path.join(ROOT, "scripts", "prepare_text.py")
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name, flush=True)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, str(detail)[-600:]), flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=ROOT, **kw)
    return r.returncode, r.stdout + r.stderr


def shard_ids(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[8:12], "little")
    body = data[1024:]
    return [int.from_bytes(body[2 * i:2 * i + 2], "little") for i in range(n)]


def decode_table(path):
    data = open(path, "rb").read()
    vocab, eot = int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")
    table, at = [], 1024
    for _ in range(vocab):
        n = data[at]
        table.append(data[at + 1:at + 1 + n])
        at += 1 + n
    return table, eot, at == len(data)


def main():
    tmp = tempfile.mkdtemp()
    text = b"".join(open(os.path.join(ROOT, p), "rb").read() for p in ("README.md", "docs/guide.md"))
    tok = bpe.train(text, 1024)

    # ---- round trips ------------------------------------------------------------------------
    bad = [bytes([a]) for a in range(256) if tok.decode(tok.encode(bytes([a]))) != bytes([a])]
    bad += [bytes([a, b]) for a in range(256) for b in range(256) if tok.decode(tok.encode(bytes([a, b]))) != bytes([a, b])]
    check("every 1- and 2-byte sequence round-trips (65792 of them)", not bad, bad[:5])
    rng = random.Random(1)
    samples = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(300)]
    samples += [bytes([b]) * 300 for b in range(256)]
    samples += ["héllo wörld — 日本語\n\t\t x  \u00a0y 12345 a1b2 ".encode() * 3, text]
    bad = [s for s in samples if tok.decode(tok.encode(s)) != s]
    check("random bytes (mostly not UTF-8), every byte repeated 300 times, and the training text round-trip", not bad,
          bad[:2])
    ids = tok.encode(text)
    check("the training text compresses (%.2f bytes per token at 1024 ids)" % (len(text) / len(ids)),
          len(text) / len(ids) > 2.0, len(ids))
    check("the end-of-text token is the last id and never comes out of encode",
          tok.eot == 1023 and tok.vocab_size == 1024 and tok.eot not in ids, (tok.eot, tok.vocab_size))

    # ---- merges as defined --------------------------------------------------------------------
    # "ab ab ab cd abd": pieces "ab", " ab" twice, " cd", " abd". Pair counts: (a, b) 4, (' ', a)
    # 3, (' ', c) 1, (c, d) 1, (b, d) 1: the first merge is a + b (id 256). Then (' ', ab) 3 (id
    # 257); then (' ', c), (c, d) and (' ab', d) once each: the tie goes to the smaller ids,
    # (32, 99) before (99, 100) and (257, 100).
    small = bpe.train(b"ab ab ab cd abd", 256 + 3 + 1)
    want = [(97, 98, 256), (32, 256, 257), (32, 99, 258)]
    check("the merges of a text worked out by hand: a+b, ' '+ab, then the tie to the smaller ids ' '+c",
          small.merges == want, small.merges)
    check("... and encoding applies them by rank", small.encode(b" abd ab cd") == [257, 100, 257, 258, 100],
          small.encode(b" abd ab cd"))
    # Encoding against the definition: every merge in the order learned, applied to the whole
    # piece (each occurrence, left to right), one after the other.
    def by_definition(piece):
        ids = list(piece)
        for a, b, c in tok.merges:
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    out.append(c)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids
    some = bpe.pieces(text)[:3000]
    bad = [p for p in some if tok.encode(p) != by_definition(p)]
    check("encode gives the merges' definition on 3000 pieces of the text (by rank = in the order learned)", not bad, bad[:3])
    # A merge whose bytes are a token already (reached through another split) maps to it.
    dup = bpe.train(b"xab xab xab ab ab abx abx", 400)
    names = [t for t in dup.tokens]
    check("no two ids share bytes (a merge reaching existing bytes maps to that token)", len(set(names)) == len(names))

    # ---- deterministic ----------------------------------------------------------------------
    src = os.path.join(tmp, "text.txt")
    open(src, "wb").write(text)
    outs = []
    for seed in ("0", "1"):
        out = os.path.join(tmp, "det" + seed)
        rc, log = run([sys.executable, PREP, src, out, "--tokenizer", "bpe", "--vocab-size", "700"],
                      env=dict(os.environ, PYTHONHASHSEED=seed))
        check(f"prepare_text.py --tokenizer bpe runs (PYTHONHASHSEED={seed})", rc == 0, log)
        outs.append(out)
    same = all(open(os.path.join(outs[0], f), "rb").read() == open(os.path.join(outs[1], f), "rb").read()
               for f in ("tokenizer.json", "tokenizer.bin", "train_000.bin", "val_000.bin"))
    check("two runs (other hash seeds) write the same tokenizer.json, tokenizer.bin and shards, byte for byte", same)
    loaded = bpe.load(os.path.join(outs[0], "tokenizer.json"))
    t700 = bpe.train(text, 700)
    check("tokenizer.json reads back as the tokenizer trained in this process", loaded.merges == t700.merges and
          loaded.tokens == t700.tokens)
    shards = shard_ids(os.path.join(outs[0], "train_000.bin")) + shard_ids(os.path.join(outs[0], "val_000.bin"))
    check("the shards hold the end-of-text id, then encode's ids of the whole text",
          shards == [699] + t700.encode(text), (shards[:5], t700.encode(text)[:5]))
    table, eot, whole = decode_table(os.path.join(outs[0], "tokenizer.bin"))
    check("tokenizer.bin: each token's bytes, the end-of-text id 699 with no bytes, nothing after",
          whole and eot == 699 and table[:699] == t700.tokens[:699] and table[699] == b"", (eot, whole))

    # ---- the vocabulary fits the model --------------------------------------------------------
    d = outs[0]
    check("every id is below --vocab-size", max(shards) < 700, max(shards))
    args = ["./train_gpt_cpu", "--data", d + "/train_*.bin", "--val-data", d + "/val_*.bin", "--batch", "4", "--steps", "20",
            "--lr", "3e-3", "--sample-every", "20", "--sample-tokens", "30"]
    rc, log = run(args + ["--model", "gpt:L=1,C=32,H=2,V=700,T=32"])
    sample = [l for l in log.splitlines() if l.startswith("sample: ")]
    check("a model with V = --vocab-size trains on the shards", rc == 0 and "step    20/20" in log, log[-300:])
    check("its samples are decoded text through tokenizer.bin (not ids)",
          sample and not re.fullmatch(r"sample: (\d+ )+", sample[0]), sample)
    rc, log = run(args + ["--model", "gpt:L=1,C=32,H=2,V=600,T=32"])
    check("a model with fewer ids than the tokenizer is refused, naming the shard", rc != 0 and "train_000.bin" in log and
          "vocab" in log, log[-300:])
    for v, why in (("256", "at least 257"), ("70000", "at most 65536")):
        rc, log = run([sys.executable, PREP, src, os.path.join(tmp, "v"), "--tokenizer", "bpe", "--vocab-size", v])
        check(f"--vocab-size {v} is refused ({why})", rc != 0 and why in log, log[-200:])
    rc, log = run([sys.executable, PREP, src, os.path.join(tmp, "v"), "--vocab-size", "500"])
    check("--vocab-size without --tokenizer bpe is refused", rc != 0 and "is for --tokenizer bpe" in log, log[-200:])

    # ---- generate.py, --export, export_weights_cpu --------------------------------------------
    ck, hf, hf2 = (os.path.join(tmp, n) for n in ("ck", "hf", "hf2"))
    rc, log = run(args[:-4] + ["--model", "gpt:L=1,C=32,H=2,V=700,T=32", "--save", ck, "--export", hf])
    files = sorted(os.listdir(hf)) if os.path.isdir(hf) else []
    check("--export carries the tokenizer beside the training data", rc == 0 and files == [
        "config.json", "model.safetensors", "tokenizer.bin", "tokenizer.json", "tokenizer_config.json"], (files, log[-300:]))
    rc, log = run([sys.executable, "scripts/generate.py", hf, "The tokenizer", "--", "--tokens", "12", "--temperature", "0"])
    lines = dict(l.split(": ", 1) for l in log.splitlines() if ": " in l)
    out_ids = [int(x) for x in lines.get("ids", "").split()]
    check("generate.py encodes the prompt with the export's tokenizer.json and decodes the continuation",
          rc == 0 and len(out_ids) == 12 and all(i < 700 for i in out_ids) and
          lines.get("continuation") == t700.decode(out_ids).decode("utf-8", "replace"), log[-400:])
    rc, log = run(["./generate_cpu", hf, "--prompt-ids", " ".join(map(str, t700.encode(b"The tokenizer"))), "--tokens", "12",
                   "--temperature", "0"])
    check("generate_cpu on the export decodes with its tokenizer.bin, as generate.py does",
          rc == 0 and ("text: " + lines.get("continuation", "?")) in log, log[-300:])
    rc, log = run([sys.executable, "scripts/generate.py", ck, "The", "--bpe", os.path.join(d, "tokenizer.json"), "--",
                   "--tokens", "4"])
    check("generate.py on a checkpoint with --bpe FILE", rc == 0 and "continuation: " in log, log[-300:])
    rc, log = run([sys.executable, "scripts/generate.py", ck, "The"])
    check("generate.py without a tokenizer to take says which to give", rc != 0 and "give --tokenizer" in log, log[-300:])
    rc, log = run(["./export_weights_cpu", ck, hf2])
    check("export_weights_cpu of the checkpoint carries the tokenizer of the data its meta.json records",
          rc == 0 and os.path.isfile(os.path.join(hf2, "tokenizer.json")) and
          open(os.path.join(hf2, "tokenizer.json"), "rb").read() == open(os.path.join(d, "tokenizer.json"), "rb").read(),
          log[-300:])
    rc, log = run(args[:-4] + ["--model", "gpt:L=1,C=32,H=2,V=700,T=32", "--steps", "1", "--export", hf])
    check("an earlier export with its tokenizer files is replaced by the next", rc == 0, log[-300:])

    rc, log = run([sys.executable, PREP, src, d, "--tokenizer", "byte"])
    left = [f for f in ("tokenizer.bin", "tokenizer.json", "tokenizer_config.json") if os.path.exists(os.path.join(d, f))]
    check("re-preparing as bytes removes the BPE's files, which would decode the new shards wrongly",
          rc == 0 and not left and "removed stale" in log, (left, log[-300:]))

    print(f"{passed} passed, {failed} failed")
    subprocess.run(["rm", "-rf", tmp])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
