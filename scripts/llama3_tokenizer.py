"""llama3_tokenizer.py: Llama 3's tokenizer from the file the user has; nothing is fetched.

Llama 3 tokenizes with a byte-level BPE of tiktoken's kind: a table of byte strings, each with
its rank (the lower the rank, the earlier two parts merge), the ranks also being the token ids,
and 256 special tokens after them (<|begin_of_text|> first, <|end_of_text|> second: ids
128000 and 128001 of Llama 3's 128256). Two files hold it:
  - Meta's tokenizer.model (also original/tokenizer.model in the Hugging Face repositories):
    one "base64(bytes) rank" line per token; the specials are numbered after the ranks;
  - Hugging Face's tokenizer.json: the same table as BPE vocabulary strings in GPT-2's
    byte-to-character map, the specials in added_tokens, the split pattern in pre_tokenizer.
Either gives a tiktoken Encoding (tiktoken encodes; it needs no download for an Encoding built
from a table), with Llama 3's split pattern unless tokenizer.json names its own.

Used by scripts/prepare_text.py (--tokenizer llama3) and scripts/generate.py.
"""
import base64
import json
import os

# Meta's split pattern for Llama 3 (its tokenizer.py), a word or number or run of punctuation
# at a time, each then encoded on its own.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
NUM_SPECIAL = 256
BOS, EOT = "<|begin_of_text|>", "<|end_of_text|>"


class TokenizerError(Exception):
    pass


def byte_chars():
    """GPT-2's map from bytes to the printable characters a byte-level BPE's strings are made of."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def read_tiktoken_model(path):
    """{bytes: rank} of a tokenizer.model of "base64 rank" lines."""
    ranks = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise TokenizerError(f"{path}: line {n} is not 'base64 rank'")
            try:
                token = base64.b64decode(parts[0], validate=True)
            except ValueError:
                raise TokenizerError(f"{path}: line {n}: the token is not base64")
            ranks[token] = int(parts[1])
    return ranks


def read_tokenizer_json(path):
    """({bytes: rank}, {special: id}, split pattern or None) of a Hugging Face tokenizer.json."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    model = doc.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise TokenizerError(f"{path}: not a byte-level BPE tokenizer.json (model.type {model.get('type')!r})")
    inverse = {c: b for b, c in byte_chars().items()}
    specials = {t["content"]: t["id"] for t in doc.get("added_tokens", []) if t.get("special")}
    ranks = {}
    for text, rank in model["vocab"].items():
        if text in specials:
            continue
        try:
            ranks[bytes(inverse[c] for c in text)] = rank
        except KeyError:
            raise TokenizerError(f"{path}: vocabulary entry {text!r} is not in the byte-level alphabet")
    pattern = None
    pre = doc.get("pre_tokenizer") or {}
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Split" and isinstance(p.get("pattern"), dict) and "Regex" in p["pattern"]:
            pattern = p["pattern"]["Regex"]
    return ranks, specials, pattern


class Llama3Tokenizer:
    """encode(text) (with <|begin_of_text|> first), decode(ids), the decode table and its ids."""

    def __init__(self, path):
        try:
            import tiktoken
        except ImportError:
            raise TokenizerError("the Llama 3 tokenizer needs tiktoken (pip install tiktoken)")
        try:
            if path.endswith(".json"):
                ranks, specials, pattern = read_tokenizer_json(path)
            else:
                ranks, pattern = read_tiktoken_model(path), None
                names = [BOS, EOT] + [f"<|reserved_special_token_{i}|>" for i in range(NUM_SPECIAL - 2)]
                specials = {name: len(ranks) + i for i, name in enumerate(names)}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"cannot read the tokenizer {path}: {e}")
        if sorted(ranks.values()) != list(range(len(ranks))):
            raise TokenizerError(f"{path}: the ranks are not 0..{len(ranks) - 1}, each once")
        if BOS not in specials or EOT not in specials:
            raise TokenizerError(f"{path}: no {BOS} or {EOT} among its special tokens: not a Llama 3 tokenizer")
        self.vocab = max(list(specials.values()) + [len(ranks) - 1]) + 1
        self.bos, self.eot = specials[BOS], specials[EOT]
        self.enc = tiktoken.Encoding(name=os.path.basename(path), pat_str=pattern or LLAMA3_PATTERN,
                                     mergeable_ranks=ranks, special_tokens=specials)
        # The decode table: each token's bytes; the specials (and unused ids) decode to nothing.
        self.pieces = [b""] * self.vocab
        for token, rank in ranks.items():
            self.pieces[rank] = token
        self.special_ids = set(specials.values())

    def encode(self, text):
        return [self.bos] + self.enc.encode_ordinary(text)

    def decode(self, ids):
        return b"".join(self.pieces[i] for i in ids if 0 <= i < self.vocab).decode("utf-8", errors="replace")
