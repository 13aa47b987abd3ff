#!/usr/bin/env python3
"""A picture of a training run: the JSONL log of --log as a PNG.

    python3 scripts/plot_log.py run.jsonl [run.png] [--x step|tokens] [--renderer auto|matplotlib|builtin]

Panels: the training loss with the validation loss, the learning rate, tokens per second, the
gradient norm, and the accuracy of --eval-prompts / --eval-choices when the log has one; each
against the step (or, with --x tokens, the tokens seen). A step logged twice (a run resumed
from a checkpoint older than its last steps) counts once, as its last occurrence.

matplotlib draws it where it is installed; elsewhere a small renderer of its own (plain Python:
lines, axes, the range of each axis in a 5x7 pixel font) writes the PNG, so the script works on
any machine the trainer runs on. Prints what it wrote.
"""
import argparse
import json
import math
import os
import struct
import sys
import zlib


def die(msg):
    print(f"plot_log: {msg}", file=sys.stderr)
    sys.exit(1)


def read_log(path):
    """{series name: [(step, value)]} from the log; the last record of a step wins."""
    steps, evals = {}, {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        die(f"cannot read {path}: {e}")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as e:
            die(f"{path}: line {n} is not JSON ({e}); is it a --log file of train_gpt?")
        if not isinstance(r, dict) or not isinstance(r.get("step"), int):
            die(f"{path}: line {n} has no \"step\"; is it a --log file of train_gpt?")
        if "loss" in r:
            steps[r["step"]] = r
        else:
            evals.setdefault(r["step"], {}).update(r)
    if not steps:
        die(f"{path} holds no step records")
    series = {}

    def add(name, step, value):
        if isinstance(value, (int, float)) and math.isfinite(value):
            series.setdefault(name, []).append((step, float(value)))
    for s in sorted(steps):
        r = steps[s]
        for key in ("loss", "lr", "tokens_per_s", "grad_norm", "tokens_seen"):
            add(key, s, r.get(key))
    for s in sorted(evals):
        for key in ("val_loss", "exact_match", "choice_accuracy"):
            add(key, s, evals[s].get(key))
    return series


# (title, [(series, label, colour)]) of each panel; a panel shows when its first series is there
# (the accuracy panel when either is).
PANELS = [
    ("loss", [("loss", "train", (31, 119, 180)), ("val_loss", "validation", (214, 39, 40))]),
    ("learning rate", [("lr", "lr", (44, 160, 44))]),
    ("tokens/s", [("tokens_per_s", "tokens/s", (148, 103, 189))]),
    ("gradient norm", [("grad_norm", "norm", (140, 86, 75))]),
    ("accuracy", [("exact_match", "exact match", (227, 119, 194)), ("choice_accuracy", "multiple choice", (23, 190, 207))]),
]


def panels_of(series, x_of):
    out = []
    for title, lines in PANELS:
        present = [(x_of([p for p in series[name]]), label, colour) for name, label, colour in lines if name in series]
        if present:
            out.append((title, present))
    return out


def x_mapper(series, x):
    """Points (step, value) -> (x, value) for the chosen x axis."""
    if x == "step":
        return lambda pts: pts
    seen = dict(series.get("tokens_seen", []))
    if not seen:
        die("--x tokens needs \"tokens_seen\" in the log (written by this version of the trainer)")
    steps = sorted(seen)

    def at(step):  # evaluations happen after a step: that step's count (or the last before it)
        best = None
        for s in steps:
            if s <= step:
                best = seen[s]
        return best if best is not None else 0.0
    return lambda pts: [(at(s), v) for s, v in pts]


def plot_matplotlib(panels, xlabel, title, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = 2
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3.4 * rows), squeeze=False)
    for ax, (name, lines) in zip(axes.flat, panels):
        for pts, label, colour in lines:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=[c / 255 for c in colour], label=label,
                    marker="o" if len(pts) < 30 else None, markersize=3)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend()
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


# ---- the built-in renderer -------------------------------------------------------------------
# 5x7 glyphs, one row per int (bit 4 the leftmost pixel), for the characters the labels use
# (letters are drawn in capitals).
FONT = {
    "0": [14, 17, 19, 21, 25, 17, 14], "1": [4, 12, 4, 4, 4, 4, 14], "2": [14, 17, 1, 2, 4, 8, 31],
    "3": [31, 2, 4, 2, 1, 17, 14], "4": [2, 6, 10, 18, 31, 2, 2], "5": [31, 16, 30, 1, 1, 17, 14],
    "6": [6, 8, 16, 30, 17, 17, 14], "7": [31, 1, 2, 4, 8, 8, 8], "8": [14, 17, 17, 14, 17, 17, 14],
    "9": [14, 17, 17, 15, 1, 2, 12], ".": [0, 0, 0, 0, 0, 12, 12], "-": [0, 0, 0, 31, 0, 0, 0],
    "+": [0, 4, 4, 31, 4, 4, 0], "/": [1, 1, 2, 4, 8, 16, 16], ":": [0, 12, 12, 0, 12, 12, 0],
    "(": [2, 4, 8, 8, 8, 4, 2], ")": [8, 4, 2, 2, 2, 4, 8], " ": [0] * 7, "_": [0, 0, 0, 0, 0, 0, 31],
    "A": [14, 17, 17, 31, 17, 17, 17], "B": [30, 17, 17, 30, 17, 17, 30], "C": [14, 17, 16, 16, 16, 17, 14],
    "D": [28, 18, 17, 17, 17, 18, 28], "E": [31, 16, 16, 30, 16, 16, 31], "F": [31, 16, 16, 30, 16, 16, 16],
    "G": [14, 17, 16, 23, 17, 17, 15], "H": [17, 17, 17, 31, 17, 17, 17], "I": [14, 4, 4, 4, 4, 4, 14],
    "J": [7, 2, 2, 2, 2, 18, 12], "K": [17, 18, 20, 24, 20, 18, 17], "L": [16, 16, 16, 16, 16, 16, 31],
    "M": [17, 27, 21, 21, 17, 17, 17], "N": [17, 17, 25, 21, 19, 17, 17], "O": [14, 17, 17, 17, 17, 17, 14],
    "P": [30, 17, 17, 30, 16, 16, 16], "Q": [14, 17, 17, 17, 21, 18, 13], "R": [30, 17, 17, 30, 20, 18, 17],
    "S": [15, 16, 16, 14, 1, 1, 30], "T": [31, 4, 4, 4, 4, 4, 4], "U": [17, 17, 17, 17, 17, 17, 14],
    "V": [17, 17, 17, 17, 17, 10, 4], "W": [17, 17, 17, 21, 21, 21, 10], "X": [17, 17, 10, 4, 10, 17, 17],
    "Y": [17, 17, 10, 4, 4, 4, 4], "Z": [31, 1, 2, 4, 8, 16, 31],
}
WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (0, 0, 0), (110, 110, 110), (225, 225, 225)


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1):
        """Bresenham's line, `width` pixels thick (rows below the first)."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for k in range(width):
                self.dot(x0, y0 + k, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, c, scale=1):
        for ch in s.upper():
            rows = FONT.get(ch, FONT[" "])
            for r, bits in enumerate(rows):
                for col in range(5):
                    if bits >> (4 - col) & 1:
                        for a in range(scale):
                            for b in range(scale):
                                self.dot(x + col * scale + a, y + r * scale + b, c)
            x += 6 * scale

    def png(self):
        raw = b"".join(b"\0" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def number(v):
    """A short label for an axis end: 0.00012 -> 1.2E-4, 12345 -> 12345, 3.5 -> 3.5."""
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-2:
        m, e = f"{v:.2e}".split("e")
        return f"{float(m):g}E{int(e)}"
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def plot_builtin(panels, xlabel, title, out):
    pw, ph, margin_l, margin_t, gap = 460, 230, 70, 40, 30
    cols = 2
    rows = (len(panels) + 1) // 2
    W = cols * (margin_l + pw) + 20
    H = margin_t + rows * (ph + 2 * gap + 10) + 10
    cv = Canvas(W, H)
    cv.text(10, 10, title[:120], BLACK, 2)
    for k, (name, lines) in enumerate(panels):
        x0 = 10 + (k % cols) * (margin_l + pw) + margin_l - 10
        y0 = margin_t + (k // cols) * (ph + 2 * gap + 10) + gap
        xs = [p[0] for pts, _, _ in lines for p in pts]
        ys = [p[1] for pts, _, _ in lines for p in pts]
        xlo, xhi = min(xs), max(xs)
        ylo, yhi = min(ys), max(ys)
        if xhi == xlo:
            xhi = xlo + 1
        if yhi == ylo:
            ylo, yhi = ylo - (abs(ylo) or 1) * 0.05, yhi + (abs(yhi) or 1) * 0.05
        pad = (yhi - ylo) * 0.05
        ylo, yhi = (ylo - pad if ylo < 0 else max(0.0, ylo - pad)), yhi + pad  # no negative axis for positive data
        X = lambda v: x0 + round((v - xlo) / (xhi - xlo) * (pw - 1))
        Y = lambda v: y0 + ph - 1 - round((v - ylo) / (yhi - ylo) * (ph - 1))
        for i in range(1, 4):  # a light grid at quarters
            cv.line(x0, y0 + i * ph // 4, x0 + pw - 1, y0 + i * ph // 4, LIGHT)
            cv.line(x0 + i * pw // 4, y0, x0 + i * pw // 4, y0 + ph - 1, LIGHT)
        cv.line(x0, y0, x0, y0 + ph - 1, GREY)
        cv.line(x0, y0 + ph - 1, x0 + pw - 1, y0 + ph - 1, GREY)
        cv.text(x0, y0 - 14, name, BLACK)
        legend_x = x0 + 6 * (len(name) + 2)
        for pts, label, colour in lines:
            pix = [(X(a), Y(b)) for a, b in pts]
            if len(pix) == 1:
                pix = pix * 2
            for (ax, ay), (bx, by) in zip(pix, pix[1:]):
                cv.line(ax, ay, bx, by, colour, 2)
            if len(lines) > 1:
                cv.line(legend_x, y0 - 10, legend_x + 12, y0 - 10, colour, 2)
                cv.text(legend_x + 16, y0 - 14, label, colour)
                legend_x += 6 * (len(label) + 5)
        cv.text(x0 - 6 * len(number(yhi)) - 4, y0, number(yhi), GREY)
        cv.text(x0 - 6 * len(number(ylo)) - 4, y0 + ph - 8, number(ylo), GREY)
        cv.text(x0, y0 + ph + 4, number(xlo), GREY)
        cv.text(x0 + pw - 6 * len(number(xhi)), y0 + ph + 4, number(xhi), GREY)
        cv.text(x0 + pw // 2 - 3 * len(xlabel), y0 + ph + 4, xlabel, GREY)
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(cv.png())
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description="Plot a train_gpt --log file (JSONL) as a PNG.")
    ap.add_argument("log")
    ap.add_argument("out", nargs="?", help="the PNG to write (default: LOG with .png)")
    ap.add_argument("--x", choices=["step", "tokens"], default="step")
    ap.add_argument("--renderer", choices=["auto", "matplotlib", "builtin"], default="auto")
    a = ap.parse_args()
    out = a.out or os.path.splitext(a.log)[0] + ".png"
    series = read_log(a.log)
    panels = panels_of(series, x_mapper(series, a.x))
    xlabel = "step" if a.x == "step" else "tokens seen"
    title = os.path.basename(a.log)
    renderer = a.renderer
    if renderer != "builtin":
        try:
            import matplotlib  # noqa: F401
            renderer = "matplotlib"
        except ImportError:
            if renderer == "matplotlib":
                die("--renderer matplotlib: matplotlib is not installed (pip install matplotlib), or leave "
                    "--renderer out for the built-in one")
            renderer = "builtin"
    (plot_matplotlib if renderer == "matplotlib" else plot_builtin)(panels, xlabel, title, out)
    last = max(s for s, _ in series["loss"])
    print(f"wrote {out}: {len(panels)} panels ({', '.join(p[0] for p in panels)}) up to step {last}, drawn by {renderer}")


if __name__ == "__main__":
    main()
