#!/usr/bin/env python3
"""bench_report.py: the report of a benchmark sweep (scripts/bench.sh).

    python3 scripts/bench_report.py DIR

Reads every JSON file under DIR (the --bench-json results of train_gpt / train_gpt_cpu and
of scripts/bench_torch.py; peak.json, the --peak run, gives the measured matmul rate), the
sweep's manifest.tsv, meta.txt and commands.txt when present (bench.sh writes them), and the
--log files (JSON lines, one per step). Writes:

  DIR/results.md    device, date, the measured peak, one markdown table row per run, the runs
                    that were skipped or failed, the plots, and the exact commands
  DIR/results.json  the same rows, machine-readable (with the parameter counts and FLOPs)
  DIR/*.png         with matplotlib (when importable; else results.md says so):
                    tflops_mfu_vs_params.png, comm_vs_link.png, loss_curves.png

Only the standard library (+ optional matplotlib). scripts/bench_torch.py imports the model
shapes and the FLOP count from here: parse_model, param_count and model_flops are the Python
twins of layers/config.c (presets, custom forms, gpt_flops, t5_flops) and of the parameter
list of layers/gpt.c and layers/t5.c, so both sides of a comparison count the same work.
"""
import csv
import datetime
import glob
import json
import math
import os
import re
import sys

# ---- model shapes: layers/config.c --------------------------------------------------------

# name: (L, C, H, V, T)
GPT_PRESETS = {
    "gpt2-124m": (12, 768, 12, 50257, 1024), "gpt2-350m": (24, 1024, 16, 50257, 1024),
    "gpt2-774m": (36, 1280, 20, 50257, 1024), "gpt2-1.5b": (48, 1600, 25, 50257, 1024),
    "gpt3-2.7b": (32, 2560, 32, 50257, 2048), "gpt3-6.7b": (32, 4096, 32, 50257, 2048),
    "gpt3-13b": (40, 5120, 40, 50257, 2048), "gpt3-175b": (96, 12288, 96, 50257, 2048),
}
# name: (L, C, H, D, F, gated); encoder and decoder have L blocks each; V = 32128
T5_PRESETS = {
    "t5-small": (6, 512, 8, 64, 2048, 0), "t5-base": (12, 768, 12, 64, 3072, 0),
    "t5-large": (24, 1024, 16, 64, 4096, 0), "t5-3b": (24, 1024, 32, 128, 16384, 0),
    "t5-11b": (24, 1024, 128, 128, 65536, 0), "t5v1.1-small": (8, 512, 6, 64, 1024, 1),
    "t5v1.1-base": (12, 768, 12, 64, 2048, 1), "t5v1.1-large": (24, 1024, 16, 64, 2816, 1),
    "t5v1.1-xl": (24, 2048, 32, 64, 5120, 1), "t5v1.1-xxl": (24, 4096, 64, 64, 10240, 1),
}
T5_VOCAB = 32128
NUM_BUCKETS, MAX_DISTANCE = 32, 128  # T5 relative position bias (layers/t5.c)


def pad_vocab(V):
    return (V + 127) // 128 * 128


def _gpt(name, L, C, H, V, T):
    return dict(kind="gpt", name=name, L=L, Ld=0, C=C, H=H, D=C // H, F=4 * C, V=V, Vp=pad_vocab(V), T=T,
                gated=0, tied=1)


def _t5(name, L, Ld, C, H, D, F, V, gated):
    return dict(kind="t5", name=name, L=L, Ld=Ld, C=C, H=H, D=D, F=F, V=V, Vp=pad_vocab(V), T=0, gated=gated,
                tied=0 if gated else 1)


def _parse_kv(s, keys, vals):
    if not s:
        return
    for item in s.split(","):
        if len(item) < 3 or item[0] not in keys or item[1] != "=":
            raise ValueError("bad key in '%s': expected one of the keys %s as K=value" % (item, keys))
        v = int(item[2:])
        if v < 1 or v > 1 << 24:
            raise ValueError("bad value for %s in '%s'" % (item[0], item))
        vals[keys.index(item[0])] = v


def parse_model(spec):
    """A preset name or a custom form (gpt:L=..,C=..,H=..,V=..,T=.. / t5:L,M,C,H,D,F,V /
    t5v1.1:...), as layers/config.c's model_config_parse; raises ValueError."""
    if spec in GPT_PRESETS:
        return _gpt(spec, *GPT_PRESETS[spec])
    if spec in T5_PRESETS:
        L, C, H, D, F, gated = T5_PRESETS[spec]
        return _t5(spec, L, L, C, H, D, F, T5_VOCAB, gated)
    if spec == "gpt" or spec.startswith("gpt:"):
        vals = [2, 64, 4, 256, 64]  # L, C, H, V, T
        _parse_kv(spec[4:], "LCHVT", vals)
        if vals[1] % vals[2]:
            raise ValueError("model %s: the width C=%d must be divisible by H=%d" % (spec, vals[1], vals[2]))
        return _gpt(spec, *vals)
    if spec.startswith("t5:") or spec.startswith("t5v1.1:"):
        gated = spec.startswith("t5v1.1:")
        vals = [2, 0, 64, 4, 16, 128, 512]  # L, M, C, H, D, F, V
        _parse_kv(spec[7 if gated else 3:], "LMCHDFV", vals)
        L, M, C, H, D, F, V = vals
        return _t5(spec, L, M or L, C, H, D, F, V, int(gated))
    raise ValueError("unknown model '%s'" % spec)


def _attention_pairs(Tq, Tk, causal):
    return Tq * (Tq + 1) / 2.0 if causal else float(Tq) * Tk


def gpt_flops(c, B, T):
    """layers/config.c gpt_flops: matmul FLOPs of forward + backward of one micro-batch."""
    N, C, HD = float(B) * T, c["C"], float(c["H"]) * c["D"]
    block = (2 * N * C * 3 * HD + 2 * 2 * B * _attention_pairs(T, T, True) * HD + 2 * N * HD * C +
             2 * N * C * c["F"] * 2)
    forward = c["L"] * block + 2 * N * C * c["Vp"]
    return 3 * forward


def t5_flops(c, B, Td, Te):
    """layers/config.c t5_flops."""
    Ne, Nd, C, I = float(B) * Te, float(B) * Td, c["C"], float(c["H"]) * c["D"]
    ff_up = 2.0 * c["F"] if c["gated"] else c["F"]
    F = c["F"]
    enc = (2 * Ne * C * 3 * I + 2 * 2 * B * _attention_pairs(Te, Te, False) * I + 2 * Ne * I * C +
           2 * Ne * C * ff_up + 2 * Ne * F * C)
    dec = (2 * Nd * C * 3 * I + 2 * 2 * B * _attention_pairs(Td, Td, True) * I + 2 * Nd * I * C +
           2 * Nd * C * I + 2 * Ne * C * 2 * I + 2 * 2 * B * _attention_pairs(Td, Te, False) * I + 2 * Nd * I * C +
           2 * Nd * C * ff_up + 2 * Nd * F * C)
    forward = c["L"] * enc + c["Ld"] * dec + 2 * Nd * C * c["Vp"]
    return 3 * forward


def model_flops(c, B, T, Te):
    """model_flops of layers/model.c: T is the GPT sequence / the T5 decoder length."""
    return gpt_flops(c, B, T) if c["kind"] == "gpt" else t5_flops(c, B, T, Te)


def tokens_per_micro_batch(c, B, T, Te):
    """The tokens train/report.c counts for tokens/s: B*T (GPT), B*(Te+Td) (T5)."""
    return B * (T + Te) if c["kind"] == "t5" else B * T


def param_count(c):
    """Parameters as the trainer's start-up table counts them (live elements: the embedding
    and an untied lm_head have V rows, not Vp)."""
    C, V, L = c["C"], c["V"], c["L"]
    if c["kind"] == "gpt":
        block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
        return V * C + c["T"] * C + 2 * C + L * block
    I, F = c["H"] * c["D"], c["F"]
    FI = 2 * F if c["gated"] else F
    enc = 2 * C + 3 * I * C + C * I + FI * C + C * F
    dec = 3 * C + 3 * I * C + C * I + I * C + 2 * I * C + C * I + FI * C + C * F
    root = V * C + 2 * NUM_BUCKETS * c["H"] + 2 * C + (0 if c["tied"] else V * C)
    return root + L * enc + c["Ld"] * dec


def datasheet_peak_flops(device_name):
    """train/report.c device_peak_flops: dense bf16 peak of known GPUs, 0 when unknown."""
    if "H100" in device_name or "H200" in device_name:
        return 989e12
    if "A100" in device_name:
        return 312e12
    return 0.0


# ---- reading a results directory ----------------------------------------------------------

def read_manifest(d):
    """manifest.tsv (bench.sh): one line per planned run; the last line of a json path wins."""
    rows = []
    path = os.path.join(d, "manifest.tsv")
    if os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                rows.append(r)
    return rows


def read_meta(d):
    meta = {}
    path = os.path.join(d, "meta.txt")
    if os.path.exists(path):
        for line in open(path):
            if ":" in line:
                k, v = line.split(":", 1)
                meta[k.strip()] = v.strip()
    return meta


def cpu_vectors(meta):
    """The vectors each side of a scripts/bench_llmc.sh --cpu run computed with (meta.txt), as a
    phrase; empty for a run from before they were recorded."""
    if not meta.get("vectors"):
        return ""
    sides = "fsdp.c %s, llm.c %s, PyTorch %s" % (meta.get("fsdp_vectors") or "?", meta.get("llmc_arch") or "?",
                                                 meta.get("torch_vectors") or "?")
    if meta["vectors"] == "avx2":
        return "AVX2 + FMA vectors only, AVX-512 turned off on every side (%s)" % sides
    return "each side's own vectors (%s)" % sides


def read_log(path):
    steps = []
    try:
        for line in open(path):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if "loss" in o and "step" in o:
                steps.append((o["step"], o["loss"]))
    except OSError:
        pass
    return steps


def num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def load(d):
    manifest = read_manifest(d)
    by_json = {}
    for r in manifest:
        if r.get("json"):
            by_json[os.path.normpath(r["json"])] = r
    runs, bad, peak = [], [], None
    for path in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
        rel = os.path.normpath(os.path.relpath(path, d))
        if rel == "results.json":
            continue
        try:
            j = json.load(open(path))
        except (ValueError, OSError) as e:
            bad.append((rel, str(e)))
            continue
        if not isinstance(j, dict) or "step_ms_median" not in j:
            continue
        m = by_json.get(rel, {})
        if m.get("group") == "peak" or os.path.basename(rel) == "peak.json":
            peak = dict(j, file=rel)
            continue
        runs.append(make_row(j, m, rel, d))
    return runs, bad, peak, manifest


def make_row(j, m, rel, d):
    r = dict(j)
    r["file"] = rel
    r["run"] = m.get("run") or os.path.splitext(os.path.basename(rel))[0]
    r["group"] = m.get("group") or ("models" if not j.get("sim_world") else "sim")
    b = str(j.get("backend", "?"))
    r["is_torch"] = b.startswith("pytorch")
    r["backend_label"] = b if r["is_torch"] else "fsdp.c (%s)" % b

    def setting(key, mkey, default=None):
        if j.get(key) is not None:
            return j[key]
        v = m.get(mkey)
        return v if v not in (None, "", "-") else default

    if r["is_torch"]:
        r["strategy"] = "FSDP2 1 rank" if j.get("fsdp2") else ("1 GPU, no FSDP" if b == "pytorch-tuned" else "no FSDP2")
        r["prefetch"], r["K"], r["sim_world"], r["sim_link"] = "-", "-", None, None
    else:
        r["strategy"] = j.get("shard", "?")
        r["prefetch"] = setting("prefetch", "prefetch", "both")
        r["K"] = setting("limit_all_gathers", "K", "2")
        sw = setting("sim_world", "sim_world")
        sl = setting("sim_link_gbps", "sim_link")
        r["sim_world"] = int(float(sw)) if sw not in (None, "") else None
        r["sim_link"] = float(sl) if sl not in (None, "") else None
        if not r["sim_world"] or r["sim_world"] <= 1:
            r["sim_world"], r["sim_link"] = None, None
    try:
        cfg = parse_model(j["model"])
    except (ValueError, KeyError):
        cfg = None
    r["cfg"] = cfg
    r["params"] = j.get("params") or (param_count(cfg) if cfg else None)
    if cfg and num(j.get("batch")) and num(j.get("seq")):
        accum = j.get("accum") or 1
        r["flops_per_step_per_rank"] = accum * model_flops(cfg, j["batch"], j["seq"], j.get("enc_len") or 0)
    else:
        r["flops_per_step_per_rank"] = None
    r["predicted_step_ms"], r["predicted_on"] = read_prediction(d, r["run"])
    log = m.get("log")
    r["log"] = log if log and os.path.exists(os.path.join(d, log)) else None
    if not r["log"]:
        guess = os.path.join("logs", r["run"] + ".jsonl")
        r["log"] = guess if os.path.exists(os.path.join(d, guess)) else None
    return r


def read_prediction(d, run):
    """The timeline's predicted step (ms) and GPU for a run, from predict/<run>.txt (bench.sh
    runs `--predict GPU --world 1` with the run's options); (None, None) when there is none."""
    try:
        text = open(os.path.join(d, "predict", run + ".txt")).read()
    except OSError:
        return None, None
    ms = re.search(r"^\| step time \(ms\)\s*\|\s*([0-9.]+)", text, re.M)
    gpu = re.search(r"^predict \| [^|]* \| \d+ x (\S+)", text, re.M)
    return (float(ms.group(1)) if ms else None), (gpu.group(1) if gpu else None)


def predicted_on(runs):
    gpus = sorted(set(r["predicted_on"] for r in runs if r.get("predicted_on")))
    return ", ".join(gpus) if gpus else "no catalogue GPU (nothing predicted)"


def fmt_predicted(r):
    p, m = num(r.get("predicted_step_ms")), num(r.get("step_ms_median"))
    if p is None:
        return "-"
    return "%s (%s)" % (fmt_num(p, "%.2f"), "%.2fx" % (m / p) if m and p > 0 else "-")


# ---- formatting -----------------------------------------------------------------------------

def fmt_params(n):
    if n is None:
        return "?"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return "%.3g%s" % (n / div, unit)
    return str(n)


def fmt_num(x, big="%.1f"):
    x = num(x)
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return big % x if abs(x) >= 10 else "%.3g" % x


def fmt_pct(x):
    x = num(x)
    return "-" if x is None else "%.1f%%" % (100 * x)


def fmt_gib(b):
    b = num(b)
    if b is None:
        return "-"
    g = b / 2.0 ** 30
    return "%.2f" % g if g >= 0.1 else "%.3g" % g


def shape_of(r):
    if r.get("enc_len"):
        return "%dx(%d+%d)" % (r.get("batch", 0), r["enc_len"], r.get("seq", 0))
    return "%dx%d" % (r.get("batch", 0), r.get("seq", 0))


def match_key(r):
    return (r.get("model"), r.get("batch"), r.get("seq"), r.get("enc_len") or 0, r.get("accum") or 1)


def add_ratios(runs):
    """ours / PyTorch: tokens/s of an fsdp.c run without a simulated link over the PyTorch run
    of the same model and micro-batch shape: the tuned single-GPU run, and FSDP2 on one rank
    (eager, and torch.compile when there is one)."""
    torch_rows = {}
    for r in runs:
        if r["is_torch"]:
            torch_rows.setdefault(match_key(r), {})[r["backend"]] = r
    for r in runs:
        r["ratio_eager"] = r["ratio_compile"] = r["ratio_tuned"] = None
        if r["is_torch"] or r["sim_world"]:
            continue
        t = torch_rows.get(match_key(r), {})
        ours = num(r.get("tokens_per_s_per_rank"))
        for backend, key in (("pytorch", "ratio_eager"), ("pytorch+compile", "ratio_compile"),
                             ("pytorch-tuned", "ratio_tuned")):
            theirs = num(t.get(backend, {}).get("tokens_per_s_per_rank"))
            if ours and theirs:
                r[key] = ours / theirs


def fmt_ratio(r):
    e, c = r.get("ratio_eager"), r.get("ratio_compile")
    if e is None and c is None:
        return "-"
    if c is None:
        return "%.2f" % e
    return "%s / %.2f" % ("-" if e is None else "%.2f" % e, c)


GROUP_ORDER = {"models": 0, "torch": 0, "strategy": 1, "link": 1, "prefetch": 1, "limit": 1, "sim": 1}
BACKEND_ORDER = {"pytorch-tuned": 1, "pytorch": 2, "pytorch+compile": 3}


def sort_key(r):
    sim = 1 if r["sim_world"] else GROUP_ORDER.get(r["group"], 0)
    return (sim, (r["cfg"] or {}).get("kind", "~"), r["params"] or 0, r.get("model", ""),
            BACKEND_ORDER.get(r.get("backend"), 0), str(r["strategy"]), str(r["prefetch"]), str(r["K"]),
            r["sim_link"] or 0, r["run"])


COLUMNS = ["model", "params", "backend", "strategy", "prefetch", "K", "sim link", "B x T",
           "step ms median (min-max)", "tokens/s per GPU", "model TFLOPS per GPU", "MFU",
           "MFU (measured peak)", "exposed comm ms", "memory GiB", "ours / PyTorch 1 GPU", "ours / FSDP2",
           "predicted step ms (measured / predicted)", "run"]


def table_row(r, peak_tflops):
    sim = "%d x %g GB/s" % (r["sim_world"], r["sim_link"]) if r["sim_world"] else "-"
    steps = "%s (%s-%s)" % (fmt_num(r.get("step_ms_median"), "%.2f"), fmt_num(r.get("step_ms_min"), "%.2f"),
                            fmt_num(r.get("step_ms_max"), "%.2f"))
    tflops = num(r.get("model_tflops_per_rank"))
    mfu_measured = tflops / peak_tflops if tflops is not None and peak_tflops else None
    r["mfu_measured_peak"] = mfu_measured
    tok = num(r.get("tokens_per_s_per_rank"))
    cells = [r.get("model", "?"), fmt_params(r["params"]), r["backend_label"], str(r["strategy"]), str(r["prefetch"]),
             str(r["K"]), sim, shape_of(r), steps, "-" if tok is None else "%.0f" % tok, fmt_num(tflops),
             fmt_pct(r.get("mfu")), fmt_pct(mfu_measured), fmt_num(r.get("exposed_comm_ms_median"), "%.1f"),
             fmt_gib(r.get("memory_bytes_per_rank")), ("-" if r.get("ratio_tuned") is None else "%.2f" % r["ratio_tuned"]), fmt_ratio(r),
             fmt_predicted(r), r["run"]]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


# ---- plots ----------------------------------------------------------------------------------

def make_plots(d, runs, peak_tflops):
    """Returns (list of (file, caption), note)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 (any import problem means: no plots)
        return [], "matplotlib is not importable by %s (%s): plots skipped" % (sys.executable, e.__class__.__name__)
    made = []

    # TFLOPS and MFU against model size: runs without a simulated link, default settings.
    base = [r for r in runs if not r["sim_world"] and r["params"] and num(r.get("model_tflops_per_rank")) is not None
            and (r["is_torch"] or (r["strategy"] == "full" and str(r["prefetch"]) == "both" and str(r["K"]) == "2"))]
    if base:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        series = {}
        for r in base:
            series.setdefault((r["backend_label"], (r["cfg"] or {}).get("kind", "?")), []).append(r)
        use_datasheet = any(num(r.get("mfu")) is not None for r in base)
        for (label, kind), rs in sorted(series.items()):
            rs.sort(key=lambda r: r["params"])
            x = [r["params"] for r in rs]
            marker = "o" if kind == "gpt" else "s"
            axes[0].plot(x, [r["model_tflops_per_rank"] for r in rs], marker=marker, label="%s %s" % (label, kind.upper()))
            mfu = [num(r.get("mfu")) if use_datasheet else
                   (r["model_tflops_per_rank"] / peak_tflops if peak_tflops else None) for r in rs]
            pts = [(a, 100 * b) for a, b in zip(x, mfu) if b is not None]
            if pts:
                axes[1].plot([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                             label="%s %s" % (label, kind.upper()))
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xlabel("parameters")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        axes[0].set_ylabel("model TFLOPS per GPU")
        axes[1].set_ylabel("MFU %% (%s)" % ("datasheet peak" if use_datasheet else
                                            "measured --peak %.3g TFLOPS" % peak_tflops if peak_tflops else "no peak"))
        fig.suptitle("Throughput against model size")
        fig.tight_layout()
        fig.savefig(os.path.join(d, "tflops_mfu_vs_params.png"), dpi=110)
        plt.close(fig)
        made.append(("tflops_mfu_vs_params.png", "model TFLOPS and MFU per GPU against parameters"))

    # Exposed communication against the simulated link bandwidth.
    sim = [r for r in runs if r["sim_world"] and num(r.get("exposed_comm_ms_median")) is not None]
    if sim:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        series = {}
        for r in sim:
            key = "%s %s prefetch=%s K=%s W=%d" % (r["model"], r["strategy"], r["prefetch"], r["K"], r["sim_world"])
            series.setdefault(key, []).append(r)
        for key, rs in sorted(series.items()):
            rs.sort(key=lambda r: r["sim_link"])
            x = [r["sim_link"] for r in rs]
            style = "o-" if len(rs) > 1 else "o"
            axes[0].plot(x, [r["exposed_comm_ms_median"] for r in rs], style, label=key)
            axes[1].plot(x, [r["step_ms_median"] for r in rs], style, label=key)
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xlabel("simulated link GB/s")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        axes[0].set_ylabel("exposed communication ms per step")
        axes[1].set_ylabel("step ms (median)")
        fig.suptitle("Simulated link: exposed communication")
        fig.tight_layout()
        fig.savefig(os.path.join(d, "comm_vs_link.png"), dpi=110)
        plt.close(fig)
        made.append(("comm_vs_link.png", "exposed communication and step time against the simulated link"))

    # Loss curves from the --log files of the model runs (no simulated link).
    logged = [r for r in runs if r["log"] and not r["sim_world"]]
    curves = {}
    for r in logged:
        pts = read_log(os.path.join(d, r["log"]))
        if pts:
            curves.setdefault(r["model"], []).append((r, pts))
    if curves:
        n = len(curves)
        cols = min(n, 4)
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
        for i, (model, rs) in enumerate(sorted(curves.items(), key=lambda kv: kv[1][0][0]["params"] or 0)):
            ax = axes[i // cols][i % cols]
            for r, pts in rs:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label="%s %s" % (r["backend_label"], r["strategy"]))
            ax.set_title(model, fontsize=8)
            ax.set_xlabel("step")
            ax.set_ylabel("loss")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=6)
        for i in range(n, rows * cols):
            axes[i // cols][i % cols].axis("off")
        fig.suptitle("Training loss (the bench runs' --log, warm-up steps included)")
        fig.tight_layout()
        fig.savefig(os.path.join(d, "loss_curves.png"), dpi=110)
        plt.close(fig)
        made.append(("loss_curves.png", "training loss per step from the --log files"))
    return made, None


# ---- where a step goes: ncu kernel times (bench.sh's profile part) -----------------------

PROFILE_GROUPS = {}  # run: measured and predicted ms per kernel group (results.json)
NCU_UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}


def kernel_group(name):
    """A kernel's line in the table: cuBLAS(Lt)'s own kernels (nvjet, cutlass, gemm) as one, the
    others by their function name without arguments or namespace."""
    n = name[5:] if name.startswith("void ") else name
    for prefix in ("(anonymous namespace)::", "<unnamed>::"):
        n = n.replace(prefix, "")
    n = n.split("(")[0].strip()
    low = n.lower()
    if low.startswith("nvjet") or "gemm" in low or "cutlass" in low:
        return "matmuls (cuBLAS)"
    return n


def read_profile(path):
    """{kernel line: [launches, ms]} from ncu --csv --metrics gpu__time_duration.sum (the traced
    program's own output, mixed in, is skipped: ncu's CSV lines start with a quote)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    groups = {}
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = NCU_UNIT_MS.get(r.get("Metric Unit", ""))
        if scale is None:
            raise ValueError("unknown ncu unit '%s' in %s" % (r.get("Metric Unit"), path))
        g = groups.setdefault(kernel_group(r.get("Kernel Name", "?")), [0, 0.0])
        g[0] += 1
        g[1] += float(r["Metric Value"].replace(",", "")) * scale
    return groups


# Kernel groups for the measured-against-predicted table: (group, the kernels.h calls whose
# modelled time the timeline's trace names (a trace name is the call, or the call followed by a
# space or a colon and a detail: "matmul_backward dinp"), the starts of the CUDA kernels ncu names
# for them). The bias gradients' column sums are one kernel (bias_sums_kernel), counted with the
# matmuls whose gradients they finish; the norms' parameter gradients are summed inside
# norm_backward_kernel.
KERNEL_GROUPS = [
    ("matmuls (cuBLASLt) and bias gradients", ("matmul_forward", "matmul_forward_gelu", "matmul_backward",
     "bias gradient"), ("matmuls (cuBLAS)", "matmul_fallback_kernel", "bias_sums_kernel")),
    ("attention", ("attention_forward", "attention_backward"), ("attn_",)),
    ("norms", ("layernorm_forward", "residual_layernorm_forward",
     "layernorm_backward", "rmsnorm_forward", "residual_rmsnorm_forward", "rmsnorm_backward"),
     ("norm_",)),
    ("activations", ("gelu_forward", "gelu_backward", "relu_forward", "relu_backward", "geglu_forward", "geglu_backward"),
     ("gelu_", "relu_", "geglu_")),
    ("classifier and loss", ("classifier_forward_backward", "softmax_row", "loss_accumulate"),
     ("classifier_", "loss_accumulate_")),
    ("embeddings and position bias", ("embedding_forward", "embedding_backward", "relative_position_bucket",
     "relative_bias_forward", "relative_bias_backward"), ("embedding_", "relative_bias_", "iota_kernel", "cub::", "Device")),
    ("AdamW and gradient norm", ("adamw_update", "adamw_update_ranges", "block_sumsq", "exact_sum", "grad_norm_words",
     "step_prepare", "step_decide"), ("adamw_", "block_sumsq_", "exact_", "grad_norm_words_", "step_prepare_",
                                     "step_decide_")),
    ("casts, adds, scales, fills", ("add_inplace", "scale_act", "fill_zero_act", "fill_zero_f32", "scale_f32", "add_f32",
     "cast_f32_to_act", "cast_act_to_f32", "narrow_f32_to_act"), ("add_", "scale_", "cast_", "narrow_", "fill")),
    ("collectives (NCCL)", ("all-gather", "reduce-scatter", "all-reduce"), ("nccl",)),
]


def group_of_measured(name):
    for group, _, starts in KERNEL_GROUPS:
        if any(name.startswith(x) for x in starts):
            return group
    return None


def group_of_predicted(name):
    for group, calls, _ in KERNEL_GROUPS:
        if any(name == c or name.startswith(c + " ") or name.startswith(c + ":") for c in calls):
            return group
    return None


def read_predicted_kernels(path):
    """{kernels.h call: [calls, ms]} of one step from the timeline's Chrome trace (--predict GPU
    --trace): the complete events of category "kernel" (their durations are modelled, in us)."""
    with open(path) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    calls = {}
    for e in events:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            c = calls.setdefault(e.get("name", "?"), [0, 0.0])
            c[0] += 1
            c[1] += float(e.get("dur", 0.0)) / 1e3
    return calls


def group_table(measured, steps, predicted):
    """Measured (ncu, per step) beside predicted (timeline trace) per kernel group."""
    rows = {}
    unmatched_measured, unmatched_predicted = [], []
    for name, (n, ms) in measured.items():
        g = group_of_measured(name)
        if g is None:
            unmatched_measured.append(name)
            g = "other kernels"
        r = rows.setdefault(g, [0.0, 0.0, 0])
        r[1] += ms / steps
        r[2] += n / steps
    for name, (n, ms) in predicted.items():
        g = group_of_predicted(name)
        if g is None:
            unmatched_predicted.append(name)
            g = "other (modelled; not ncu kernels: copies)" if "copy" in name else "other kernels"
        rows.setdefault(g, [0.0, 0.0, 0])[0] += ms
    order = [g for g, _, _ in KERNEL_GROUPS] + ["other kernels", "other (modelled; not ncu kernels: copies)"]
    out = ["| kernel group | predicted ms | measured ms per step | measured / predicted | launches per step |",
           "|---|---|---|---|---|"]
    tp = tm = 0.0
    for g in order:
        if g not in rows:
            continue
        p, m, n = rows[g]
        tp, tm = tp + p, tm + m
        out.append("| %s | %.3f | %.3f | %s | %g |" % (g, p, m, "%.2f" % (m / p) if p > 0 else "-", n))
    out.append("| every kernel | %.3f | %.3f | %s | |" % (tp, tm, "%.2f" % (tm / tp) if tp > 0 else "-"))
    if unmatched_measured:
        out += ["", "Measured kernels in no group: %s." % ", ".join(sorted(unmatched_measured)[:20])]
    return out, {"predicted_ms": tp, "measured_ms": tm,
                 "groups": {g: {"predicted_ms": v[0], "measured_ms": v[1]} for g, v in rows.items()}}


def profile_section(d, manifest, top=15):
    out = []
    for m in manifest:
        if m.get("group") != "profile" or m.get("status") not in ("ok", "reused"):
            continue
        path = os.path.join(d, m.get("json", ""))
        counted = re.match(r"(\d+) steps", m.get("note", ""))
        steps = int(counted.group(1)) if counted else 1
        try:
            groups = read_profile(path)
        except (OSError, ValueError) as e:
            out += ["- %s: unreadable profile: %s" % (m.get("run"), e), ""]
            continue
        total = sum(g[1] for g in groups.values())
        launches = sum(g[0] for g in groups.values())
        if not total:
            continue
        out.append("%s, batch %s (`%s`): %.2f ms of kernels per step in %d launches (ncu, %d steps, caches and "
                   "clocks as they are). The step's own time is in the Results table; the difference is time no "
                   "kernel ran (host work, synchronizations, launch gaps)." % (m.get("model"), m.get("batch"), m.get("run"),
                                                                             total / steps, launches // steps, steps))
        out += ["", "| kernel | launches per step | ms per step | us per launch | share |", "|---|---|---|---|---|"]
        ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])
        for name, (n, ms) in ranked[:top]:
            out.append("| %s | %g | %.3f | %.1f | %.1f%% |" % (name, n / steps, ms / steps, 1e3 * ms / n, 100 * ms / total))
        rest = ranked[top:]
        if rest:
            n, ms = sum(g[0] for _, g in rest), sum(g[1] for _, g in rest)
            out.append("| %d other kernels | %g | %.3f | %.1f | %.1f%% |" % (len(rest), n / steps, ms / steps, 1e3 * ms / n,
                                                                          100 * ms / total))
        out.append("")
        trace = os.path.join(d, "predict", m.get("run", "") + ".trace.json")
        if os.path.exists(trace):
            try:
                table, summary = group_table(groups, steps, read_predicted_kernels(trace))
            except (OSError, ValueError, KeyError) as e:
                out += ["- %s: unreadable predicted trace: %s" % (m.get("run"), e), ""]
                continue
            PROFILE_GROUPS[m.get("run")] = summary
            out += ["Per kernel group, beside the timeline's modelled kernels of the same step (`predict/%s.trace.json`):"
                    % m.get("run"), ""] + table + [""]
    return out


# ---- the report ------------------------------------------------------------------------------

def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: bench_report.py DIR   (writes DIR/results.md, DIR/results.json and plots)")
        return 0 if len(argv) == 2 else 2
    d = argv[1]
    if not os.path.isdir(d):
        print("error: %s is not a directory" % d, file=sys.stderr)
        return 2
    runs, bad, peak, manifest = load(d)
    meta = read_meta(d)
    peak_tflops = num(peak.get("peak_tflops")) if peak and "measured" in str(peak.get("peak_source", "")) else None
    add_ratios(runs)
    runs.sort(key=sort_key)

    devices = sorted(set(str(r.get("device", "?")) for r in runs) | ({str(peak.get("device"))} if peak else set()))
    out = ["# fsdp.c benchmark results", ""]
    out.append("- device: %s" % (", ".join(devices) or "?"))
    if meta.get("gpu"):
        out.append("- nvidia-smi: %s" % meta["gpu"])
    out.append("- sweep started: %s" % meta.get("date", "?"))
    out.append("- report written: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    for key in ("mode", "host", "git", "binary", "torch", "free memory", "data"):
        if meta.get(key):
            out.append("- %s: %s" % (key, meta[key]))
    if peak:
        out.append("- peak matmul rate: %.4g TFLOPS (%s, %s)" % (peak.get("peak_tflops", 0), peak.get("peak_source", "?"),
                                                                  peak.get("device", "?")))
    else:
        out.append("- peak matmul rate: not measured (no peak.json)")
    out += ["",
            "MFU is against the datasheet dense bf16 peak of the device (H100/H200 989, A100 312 TFLOPS; "
            "'-' when unknown); \"MFU (measured peak)\" against the rate `--peak` measured for the trainer's "
            "own matmul on this device. TFLOPS count matmul FLOPs only (layers/config.c: 2mnk per "
            "product, backward twice the forward, causal attention counts the scores it computes); the "
            "PyTorch baseline uses the same count. Tokens/s counts B*T (GPT) and B*(enc+dec) (T5). "
            "Memory is fsdp.c's memory plan per rank, and torch.cuda.max_memory_allocated for PyTorch. "
            "A simulated link (`--sim-world W --sim-link GBPS`) runs one GPU but makes every all-gather / "
            "reduce-scatter wait as long as a ring collective over W ranks at GBPS GB/s would; strategies, "
            "prefetch and K only differ in time under it. \"ours / PyTorch 1 GPU\" is fsdp.c's tokens/s over "
            "PyTorch's on one GPU without FSDP, the whole model and loss compiled, flash SDPA, fused AdamW "
            "(`bench_torch.py --tuned`: what a PyTorch user with one GPU runs), for the same model and "
            "micro-batch; \"ours / FSDP2\" over PyTorch FSDP2 on one rank, eager / per-block torch.compile, "
            "which measures FSDP2's own per-unit overhead rather than a rival. \"predicted step ms\" is "
            "the timeline backend's step for the same run and options (`--predict GPU --world 1`, "
            "predict/README.md) on %s, and the measured median over it: above 1, this device was slower "
            "than the model says." % predicted_on(runs), ""]
    out.append("## Results (%d runs)" % len(runs))
    out.append("")
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "|".join("---" for _ in COLUMNS) + "|")
    for r in runs:
        out.append(table_row(r, peak_tflops))
    out.append("")

    # skipped and failed runs (manifest), unreadable JSON
    notes = [m for m in manifest if m.get("status") not in (None, "", "ok", "reused", "planned")]
    if notes or bad:
        out += ["## Skipped or failed", ""]
        seen = set()
        for m in notes:
            key = (m.get("run"), m.get("status"), m.get("note"))
            if key in seen:
                continue
            seen.add(key)
            out.append("- %s (%s, %s): **%s** %s" % (m.get("run"), m.get("model"), m.get("backend"), m.get("status"),
                                                    m.get("note", "")))
        for rel, err in bad:
            out.append("- %s: **unreadable JSON** %s" % (rel, err))
        out.append("")

    prof = profile_section(d, manifest)
    if prof:
        out += ["## Where a step goes", ""] + prof

    # notes on runs that did run (a batch lowered to fit, PyTorch without FSDP2, ...)
    run_names = {r["run"] for r in runs}
    run_notes = []
    for m in manifest:
        if m.get("status") in ("ok", "reused") and m.get("note") and m.get("run") in run_names:
            line = "- %s: %s" % (m["run"], m["note"])
            if line not in run_notes:
                run_notes.append(line)
    if run_notes:
        out += ["## Notes", ""] + run_notes + [""]

    plots, note = make_plots(d, runs, peak_tflops)
    out += ["## Plots", ""]
    if note:
        out.append(note)
    for f, caption in plots:
        out.append("![%s](%s)" % (caption, f))
        out.append("")
    if not note and not plots:
        out.append("nothing to plot")
    out.append("")

    cmd_path = os.path.join(d, "commands.txt")
    out += ["## Commands", ""]
    if os.path.exists(cmd_path):
        out += ["The exact commands of the sweep (commands.txt):", "", "```"]
        out += [line.rstrip("\n") for line in open(cmd_path)]
        out.append("```")
    else:
        out.append("no commands.txt in this directory")
    out.append("")
    with open(os.path.join(d, "results.md"), "w") as f:
        f.write("\n".join(out))

    keep = ["run", "file", "group", "model", "params", "backend", "backend_label", "device", "strategy", "prefetch", "K",
            "sim_world", "sim_link", "batch", "seq", "enc_len", "accum", "steps", "step_ms_median", "step_ms_min",
            "step_ms_max", "tokens_per_s_per_rank", "model_tflops_per_rank", "hardware_tflops_per_rank", "mfu",
            "mfu_measured_peak", "peak_tflops", "peak_source", "exposed_comm_ms_median", "memory_bytes_per_rank",
            "flops_per_step_per_rank", "ratio_eager", "ratio_compile", "ratio_tuned", "predicted_step_ms", "predicted_on", "log"]
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump({"peak_tflops_measured": peak_tflops, "devices": devices, "profile_groups": PROFILE_GROUPS,
                   "rows": [{k: r.get(k) for k in keep} for r in runs],
                   "plots": [p[0] for p in plots], "plot_note": note}, f, indent=1)
    print("bench_report: wrote %s (%d rows, %d plots%s)" % (os.path.join(d, "results.md"), len(runs), len(plots),
                                                          "; " + note if note else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
