"""llm.c's multiple-choice evaluation files (its HellaSwag and MMLU format), written and checked
here in Python, independently of data/choices.c: the writer the tests make their files with,
and the validator that says which files the trainer must accept.

The format: 256 little-endian int32 (magic 20240522, version 1, the number of examples, the
bytes of the longest example, the rest 0), then per example a run of uint16: 65535, the
example's bytes (these six fields included), its index, its label, the number of completions,
the context's length and tokens, then each completion's length and tokens.
"""
import struct

MAGIC, VERSION, START = 20240522, 1, 65535


def example_words(index, context, completions, label):
    words = [START, 0, index, label, len(completions), len(context)] + list(context)
    for c in completions:
        words += [len(c)] + list(c)
    words[1] = 2 * len(words)
    return words


def choices_bytes(examples):
    """examples: [(context tokens, [completion tokens, ...], label)] -> the file's bytes."""
    streams = [example_words(i, ctx, comps, label) for i, (ctx, comps, label) in enumerate(examples)]
    longest = max(2 * len(s) for s in streams)
    header = struct.pack("<256i", MAGIC, VERSION, len(examples), longest, *([0] * 252))
    return header + b"".join(struct.pack(f"<{len(s)}H", *s) for s in streams)


def choices_valid(data, vocab, T):
    """Whether the trainer must take the file for a model of `vocab` tokens and sequences of T:
    the header as above (1 to 65536 examples; a longest size the format can hold), each example
    at its place with its delimiter and index, a size that is even, at least 18 bytes, at most the
    header's longest, and exactly its fields; a label below its count of completions (at least
    one); a context and completions of at least one token, each context + completion at most T;
    every token below vocab; nothing after the last example."""
    if len(data) < 1024:
        return False
    magic, version, n, longest = struct.unpack_from("<4i", data)
    if magic != MAGIC or version != VERSION or not 1 <= n <= 65536 or not 18 <= longest <= 65535:
        return False
    body = data[1024:]
    if len(body) % 2:
        return False
    w = struct.unpack(f"<{len(body) // 2}H", body)
    at = 0
    for i in range(n):
        if at + 6 > len(w) or w[at] != START or w[at + 2] != i:
            return False
        size = w[at + 1]
        if size % 2 or size < 18 or size > longest or at + size // 2 > len(w):
            return False
        end = at + size // 2
        label, count, ctx = w[at + 3], w[at + 4], w[at + 5]
        if count < 1 or label >= count or ctx < 1 or at + 6 + ctx > end:
            return False
        tokens = list(w[at + 6:at + 6 + ctx])
        k = at + 6 + ctx
        for _ in range(count):
            if k >= end or w[k] < 1 or k + 1 + w[k] > end or ctx + w[k] > T:
                return False
            tokens += w[k + 1:k + 1 + w[k]]
            k += 1 + w[k]
        if k != end or any(t >= vocab for t in tokens):
            return False
        at = end
    return at == len(w)
