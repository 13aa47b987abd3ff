"""refcheck.py: what the PyTorch reference checks (ref_gpt.py, ref_t5.py) share: reading the
dumps the C tools write, relative errors, and the ok/FAIL report with its counts."""
import struct

import torch

counts = {"passed": 0, "failed": 0}


def report(name, err, tol, ok=None):
    """One check: ok when err < tol (NaN fails), unless ok is given."""
    if ok is None:
        ok = err == err and err < tol
    print(("ok" if ok else "FAIL"), name, "%.3e" % err, "(tol %.0e)" % tol)
    counts["passed" if ok else "failed"] += 1


def summary():
    """Prints the closing line and returns the exit code."""
    print("%d passed, %d failed" % (counts["passed"], counts["failed"]))
    return 1 if counts["failed"] else 0


def rel_err(c, ref):
    """max|c - ref| / max|ref| over a tensor (the absolute error when ref is all zero)."""
    c = c.double()
    ref = ref.double()
    den = ref.abs().max().item()
    num = (c - ref).abs().max().item()
    return num / den if den > 0 else num


def _read(path, fmt, dtype, n):
    with open(path, "rb") as f:
        data = f.read()
    if n is not None and len(data) != 4 * n:
        raise SystemExit("%s: %d bytes, expected %d" % (path, len(data), 4 * n))
    return torch.tensor(struct.unpack("<%d%s" % (len(data) // 4, fmt), data), dtype=dtype)


def read_f32(path, n=None):
    return _read(path, "f", torch.float32, n)


def read_i32(path, n=None):
    return _read(path, "i", torch.int64, n)


def split_params(flat, meta):
    """Flat live elements -> {"unit.name": tensor} in meta order; vocabulary padding rows
    (elements past "live") come back as zeros."""
    out = {}
    o = 0
    for p in meta["params"]:
        key = "%s.%s" % (p["unit_name"], p["name"])
        live = p["live"]
        t = torch.zeros(p["numel"], dtype=torch.float32)
        t[:live] = flat[o:o + live]
        o += live
        out[key] = t.reshape(p["shape"])
    assert o == flat.numel(), "params.bin size does not match meta.json"
    return out


def live_view(t, p):
    return t.reshape(-1)[:p["live"]]
