#!/usr/bin/env python3
"""Text in, text out around generate_cpu: encodes the prompt with the model's tokenizer, runs
the generator on the ids, decodes the continuation with the same tokenizer.

    python3 scripts/generate.py SRC "PROMPT" [--tokenizer bpe|gpt2|sentencepiece|llama3] [--bpe FILE]
                                [--sp-model FILE] [--tokenizer-file FILE] [--binary ./generate_cpu]
                                [-- generate_cpu options]

SRC: what generate_cpu takes (an fsdp.c checkpoint, a Hugging Face directory, an llm.c .bin).
bpe: the byte-level BPE scripts/prepare_text.py trained (its tokenizer.json: --bpe FILE, or
SRC/tokenizer.json, which --export writes; the default tokenizer when there is one);
gpt2: tiktoken's "gpt2" encoding; sentencepiece: the model file of --sp-model (T5's
spiece.model), with the end-of-sequence id appended to the prompt as T5 expects its inputs;
llama3: Llama 3's tokenizer.json or tokenizer.model given by --tokenizer-file (or SRC/tokenizer.json,
the default for a Llama directory), the prompt after <|begin_of_text|> (scripts/llama3_tokenizer.py).
Options after "--" go to generate_cpu (--tokens, --temperature, --top-k, --seed). Prints the
prompt and the continuation as text, and the ids.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def die(msg):
    print(f"generate.py: {msg}", file=sys.stderr)
    sys.exit(1)


def model_type(src):
    """config.json's model_type of a Hugging Face directory SRC, or None."""
    try:
        with open(os.path.join(src, "config.json")) as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def tokenizer(kind, sp_model, bpe_file, tokenizer_file=None):
    """(encode, decode) for the tokenizer kind."""
    if kind == "bpe":
        import bpe
        try:
            tok = bpe.load(bpe_file)
        except (OSError, ValueError, KeyError) as e:
            die(f"--tokenizer bpe: cannot read {bpe_file}: {e}")
        return (lambda text: tok.encode(text.encode("utf-8"))), \
               (lambda ids: tok.decode(ids).decode("utf-8", errors="replace"))
    if kind == "llama3":
        from llama3_tokenizer import Llama3Tokenizer, TokenizerError
        try:
            tok = Llama3Tokenizer(tokenizer_file)
        except TokenizerError as e:
            die(str(e))
        return tok.encode, tok.decode
    if kind == "gpt2":
        try:
            import tiktoken
            enc = tiktoken.get_encoding("gpt2")
        except Exception as e:
            die(f"--tokenizer gpt2 needs tiktoken with its gpt2 vocabulary ({e})")
        return enc.encode_ordinary, enc.decode
    try:
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=sp_model)
    except Exception as e:
        die(f"--tokenizer sentencepiece needs the sentencepiece package and --sp-model FILE ({e})")
    return (lambda text: sp.encode(text) + [sp.eos_id()]), (lambda ids: sp.decode([i for i in ids if i != sp.eos_id()]))


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description="Text generation with generate_cpu and a Python tokenizer.")
    ap.add_argument("src")
    ap.add_argument("prompt")
    ap.add_argument("--tokenizer", choices=["bpe", "gpt2", "sentencepiece", "llama3"])
    ap.add_argument("--bpe", help="tokenizer.json of --tokenizer bpe (default: SRC/tokenizer.json)")
    ap.add_argument("--sp-model")
    ap.add_argument("--tokenizer-file")
    ap.add_argument("--binary", default="./generate_cpu")
    args = ap.parse_args(argv)
    beside = os.path.join(args.src, "tokenizer.json")
    if not args.tokenizer:
        if not (args.bpe or os.path.isfile(beside)):
            die(f"give --tokenizer bpe|gpt2|sentencepiece|llama3 (there is no {beside} to take)")
        # A Llama directory's tokenizer.json is Llama 3's tokenizer; elsewhere it is our BPE's.
        args.tokenizer = "llama3" if not args.bpe and model_type(args.src) == "llama" else "bpe"
        if args.tokenizer == "llama3" and not args.tokenizer_file:
            args.tokenizer_file = beside
    if args.tokenizer == "bpe" and not args.bpe:
        args.bpe = beside
    if args.tokenizer == "sentencepiece" and not args.sp_model:
        die("--tokenizer sentencepiece needs --sp-model FILE")
    if args.tokenizer == "llama3" and not args.tokenizer_file:
        die("--tokenizer llama3 needs --tokenizer-file FILE (tokenizer.json or tokenizer.model)")
    encode, decode = tokenizer(args.tokenizer, args.sp_model, args.bpe, args.tokenizer_file)
    ids = encode(args.prompt)
    r = subprocess.run([args.binary, args.src, "--prompt-ids", " ".join(map(str, ids))] + extra,
                       capture_output=True, text=True, errors="replace")  # its text: line may cut a character
    if r.returncode:
        die(f"{args.binary} failed:\n{r.stderr.strip()}")
    line = [l for l in r.stdout.splitlines() if l.startswith("ids:")]
    if not line:
        die(f"no 'ids:' line in the output of {args.binary}:\n{r.stdout}")
    out = [int(x) for x in line[0].split()[1:]]
    print(f"prompt: {args.prompt}")
    print(f"continuation: {decode(out)}")
    print(f"ids: {' '.join(map(str, out))}")


if __name__ == "__main__":
    main()
