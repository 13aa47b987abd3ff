#!/usr/bin/env python3
"""zipf_tokens.py: an llm.c token shard of synthetic text-like token ids, for benchmarks.

    python3 scripts/zipf_tokens.py --vocab 50257 [--tokens 2097152] [--seed 1337] OUT.bin

Token i of the vocabulary is drawn with probability proportional to 1 / (i + 1), Zipf's law,
which the token frequencies of natural text roughly follow. Benchmarks need such a spread: the
embedding gradient's cost depends on how many distinct ids a batch holds and how often each
repeats (a batch of 13 distinct ids, as the built-in addition data has, is a pathological case
for every trainer's embedding backward), and FineWeb cannot be downloaded everywhere a
benchmark runs. Standard library only; the same arguments give the same bytes.
Format: llm.c's (data/shard.c): 256 int32 header (magic 20240520, version 1, token count),
then the tokens as uint16.
"""
import argparse
import array
import itertools
import os
import random
import struct
import sys

SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def main(argv):
    p = argparse.ArgumentParser(description="write an llm.c token shard of Zipf-distributed ids")
    p.add_argument("--vocab", type=int, required=True, help="ids are drawn from [0, VOCAB), at most 65536")
    p.add_argument("--tokens", type=int, default=1 << 21, help="how many tokens (default 2097152)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("out")
    a = p.parse_args(argv)
    if not 1 <= a.vocab <= 65536:
        p.error("--vocab must be in [1, 65536] (ids are stored as uint16), got %d" % a.vocab)
    if not 2 <= a.tokens < 1 << 31:
        p.error("--tokens must be in [2, 2^31), got %d" % a.tokens)
    rng = random.Random(a.seed)
    cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(a.vocab)))
    tokens = array.array("H", rng.choices(range(a.vocab), cum_weights=cum, k=a.tokens))
    if sys.byteorder != "little":
        tokens.byteswap()
    header = [SHARD_MAGIC, SHARD_VERSION, a.tokens] + [0] * 253
    tmp = a.out + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<256i", *header))
            f.write(tokens.tobytes())
        os.replace(tmp, a.out)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        print("error: cannot write %s: %s" % (a.out, e), file=sys.stderr)
        return 1
    print("wrote %s: %d Zipf tokens over %d ids (seed %d)" % (a.out, a.tokens, a.vocab, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
