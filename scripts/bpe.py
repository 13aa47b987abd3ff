#!/usr/bin/env python3
"""A byte-level BPE tokenizer trained on the user's own text: no network, no packages.

    import bpe
    tok = bpe.train(data, vocab_size=4096)      # data: bytes; deterministic
    ids = tok.encode(b"any bytes at all")       # every byte sequence round-trips:
    assert tok.decode(ids) == b"any bytes at all"
    tok.save("out/tokenizer.json")              # Hugging Face tokenizers' format
    tok = bpe.load("out/tokenizer.json")

The vocabulary: ids 0-255 are the 256 bytes (so nothing is ever unknown), then one id per merge
learned, in the order learned, and last the end-of-text token "<|endoftext|>".

Training (Sennrich et al. 2016, on bytes as GPT-2 does): the text is split into pieces by
PIECE_PATTERN (a word with its leading space, a number, a run of other symbols, whitespace), so
no token crosses a word boundary; then, over the pieces weighted by how often each occurs, the
most frequent adjacent pair of tokens becomes a new token, until the vocabulary has vocab_size
ids. Ties go to the pair of smaller ids, so the same text gives the same merges on every run.
A merge whose bytes are already a token (the same bytes reached through another split) maps to
that token, as Hugging Face's trainer does; a token never grows beyond MAX_TOKEN_BYTES (the
length byte of llm.c's decode table, tokenizer.bin).

Encoding applies the merges to each piece by rank, lowest first, every occurrence left to
right: what Hugging Face's BPE model does with the same merges, so the tokenizer.json written
here (a Split pre-tokenizer with PIECE_PATTERN, then ByteLevel without its own regex) gives the
same ids in transformers. PIECE_PATTERN uses ASCII classes only, so that Python's re (here, on
bytes) and Oniguruma (in tokenizers, on text) cut every text alike; the bytes of a non-ASCII
character all fall in the "other symbols" class.
"""
import heapq
import json
import os
import re

EOT = "<|endoftext|>"
MAX_TOKEN_BYTES = 255
_WS = r" \t\n\r\x0b\x0c"
PIECE_PATTERN = (rf" ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+")
_PIECES = re.compile(PIECE_PATTERN.encode("ascii"))


def byte_symbols():
    """The printable character Hugging Face's ByteLevel stands each byte for: printable Latin-1
    characters for themselves, the other 68 bytes (controls, space, ...) for the characters from
    U+0100 up, in byte order. A token's name in tokenizer.json is its bytes in these symbols."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    symbols, extra = [], 0
    for b in range(256):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(256 + extra))
            extra += 1
    return symbols


_SYMBOLS = byte_symbols()
_BYTE_OF = {s: b for b, s in enumerate(_SYMBOLS)}


def pieces(data):
    """data (bytes) cut by PIECE_PATTERN; the pieces join back to data."""
    return _PIECES.findall(data)


class Tokenizer:
    """merges: [(left id, right id, result id)] in rank order; tokens: id -> bytes (the last is
    the end-of-text token, whose bytes are its name)."""

    def __init__(self, merges, tokens):
        self.merges = merges
        self.tokens = tokens
        self.eot = len(tokens) - 1
        self.rank = {(a, b): (r, c) for r, (a, b, c) in enumerate(merges)}
        self.cache = {}

    @property
    def vocab_size(self):
        return len(self.tokens)

    def encode_piece(self, piece):
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        ids = list(piece)
        while len(ids) > 1:
            best = None
            for i in range(len(ids) - 1):
                m = self.rank.get((ids[i], ids[i + 1]))
                if m is not None and (best is None or m[0] < best[0]):
                    best = m + (ids[i], ids[i + 1])
            if best is None:
                break
            _, result, a, b = best
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    merged.append(result)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        if len(self.cache) < 1 << 20:
            self.cache[piece] = ids
        return ids

    def encode(self, data):
        """The ids of data (bytes, any bytes at all; the end-of-text token is never produced)."""
        out = []
        for p in pieces(data):
            out.extend(self.encode_piece(p))
        return out

    def decode(self, ids):
        """The bytes of the ids (the end-of-text token decodes to nothing)."""
        return b"".join(self.tokens[i] for i in ids if i != self.eot)

    def to_json(self):
        """Hugging Face tokenizers' tokenizer.json, as a dict."""
        name = lambda i: "".join(_SYMBOLS[b] for b in self.tokens[i])
        vocab = {name(i): i for i in range(self.eot)}
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": self.eot, "content": EOT, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PIECE_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": vocab, "merges": [f"{name(a)} {name(b)}" for a, b, _ in self.merges]},
        }

    def save(self, path):
        """Writes tokenizer.json, and tokenizer_config.json beside it (transformers' class for it,
        and its decode as written: no clean-up of spaces), each atomically."""
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOT, "bos_token": EOT,
                  "clean_up_tokenization_spaces": False}
        for p, doc in ((path, self.to_json()), (os.path.join(os.path.dirname(path), "tokenizer_config.json"), config)):
            tmp = f"{p}.tmp.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False, indent=None, separators=(",", ":"))
                f.write("\n")
            os.replace(tmp, p)


def train(data, vocab_size, progress=None):
    """The BPE of vocab_size ids (256 bytes, the merges, the end-of-text token) learned on data;
    fewer when the text runs out of pairs. progress(merges, vocab) is called now and then."""
    if vocab_size < 257:
        raise ValueError(f"a byte-level BPE needs at least 257 ids (256 bytes and the end-of-text token), not {vocab_size}")
    counts = {}
    for p in pieces(data):
        if len(p) > 1:
            counts[p] = counts.get(p, 0) + 1
    words = [list(p) for p in counts]  # each distinct piece as token ids, and how often it occurs
    freq = list(counts.values())
    tokens = [bytes([b]) for b in range(256)]
    token_of = {t: i for i, t in enumerate(tokens)}
    # Pair counts over all pieces, which pieces hold each pair, and a max-heap of (count, pair)
    # whose stale entries (a count that changed since) are skipped when popped.
    pair_count, where = {}, {}
    for w, (word, f) in enumerate(zip(words, freq)):
        for pair in zip(word, word[1:]):
            pair_count[pair] = pair_count.get(pair, 0) + f
            where.setdefault(pair, set()).add(w)
    heap = [(-c, pair) for pair, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(tokens) < vocab_size - 1 and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue
        a, b = pair
        joined = tokens[a] + tokens[b]
        if len(joined) > MAX_TOKEN_BYTES:
            pair_count[pair] = 0  # never again: beyond what the decode table can hold
            continue
        result = token_of.get(joined)
        if result is None:
            result = len(tokens)
            tokens.append(joined)
            token_of[joined] = result
        merges.append((a, b, result))
        changed = {}
        for w in sorted(where.pop(pair, ())):
            word, f = words[w], freq[w]
            for p in zip(word, word[1:]):
                changed[p] = changed.get(p, 0) - f
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    merged.append(result)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            words[w] = merged
            for p in zip(merged, merged[1:]):
                changed[p] = changed.get(p, 0) + f
                where.setdefault(p, set()).add(w)
        for p, d in changed.items():
            if d:
                pair_count[p] = pair_count.get(p, 0) + d
                if pair_count[p] > 0:
                    heapq.heappush(heap, (-pair_count[p], p))
        pair_count.pop(pair, None)
        if progress and len(merges) % 500 == 0:
            progress(len(merges), len(tokens))
    tokens.append(EOT.encode())
    return Tokenizer(merges, tokens)


def load(path):
    """A tokenizer.json written by Tokenizer.save (the BPE of this module, checked as read)."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    model = j.get("model") or {}
    if model.get("type") != "BPE" or j.get("pre_tokenizer", {}).get("pretokenizers", [{}])[0].get("pattern") != \
            {"Regex": PIECE_PATTERN}:
        raise ValueError(f"{path} is not a byte-level BPE written by scripts/prepare_text.py --tokenizer bpe")
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for name, i in vocab.items():
        if not 0 <= i < len(vocab) or tokens[i] is not None:
            raise ValueError(f"{path}: token id {i} ({name!r}) is out of place")
        tokens[i] = bytes(_BYTE_OF[c] for c in name)
    if tokens[:256] != [bytes([b]) for b in range(256)]:
        raise ValueError(f"{path}: ids 0-255 are not the 256 bytes")
    merges = []
    for m in model["merges"]:
        left, right = m.split(" ") if isinstance(m, str) else m
        a, b = vocab[left], vocab[right]
        merges.append((a, b, vocab["".join((left, right))]))
    added = [t for t in j.get("added_tokens", []) if t.get("content") == EOT]
    if len(added) != 1 or added[0]["id"] != len(tokens):
        raise ValueError(f"{path}: the end-of-text token is not the id after the vocabulary")
    return Tokenizer(merges, tokens + [EOT.encode()])
