#!/usr/bin/env python3
"""Fuzzing the trainer's inputs: mutated token shards and checkpoints, fed to a trainer built
with AddressSanitizer and UBSan (build/asan/train_gpt_cpu).

Every case must end with no crash (a sanitizer report or a signal), no hang (a time limit) and
no corrupt input accepted:
  - a shard is accepted exactly when an independent validator here says it is valid (right
    magic and version, a count that matches the size, every id below the vocabulary, and
    enough tokens for one micro-batch);
  - a checkpoint is either refused, or it loads exactly what the intact one loads (the same
    params_digest after one more step, which also depends on the AdamW state).

Usage: fuzz_inputs.py [--cases N] [--seed S]. Prints one line per kind of input and ends with
"N passed, M failed"; each failing case is printed with its mutation and the trainer's output.
"""
import argparse
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAN_BIN = os.path.join(ROOT, "build", "asan", "train_gpt_cpu")
MODEL = ["--model", "gpt:L=1,C=32,H=2,V=256,T=16", "--batch", "2", "--seq", "16"]
VOCAB, WINDOW = 256, 2 * 16 + 1
SAN_EXIT = 86  # the sanitizers' exit code, so a report is never mistaken for a refusal
ENV = dict(os.environ, OMP_NUM_THREADS="1",
           ASAN_OPTIONS=f"detect_leaks=0:exitcode={SAN_EXIT}:abort_on_error=0",
           UBSAN_OPTIONS=f"halt_on_error=1:exitcode={SAN_EXIT}:print_stacktrace=1")
TIME_LIMIT = 60


def run(args):
    try:
        p = subprocess.run([SAN_BIN] + args, capture_output=True, text=True, env=ENV, timeout=TIME_LIMIT)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        return "hang", out


def digest(out):
    m = re.search(r"params_digest ([0-9a-f]+)", out)
    return m.group(1) if m else None


# ---- shards -----------------------------------------------------------------------------------

def shard_bytes(tokens):
    header = struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253))
    return header + struct.pack(f"<{len(tokens)}H", *tokens)


def shard_valid(data):
    """The reference validator: what the trainer must accept, and nothing else."""
    if len(data) < 1024:
        return False
    magic, version, count = struct.unpack_from("<3i", data)
    if magic != 20240520 or version != 1 or count < 0 or len(data) != 1024 + 2 * count:
        return False
    ids = struct.unpack_from(f"<{count}H", data, 1024)
    return all(i < VOCAB for i in ids) and count >= WINDOW


def mutate_shard(rng, data):
    data = bytearray(data)
    kind = rng.choice(["flip", "truncate", "extend", "count", "magic", "version", "token", "tokens"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 3, 64])))
    elif kind == "count":
        struct.pack_into("<i", data, 8, rng.choice([-1, 0, 1, 32, 33, 1 << 30, -(1 << 31), (len(data) - 1024) // 2 + rng.choice([-1, 1])]))
    elif kind == "magic":
        struct.pack_into("<i", data, 0, rng.choice([0, 20240326, 20240521, -20240520]))
    elif kind == "version":
        struct.pack_into("<i", data, 4, rng.choice([0, 2, -1, 1 << 30]))
    elif kind == "token":
        at = 1024 + 2 * rng.randrange((len(data) - 1024) // 2)
        struct.pack_into("<H", data, at, rng.choice([VOCAB, VOCAB + 1, 65535, rng.randrange(65536)]))
    else:  # a valid shard of another length (it must be accepted when long enough)
        n = rng.choice([0, 1, WINDOW - 1, WINDOW, 100])
        data = bytearray(shard_bytes([rng.randrange(VOCAB) for _ in range(n)]))
    return kind, bytes(data)


def fuzz_shards(rng, cases, tmp):
    base = shard_bytes([rng.randrange(VOCAB) for _ in range(300)])
    failures = []
    for i in range(cases):
        kind, data = mutate_shard(rng, base)
        path = os.path.join(tmp, f"shard_{i}.bin")
        with open(path, "wb") as f:
            f.write(data)
        rc, out = run(MODEL + ["--data", path, "--steps", "2"])
        valid = shard_valid(data)
        if rc == "hang" or rc not in (0, 1, 2):
            failures.append((f"shard {i} ({kind})", f"crash or hang (exit {rc})", out))
        elif valid and rc != 0:
            failures.append((f"shard {i} ({kind})", "a valid shard was refused", out))
        elif not valid and rc == 0:
            failures.append((f"shard {i} ({kind})", "a corrupt shard was accepted", out))
        elif not valid and "error:" not in out:
            failures.append((f"shard {i} ({kind})", "refused without an error message", out))
        os.remove(path)
    return failures


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
    failures = []
    for i in range(cases):
        ck = os.path.join(tmp, f"ck_{i}")
        shutil.copytree(good, ck)
        what = mutate_checkpoint(rng, ck)
        rc, out = run(resume + [ck])
        if rc == "hang" or rc not in (0, 1, 2):
            failures.append((f"checkpoint {i} ({what})", f"crash or hang (exit {rc})", out))
        elif rc == 0 and digest(out) != intact:
            failures.append((f"checkpoint {i} ({what})", "a corrupt checkpoint was accepted", out))
        elif rc != 0 and "error:" not in out:
            failures.append((f"checkpoint {i} ({what})", "refused without an error message", out))
        shutil.rmtree(ck)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=120, help="cases per kind of input")
    ap.add_argument("--seed", type=int, default=20261123)
    a = ap.parse_args()
    if not os.access(SAN_BIN, os.X_OK):
        print(f"FAIL {SAN_BIN} is missing (make build/asan/train_gpt_cpu)\n0 passed, 1 failed")
        return 1
    rng = random.Random(a.seed)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("token shards", fuzz_shards), ("checkpoints", fuzz_checkpoints)):
            start = time.time()
            failures = fn(rng, a.cases, tmp)
            for case, why, out in failures:
                print(f"FAIL {case}: {why}\n" + "\n".join("     " + l for l in out.strip().splitlines()[-6:]))
            ok = not failures
            print(f"{'ok  ' if ok else 'FAIL'} {a.cases} mutated {name}: no crash, no hang, no corrupt input accepted"
                  f" ({len(failures)} failing) ({time.time() - start:.1f} s)")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
