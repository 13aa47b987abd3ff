#!/usr/bin/env python3
"""scripts/plot_log.py on a real --log file, and the step line's progress.

The built-in renderer's PNG is decoded here (its rows are unfiltered) and looked at: the size
it says, every panel's line drawn in its own colour across the panel, the training loss
falling from left to right as the log says, the validation loss drawn, a step logged twice (a
resumed run's log) counted once. With matplotlib installed, its PNG too. Bad input is refused
with the file and the line. The trainer's step lines carry elapsed time, ETA and tokens seen,
and the log the same. Prints ok/FAIL per check and "N passed, M failed".
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "scripts", "plot_log.py")
TRAIN = (31, 119, 180)  # the colours plot_log.py gives the training and validation losses
VAL = (214, 39, 40)
LR = (44, 160, 44)
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name, flush=True)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, str(detail)[-500:]), flush=True)


def read_png(path):
    """(width, height, pixels as rows of (r, g, b)) of an 8-bit RGB PNG with unfiltered rows."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat = 8, b""
    w = h = 0
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        if zlib.crc32(kind + body) & 0xFFFFFFFF != struct.unpack(">I", data[at + 8 + n:at + 12 + n])[0]:
            raise ValueError(f"chunk {kind} has a bad CRC")
        if kind == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", body[:10])
            assert (depth, colour) == (8, 2), (depth, colour)
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    raw = zlib.decompress(idat)
    rows = []
    for y in range(h):
        line = raw[y * (3 * w + 1):(y + 1) * (3 * w + 1)]
        assert line[0] == 0, "a filtered row"
        rows.append([tuple(line[1 + 3 * x:4 + 3 * x]) for x in range(w)])
    return w, h, rows


def pixels_of(rows, colour):
    return [(x, y) for y, row in enumerate(rows) for x, c in enumerate(row) if c == colour]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return r.returncode, r.stdout + r.stderr


def main():
    tmp = tempfile.mkdtemp()
    log = os.path.join(tmp, "run.jsonl")
    rc, out = run(["./train_gpt_cpu", "--model", "gpt:L=2,C=64,H=4,V=256,T=10", "--data", "data/addition/train_*.bin",
                   "--val-data", "data/addition/val_*.bin", "--batch", "32", "--seq", "10", "--steps", "60", "--lr", "3e-3",
                   "--warmup", "10", "--eval-every", "20", "--eval-batches", "2", "--log", log])
    check("a run with a log", rc == 0, out[-300:])
    steps = [l for l in out.splitlines() if l.startswith("step ") and "loss" in l and "val" not in l]
    m = [re.search(r"\| ([0-9.]+ s|\dm\d\ds), ETA ([0-9.]+ s|\dm\d\ds) \| ([0-9.]+)(k?) tokens seen$", l) for l in steps]
    check("every step line ends with the elapsed time, the ETA and the tokens seen", len(steps) == 60 and all(m),
          [l for l, x in zip(steps, m) if not x][:2])
    seen = [float(x.group(3)) * (1000 if x.group(4) else 1) for x in m if x]
    check("the tokens seen grow by the step's 320 tokens (shown to 3 digits)",
          seen[:3] == [320, 640, 960] and abs(seen[-1] - 60 * 320) <= 0.005 * 60 * 320, seen[:3] + seen[-1:])
    records = [json.loads(l) for l in open(log) if '"loss"' in l]
    check("the log has elapsed_s and tokens_seen for every step",
          [r["tokens_seen"] for r in records] == [320 * (i + 1) for i in range(60)] and
          all(b["elapsed_s"] >= a["elapsed_s"] for a, b in zip(records, records[1:])), records[-1])

    png = os.path.join(tmp, "run.png")
    rc, out = run([sys.executable, PLOT, log, png, "--renderer", "builtin"])
    check("plot_log.py writes a PNG with the built-in renderer", rc == 0 and "drawn by builtin" in out and
          "loss, learning rate, tokens/s, gradient norm" in out, out)
    w, h, rows = read_png(png)
    check(f"the PNG decodes (CRCs, {w}x{h}, unfiltered RGB rows)", w > 600 and h > 400)
    train, val, lr = pixels_of(rows, TRAIN), pixels_of(rows, VAL), pixels_of(rows, LR)
    xs = sorted({x for x, _ in train})
    check("the training loss is drawn across its panel", train and xs[-1] - xs[0] > 300, len(train))
    left = [y for x, y in train if x < xs[0] + 20]
    right = [y for x, y in train if x > xs[-1] - 20]
    check("... falling from left to right as the log's loss does (image rows grow downward)",
          records[0]["loss"] > records[-1]["loss"] and left and right and min(left) < min(right), (min(left), min(right)))
    check("the validation loss and the learning rate have lines of their own", len(val) > 20 and len(lr) > 100,
          (len(val), len(lr)))
    lrs = [r["lr"] for r in records]
    lr_x = sorted({x for x, _ in lr})
    top = min(y for x, y in lr)
    peak_x = min(x for x, y in lr if y == top)
    check("the learning rate peaks where the warm-up ends (step 10 of 60)",
          abs((peak_x - lr_x[0]) / (lr_x[-1] - lr_x[0]) - (lrs.index(max(lrs))) / 59) < 0.03, (peak_x, lr_x[0], lr_x[-1]))

    # A resumed run's log: steps 41-60 again after step 60 (a crash after step 60 with a
    # checkpoint at 40), the second time with another loss: the last record counts.
    log2 = os.path.join(tmp, "resumed.jsonl")
    lines = open(log).read().splitlines()
    again = [json.dumps(dict(json.loads(l), loss=json.loads(l)["loss"] + 5.0)) for l in lines
             if '"loss"' in l and json.loads(l)["step"] > 40]
    open(log2, "w").write("\n".join(lines + again) + "\n")
    png2 = os.path.join(tmp, "resumed.png")
    rc, out = run([sys.executable, PLOT, log2, png2, "--renderer", "builtin"])
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import plot_log
    series = plot_log.read_log(log2)
    check("a step logged twice counts once, as its last record", rc == 0 and len(series["loss"]) == 60 and
          series["loss"][-1][1] == records[-1]["loss"] + 5.0, out)
    rc, out = run([sys.executable, PLOT, log, os.path.join(tmp, "tokens.png"), "--x", "tokens", "--renderer", "builtin"])
    check("--x tokens plots against the tokens seen", rc == 0 and os.path.getsize(os.path.join(tmp, "tokens.png")) > 1000, out)
    open(os.path.join(tmp, "bad.jsonl"), "w").write('{"step": 1, "loss": 2.0}\nnot json\n')
    rc, out = run([sys.executable, PLOT, os.path.join(tmp, "bad.jsonl")])
    check("a line that is not JSON is refused, naming the file and the line", rc == 1 and "bad.jsonl: line 2 is not JSON" in out, out)
    open(os.path.join(tmp, "empty.jsonl"), "w").write('{"step": 1, "val_loss": 2.0}\n')
    rc, out = run([sys.executable, PLOT, os.path.join(tmp, "empty.jsonl")])
    check("a log without step records is refused", rc == 1 and "holds no step records" in out, out)

    try:
        import matplotlib  # noqa: F401
        have = True
    except ImportError:
        have = False
    rc, out = run([sys.executable, PLOT, log, os.path.join(tmp, "mpl.png"), "--renderer", "matplotlib"])
    if have:
        check("with matplotlib: --renderer matplotlib writes a PNG", rc == 0 and
              open(os.path.join(tmp, "mpl.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n", out)
    else:
        check("without matplotlib: --renderer matplotlib says how to get it, auto draws with the built-in one",
              rc == 1 and "matplotlib is not installed" in out and "drawn by builtin" in run([sys.executable, PLOT, log])[1], out)
    print(f"{passed} passed, {failed} failed")
    subprocess.run(["rm", "-rf", tmp])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
