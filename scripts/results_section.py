#!/usr/bin/env python3
"""results_section.py: the README's results section, from the result folders it reports.

    python3 scripts/results_section.py [--gpu DIR] [--cpu DIR] [--out FILE] [--write README.md]

--gpu DIR  a scripts/gpu_report.sh folder: meta.txt (date, GPU, driver, toolkit, torch, commit),
           parts.tsv, test-bf16.txt / test-fp16.txt (make test-gpu), llmc/results.json
           (bench_llmc.sh: fsdp.c, llm.c, llm.c with cuDNN), bench/results.json and
           bench/peak.json (bench.sh: PyTorch, --peak, the ncu profile per kernel group),
           kernels.txt (make kernel-report)
           or a GPU bundle's run (scripts/gpu_bundle.sh; meta.txt says "kind: gpu-bundle"): the
           same llmc/, kernels.txt and logs/train-check.txt (its tests on the GPU), steps.tsv,
           profile/groups.json (scripts/gpu_bundle_report.py's per-group sums)
--cpu DIR  a scripts/bench_llmc.sh --cpu folder (results.json: fsdp.c, llm.c, PyTorch on the CPU)
--out FILE writes the section there (gpu_report.sh: DIR/results.md); --write FILE replaces the
           text between "<!-- results -->" and "<!-- end of results -->" in FILE with it, or,
           given only --gpu or only --cpu, just that machine's block inside it (between
           "<!-- gpu results -->" and "<!-- end of gpu results -->", or the same with cpu).

The section leads with fsdp.c's throughput against llm.c's and the date, GPU, driver, toolkit
and commits of the figures; one table per machine; older figures live in
docs/results-history.md. Before anything is written, every ratio in the inputs is checked
against the medians it claims to come from (fsdp.c's tokens/s over the other's must equal the
other's step time over fsdp.c's): an inverted or stale ratio stops the report, naming the file
and the row, instead of reaching the README. Standard library only.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import cpu_vectors, read_meta  # noqa: E402

START, END = "<!-- results -->\n", "<!-- end of results -->"
HISTORY = "docs/results-history.md"
RATIO_TOLERANCE = 1e-6  # the ratios are recomputed from the same floats: only rounding may differ


class BadInput(Exception):
    pass


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return None
    except ValueError as e:
        raise BadInput("%s: unreadable JSON (%s)" % (path, e))


def close(a, b):
    return a is not None and b is not None and abs(a - b) <= RATIO_TOLERANCE * max(abs(a), abs(b))


def check_side_by_side(res, path):
    """Every "fsdp.c / this" of a side_by_side.py results.json against its own medians."""
    for cfg in res.get("configs", []):
        sides = cfg.get("sides", {})
        ours = sides.get("fsdp.c")
        for name, s in sides.items():
            r = s.get("fsdp_over_this")
            if ours is None:
                if r is not None:
                    raise BadInput("%s: %s B=%s %s: a ratio without an fsdp.c row" % (path, cfg["model"], cfg["batch"], name))
                continue
            tok = cfg["batch"] * cfg["seq"] / (s["median_ms"] / 1e3)
            by_tokens = ours["tokens_per_s"] / s["tokens_per_s"]
            by_time = s["median_ms"] / ours["median_ms"]
            if not (close(tok, s["tokens_per_s"]) and close(r, by_tokens) and close(r, by_time)):
                raise BadInput("%s: %s B=%s %s: fsdp.c / this is %s, but the medians give %.4g (fsdp.c %.4g ms, %s %.4g "
                               "ms, %.4g and %.4g tokens/s): an inverted or stale ratio; rerun scripts/side_by_side.py"
                               % (path, cfg["model"], cfg["batch"], name, r, by_time, ours["median_ms"], name,
                                  s["median_ms"], ours["tokens_per_s"], s["tokens_per_s"]))


def check_bench(res, path):
    """bench_report.py's ours / PyTorch ratios against the rows' tokens/s."""
    rows = res.get("rows", [])
    key = lambda r: (r.get("model"), r.get("batch"), r.get("seq"), r.get("enc_len") or 0, r.get("accum") or 1)
    torch_rows = {(key(r), r.get("backend")): r for r in rows if str(r.get("backend", "")).startswith("pytorch")}
    for r in rows:
        if str(r.get("backend", "")).startswith("pytorch") or r.get("sim_world"):
            continue
        for backend, field in (("pytorch", "ratio_eager"), ("pytorch+compile", "ratio_compile"),
                               ("pytorch-tuned", "ratio_tuned")):
            t = torch_rows.get((key(r), backend))
            if r.get(field) is None and t is None:
                continue
            want = r["tokens_per_s_per_rank"] / t["tokens_per_s_per_rank"] if t else None
            if not close(r.get(field), want):
                raise BadInput("%s: %s %s: %s is %s, but the rows' tokens/s give %s: an inverted or stale ratio; rerun "
                               "scripts/bench_report.py" % (path, r.get("run"), backend, field, r.get(field), want))


def ms(x):
    return "-" if x is None else "%.0f" % x if x >= 1000 else "%.1f" % x if x >= 10 else "%.2f" % x


def tests_line(d):
    if read_meta(d).get("kind") == "gpu-bundle":
        out = []
        for path, what in (("kernels.txt", "the attention and step-control kernels against the CPU reference"),
                           (os.path.join("logs", "train-check.txt"), "10 training steps against the CPU trainer")):
            p = os.path.join(d, path)
            got = re.findall(r"^(\d+) passed, (\d+) failed$", open(p, errors="replace").read(), re.M) if os.path.exists(p) else []
            out.append("%s: %s" % (what, "%s passed, %s failed" % got[-1] if got else "did not run"))
        return "On the GPU, " + "; ".join(out) + "."
    out = []
    for prec in ("bf16", "fp16"):
        path = os.path.join(d, "test-%s.txt" % prec)
        if not os.path.exists(path):
            continue
        lines = re.findall(r"^(\d+) passed, (\d+) failed$", open(path, errors="replace").read(), re.M)
        out.append("%s %s" % (prec, "%s passed, %s failed" % lines[-1] if lines else "no summary line (see %s)" % path))
    return "`make test-gpu`: " + "; ".join(out) + "." if out else None


def gpu_section(d):
    meta = read_meta(d)
    llmc_path, bench_path = os.path.join(d, "llmc", "results.json"), os.path.join(d, "bench", "results.json")
    llmc, bench = load_json(llmc_path), load_json(bench_path)
    if llmc:
        check_side_by_side(llmc, llmc_path)
    if bench:
        check_bench(bench, bench_path)
    gpu = meta.get("gpu") or (llmc or {}).get("meta", {}).get("gpu") or "GPU"
    L = []
    head = (llmc or {}).get("headline")
    where = "one %s (%s, driver %s, %s, torch %s), %s, fsdp.c commit %s" % (
        gpu, meta.get("gpu_memory", "?"), meta.get("driver", "?"), meta.get("toolkit", "?"), meta.get("torch", "?"),
        meta.get("date", "?"), meta.get("commit", "?"))
    if head:
        L.append("**fsdp.c: %.2fx llm.c's tokens/s** for %s at B=%d, T=%d (%.0f against %.0f tokens/s, llm.c%s), on "
                 "%s, llm.c commit %s." % (
                     head["ratio"], head["model"], head["batch"], head["seq"], head["fsdp_tokens_per_s"],
                     head["llmc_tokens_per_s"], " with cuDNN attention" if head["against"] == "llm.c+cudnn" else "",
                     where, (llmc["meta"].get("llmc_commit") or "?")[:12]))
    else:
        L.append("GPU figures from %s (no llm.c comparison in this report: %s)." % (
            where, "LLMC_DIR was unset" if meta.get("llmc_dir") in (None, "unset") else "see llmc/"))
    L.append("")
    # one table: the llm.c configurations, then the models only the PyTorch sweep ran
    torch_by = {}
    ours_by = {}
    for r in (bench or {}).get("rows", []):
        k = (r.get("model"), r.get("batch"))
        if r.get("backend") == "pytorch-tuned":
            torch_by[k] = r
        elif not str(r.get("backend", "")).startswith("pytorch") and not r.get("sim_world"):
            ours_by[k] = r
    L.append("| model | B x T | fsdp.c ms | fsdp.c TFLOPS (MFU) | llm.c ms | llm.c + cuDNN ms | PyTorch 1 GPU ms "
             "| fsdp.c / llm.c (+ cuDNN) | fsdp.c / PyTorch |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    seen = set()
    for cfg in (llmc or {}).get("configs", []):
        s = cfg["sides"]
        f = s.get("fsdp.c")
        k = (cfg["model"], cfg["batch"])
        seen.add(k)
        t, o = torch_by.get(k), ours_by.get(k)
        ratios = [s[x]["fsdp_over_this"] for x in ("llm.c", "llm.c+cudnn") if x in s]
        L.append("| %s | %dx%d | %s | %s | %s | %s | %s | %s | %s |" % (
            cfg["model"], cfg["batch"], cfg["seq"], ms(f and f["median_ms"]),
            "%.0f (%.1f%%)" % (f["tflops"], 100 * f["mfu"]) if f and f.get("mfu") else (f and "%.0f" % f["tflops"]) or "-",
            ms(s.get("llm.c", {}).get("median_ms")), ms(s.get("llm.c+cudnn", {}).get("median_ms")),
            ms(t and t["step_ms_median"]), " (".join("%.2fx" % r for r in ratios) + (")" if len(ratios) > 1 else "") or "-",
            "%.2fx" % o["ratio_tuned"] if o and o.get("ratio_tuned") else "-"))
    for k, o in sorted(ours_by.items(), key=lambda kv: (kv[1].get("params") or 0)):
        if k in seen:
            continue
        t = torch_by.get(k)
        shape = "%dx(%d+%d)" % (o["batch"], o["enc_len"], o["seq"]) if o.get("enc_len") else "%dx%d" % (o["batch"], o["seq"])
        L.append("| %s | %s | %s | %s | - | - | %s | - | %s |" % (
            o["model"], shape, ms(o["step_ms_median"]),
            "%.0f (%.1f%%)" % (o["model_tflops_per_rank"], 100 * o["mfu"]) if o.get("mfu") else "%.0f" % o["model_tflops_per_rank"],
            ms(t and t["step_ms_median"]), "%.2fx" % o["ratio_tuned"] if o.get("ratio_tuned") else "-"))
    L.append("")
    L.append("Ratios are fsdp.c's tokens/s over the other's (above 1: fsdp.c is faster); every trainer is charged "
             "the same FLOPs (layers/config.c's exact matmul count), MFU is against the datasheet's dense bf16 peak. "
             "fsdp.c: `--shard full`, one rank. llm.c: train_gpt2cu built with this toolkit (`llmc/patches.txt`), "
             "`-r 0` as its own run scripts. PyTorch 1 GPU: no FSDP, the whole model and loss compiled, flash "
             "SDPA, fused AdamW (`bench_torch.py --tuned`); fsdp.c / PyTorch is from the PyTorch sweep's own "
             "fsdp.c run. Same token shard for all (Zipf-distributed ids).")
    extra = [x for x in [tests_line(d)] if x]
    peak = load_json(os.path.join(d, "bench", "peak.json"))
    if peak and peak.get("peak_tflops"):
        extra.append("`--peak`: %.0f TFLOPS for the trainer's own bf16 matmul." % peak["peak_tflops"])
    fsdp2 = [r for r in (bench or {}).get("rows", []) if r.get("backend") in ("pytorch", "pytorch+compile")]
    if fsdp2:
        extra.append("PyTorch FSDP2 on one rank, which measures FSDP2's own per-unit overhead: " + ", ".join(
            "%s %s %s ms" % (r["model"], "compiled" if r["backend"] == "pytorch+compile" else "eager",
                             ms(r["step_ms_median"])) for r in fsdp2) + ".")
    groups = dict((bench or {}).get("profile_groups") or {})
    groups.update(load_json(os.path.join(d, "profile", "groups.json")) or {})
    for run, g in sorted(groups.items()):
        extra.append("Where a step goes (`%s`, ncu): %.2f ms of kernels against %.2f predicted by the timeline; the "
                     "table per kernel group is in %s." % (run, g["measured_ms"], g["predicted_ms"],
                                                           "docs/performance.md" if meta.get("kind") == "gpu-bundle" else
                                                           "bench/results.md"))
    kern = os.path.join(d, "kernels.txt")
    if os.path.exists(kern):
        first = open(kern, errors="replace").readline().strip()
        extra.append("Kernel report: %s" % ("kernels.txt" if not first.startswith("note:") else first[6:]))
    for name in ("parts.tsv", "steps.tsv"):
        path = os.path.join(d, name)
        for line in open(path).read().splitlines()[1:] if os.path.exists(path) else []:
            p = line.split("\t")
            if len(p) >= 3 and p[1] != "ok":
                extra.append("%s %s %s (%s)." % ("Part" if name == "parts.tsv" else "Step", p[0], p[1],
                                                 p[3] if len(p) > 3 else ""))
    if extra:
        L.append("")
        L += ["- " + x for x in extra]
    return L


def cpu_section(d):
    path = os.path.join(d, "results.json")
    res = load_json(path)
    if res is None:
        raise BadInput("%s: no results.json (scripts/bench_llmc.sh --cpu writes it)" % d)
    check_side_by_side(res, path)
    m = res["meta"]
    head = res.get("headline")
    lead = ("**CPU: fsdp.c %.2fx llm.c's tokens/s** for %s at B=%d, T=%d, fp32. " % (
        head["ratio"], head["model"], head["batch"], head["seq"]) if head else "**CPU.** ")
    vec = cpu_vectors(m)
    L = [lead + "%s, %s%s threads, load average %s before and %s after (a shared machine: read the spread), %s, fsdp.c "
         "commit %s, llm.c commit %s, %s:" % (m.get("cpu", "?"), vec + ", " if vec else "", m.get("threads", "?"),
                                             m.get("load_before", "?"),
                                             m.get("load_after", "?"), m.get("date", "?"), m.get("commit", "?"),
                                             (m.get("llmc_commit") or "-")[:12],
                                             "PyTorch's BLAS %s" % ", ".join(
                                                 os.path.basename(x) for x in m.get("torch_blas", "-").split(", "))), ""]
    L.append("| model | B x T | trainer | timed steps | median ms | min | max | spread | tokens/s | fsdp.c / this |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    labels = {"fsdp.c": "fsdp.c (fp32)", "llm.c": "llm.c train_gpt2 (fp32)",
              "pytorch": "PyTorch %s eager (fp32)" % m.get("torch", "?")}
    for cfg in res["configs"]:
        for side in ("fsdp.c", "llm.c", "pytorch"):
            s = cfg["sides"].get(side)
            if not s:
                continue
            L.append("| %s | %dx%d | %s | %d | %s | %s | %s | %.0f%% | %.0f | %s |" % (
                cfg["model"], cfg["batch"], cfg["seq"], labels[side], s["steps"], ms(s["median_ms"]), ms(s["min_ms"]),
                ms(s["max_ms"]), 100 * s["spread"], s["tokens_per_s"], "%.2fx" % s["fsdp_over_this"]))
    blas = m.get("torch_blas", "")
    L.append("")
    L.append("Command: `LLMC_DIR=... scripts/bench_llmc.sh --cpu --threads %s --rounds %s --steps %s --warmup %s%s%s` "
             "(%s)." % (m.get("threads", "?"), m.get("rounds", "?"), m.get("steps", "?"), m.get("warmup", "?"),
                        " --torch-blas DIR" if blas and "/blas/" not in blas else "",
                        " --vectors avx2" if m.get("vectors") == "avx2" else "",
                        "DIR: an optimized libblas.so.3, see docs/performance.md" if "openblas" in blas else
                        "PyTorch with the reference BLAS: not a fair baseline"))
    for ck in res.get("loss_checks", []):
        L.append("")
        L.append("Same checkpoint, same batches: the losses of the first two steps agree (%s)." % "; ".join(
            "step %d: %.6f and %.6f, %.0e relative" % (s["step"], s["fsdp.c"], s["llm.c"], s["relative"]) for s in ck["steps"])
            if ck["agree"] else "LOSSES DISAGREE: see results.md")
    return L


def block(name, lines):
    return ["<!-- %s results -->" % name] + lines + ["<!-- end of %s results -->" % name]


def gpu_block(gpu):
    if gpu:
        return block("gpu", gpu_section(gpu))
    return block("gpu", ["No GPU figures from `make gpu-report` or the GPU bundle yet. The last GPU measurements (an "
                         "H100, 2026-11-25, against PyTorch FSDP2 on one rank only) are in [%s](%s)." % (HISTORY, HISTORY)])


def section(gpu, cpu):
    L = gpu_block(gpu)
    if cpu:
        L += [""] + block("cpu", cpu_section(cpu))
    L += ["", "How to measure these again: [docs/performance.md](docs/performance.md), \"Against llm.c, and one command "
          "for a GPU\". Older figures and how they came about: [%s](%s)." % (HISTORY, HISTORY)]
    return "\n".join(L) + "\n"


def replace_block(path, name, text):
    """Replaces what stands between "<!-- NAME -->" and "<!-- end of NAME -->" in the file at path
    (the README's GPU or CPU results, docs/performance.md's per-group table) with text."""
    doc = open(path).read()
    start, end = "<!-- %s -->\n" % name, "<!-- end of %s -->" % name
    i, j = doc.find(start), doc.find(end)
    if i < 0 or j < i:
        raise BadInput("%s has no '%s' ... '%s' markers" % (path, start.strip(), end))
    with open(path, "w") as f:
        f.write(doc[: i + len(start)] + text + doc[j:])


def main(argv):
    p = argparse.ArgumentParser(description="the README's results section from result folders")
    p.add_argument("--gpu", help="a scripts/gpu_report.sh folder")
    p.add_argument("--cpu", help="a scripts/bench_llmc.sh --cpu folder")
    p.add_argument("--out", help="write the section to this file")
    p.add_argument("--write", help="replace the text between the results markers of this file (README.md)")
    a = p.parse_args(argv)
    if not a.gpu and not a.cpu:
        p.error("give --gpu DIR, --cpu DIR or both")
    try:
        text = section(a.gpu, a.cpu)
        sys.stdout.write(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        if a.write:
            doc = open(a.write).read()
            if START not in doc or doc.find(END) < doc.find(START):
                raise BadInput("%s has no '%s' ... '%s' markers" % (a.write, START.strip(), END))
            if a.gpu and a.cpu:
                replace_block(a.write, "results", text)
            elif a.gpu:  # only this machine's block: the other's figures stay
                replace_block(a.write, "gpu results", "\n".join(gpu_section(a.gpu)) + "\n")
            else:
                replace_block(a.write, "cpu results", "\n".join(cpu_section(a.cpu)) + "\n")
    except BadInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
