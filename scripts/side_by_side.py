#!/usr/bin/env python3
"""side_by_side.py: the table of scripts/bench_llmc.sh: fsdp.c beside llm.c (and PyTorch).

    python3 scripts/side_by_side.py DIR

Reads DIR/runs.tsv (one line per run: side, model, batch, seq, round, format, log, status,
note), DIR/meta.txt and the runs' logs, and writes DIR/results.md and DIR/results.json.

Every side's step times come from its own log, in its own words:
  jsonl      fsdp.c's --log and scripts/bench_torch.py's --log: one JSON object per step
             (step from 1, loss, ms)
  llmc-cpu   llm.c's train_gpt2.c: "step N: train loss L (took T ms)", N from 0
  llmc-cuda  llm.c's train_gpt2cu: "step N/M | loss L (...)| ... | T ms | ...", N from 1
The first `warmup` steps of every run are left out; the others, of every round, are pooled:
median, min, max, spread ((max - min) / median). Every side is charged the same work: tokens/s
is B*T over the median, TFLOPS the exact matmul FLOPs of layers/config.c (bench_report.py's
model_flops, forward and backward) over the median, MFU that against the GPU's dense bf16 peak
(none on a CPU). "fsdp.c / this" is fsdp.c's tokens/s over the row's: above 1, fsdp.c is faster.

CPU mode also checks that the comparison is like for like: fsdp.c and llm.c start from the
same checkpoint and read the same first batches, so their losses at step 1 (before any update)
must agree within LOSS_TOLERANCE, and at step 2 (after one AdamW step with the same settings)
within UPDATE_TOLERANCE; otherwise the table says so and the exit status is 1.
Standard library only.
"""
import csv
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import cpu_vectors, datasheet_peak_flops, model_flops, parse_model, read_meta  # noqa: E402

# Step 1: the same fp32 weights and tokens through two fp32 forwards that sum in different
# orders (llm.c's matmul loops against fsdp.c's register tiles): the logits differ by a few
# fp32 ulps of their sums over C terms, so the mean cross-entropy agrees to about 1e-6
# relative; 1e-5 leaves room and still catches any real difference (a wrong weight layout or
# batch changes the loss in its first or second digit).
LOSS_TOLERANCE = 1e-5
# Step 2 follows one AdamW update: each weight moves by about lr (1e-4) times the sign of its
# gradient, so a gradient that is rounding noise near zero can move the other way in the
# other trainer; such elements shift the loss only to second order (gpt2-124m: 1e-8 relative
# seen). 1e-4 is far above that and far below what a wrong gradient or learning rate does (the
# first update moves gpt2-124m's loss by 8%).
UPDATE_TOLERANCE = 1e-4

LABELS = {
    ("gpu", "fsdp.c"): "fsdp.c train_gpt (bf16, --shard full, 1 rank)",
    ("gpu", "llm.c"): "llm.c train_gpt2cu (bf16)",
    ("gpu", "llm.c+cudnn"): "llm.c train_gpt2cu, cuDNN attention (bf16)",
    ("cpu", "fsdp.c"): "fsdp.c train_gpt_cpu (fp32)",
    ("cpu", "llm.c"): "llm.c train_gpt2 (fp32)",
    ("cpu", "pytorch"): "PyTorch {torch} eager (fp32)",
}
SIDE_ORDER = {"fsdp.c": 0, "llm.c": 1, "llm.c+cudnn": 2, "pytorch": 3}

LLMC_CPU = re.compile(r"^step (\d+): train loss (\S+) \(took ([0-9.eE+-]+) ms\)")
LLMC_CUDA = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+) .*\| ([0-9.eE+-]+) ms \|")


def read_steps(path, fmt):
    """[(step from 1, loss, ms)] of one run's log."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if fmt == "jsonl":
                line = line.strip()
                if not line.startswith("{"):
                    continue
                o = json.loads(line)
                if "step" in o and "ms" in o:
                    out.append((int(o["step"]), float(o.get("loss", float("nan"))), float(o["ms"])))
            else:
                m = (LLMC_CPU if fmt == "llmc-cpu" else LLMC_CUDA).match(line)
                if m:
                    step = int(m.group(1)) + (1 if fmt == "llmc-cpu" else 0)
                    out.append((step, float(m.group(2)), float(m.group(3))))
    return out


def summarize(d):
    meta = read_meta(d)
    mode = meta.get("mode", "gpu")
    warmup = int(meta.get("warmup", "0"))
    with open(os.path.join(d, "runs.tsv"), newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    # a rerun into the same directory appends its lines (a run reused, or tried again): the
    # last line of each run stands
    last = {}
    for r in rows:
        last[(r["side"], r["model"], r["batch"], r["seq"], r["round"], r["status"] if r["side"] == "-" else "")] = r
    runs = list(last.values())
    configs, skipped, failed, notes, problems = {}, [], [], [], []
    for r in runs:
        if r["status"] == "skipped":
            if (r["side"], r["note"]) not in skipped:
                skipped.append((r["side"], r["note"]))
            continue
        if r["status"] == "note":
            notes.append("%s: %s" % (r["model"], r["note"]))
            continue
        key = (r["model"], int(r["batch"]), int(r["seq"]))
        c = configs.setdefault(key, {"runs": {}, "oom": []})
        if r["status"] == "oom":
            c["oom"].append(r["side"])
            continue
        if r["status"] == "failed":
            failed.append("%s %s B=%s round %s: %s (%s)" % (r["side"], r["model"], r["batch"], r["round"], r["note"], r["log"]))
            continue
        if r["status"] not in ("ok", "reused"):
            continue
        try:
            steps = read_steps(os.path.join(d, r["log"]), r["format"])
        except (OSError, ValueError) as e:
            problems.append("%s: unreadable (%s)" % (r["log"], e))
            continue
        c["runs"].setdefault(r["side"], []).append((int(r["round"]), steps))

    peak = datasheet_peak_flops(meta.get("gpu", "")) if mode == "gpu" else 0.0
    rows, checks = [], []
    for (model, B, T), c in sorted(configs.items(), key=lambda kv: (parse_model(kv[0][0])["L"], kv[0][1])):
        if c["oom"]:
            notes.append("%s B=%d: %s does not fit at this batch (not in the table)" % (model, B, ", ".join(sorted(set(c["oom"])))))
            continue
        if not c["runs"]:
            continue
        flops = model_flops(parse_model(model), B, T, 0)
        sides = {}
        for side, rounds in c["runs"].items():
            ms = [s[2] for _, steps in rounds for s in steps if s[0] > warmup]
            if not ms:
                problems.append("%s %s B=%d: no timed steps in its logs" % (side, model, B))
                continue
            med = statistics.median(ms)
            sides[side] = {"steps": len(ms), "median_ms": med, "min_ms": min(ms), "max_ms": max(ms),
                           "spread": (max(ms) - min(ms)) / med, "tokens_per_s": B * T / (med / 1e3),
                           "tflops": flops / (med / 1e3) / 1e12,
                           "mfu": flops / (med / 1e3) / peak if peak else None}
        ref = sides.get("fsdp.c")
        for s in sides.values():
            s["fsdp_over_this"] = ref["tokens_per_s"] / s["tokens_per_s"] if ref else None
        rows.append({"model": model, "batch": B, "seq": T, "flops_per_step": flops, "sides": sides})
        if mode == "cpu" and "fsdp.c" in c["runs"] and "llm.c" in c["runs"]:
            checks.append(loss_check(model, B, dict(c["runs"]["fsdp.c"]).get(1), dict(c["runs"]["llm.c"]).get(1)))
    return {"mode": mode, "meta": meta, "warmup": warmup, "configs": rows, "skipped": skipped, "failed": failed,
            "notes": notes, "problems": problems, "loss_checks": [x for x in checks if x]}


def loss_check(model, B, ours, theirs):
    """The first two losses of round 1 of both trainers (same checkpoint, same batches)."""
    if not ours or not theirs or len(ours) < 2 or len(theirs) < 2:
        return None
    out = {"model": model, "batch": B, "steps": []}
    for i, tol in ((0, LOSS_TOLERANCE), (1, UPDATE_TOLERANCE)):
        a, b = ours[i][1], theirs[i][1]
        rel = abs(a - b) / abs(b) if b and math.isfinite(a) and math.isfinite(b) else float("inf")
        out["steps"].append({"step": i + 1, "fsdp.c": a, "llm.c": b, "relative": rel, "tolerance": tol,
                             "agree": rel <= tol})
    out["agree"] = all(s["agree"] for s in out["steps"])
    return out


def fmt(x, f="%.1f"):
    if x is None:
        return "-"
    return f % x if abs(x) >= 10 else "%.3g" % x


def label(mode, side, meta):
    return LABELS.get((mode, side), side).format(torch=meta.get("torch", "?"))


def headline(res):
    """The ratio the README leads with: fsdp.c / llm.c in tokens/s, at the largest batch of the
    smallest model that both ran (against llm.c with cuDNN when it ran: what llm.c's users run)."""
    for cfg in sorted(res["configs"], key=lambda c: (parse_model(c["model"])["L"], -c["batch"])):
        for side in ("llm.c+cudnn", "llm.c"):
            s = cfg["sides"].get(side)
            if s and "fsdp.c" in cfg["sides"]:
                return {"model": cfg["model"], "batch": cfg["batch"], "seq": cfg["seq"], "against": side,
                        "ratio": s["fsdp_over_this"], "fsdp_tokens_per_s": cfg["sides"]["fsdp.c"]["tokens_per_s"],
                        "llmc_tokens_per_s": s["tokens_per_s"]}
    return None


def render(res):
    mode, meta = res["mode"], res["meta"]
    L = []
    if mode == "gpu":
        L.append("fsdp.c and llm.c on one %s (driver %s, %s), %s rounds of %s timed steps after %s untimed, "
                 "runs interleaved; fsdp.c %s, llm.c %s; %s." % (
                     meta.get("gpu") or "GPU (no nvidia-smi)", meta.get("driver", "?"), meta.get("toolkit", "?"),
                     meta.get("rounds"), meta.get("steps"), meta.get("warmup"), meta.get("commit"),
                     meta.get("llmc_commit", "-")[:12], meta.get("date")))
    else:
        vec = cpu_vectors(meta)
        L.append("fsdp.c, llm.c and PyTorch on the CPU (%s%s), fp32, %s threads, %s rounds of %s timed steps after "
                 "%s untimed, runs interleaved; fsdp.c %s, llm.c %s; %s." % (
                     meta.get("cpu", "?"), "; " + vec if vec else "", meta.get("threads"), meta.get("rounds"), meta.get("steps"),
                     meta.get("warmup"), meta.get("commit"), meta.get("llmc_commit", "-")[:12], meta.get("date")))
    L.append("")
    L.append("| model | B x T | trainer | timed steps | median ms | min | max | spread | tokens/s | TFLOPS | MFU | fsdp.c / this |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cfg in res["configs"]:
        for side in sorted(cfg["sides"], key=lambda s: SIDE_ORDER.get(s, 9)):
            s = cfg["sides"][side]
            L.append("| %s | %dx%d | %s | %d | %s | %s | %s | %.0f%% | %.0f | %s | %s | %s |" % (
                cfg["model"], cfg["batch"], cfg["seq"], label(mode, side, meta), s["steps"], fmt(s["median_ms"], "%.1f"),
                fmt(s["min_ms"], "%.1f"), fmt(s["max_ms"], "%.1f"), 100 * s["spread"], s["tokens_per_s"],
                fmt(s["tflops"]), "-" if s["mfu"] is None else "%.1f%%" % (100 * s["mfu"]),
                "-" if s["fsdp_over_this"] is None else "%.2fx" % s["fsdp_over_this"]))
    L.append("")
    L.append("\"fsdp.c / this\" is fsdp.c's tokens/s over the row's (above 1: fsdp.c is faster). Every trainer is "
             "charged the same FLOPs, the exact matmul count of layers/config.c%s. Spread is (max - min) / median." %
             (", and MFU is against the datasheet's dense bf16 peak" if mode == "gpu" else ""))
    for ck in res["loss_checks"]:
        L.append("")
        L.append("Like for like (%s, B=%d, same checkpoint, same batches): %s" % (ck["model"], ck["batch"], "; ".join(
            "step %d loss fsdp.c %.6f, llm.c %.6f, relative difference %.1e (%s %.0e)" % (
                s["step"], s["fsdp.c"], s["llm.c"], s["relative"], "within" if s["agree"] else "DISAGREE: over",
                s["tolerance"]) for s in ck["steps"])))
    extra = ["%s: skipped: %s" % (side, why) for side, why in res["skipped"]] + res["notes"] + \
            ["FAILED: " + f for f in res["failed"]] + ["PROBLEM: " + p for p in res["problems"]]
    if extra:
        L.append("")
        L += ["- " + x for x in extra]
    L.append("")
    if mode == "cpu":
        L.append("Machine load average (1, 5, 15 min): %s before, %s after.%s" % (
            meta.get("load_before", "?"), meta.get("load_after", "?"),
            " PyTorch: %s intra-op threads, BLAS %s." % (meta["torch_threads"], meta.get("torch_blas", "?"))
            if meta.get("torch_threads") else ""))
    L.append("Data: %s.%s" % (meta.get("data", "?"), " llm.c built from commit %s with the patches in patches.txt." %
                              meta["llmc_commit"] if meta.get("llmc_commit", "-") != "-" else ""))
    return "\n".join(L) + "\n"


def main(argv):
    if len(argv) != 1:
        print("usage: side_by_side.py DIR", file=sys.stderr)
        return 2
    d = argv[0]
    if not os.path.exists(os.path.join(d, "runs.tsv")):
        print("error: %s has no runs.tsv (scripts/bench_llmc.sh writes it)" % d, file=sys.stderr)
        return 2
    res = summarize(d)
    res["headline"] = headline(res)
    with open(os.path.join(d, "results.md"), "w") as f:
        f.write(render(res))
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    bad = [ck for ck in res["loss_checks"] if not ck["agree"]]
    return 1 if bad or res["problems"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
