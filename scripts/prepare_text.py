#!/usr/bin/env python3
"""Turns a text file into llm.c token shards for fsdp.c.

    python3 scripts/prepare_text.py INPUT.txt OUTDIR [--tokenizer byte|bpe|gpt2|sentencepiece|llama3]
                                    [--vocab-size N] [--sp-model FILE] [--tokenizer-file FILE]
                                    [--val-fraction 0.1] [--shard-tokens N]

byte: a token is the byte value (vocab 256), works on any file.
bpe: a byte-level BPE of --vocab-size ids (default 4096) trained here on INPUT itself
      (scripts/bpe.py: plain Python, deterministic, no network); the text starts with its
      end-of-text token, the last id. Saved beside the shards as OUTDIR/tokenizer.json (and
      tokenizer_config.json), which transformers' tokenizers load and scripts/generate.py
      encodes prompts with.
gpt2: tiktoken's "gpt2" encoding (vocab 50257); needs tiktoken and its vocabulary files.
sentencepiece: the SentencePiece model given by --sp-model (e.g. T5's spiece.model, vocab
      32000; T5 models add 100 sentinel ids above it); needs the sentencepiece package.
llama3: Llama 3's tokenizer from --tokenizer-file, its tokenizer.json or Meta's tokenizer.model
      (vocab 128256; scripts/llama3_tokenizer.py); the text starts with <|begin_of_text|>;
      needs tiktoken, and nothing is downloaded. Its shards are llm.c's Llama 3 format
      (magic 20240801, version 7, uint32 tokens). A tokenizer.json given is copied beside
      them, so an --export of the trained model carries it.

The last --val-fraction of the tokens becomes the validation split (so the training split
is one contiguous stretch from the start of the text). Writes OUTDIR/train_000.bin ... and
OUTDIR/val_000.bin ... in the llm.c format (header of 256 little-endian int32: magic
20240520, version 1, token count; then uint16 tokens; llama3: 20240801, 7 and uint32 tokens),
each atomically (temporary name, then rename), and OUTDIR/tokenizer.txt naming the tokenizer
and its vocab size. For bpe, gpt2, sentencepiece and llama3 also OUTDIR/tokenizer.bin, the
decode table in llm.c's tokenizer format (256 uint32 header: magic 20240328, version 2,
vocab size, end-of-text id; then per token a uint8 length and its bytes), which the trainer's
--sample-every and generate_cpu decode with.
Plain python3 only (struct/array), no numpy needed.
"""
import argparse
import os
import re
import shutil
import sys
from array import array

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
MAGIC32, VERSION32 = 20240801, 7  # llm.c's Llama 3 shards: uint32 tokens
MAX_SHARD_TOKENS = 2**31 - 1  # the header stores the count as int32


def die(msg):
    print(f"prepare_text: {msg}", file=sys.stderr)
    sys.exit(1)


def tokenize(data, tokenizer, sp_model=None, vocab_size=None, outdir=None, tokenizer_file=None):
    """Returns (tokens as array('H'), or array('I') for llama3, vocab size, decode table or None,
    end-of-text id)."""
    if tokenizer == "byte":
        # iter() matters: array('H', bytes) would reinterpret the raw bytes as uint16 pairs.
        return array("H", iter(data)), 256, None, 0
    if tokenizer == "bpe":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bpe
        if not 257 <= vocab_size <= 65536:
            die(f"--vocab-size {vocab_size}: a byte-level BPE has 256 byte ids, its merges and an end-of-text id, "
                "at least 257 and at most 65536 (the uint16 shards' range)")
        tok = bpe.train(data, vocab_size, progress=lambda m, v: print(f"bpe: {m} merges, {v} tokens", flush=True))
        if tok.vocab_size < vocab_size:
            print(f"bpe: the text has no more pairs to merge: {tok.vocab_size} ids, not {vocab_size}")
        os.makedirs(outdir, exist_ok=True)
        path = os.path.join(outdir, "tokenizer.json")
        tok.save(path)
        print(f"wrote {path}: byte-level BPE, {len(tok.merges)} merges, {tok.vocab_size} ids "
              f"(end-of-text {tok.eot})")
        return array("H", [tok.eot] + tok.encode(data)), tok.vocab_size, tok.tokens[:-1] + [b""], tok.eot
    text = data.decode("utf-8", errors="replace")
    if tokenizer == "llama3":
        if not tokenizer_file:
            die("--tokenizer llama3 needs --tokenizer-file FILE (its tokenizer.json or Meta's tokenizer.model)")
        from llama3_tokenizer import Llama3Tokenizer, TokenizerError
        try:
            tok = Llama3Tokenizer(tokenizer_file)
        except TokenizerError as e:
            die(str(e))
        if tokenizer_file.endswith(".json"):  # beside the shards, so --export carries it for transformers
            os.makedirs(outdir, exist_ok=True)
            dst = os.path.join(outdir, "tokenizer.json")
            if not (os.path.exists(dst) and os.path.samefile(dst, tokenizer_file)):
                tmp = f"{dst}.tmp.{os.getpid()}"
                shutil.copyfile(tokenizer_file, tmp)
                os.replace(tmp, dst)
                print(f"wrote {dst}: a copy of {tokenizer_file}")
        return array("I", tok.encode(text)), tok.vocab, tok.pieces, tok.eot
    if tokenizer == "sentencepiece":
        if not sp_model:
            die("--tokenizer sentencepiece needs --sp-model FILE (e.g. T5's spiece.model)")
        try:
            import sentencepiece
        except ImportError:
            die("--tokenizer sentencepiece needs the sentencepiece package (pip install sentencepiece)")
        try:
            sp = sentencepiece.SentencePieceProcessor(model_file=sp_model)
        except Exception as e:
            die(f"cannot load the SentencePiece model {sp_model}: {e}")
        ids = sp.encode(text)
        table = []
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if sp.is_byte(i):  # <0xAB>: one raw byte
                table.append(bytes([int(piece[3:5], 16)]))
            elif sp.is_control(i) or sp.is_unknown(i):
                table.append(b"")
            else:
                table.append(piece.replace("\u2581", " ").encode("utf-8"))
        vocab, eot = sp.get_piece_size(), max(sp.eos_id(), 0)
    else:
        try:
            import tiktoken
        except ImportError:
            die("--tokenizer gpt2 needs tiktoken (pip install tiktoken); or use --tokenizer byte")
        try:
            enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # vocabulary files missing and not downloadable, etc.
            die(f"tiktoken could not load the gpt2 encoding ({e}); install tiktoken with its "
                "vocabulary files available, or use --tokenizer byte")
        ids = enc.encode_ordinary(text)  # plain text: special tokens are not interpreted
        table = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
        vocab, eot = enc.n_vocab, enc.eot_token
    bad = [t for t in ids if t >= 65536]
    if bad:
        die(f"token id {bad[0]} >= 65536 does not fit the uint16 shard format")
    return array("H", ids), vocab, table, eot


def write_decode_table(path, table, eot):
    """tokenizer.bin: llm.c's tokenizer format, version 2 (pieces longer than 255 bytes are cut)."""
    header = array("I", [0] * HEADER_INTS)
    header[0], header[1], header[2], header[3] = 20240328, 2, len(table), eot
    if sys.byteorder == "big":
        header.byteswap()
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        for piece in table:
            piece = piece[:255]
            f.write(bytes([len(piece)]) + piece)
    os.replace(tmp, path)


def write_shard(path, tokens):
    """Writes one shard atomically: GPT-2's format for array('H') tokens, Llama 3's for array('I')."""
    if len(tokens) > MAX_SHARD_TOKENS:
        die(f"{path}: {len(tokens)} tokens do not fit one shard; use a smaller --shard-tokens")
    wide = tokens.typecode == "I"
    header = array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC32 if wide else MAGIC, VERSION32 if wide else VERSION, len(tokens)
    body = array(tokens.typecode, tokens)
    if sys.byteorder == "big":  # the format is little-endian
        header.byteswap()
        body.byteswap()
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(body.tobytes())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_split(outdir, name, tokens, shard_tokens):
    """Writes NAME_000.bin, NAME_001.bin, ...; removes stale higher-numbered shards of an
    earlier run, which the trainer's glob would otherwise pick up."""
    n = max(1, -(-len(tokens) // shard_tokens))
    for i in range(n):
        part = tokens[i * shard_tokens:(i + 1) * shard_tokens]
        path = os.path.join(outdir, f"{name}_{i:03d}.bin")
        write_shard(path, part)
        print(f"wrote {path}: {len(part)} tokens")
    remove_stale(outdir, name, n)


def remove_stale(outdir, name, n):
    """Removes NAME_<i>.bin for i >= n left by an earlier run."""
    pat = re.compile(rf"^{name}_(\d+)\.bin$")
    for fn in sorted(os.listdir(outdir)):
        m = pat.match(fn)
        if m and int(m.group(1)) >= n:
            os.unlink(os.path.join(outdir, fn))
            print(f"removed stale {os.path.join(outdir, fn)}")


def main():
    ap = argparse.ArgumentParser(description="Turn a text file into llm.c token shards.")
    ap.add_argument("input")
    ap.add_argument("outdir")
    ap.add_argument("--tokenizer", choices=["byte", "bpe", "gpt2", "sentencepiece", "llama3"], default="byte")
    ap.add_argument("--vocab-size", type=int, default=4096, help="ids of --tokenizer bpe (default 4096)")
    ap.add_argument("--sp-model", help="SentencePiece model file for --tokenizer sentencepiece")
    ap.add_argument("--tokenizer-file", help="tokenizer.json or tokenizer.model for --tokenizer llama3")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    args = ap.parse_args()
    if not 0.0 <= args.val_fraction < 1.0:
        die("--val-fraction must be in [0, 1)")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        die(f"--shard-tokens must be in [1, {MAX_SHARD_TOKENS}]")

    try:
        with open(args.input, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"cannot read {args.input}: {e}")
    if args.tokenizer != "bpe" and "--vocab-size" in sys.argv[1:]:
        die("--vocab-size is for --tokenizer bpe (the other tokenizers have their own vocabulary)")
    tokens, vocab, table, eot = tokenize(data, args.tokenizer, args.sp_model, args.vocab_size, args.outdir,
                                         args.tokenizer_file)
    if len(tokens) < 2:
        die(f"{args.input} gives {len(tokens)} tokens, too few to train on")

    nval = int(len(tokens) * args.val_fraction)
    if args.val_fraction > 0 and nval < 2:
        nval = 2  # a validation split needs at least one (input, target) pair
    ntrain = len(tokens) - nval
    if ntrain < 2:
        die(f"only {ntrain} training tokens left; lower --val-fraction")

    os.makedirs(args.outdir, exist_ok=True)
    write_split(args.outdir, "train", tokens[:ntrain], args.shard_tokens)
    if nval:
        write_split(args.outdir, "val", tokens[ntrain:], args.shard_tokens)
    else:
        remove_stale(args.outdir, "val", 0)
        print("no validation split (--val-fraction 0)")

    info = os.path.join(args.outdir, "tokenizer.txt")
    tmp = f"{info}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"tokenizer: {args.tokenizer}\nvocab_size: {vocab}\n")
    os.replace(tmp, info)
    if table is not None:
        write_decode_table(os.path.join(args.outdir, "tokenizer.bin"), table, eot)
        print(f"wrote {os.path.join(args.outdir, 'tokenizer.bin')}: decode table of {len(table)} tokens")
    # An earlier run's tokenizer files would decode these shards wrongly (the trainer's samples,
    # generate_cpu and --export read what is beside the shards).
    for name, ours in (("tokenizer.bin", table is not None), ("tokenizer.json", args.tokenizer == "bpe" or
                       (args.tokenizer == "llama3" and args.tokenizer_file.endswith(".json"))),
                       ("tokenizer_config.json", args.tokenizer == "bpe")):
        path = os.path.join(args.outdir, name)
        if args.tokenizer_file and os.path.exists(path) and os.path.samefile(path, args.tokenizer_file):
            continue  # the Llama 3 tokenizer the user gave us: theirs, never removed
        if not ours and os.path.exists(path):
            os.unlink(path)
            print(f"removed stale {path}")
    print(f"{args.input}: {len(tokens)} tokens ({ntrain} train, {nval} val), "
          f"tokenizer {args.tokenizer}, vocab {vocab}; use --model ...,V={vocab} or larger")


if __name__ == "__main__":
    main()
