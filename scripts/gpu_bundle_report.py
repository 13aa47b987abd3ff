#!/usr/bin/env python3
"""gpu_bundle_report.py: the report of a GPU bundle's run (scripts/gpu_bundle.sh), and from it the
README's GPU results and docs/performance.md's per-group table.

    python3 scripts/gpu_bundle_report.py RUN [--out FILE] [--write-readme README.md]
                                             [--write-performance docs/performance.md]

RUN is what the run left: its output folder (results.tgz there is unpacked into a temporary
folder), results.tgz itself, or the work folder. The report (--out, else printed):
  - the machine: GPU, memory, driver, clocks, the libraries found, the bundle's commit and build;
  - every step's outcome (steps.tsv): ok, failed, timeout, not available, skipped;
  - correctness on the GPU: the kernel test's and train-check's counts, and every failing line;
  - fsdp.c beside llm.c (llmc/results.json, scripts/side_by_side.py's), the ratio first;
  - where a step goes: ncu's kernel times of one step summed per kernel group (the groups of
    scripts/bench_report.py) beside the bundle's prediction of the same step for this GPU,
    measured / predicted per group, the gaps between kernels (the measured step time less its
    kernels; predicted likewise), llm.c's step in the same groups where it was profiled, and the
    attention kernels' TFLOPS per launch;
  - ncu's detail of one attention forward and backward launch (throughputs, occupancy, the
    warp stall reasons);
  - the optional steps: PyTorch tuned on one GPU, t5-base per group, the next GPT-2 size, Llama 3.2
    1B's tokens/s and MFU beside its prediction.
--write-readme replaces the GPU block of README.md's results section (between "<!-- gpu results
-->" and "<!-- end of gpu results -->"; scripts/results_section.py writes the same block), and
--write-performance the block between "<!-- gpu groups -->" and "<!-- end of gpu groups -->" of
docs/performance.md with the per-group table. Both refuse what results_section.py refuses: a
ratio that its own medians do not give (stale or inverted), and they refuse a run whose llm.c
step did not finish. Standard library only.
"""
import argparse
import csv
import json
import os
import re
import shutil
import statistics
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import (KERNEL_GROUPS, group_of_measured, group_of_predicted, parse_model,  # noqa: E402
                          read_meta, read_predicted_kernels, read_profile)
from results_section import BadInput, check_side_by_side, load_json, ms, replace_block  # noqa: E402

# llm.c's kernels in the same groups (its train_gpt2.cu and llmc/*.cuh names; cuBLAS(Lt)'s own
# kernels are one line, "matmuls (cuBLAS)", as for fsdp.c)
LLMC_GROUPS = [
    ("matmuls (cuBLASLt) and bias gradients", ("matmuls (cuBLAS)", "matmul_backward_bias")),
    ("attention", ("permute_kernel", "unpermute_kernel", "softmax_forward", "softmax_autoregressive", "cudnn",
                   "flash", "sm90_", "fmha")),
    ("norms", ("layernorm_", "fused_residual_forward", "residual_forward")),
    ("activations", ("gelu_",)),
    ("classifier and loss", ("fused_classifier",)),
    ("embeddings and position bias", ("encoder_",)),
    ("AdamW and gradient norm", ("adamw_", "global_norm")),
    ("casts, adds, scales, fills", ("copy_and_cast", "cast_", "fill", "memset")),
    ("collectives (NCCL)", ("nccl",)),
]
GROUP_ORDER = [g for g, _, _ in KERNEL_GROUPS] + ["other kernels"]
GPU_KEYS = (("h200", "h200"), ("h100", "h100-sxm"))  # nvidia-smi's name -> the bundle's predictions


def open_run(path):
    """The work folder of a run (a temporary copy when it comes as results.tgz)."""
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "steps.tsv")) and \
            not os.path.exists(os.path.join(path, "results.tgz")):
        return path, None
    tgz = path if path.endswith(".tgz") else os.path.join(path, "results.tgz")
    if not os.path.exists(tgz):
        raise BadInput("%s: neither a work folder (steps.tsv) nor an output folder with results.tgz" % path)
    tmp = tempfile.mkdtemp(prefix="bundle-report.")
    with tarfile.open(tgz) as t:
        for m in t.getmembers():
            if m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or m.isdir()):
                raise BadInput("%s: unexpected member %s" % (tgz, m.name))
        t.extractall(tmp)
    tops = os.listdir(tmp)
    if len(tops) != 1:
        raise BadInput("%s: expected one folder inside, found %s" % (tgz, tops))
    return os.path.join(tmp, tops[0]), tmp


def run_meta(d):
    """meta.txt (the machine), with the shapes the run used from its bundle.conf."""
    meta = read_meta(d)
    conf = os.path.join(d, "bundle.conf")
    if os.path.exists(conf):
        for line in open(conf):
            m = re.match(r"^(BENCH_MODEL|PROFILE_BATCH|BENCH_SEQ|T5_MODEL|T5_BATCH|LLAMA_MODEL)=['\"]?([^'\"\n]*)", line)
            if m:
                meta[m.group(1).lower()] = m.group(2)
    return meta


def read_steps(d):
    with open(os.path.join(d, "steps.tsv"), newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def summary_line(path):
    if not os.path.exists(path):
        return None
    text = open(path, errors="replace").read()
    lines = re.findall(r"^(\d+) passed, (\d+) failed$", text, re.M)
    fails = [x for x in text.splitlines() if x.startswith("FAIL")]
    return (int(lines[-1][0]), int(lines[-1][1])) if lines else None, fails


def predictions_dir(d, gpu):
    low = (gpu or "").lower()
    for key, name in GPU_KEYS:
        if key in low and os.path.isdir(os.path.join(d, "predict", name)):
            return os.path.join(d, "predict", name), name
    return None, None


def predicted_step_ms(txt):
    m = re.search(r"\| step time \(ms\)\s*\|\s*([0-9.]+)", open(txt).read()) if os.path.exists(txt) else None
    return float(m.group(1)) if m else None


def llmc_group(name):
    for group, starts in LLMC_GROUPS:
        if any(name.startswith(s) or s in name.lower() for s in starts):
            return group
    return "other kernels"


def measured_groups(path, steps, grouper):
    """{group: [ms per step, launches per step]} and the per-kernel lines of an ncu CSV."""
    kernels = read_profile(path)
    groups = {}
    for name, (n, t) in kernels.items():
        g = grouper(name) or "other kernels"
        r = groups.setdefault(g, [0.0, 0.0])
        r[0] += t / steps
        r[1] += n / steps
    return groups, kernels


def attention_tflops(csv_path, steps, model, batch, seq):
    """The attention kernels' TFLOPS per launch at this shape (causal GPT: half the T x T products;
    the forward's two products, the backward's five)."""
    if not os.path.exists(csv_path):
        return []
    c = parse_model(model)
    if c.get("kind") != "gpt":
        return []
    H, T = c["H"], seq
    D = c["C"] // H
    fwd = 2 * 2 * batch * H * T * T * D / 2
    out = []
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(line for line in f if line.startswith('"'))
                if r.get("Metric Name") == "gpu__time_duration.sum"]
    for label, prefix, flops in (("forward", "attn_fwd", fwd), ("backward", "attn_bwd", 2.5 * fwd)):
        us = [float(r["Metric Value"].replace(",", "")) * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0,
                                                            "ms": 1e3, "msecond": 1e3}[r["Metric Unit"]]
              for r in rows if prefix in r.get("Kernel Name", "")]
        if us:
            med = statistics.median(us)
            out.append("attention %s: %d launches per step, median %.1f us, %.3g TFLOPS (%.3g GFLOP each)" % (
                label, len(us) // steps, med, flops / (med * 1e-6) / 1e12, flops / 1e9))
    return out


def group_section(d, meta, llmc_res, who="fsdp.c", model=None, batch=None, seq=None):
    """The per-group table of one profiled fsdp.c step, beside the prediction and llm.c."""
    prof = os.path.join(d, "profile")
    slug = re.sub(r"[^A-Za-z0-9.-]", "_", "%s-%s-B%s" % (who, model, batch))
    path = os.path.join(prof, slug + ".csv")
    if not os.path.exists(path):
        return None, None
    steps_file = os.path.join(prof, slug + ".steps")
    steps = int(open(steps_file).read().split()[-1]) if os.path.exists(steps_file) else 1
    measured, _ = measured_groups(path, steps, group_of_measured)
    pdir, gpu_key = predictions_dir(d, meta.get("gpu"))
    predicted, pstep = {}, None
    if pdir:
        trace = os.path.join(pdir, slug + ".trace.json")
        if os.path.exists(trace):
            for name, (n, t) in read_predicted_kernels(trace).items():
                g = group_of_predicted(name) or ("other (modelled; not ncu kernels: copies)" if "copy" in name
                                                 else "other kernels")
                predicted[g] = predicted.get(g, 0.0) + t
            pstep = predicted_step_ms(os.path.join(pdir, slug + ".txt"))
    llmc = {}
    lpath = os.path.join(prof, re.sub(r"[^A-Za-z0-9.-]", "_", "llm.c-%s-B%s" % (model, batch)) + ".csv")
    if os.path.exists(lpath):
        lsteps_file = lpath[:-4] + ".steps"
        lsteps = int(open(lsteps_file).read().split()[-1]) if os.path.exists(lsteps_file) else 1
        llmc, _ = measured_groups(lpath, lsteps, llmc_group)
    # the measured step of the same shape, from the side by side (fsdp.c's median; llm.c's)
    step_ms = {}
    for cfg in (llmc_res or {}).get("configs", []):
        if cfg["model"] == model and cfg["batch"] == batch:
            for side in ("fsdp.c", "llm.c"):
                if side in cfg["sides"]:
                    step_ms[side] = cfg["sides"][side]["median_ms"]
    L = ["| kernel group | predicted ms | measured ms | measured / predicted | launches | llm.c ms | llm.c launches |",
         "|---|---|---|---|---|---|---|"]
    names = [g for g in GROUP_ORDER if g in measured or g in predicted or g in llmc] + \
            [g for g in predicted if g not in GROUP_ORDER]
    tot = [0.0, 0.0, 0.0]
    summary = {}
    for g in names:
        p, (m, n), (lm, ln) = predicted.get(g), measured.get(g, (0.0, 0)), llmc.get(g, (None, None))
        tot[0] += p or 0.0
        tot[1] += m
        tot[2] += lm or 0.0
        summary[g] = {"predicted_ms": p, "measured_ms": m, "llmc_ms": lm}
        L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            g, "-" if p is None else "%.3f" % p, "%.3f" % m if g in measured else "-",
            "%.2f" % (m / p) if p and g in measured else "-", "%g" % n if g in measured else "-",
            "-" if lm is None else "%.3f" % lm, "-" if ln is None else "%g" % ln))
    L.append("| every kernel | %.3f | %.3f | %s | | %s | |" % (
        tot[0], tot[1], "%.2f" % (tot[1] / tot[0]) if tot[0] else "-", "%.3f" % tot[2] if llmc else "-"))
    gap_p = pstep - tot[0] if pstep is not None and predicted else None
    gap_m = step_ms["fsdp.c"] - tot[1] if "fsdp.c" in step_ms else None
    gap_l = step_ms["llm.c"] - tot[2] if "llm.c" in step_ms and llmc else None
    L.append("| gaps between kernels (step less its kernels) | %s | %s | | | %s | |" % (
        "-" if gap_p is None else "%.3f" % gap_p, "-" if gap_m is None else "%.3f" % gap_m,
        "-" if gap_l is None else "%.3f" % gap_l))
    L.append("| the step | %s | %s | %s | | %s | |" % (
        "-" if pstep is None else "%.3f" % pstep, ms(step_ms.get("fsdp.c")),
        "%.2f" % (step_ms["fsdp.c"] / pstep) if pstep and "fsdp.c" in step_ms else "-", ms(step_ms.get("llm.c"))))
    head = ("%s, batch %s%s, one step (ncu, `profile/%s.csv`%s), against the bundle's prediction for %s "
            "(`predict/%s/%s.trace.json`)." % (model, batch, ", T=%s" % seq if seq else "", slug,
                                              ", two steps averaged" if steps == 2 else "", gpu_key or "this GPU (none)",
                                              gpu_key or "-", slug))
    extra = attention_tflops(path, steps, model, batch, seq) if seq else []
    return [head, ""] + L + ([""] + ["- " + x for x in extra] if extra else []), {
        "run": slug, "predicted_ms": tot[0], "measured_ms": tot[1], "predicted_step_ms": pstep,
        "measured_step_ms": step_ms.get("fsdp.c"), "groups": summary}


def detail_section(d):
    out = []
    for k, label in (("attn_fwd", "forward"), ("attn_bwd", "backward")):
        path = os.path.join(d, "profile", "detail-%s.csv" % k)
        if not os.path.exists(path):
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(line for line in f if line.startswith('"')))
        if not rows:
            continue
        want = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "Achieved Occupancy",
                "Registers Per Thread", "Dynamic Shared Memory Per Block", "Executed Ipc Active")
        vals = {r.get("Metric Name"): "%s %s" % (r.get("Metric Value"), r.get("Metric Unit", "")) for r in rows}
        stalls = sorted(((float(str(r.get("Metric Value", "0")).replace(",", "") or 0), r["Metric Name"]) for r in rows
                         if r.get("Section Name", "").startswith("Warp State") and "Stall" in r.get("Metric Name", "")),
                        reverse=True)[:4]
        name = rows[0].get("Kernel Name", k)[:80]
        out.append("- attention %s (`%s`): %s%s" % (label, name, "; ".join(
            "%s %s" % (w, vals[w].strip()) for w in want if w in vals),
            "; warp stalls (cycles per instruction): " + ", ".join("%s %.2f" % (n, v) for v, n in stalls) if stalls else ""))
    return out


def llama_section(d, meta, run):
    """The llama step: train_gpt's --bench JSON beside the bundle's prediction of the same run."""
    model = meta.get("llama_model") or run["model"]  # as the bundle spelled it (its predictions' names)
    slug = re.sub(r"[^A-Za-z0-9.-]", "_", "fsdp.c-%s-B%d" % (model, run["batch"]))
    pdir, gname = predictions_dir(d, meta.get("gpu"))
    txt = os.path.join(pdir, slug + ".txt") if pdir else None
    pred_ms = predicted_step_ms(txt) if txt else None
    pred = open(txt).read() if pred_ms else ""
    m = re.search(r"\| MFU \(dense bf16 peak\)\s*\|\s*([0-9.]+)%", pred)
    L = ["## Llama", "", "| model | B x T | | step ms | tokens/s | MFU |", "|---|---|---|---|---|---|",
         "| %s | %dx%d | measured (median of %d) | %s | %.0f | %s |" % (
             model, run["batch"], run["seq"], run["steps"], ms(run["step_ms_median"]),
             run["tokens_per_s_per_rank"], "-" if run.get("mfu") is None else "%.1f%%" % (100 * run["mfu"]))]
    if pred_ms:
        L.append("| %s | %dx%d | predicted (%s) | %s | %.0f | %s |" % (
            model, run["batch"], run["seq"], gname, ms(pred_ms), run["batch"] * run["seq"] / (pred_ms / 1e3),
            "%s%%" % m.group(1) if m else "-"))
        L += ["", "Measured / predicted step time: %.2f." % (run["step_ms_median"] / pred_ms)]
    else:
        L += ["", "No prediction for this GPU in the bundle."]
    return L


def side_by_side_section(res, title):
    L = [title, "", "| model | B x T | trainer | median ms | tokens/s | TFLOPS | MFU | fsdp.c / this |",
         "|---|---|---|---|---|---|---|---|"]
    for cfg in res.get("configs", []):
        for side in ("fsdp.c", "llm.c", "llm.c+cudnn"):
            s = cfg["sides"].get(side)
            if s:
                L.append("| %s | %dx%d | %s | %s | %.0f | %.0f | %s | %s |" % (
                    cfg["model"], cfg["batch"], cfg["seq"], side, ms(s["median_ms"]), s["tokens_per_s"], s["tflops"],
                    "-" if s.get("mfu") is None else "%.1f%%" % (100 * s["mfu"]),
                    "-" if s.get("fsdp_over_this") is None else "%.2fx" % s["fsdp_over_this"]))
    notes = ["- %s: not run: %s" % (side, why) for side, why in res.get("skipped", [])] + \
            ["- %s" % n for n in res.get("notes", [])] + ["- FAILED: %s" % f for f in res.get("failed", [])]
    return L + ([""] + notes if notes else [])


def load_side_by_side(d, sub):
    path = os.path.join(d, sub, "results.json")
    res = load_json(path)
    if res:
        check_side_by_side(res, path)
    return res, path


def report(d):
    meta = run_meta(d)
    steps = read_steps(d)
    status = {s["step"]: s for s in steps}
    gpu = meta.get("gpu") if meta.get("gpu") not in (None, "", "none") else None
    L = ["# fsdp.c on %s" % (gpu or "a machine without nvidia-smi (the CUDA simulator?)"), ""]
    L.append("%s; %s, driver %s; bundle commit %s built %s (%s); llm.c commit %s; torch %s; CPU %s." % (
        meta.get("date", "?"), meta.get("gpu_memory", "?"), meta.get("driver", "?"), meta.get("commit", "?"),
        meta.get("bundle_date", "?"), meta.get("toolkit", "?"), (meta.get("llmc_commit") or "-")[:12],
        meta.get("torch", "?"), meta.get("cpu", "?")))
    if meta.get("gpu_line"):
        L += ["", "nvidia-smi: " + meta["gpu_line"]]
    libs = os.path.join(d, "libraries.txt")
    if os.path.exists(libs):
        L += ["", "Libraries:", ""] + ["    " + x for x in open(libs).read().splitlines() if x and not x.startswith("#")]
    L += ["", "| step | status | seconds | note |", "|---|---|---|---|"]
    L += ["| %s | %s | %s | %s |" % (s["step"], s["status"], s["seconds"], s.get("note") or "") for s in steps]
    L += ["", "## Correctness on the GPU", ""]
    for name, path, what in (("kernels", "kernels.txt", "attention and step-control kernels against the CPU reference"),
                             ("train-check", "logs/train-check.txt", "10 steps of tiny GPT, T5, T5 v1.1 against the CPU trainer")):
        got = summary_line(os.path.join(d, path))
        st = status.get(name, {}).get("status", "not run")
        if got and got[0]:
            L.append("- %s (%s): %d passed, %d failed%s" % (name, what, got[0][0], got[0][1],
                                                            "".join("\n  - " + x for x in got[1][:20])))
        else:
            L.append("- %s (%s): %s" % (name, what, st))
    llmc_res, _ = load_side_by_side(d, "llmc")
    L.append("")
    if llmc_res:
        h = llmc_res.get("headline")
        lead = ("**fsdp.c: %.2fx %s's tokens/s** for %s at B=%d, T=%d." % (
            h["ratio"], h["against"], h["model"], h["batch"], h["seq"]) if h else "fsdp.c alone (llm.c did not run).")
        L += side_by_side_section(llmc_res, "## fsdp.c beside llm.c\n\n" + lead)
    else:
        L += ["## fsdp.c beside llm.c", "", "No results (the llmc step: %s)." % status.get("llmc", {}).get("status", "not run")]
    L += ["", "## Where a step goes", ""]
    groups = {}
    for model, batch, seq in ((meta.get("bench_model"), meta.get("profile_batch"), meta.get("bench_seq")),
                              (meta.get("t5_model"), meta.get("t5_batch"), None)):
        if not model:
            continue
        sec, summ = group_section(d, meta, llmc_res, model=model, batch=int(batch), seq=int(seq) if seq else None)
        if sec:
            L += sec + [""]
            groups[summ["run"]] = summ
    if not groups:
        L.append("No kernel profile (the profile step: %s)." % status.get("profile", {}).get("status", "not run"))
    det = detail_section(d)
    if det:
        L += ["", "## Attention, one launch each (ncu sections)", ""] + det
    off, _ = load_side_by_side(d, "llmc-gelu-off")
    for cfg in (off or {}).get("configs", []):
        on = [c for c in (llmc_res or {}).get("configs", []) if (c["model"], c["batch"]) == (cfg["model"], cfg["batch"])]
        s_off, s_on = cfg["sides"].get("fsdp.c"), on[0]["sides"].get("fsdp.c") if on else None
        if s_off:
            L += ["", "## The GELU epilogue", "", "%s B=%d: %s ms with `--gelu-epilogue off` (the product, then the GELU "
                  "kernel)%s." % (cfg["model"], cfg["batch"], ms(s_off["median_ms"]),
                                 ", %s ms with the epilogue (the llmc step): off / on %.3f" % (
                                     ms(s_on["median_ms"]), s_off["median_ms"] / s_on["median_ms"]) if s_on else "")]
    tuned = load_json(os.path.join(d, "torch", "tuned.json"))
    if tuned:
        L += ["", "## PyTorch on one GPU, tuned", "", "%s B=%s: median %s ms, %.0f tokens/s (bench_torch.py --tuned, "
              "torch %s)." % (tuned.get("model"), tuned.get("batch"), ms(tuned.get("step_ms_median")),
                               tuned.get("tokens_per_s_per_rank", 0), meta.get("torch", "?"))]
    larger, _ = load_side_by_side(d, "llmc-larger")
    if larger:
        L += [""] + side_by_side_section(larger, "## The next size")
    llama = load_json(os.path.join(d, "llama", "bench.json"))
    if llama:
        L += [""] + llama_section(d, meta, llama)
    if groups:
        with open(os.path.join(d, "profile", "groups.json"), "w") as f:
            json.dump(groups, f, indent=1)
    return "\n".join(L) + "\n", llmc_res, groups, status


def performance_block(d, meta):
    """docs/performance.md's per-group table: the bench model's profiled step."""
    llmc_res, _ = load_side_by_side(d, "llmc")
    sec, _ = group_section(d, meta, llmc_res, model=meta.get("bench_model"), batch=int(meta.get("profile_batch", 0)),
                           seq=int(meta.get("bench_seq", 0)) or None)
    if not sec:
        raise BadInput("%s: no kernel profile of %s to write a per-group table from" % (d, meta.get("bench_model")))
    return "Measured on one %s (driver %s), %s, bundle commit %s:\n\n%s\n" % (
        meta.get("gpu"), meta.get("driver"), meta.get("date"), meta.get("commit"), "\n".join(sec))


def main(argv):
    p = argparse.ArgumentParser(description="the report of a GPU bundle's run")
    p.add_argument("run", help="the run's output folder, its results.tgz, or its work folder")
    p.add_argument("--out", help="write the report here (else print it)")
    p.add_argument("--write-readme", help="replace the GPU block of this README's results section")
    p.add_argument("--write-performance", help="replace the per-group block of this docs/performance.md")
    a = p.parse_args(argv)
    tmp = None
    try:
        d, tmp = open_run(a.run)
        meta = run_meta(d)
        text, llmc_res, groups, status = report(d)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        if a.write_readme or a.write_performance:
            if meta.get("gpu") in (None, "", "none"):
                raise BadInput("%s: this run had no GPU (no nvidia-smi: the CUDA simulator?): its figures are not the "
                               "README's" % d)
            if status.get("llmc", {}).get("status") != "ok" or not llmc_res:
                raise BadInput("%s: the llmc step did not finish (%s): no README or docs figures from this run" % (
                    d, status.get("llmc", {}).get("status", "not run")))
        if a.write_readme:
            import results_section
            block = "\n".join(results_section.gpu_section(d)) + "\n"
            replace_block(a.write_readme, "gpu results", block)
        if a.write_performance:
            replace_block(a.write_performance, "gpu groups", performance_block(d, meta))
    except BadInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
