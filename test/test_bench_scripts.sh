#!/usr/bin/env bash
# test_bench_scripts.sh: the benchmark pipeline (scripts/bench.sh, bench_report.py,
# bench_torch.py) on CPU, end to end, in well under a minute on 2 cores:
#   - bench.sh --cpu --quick: a --peak run, tiny GPT and T5 models, gpt3-175b planned and skipped
#     for memory, the PyTorch baseline (Debian's /usr/bin/python3 torch; torch.compile skipped
#     when that torch has none), and the simulated-link sweep (strategies, prefetch, K, links)
#   - results.md: the header columns, one table row per run JSON, the skips, the commands, the
#     ratio column, plots when matplotlib is importable (else the note that they were skipped)
#   - the numbers behind it: every JSON parses; the report's parameter counts and bench_torch's
#     FLOPs equal the trainer's own; the exposed communication of the slowest simulated link is
#     at least the ring-model time of the collectives
#   - bench.sh --dry-run of the GPU sweep (no GPU needed): the commands it would run
#   - rerunning into the same directory reuses the runs
#   - bench_report.py on hand-made GPU results (datasheet MFU, measured peak, eager and
#     torch.compile ratios, an ncu kernel profile), the paths this machine cannot produce; the
#     profile part skipped on the CPU
#   - bench_llmc.sh --cpu on a tiny model: fsdp.c and PyTorch interleaved, the llm.c side
#     skipped without LLMC_DIR (and run beside fsdp.c from the same checkpoint when LLMC_DIR is
#     set: the first two losses must agree), the ratio recomputed from the logs; its pieces
#     (the patcher, the checkpoint writer, the Zipf shard); side_by_side.py on hand-made llm.c
#     GPU logs; results_section.py with planted inverted ratios; gpu_report.sh's plan
# Prints ok/FAIL per check and "N passed, M failed"; exits 1 on failure.
set -u
cd "$(dirname "$0")/.." || exit 2
source test/cases.sh
export OMP_NUM_THREADS=1
PY=python3
command -v $PY >/dev/null 2>&1 || PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
check() {  # check NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name"; fi
}

[ -x ./train_gpt_cpu ] || make train_gpt_cpu >/dev/null 2>&1
[ -f data/addition/train_000.bin ] || make data/addition/train_000.bin >/dev/null 2>&1

# ---- usage -----------------------------------------------------------------------------
out=$(scripts/bench.sh --help 2>&1)
check "bench.sh --help prints the usage" grep -q -- "--quick" <<< "$out"
scripts/bench.sh --bogus >/dev/null 2>&1
[ $? = 2 ] && ok "bench.sh refuses an unknown option (exit 2)" || bad "bench.sh refuses an unknown option (exit 2)"
scripts/bench.sh --parts peak,foo --dry-run --out "$TMP/x" >/dev/null 2>&1
[ $? = 2 ] && ok "bench.sh refuses an unknown part" || bad "bench.sh refuses an unknown part"

# ---- the GPU sweep, dry run -------------------------------------------------------------
D=$TMP/dry
scripts/bench.sh --dry-run --out "$D" > "$TMP/dry.txt" 2>&1
rc=$?
check "bench.sh --dry-run (GPU sweep) exits 0 without a GPU or train_gpt" test $rc = 0
missing=""
for m in gpt2-124m gpt2-350m gpt2-774m gpt2-1.5b t5-small t5-base t5-large t5-3b; do
  grep -q "^./train_gpt --model $m .*--bench-json" "$D/commands.txt" || missing+=" $m"
  grep -q "bench_torch.py --model $m .*--compile" "$D/commands.txt" || missing+=" torch+compile:$m"
  grep -q "bench_torch.py --model $m .*--tuned" "$D/commands.txt" || missing+=" torch-tuned:$m"
done
[ -z "$missing" ] && ok "GPU sweep: all 8 models with fsdp.c, PyTorch tuned on 1 GPU, FSDP2 eager and compiled runs" ||
  bad "GPU sweep models" "missing$missing"
n_peak=$(grep -c -- "--peak" "$D/commands.txt")
[ "$n_peak" = 1 ] && ok "GPU sweep: --peak exactly once" || bad "GPU sweep: --peak exactly once" "$n_peak"
links=$(grep -o -- "--sim-world 8 --sim-link [0-9.]*" "$D/commands.txt" | awk '{print $4}' | sort -n -u | tr '\n' ' ')
[ "$links" = "5 10 25 50 100 200 " ] && ok "GPU sweep: simulated links 5..200 GB/s on 8 ranks" || bad "GPU sweep links" "$links"
n_pred=$(grep -c -- "--predict h100-sxm --world 1" "$D/commands.txt")
[ "$n_pred" = 0 ] && ok "GPU sweep without nvidia-smi predicts nothing" || bad "GPU sweep without nvidia-smi predicts nothing" "$n_pred"
BENCH_PREDICT_GPU=h100-sxm scripts/bench.sh --dry-run --parts models --out "$TMP/dry2" > /dev/null 2>&1
n_pred=$(grep -c -- "^./train_gpt --model .* --predict h100-sxm --world 1$" "$TMP/dry2/commands.txt")
[ "$n_pred" = 8 ] && ok "GPU sweep on an H100: each of the 8 model runs predicted with --predict h100-sxm --world 1" ||
  bad "GPU sweep on an H100: 8 predictions" "$n_pred"
for what in "--shard grad-op" "--shard none" "--prefetch none" "--limit-all-gathers 1" "--limit-all-gathers 4"; do
  check "GPU sweep has $what under the simulated link" grep -q -- "$what .*--sim-link" "$D/commands.txt"
done
check "GPU sweep's link sweep uses gpt2-350m" grep -q -- "--model gpt2-350m .*--sim-link 5 " "$D/commands.txt"
n_prof=$(grep -c -- "ncu --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none ./train_gpt --model gpt2-124m .*--steps 2$" "$D/commands.txt")
[ "$n_prof" = 1 ] && ok "GPU sweep: one ncu profile of gpt2-124m, 2 steps" || bad "GPU sweep: one ncu profile" "$n_prof"
n_prof=$(grep -c -- "^ncu .* ./train_gpt --model t5-small .*--steps 2$" "$D/commands.txt")
[ "$n_prof" = 1 ] && ok "GPU sweep: one ncu profile of the first T5 model (t5-small)" || bad "GPU sweep: one T5 ncu profile" "$n_prof"
BENCH_PREDICT_GPU=h100-sxm scripts/bench.sh --dry-run --parts profile --models "gpt2-124m t5-base" --out "$TMP/dry3" > /dev/null 2>&1
check "GPU profile part on an H100: ncu on gpt2-124m and t5-base, each beside the timeline's trace of the same step" \
  test "$(grep -cE -- "^ncu .* --model (gpt2-124m|t5-base) " "$TMP/dry3/commands.txt")$(grep -cE -- \
    "^./train_gpt --model (gpt2-124m --batch 8 --seq 1024|t5-base --batch 16 --enc-len 512 --dec-len 114) --predict h100-sxm --world 1 --trace .*/predict/profile-(gpt2-124m-B8|t5-base-B16).trace.json$" \
    "$TMP/dry3/commands.txt")" = 22

# ---- the CPU sweep ---------------------------------------------------------------------
O=$TMP/sweep
t0=$(date +%s)
BENCH_PREDICT_GPU=a100-80gb BENCH_PYTHON=/usr/bin/python3 scripts/bench.sh --cpu --quick --out "$O" > "$TMP/sweep.txt" 2>&1
rc=$?
t1=$(date +%s)
if [ $rc = 0 ]; then ok "bench.sh --cpu --quick exits 0 ($((t1 - t0)) s)"; else bad "bench.sh --cpu --quick exits 0" "exit $rc: $(tail -5 "$TMP/sweep.txt")"; fi
R=$O/results.md
check "results.md exists" test -s "$R"
for f in commands.txt manifest.tsv meta.txt peak.json results.json; do check "$f written" test -s "$O/$f"; done
header="| model | params | backend | strategy | prefetch | K | sim link | B x T | step ms median (min-max) | tokens/s per GPU | model TFLOPS per GPU | MFU | MFU (measured peak) | exposed comm ms | memory GiB | ours / PyTorch 1 GPU | ours / FSDP2 | predicted step ms (measured / predicted) | run |"
check "results.md has the table header with every column" grep -qF "$header" "$R"

# Everything below reads the directory with one python program that prints ok/FAIL lines.
have_torch=0
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 && have_torch=1
have_compile=0
[ $have_torch = 1 ] && /usr/bin/python3 -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)' >/dev/null 2>&1 && have_compile=1
have_mpl=0
# the pythons bench.sh may report with (BENCH_REPORT_PYTHON, else the first of these with matplotlib)
for p in ${BENCH_REPORT_PYTHON:-} python3 /usr/bin/python3; do
  command -v "$p" >/dev/null 2>&1 && "$p" -c 'import matplotlib' >/dev/null 2>&1 && have_mpl=1
done
$PY - "$O" $have_torch $have_compile $have_mpl > "$TMP/checks.txt" 2>&1 <<'EOF'
import glob, json, math, os, re, subprocess, sys
d, have_torch, have_compile, have_mpl = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4] == "1"
def check(name, cond, detail=""):
    print(("ok " if cond else "FAIL ") + name + ("" if cond or not detail else ": " + str(detail)[:300]))
md = open(os.path.join(d, "results.md")).read()
rows = [l for l in md.splitlines() if l.startswith("| ") and not l.startswith("| model |")]
cells = [[c.strip() for c in l.strip("|").split(" | ")] for l in rows]
files = sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True))
bad = []
for f in files:
    try:
        json.load(open(f))
    except ValueError as e:
        bad.append((f, e))
check("all %d JSON files parse" % len(files), files and not bad, bad)
runs = sorted(glob.glob(os.path.join(d, "runs", "*.json")))
names = [os.path.basename(f)[:-5] for f in runs]
check("one table row per run JSON (%d rows, %d runs)" % (len(rows), len(runs)), len(rows) == len(runs) and len(runs) >= 10)
check("every run has its row", all(any(c[-1] == n for c in cells) for n in names), names)
fs = [c for c in cells if c[2].startswith("fsdp.c")]
check("fsdp.c rows for the GPT and T5 models", any(c[0].startswith("gpt:") and c[6] == "-" for c in fs) and
      any(c[0].startswith("t5:") for c in fs))
sim = [c for c in fs if c[6] != "-"]
check("8 simulated-link rows (links, strategies, prefetch none, K 1 and 4)", len(sim) == 8 and
      {c[3] for c in sim} == {"full", "grad-op", "none"} and {c[4] for c in sim} == {"both", "none"} and
      {c[5] for c in sim} == {"1", "2", "4"} and len({c[6] for c in sim}) == 3, sim)
check("MFU (measured peak) filled from peak.json on fsdp.c rows", all(c[12].endswith("%") for c in fs))
check("the measured peak is in the report", "measured with --peak" in md)
# the timeline's prediction of each world-1 fsdp.c run (BENCH_PREDICT_GPU=a100-80gb), and none
# for the simulated links and PyTorch
pred = re.compile(r"^(\d+(\.\d+)?) \((\d+\.\d\d)x\)$")
check("predicted step filled on the fsdp.c model rows", all(pred.match(c[17]) for c in fs if c[6] == "-"),
      [c[17] for c in fs if c[6] == "-"])
check("no prediction on simulated-link and PyTorch rows", all(c[17] == "-" for c in cells if c[6] != "-" or
      not c[2].startswith("fsdp.c")))
check("the report names the GPU predicted on", "on a100-80gb, and the measured median" in md)
res = json.load(open(os.path.join(d, "results.json")))["rows"]
# parameter counts and FLOPs against the trainer's own start-up table
for r in res:
    if not r["run"].startswith("model-"):
        continue
    out = open(os.path.join(d, "out", r["run"] + ".txt")).read()
    p = re.search(r"\| parameters +\| (\d+)", out)
    fl = re.search(r"\| matmul FLOPs per step +\| ([0-9.e+]+)", out)
    check("params of %s = the trainer's %s" % (r["model"], p and p.group(1)), p and int(p.group(1)) == r["params"], r["params"])
    tj = os.path.join(d, "runs", r["run"].replace("model-", "torch-", 1) + ".json")
    if have_torch:
        t = json.load(open(tj))
        check("bench_torch FLOPs of %s = the trainer's %s" % (r["model"], fl and fl.group(1)),
              fl and float("%.4g" % t["flops_per_step"]) == float(fl.group(1)), t["flops_per_step"])
        check("bench_torch JSON has fsdp.c's fields", all(k in t for k in (
            "model", "device", "backend", "ranks", "shard", "batch", "seq", "enc_len", "accum", "steps", "step_ms_median",
            "step_ms_min", "step_ms_max", "tokens_per_s_per_rank", "model_tflops_per_rank", "hardware_tflops_per_rank",
            "mfu", "peak_tflops", "peak_source", "exposed_comm_ms_median", "memory_bytes_per_rank")))
# the prediction is predict_gpt's for the run's own options, and the ratio is measured over it
gpt = [r for r in res if r["run"].startswith("model-gpt_")]
if gpt:
    r = gpt[0]
    out = subprocess.run(["./predict_gpt", "--model", r["model"], "--batch", str(r["batch"]), "--seq", str(r["seq"]),
                          "--shard", "full", "--prefetch", "both", "--limit-all-gathers", "2", "--predict", "a100-80gb",
                          "--world", "1"], capture_output=True, text=True).stdout
    want = re.search(r"\| step time \(ms\)\s*\|\s*([0-9.]+)", out)
    check("predicted step of %s = predict_gpt's %s ms" % (r["model"], want and want.group(1)),
          want and r["predicted_step_ms"] == float(want.group(1)), r["predicted_step_ms"])
    cell = [c[17] for c in cells if c[-1] == r["run"]]
    check("measured / predicted = the median over the prediction", cell and pred.match(cell[0]) and
          abs(float(pred.match(cell[0]).group(3)) - r["step_ms_median"] / r["predicted_step_ms"]) < 0.006, cell)
else:
    check("a GPT model row to check the prediction on", False)
torch_rows = [c for c in cells if c[2] == "pytorch"]
if have_torch:
    check("PyTorch baseline rows (GPT and T5)", len(torch_rows) == 2, torch_rows)
    filled = [c for c in fs if c[6] == "-"]
    check("ratio column ours / PyTorch filled on the fsdp.c model rows",
          filled and all(re.match(r"^\d+\.\d\d", c[16]) for c in filled), [c[16] for c in filled])
    check("ratio = fsdp.c tokens/s / PyTorch tokens/s", all(
        r["ratio_eager"] and abs(r["ratio_eager"] - r["tokens_per_s_per_rank"] /
        [t for t in res if t["backend"] == "pytorch" and t["model"] == r["model"]][0]["tokens_per_s_per_rank"]) < 1e-9
        for r in res if r["run"].startswith("model-")))
    no_fsdp2 = open(os.path.join(d, "manifest.tsv")).read()
    check("the torch run says 'no FSDP2 in this torch'", "no FSDP2 in this torch" in no_fsdp2)
    if have_compile:
        check("torch.compile rows", any(c[2] == "pytorch+compile" for c in cells))
    else:
        check("torch.compile runs recorded as skipped (no torch.compile in this torch)",
              len(re.findall(r"torchc-.*\*\*skipped\*\* --compile requested but torch .* has no torch.compile", md)) == 2)
else:
    print("note: /usr/bin/python3 has no torch: PyTorch rows not checked")
check("gpt3-175b skipped for memory after --plan", re.search(r"model-gpt3-175b-B1 .*\*\*skipped\*\* memory: plan [0-9.]+ GiB", md))
cmds = open(os.path.join(d, "commands.txt")).read()
check("commands.txt has every run's command", all(n + ".json" in cmds for n in names))
check("results.md lists the commands", "## Commands" in md and "--bench-json" in md and "scripts/bench.sh --cpu --quick" in md)
check("--log files with losses for the runs", all(os.path.exists(os.path.join(d, "logs", n + ".jsonl")) and
      json.loads(open(os.path.join(d, "logs", n + ".jsonl")).readline())["loss"] > 0 for n in names))
# the slowest simulated link: exposed communication >= the ring time of every collective
# (gpt:L=4,C=64,H=4,V=256,T=64, fp32 on the CPU, W=8, 0.05 GB/s; full: 1 + 2 x 4 all-gathers
# and 1 + 4 reduce-scatters), as test/test_plan.py derives it
up = lambda x, m: (x + m - 1) // m * m
def numel(shapes):
    end = 0
    for n in shapes:
        end = up(end, 64) + n
    return end
C, V, T, L = 64, 256, 64, 4
root = up(numel([up(V, 128) * C, T * C, C, C]), 128)
block = up(numel([C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]), 128)
ring = lambda e: 7 / 8 * e * 4 / 0.05e9 * 1e3
want = 2 * ring(root) + (2 * L + L) * ring(block)
slow = [r for r in res if r["sim_link"] == 0.05]
check("exposed comm at 8 x 0.05 GB/s >= ring model %.1f ms" % want, slow and slow[0]["exposed_comm_ms_median"] >= 0.95 * want,
      slow and slow[0]["exposed_comm_ms_median"])
pngs = ["tflops_mfu_vs_params.png", "comm_vs_link.png", "loss_curves.png"]
if have_mpl:
    check("plots written (%s)" % ", ".join(pngs), all(open(os.path.join(d, p), "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in pngs
                                                   if os.path.exists(os.path.join(d, p))) and
          all(os.path.exists(os.path.join(d, p)) for p in pngs) and all("](%s)" % p in md for p in pngs))
else:
    print("note: matplotlib is not importable (python3, /usr/bin/python3, BENCH_REPORT_PYTHON): plot files not checked")
    check("results.md says the plots were skipped", "matplotlib is not importable" in md)
EOF
cat "$TMP/checks.txt"
pass=$((pass + $(grep -c '^ok ' "$TMP/checks.txt")))
fail=$((fail + $(grep -c '^FAIL ' "$TMP/checks.txt")))
grep -q '^Traceback' "$TMP/checks.txt" && bad "the result checks ran to the end"

# ---- rerunning into the same directory reuses the runs ---------------------------------
rows_before=$(grep -c '^| [a-z0-9]' "$R")
scripts/bench.sh --cpu --quick --out "$O" --parts peak,models > "$TMP/again.txt" 2>&1
rc=$?
n_reused=$(grep -c ': reused' "$TMP/again.txt")
[ $rc = 0 ] && [ "$n_reused" = 3 ] && ok "a rerun into the same --out reuses the runs (3 reused)" || bad "rerun reuses" "exit $rc, $n_reused reused: $(tail -3 "$TMP/again.txt")"
[ "$(grep -c '^| [a-z0-9]' "$R")" = "$rows_before" ] && ok "the report after the rerun has the same rows" || bad "rows after rerun"

# ---- where memory allows: a batch that does not fit is halved (--plan: gpt:L=2,C=64 at
# B=4 T=64 needs 6132992 bytes, at B=2 4516608)
L=$TMP/low
BENCH_MEMORY_BYTES=5000000 scripts/bench.sh --cpu --quick --parts models --models "gpt:L=2,C=64,H=4,V=256,T=64" \
  --out "$L" > "$TMP/low.txt" 2>&1
rc=$?
check "a batch over the memory budget is halved until the plan fits (B=4 -> 2, recorded)" \
  grep -qE "^model-gpt_L_2_C_64_H_4_V_256_T_64-B2.*ok.batch lowered from 4 to 2 to fit" "$L/manifest.tsv"
check "the lowered run is in the report with B=2" grep -q "| 2x64 |" "$L/results.md"
check "the report notes the lowered batch" grep -q "^- model-gpt_L_2_C_64_H_4_V_256_T_64-B2: batch lowered from 4 to 2 to fit" "$L/results.md"
[ $rc = 0 ] || bad "bench.sh with a small memory budget exits 0" "exit $rc"

# ---- bench_report.py on hand-made GPU results ------------------------------------------
G=$TMP/gpu
mkdir -p "$G/runs"
$PY - "$G" <<'EOF'
import json, os, sys
d = sys.argv[1]
base = dict(device="NVIDIA H100 80GB HBM3", ranks=1, batch=8, seq=1024, enc_len=0, accum=1, steps=10, peak_tflops=989,
            peak_source="datasheet dense bf16", memory_bytes_per_rank=20 * 2**30)
def w(name, **kw):
    r = dict(base, **kw)
    t = r["model_tflops_per_rank"] = r.get("model_tflops_per_rank", 400.0)
    r.setdefault("hardware_tflops_per_rank", t)
    r.setdefault("mfu", t / 989)
    r.setdefault("step_ms_median", 100.0); r.setdefault("step_ms_min", 99.0); r.setdefault("step_ms_max", 101.0)
    r.setdefault("exposed_comm_ms_median", 0.5)
    json.dump(r, open(os.path.join(d, "runs", name + ".json"), "w"))
w("model-gpt2-124m-B8", model="gpt2-124m", backend="cuda", shard="full", tokens_per_s_per_rank=300000.0)
w("torch-gpt2-124m-B8", model="gpt2-124m", backend="pytorch", shard="full", fsdp2=True, tokens_per_s_per_rank=200000.0,
  exposed_comm_ms_median=None)
w("torchc-gpt2-124m-B8", model="gpt2-124m", backend="pytorch+compile", shard="full", fsdp2=True,
  tokens_per_s_per_rank=250000.0, exposed_comm_ms_median=None)
w("torcht-gpt2-124m-B8", model="gpt2-124m", backend="pytorch-tuned", shard="none", fsdp2=False,
  tokens_per_s_per_rank=400000.0, exposed_comm_ms_median=None)
w("model-t5-base-B16", model="t5-base", backend="cuda", shard="full", batch=16, seq=114, enc_len=512,
  tokens_per_s_per_rank=100000.0, model_tflops_per_rank=300.0)
w("sim-gpt2-350m-B8-full-both-K2-link5", model="gpt2-350m", backend="cuda", shard="full", tokens_per_s_per_rank=50000.0,
  exposed_comm_ms_median=250.0)
# the timeline's prediction of the gpt2-124m run (as bench.sh saves predict_gpt's output)
os.makedirs(os.path.join(d, "predict"))
open(os.path.join(d, "predict", "model-gpt2-124m-B8.txt"), "w").write(
    "predict | gpt2-124m | 1 x h100-sxm | network ib3200 (8 GPUs per node, 400 GB/s per node) | full | batch 8 | "
    "seq 1024 | accum 1\n| predicted | value |\n| step time (ms)                           |          80.00 |\n"
    "predict_tflops_per_gpu 500.00\n")
json.dump(dict(base, model="gpt2-124m", backend="cuda", shard="full", peak_tflops=800.0, peak_source="measured with --peak",
               step_ms_median=1, step_ms_min=1, step_ms_max=1, tokens_per_s_per_rank=1, model_tflops_per_rank=1, mfu=0.001,
               exposed_comm_ms_median=0), open(os.path.join(d, "peak.json"), "w"))
with open(os.path.join(d, "manifest.tsv"), "w") as f:
    f.write("run\tgroup\tbackend\tmodel\tbatch\tshape\tshard\tprefetch\tK\tsim_world\tsim_link\tjson\tlog\tstatus\tnote\n")
    f.write("sim-gpt2-350m-B8-full-both-K2-link5\tlink\tfsdp.c\tgpt2-350m\t8\t--seq 1024\tfull\tboth\t2\t8\t5\t"
            "runs/sim-gpt2-350m-B8-full-both-K2-link5.json\t-\tok\t\n")
    f.write("model-gpt2-1.5b-B8\tmodels\tfsdp.c\tgpt2-1.5b\t8\t--seq 1024\t-\t-\t-\t-\t-\t-\t-\tskipped\tmemory: plan 90.00 GiB\n")
EOF
$PY scripts/bench_report.py "$G" > "$TMP/gpu_report.txt" 2>&1
check "bench_report.py on GPU-like results exits 0" test $? = 0
GM=$G/results.md
check "GPU report: device name" grep -q "device: NVIDIA H100 80GB HBM3" "$GM"
check "GPU report: ours / PyTorch 1 GPU 0.75, ours / FSDP2 eager / compiled 1.50 / 1.20, predicted 80 ms (measured 100: 1.25x)" \
  grep -q "| 0.75 | 1.50 / 1.20 | 80.00 (1.25x) | model-gpt2-124m-B8 |" "$GM"
check "GPU report: the tuned single-GPU PyTorch row" grep -q "| gpt2-124m | 124M | pytorch-tuned | 1 GPU, no FSDP |" "$GM"
check "GPU report: a run without a prediction shows none" grep -q "| - | model-t5-base-B16 |" "$GM"
check "GPU report: names the GPU predicted on" grep -q "on h100-sxm, and the measured median" "$GM"
check "GPU report: datasheet MFU 40.4% and measured-peak MFU 50.0%" grep -q "| 40.4% | 50.0% |" "$GM"
check "GPU report: PyTorch FSDP2 row" grep -q "| gpt2-124m | 124M | pytorch | FSDP2 1 rank |" "$GM"
check "GPU report: T5 shape and params" grep -q "| t5-base | 223M | fsdp.c (cuda) | full | both | 2 | - | 16x(512+114) |" "$GM"
check "GPU report: the simulated link from the manifest" grep -q "| 8 x 5 GB/s | 8x1024 |" "$GM"
check "GPU report: the memory skip" grep -q "model-gpt2-1.5b-B8 (gpt2-1.5b, fsdp.c): \*\*skipped\*\* memory: plan 90.00 GiB" "$GM"
check "GPU report: memory in GiB" grep -q "| 20.00 |" "$GM"

# The profile part: skipped on the CPU, and a hand-made ncu CSV (the traced program's output
# mixed in, two units, a cuBLAS kernel, an anonymous-namespace template kernel) summed per step.
P=$TMP/prof
scripts/bench.sh --cpu --quick --parts profile --out "$P" > "$TMP/prof.txt" 2>&1
check "bench.sh --cpu --parts profile exits 0" test $? = 0
check "profile on the CPU: skipped, saying it is a GPU part" \
  grep -q "profile-gpt_L_2_C_64_H_4_V_256_T_64-B4 (gpt:L=2,C=64,H=4,V=256,T=64, fsdp.c): \*\*skipped\*\* ncu profiles CUDA kernels" "$P/results.md"
check "the CPU sweep's default parts have no profile" bash -c "! grep -q profile '$O/manifest.tsv'"
mkdir -p "$G/profile"
cat > "$G/profile/profile-gpt2-124m-B8.csv" <<'CSV'
==PROF== Connected to process 1 (./train_gpt)
step     1/2 | loss 10.5
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","train_gpt","127.0.0.1","nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT","1","13","(384, 1, 1)","(66, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","us","100.00"
"1","1","train_gpt","127.0.0.1","void <unnamed>::attn_fwd_kernel<64, 0>(const __nv_bfloat16 *)","1","13","(128, 1, 1)","(16, 12, 8)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","50,000"
step     2/2 | loss 7.9
"2","1","train_gpt","127.0.0.1","nvjet_sm90_tss_128x160_64x5_2x4_h_badd_NTT","1","13","(384, 1, 1)","(66, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","us","300.00"
"3","1","train_gpt","127.0.0.1","void <unnamed>::attn_fwd_kernel<64, 0>(const __nv_bfloat16 *)","1","13","(128, 1, 1)","(16, 12, 8)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","150,000"
CSV
# the timeline's modelled kernels of the same step (kernels.h call names; a copy is no ncu kernel)
cat > "$G/predict/profile-gpt2-124m-B8.trace.json" <<'JSON'
{"traceEvents": [{"name": "thread_name", "ph": "M", "pid": 0, "tid": 3, "args": {"name": "compute kernels"}},
 {"name": "matmul_forward", "cat": "kernel", "ph": "X", "pid": 0, "tid": 3, "ts": 0, "dur": 100.0},
 {"name": "matmul_backward", "cat": "kernel", "ph": "X", "pid": 0, "tid": 3, "ts": 100, "dur": 60.0},
 {"name": "attention_forward", "cat": "kernel", "ph": "X", "pid": 0, "tid": 3, "ts": 160, "dur": 40.0},
 {"name": "attention_backward", "cat": "kernel", "ph": "X", "pid": 0, "tid": 3, "ts": 200, "dur": 10.0},
 {"name": "adamw_update_ranges", "cat": "kernel", "ph": "X", "pid": 0, "tid": 3, "ts": 210, "dur": 30.0},
 {"name": "copy to device", "cat": "kernel", "ph": "X", "pid": 0, "tid": 3, "ts": 240, "dur": 5.0},
 {"name": "forward root", "cat": "forward", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 999.0}]}
JSON
printf 'profile-gpt2-124m-B8\tprofile\tfsdp.c\tgpt2-124m\t8\t--seq 1024\tfull\tboth\t2\t-\t-\tprofile/profile-gpt2-124m-B8.csv\t-\tok\t2 steps\n' >> "$G/manifest.tsv"
$PY scripts/bench_report.py "$G" > /dev/null 2>&1
check "profile report: 0.30 ms of kernels per step in 2 launches" grep -q "(\`profile-gpt2-124m-B8\`): 0.30 ms of kernels per step in 2 launches" "$GM"
check "profile report: cuBLAS kernels as one line (1 per step, 0.200 ms, 200 us each, 66.7%)" \
  grep -q "^| matmuls (cuBLAS) | 1 | 0.200 | 200.0 | 66.7% |$" "$GM"
check "profile report: ns with thousands separators, namespace and arguments dropped" \
  grep -q "^| attn_fwd_kernel<64, 0> | 1 | 0.100 | 100.0 | 33.3% |$" "$GM"
check "profile report: per kernel group beside the prediction (matmuls 0.160 predicted, 0.200 measured, 1.25)" \
  grep -q "^| matmuls (cuBLASLt) and bias gradients | 0.160 | 0.200 | 1.25 | 1 |$" "$GM"
check "profile report: attention 0.050 predicted, 0.100 measured (2.00); AdamW predicted but not measured" \
  bash -c "grep -q '^| attention | 0.050 | 0.100 | 2.00 | 1 |\$' '$GM' && grep -q '^| AdamW and gradient norm | 0.030 | 0.000 | 0.00 | 0 |\$' '$GM'"
check "profile report: every kernel 0.245 predicted (the copy included), 0.300 measured" \
  grep -q "^| every kernel | 0.245 | 0.300 | 1.22 | |$" "$GM"
sed -i 's/"ns","150,000"/"furlongs","150,000"/' "$G/profile/profile-gpt2-124m-B8.csv"
$PY scripts/bench_report.py "$G" > /dev/null 2>&1
check "profile report: an unknown ncu unit is named, not summed" grep -q "unreadable profile: unknown ncu unit 'furlongs'" "$GM"

# ---- bench_llmc.sh: fsdp.c beside llm.c (and PyTorch), and the table's ratio logic ------
out=$(scripts/bench_llmc.sh --help 2>&1)
check "bench_llmc.sh --help prints the usage" grep -q -- "LLMC_DIR" <<< "$out"
expect "bench_llmc.sh refuses --threads 0" 2 "--threads needs an integer >= 1" scripts/bench_llmc.sh --cpu --threads 0
expect "bench_llmc.sh refuses a T5 model (llm.c trains GPT-2 only)" 2 "'t5-small' is not a GPT model" \
  scripts/bench_llmc.sh --cpu --model t5-small
expect "bench_llmc.sh refuses an LLMC_DIR that is no llm.c checkout" 2 "LLMC_DIR=$TMP is not an llm.c checkout" \
  env LLMC_DIR="$TMP" scripts/bench_llmc.sh --cpu --dry-run --out "$TMP/nollmc"
TINY=(--model gpt:L=1,C=32,H=2,V=128,T=16 --batch 2 --seq 16 --threads 1 --rounds 2 --steps 2 --warmup 1)
# (a) without LLMC_DIR: fsdp.c and PyTorch, and the llm.c side says why it is skipped
A=$TMP/side_a
env -u LLMC_DIR scripts/bench_llmc.sh --cpu "${TINY[@]}" --out "$A" > "$TMP/side_a.txt" 2>&1
rc=$?
check "bench_llmc.sh --cpu without LLMC_DIR exits 0" test $rc = 0
check "without LLMC_DIR the llm.c side says it is skipped and why" bash -c \
  "grep -q 'skip: llm.c: LLMC_DIR is not set' '$TMP/side_a.txt' && grep -q -- '- llm.c: skipped: LLMC_DIR is not set' '$A/results.md'"
check "the fsdp.c row: 4 timed steps (2 rounds x 2), ratio 1.00x" \
  grep -qE '^\| gpt:L=1,C=32,H=2,V=128,T=16 \| 2x16 \| fsdp\.c train_gpt_cpu \(fp32\) \| 4 \| [0-9.]+ \|.* \| 1\.00x \|$' "$A/results.md"
if [ $have_torch = 1 ]; then
  check "bench_llmc.sh --cpu interleaves the runs (fsdp.c, PyTorch, fsdp.c, PyTorch)" diff \
    <(grep -o '^llmc: round [0-9]/2: [a-z.]*' "$TMP/side_a.txt") \
    <(printf 'llmc: round 1/2: fsdp.c\nllmc: round 1/2: pytorch\nllmc: round 2/2: fsdp.c\nllmc: round 2/2: pytorch\n')
  # the ratio, recomputed here from the step logs: PyTorch's median step over fsdp.c's
  want=$($PY - "$A" <<'PY'
import glob, json, statistics, sys
med = lambda side: statistics.median(o["ms"] for f in glob.glob("%s/logs/%s-*.jsonl" % (sys.argv[1], side))
                                     for o in map(json.loads, open(f)) if o["step"] > 1)
print("%.2fx" % (med("pytorch") / med("fsdp.c")))
PY
)
  check "the PyTorch row: 4 timed steps, fsdp.c / this = its median over fsdp.c's from the logs ($want)" \
    grep -qE "^\| gpt:L=1,C=32,H=2,V=128,T=16 \| 2x16 \| PyTorch .* eager \(fp32\) \| 4 \| .* \| $want \|$" "$A/results.md"
else
  echo "skip: the PyTorch side (/usr/bin/python3 has no torch): its row is not checked"
fi
check "the table names the machine, the load before and after, and the data" \
  bash -c "grep -q 'load average' '$A/results.md' && grep -q 'Data: build/bench-data/zipf-V128.bin' '$A/results.md'"

# a batch one side cannot fit is halved for every side, and the table says so (fsdp.c's plan
# for gpt:L=2,C=64 at B=4 x 64 needs 6.1 MB, at B=2 4.5 MB: --memory-limit 0.0047 GiB refuses 4)
BENCH_FSDP_ARGS="--memory-limit 0.0047" env -u LLMC_DIR scripts/bench_llmc.sh --cpu --model gpt:L=2,C=64,H=4,V=256,T=64 \
  --batch 4 --seq 64 --threads 1 --rounds 1 --steps 1 --warmup 0 --no-torch --out "$TMP/half" > "$TMP/half.txt" 2>&1
check "a batch that does not fit is halved (B=4 refused by fsdp.c's plan, B=2 run and in the table, the note)" bash -c \
  "grep -q 'fsdp.c gpt:L=2,C=64,H=4,V=256,T=64 B=4: does not fit' '$TMP/half.txt' &&
   grep -q '^| gpt:L=2,C=64,H=4,V=256,T=64 | 2x64 | fsdp.c ' '$TMP/half/results.md' && ! grep -q '| 4x64 |' '$TMP/half/results.md' &&
   grep -q 'batch lowered from 4: fsdp.c does not fit at 4' '$TMP/half/results.md'"

# (b) with LLMC_DIR (a checkout of karpathy/llm.c): llm.c's CPU trainer beside fsdp.c, from the
# same checkpoint: the losses of the first two steps must agree
if [ -n "${LLMC_DIR:-}" ]; then
  B_=$TMP/side_b
  scripts/bench_llmc.sh --cpu "${TINY[@]}" --no-torch --out "$B_" > "$TMP/side_b.txt" 2>&1
  rc=$?
  check "bench_llmc.sh --cpu with LLMC_DIR=$LLMC_DIR exits 0" test $rc = 0
  check "llm.c's CPU trainer built with its 7 patches" test "$(grep -c '^cpu: train_gpt2.c: ' "$B_/patches.txt")" = 7
  check "fsdp.c and llm.c interleave" diff <(grep -o '^llmc: round [0-9]/2: [a-z.]*' "$TMP/side_b.txt") \
    <(printf 'llmc: round 1/2: fsdp.c\nllmc: round 1/2: llm.c\nllmc: round 2/2: fsdp.c\nllmc: round 2/2: llm.c\n')
  check "the llm.c row: 4 timed steps and a ratio" \
    grep -qE '^\| gpt:L=1,C=32,H=2,V=128,T=16 \| 2x16 \| llm\.c train_gpt2 \(fp32\) \| 4 \| .* \| [0-9.]+x \|$' "$B_/results.md"
  check "same checkpoint, same batches: the step 1 and step 2 losses agree" \
    grep -qE '^Like for like .*step 1 loss .*\(within 1e-05\); step 2 loss .*\(within 1e-04\)$' "$B_/results.md"
else
  echo "skip: llm.c side by side: LLMC_DIR is not set (a checkout of karpathy/llm.c; docs/performance.md, 'Against llm.c'): not run, not counted"
fi

# (c) the pieces: the patcher refuses an llm.c it was not written for, the checkpoint fsdp.c
# loads, the Zipf token shard
mkdir -p "$TMP/oldllmc/llmc" && echo 'int main(void) { return 0; }' > "$TMP/oldllmc/train_gpt2.c"
expect "llmc_patch.py stops at a text it cannot find, naming the patch and the file" 1 \
  "patch 'benchmark settings from the environment': .*/oldllmc/train_gpt2.c holds the text it replaces 0 times" \
  $PY scripts/llmc_patch.py cpu "$TMP/oldllmc"
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 scripts/llmc_checkpoint.py --model gpt:L=1,C=32,H=2,V=128,T=16 "$TMP/ck.bin" > /dev/null 2>&1
  # 1024-byte header, wte [128, 32], wpe [16, 32], one block (12 C^2 + 13 C), the final norm (2 C)
  check "llmc_checkpoint.py: llm.c's header and 4 bytes per parameter" $PY -c "
import struct, sys
d = open('$TMP/ck.bin', 'rb').read()
C = 32
sys.exit(0 if struct.unpack('<8i', d[:32]) == (20240326, 3, 16, 128, 1, 2, 32, 128) and
         len(d) == 1024 + 4 * (128 * C + 16 * C + 12 * C * C + 13 * C + 2 * C) else 1)"
  expect "fsdp.c trains from it (--init-from)" 0 "step +1/1" ./train_gpt_cpu --init-from "$TMP/ck.bin" \
    --data build/bench-data/zipf-V128.bin --batch 2 --seq 16 --steps 1
  expect "llmc_checkpoint.py refuses a T5 model" 2 "llm.c checkpoints hold GPT-2 models only" \
    /usr/bin/python3 scripts/llmc_checkpoint.py --model t5-small "$TMP/t5.bin"
else
  echo "skip: llmc_checkpoint.py (no python3 with numpy): not run, not counted"
fi
$PY scripts/zipf_tokens.py --vocab 1000 --tokens 100000 "$TMP/z.bin" > /dev/null
# id 0's share is 1 / H(1000) = 1 / 7.4855: 13359 of 100000, within 5%
check "zipf_tokens.py: an llm.c shard header, ids below the vocabulary, id 0 at Zipf's share" $PY -c "
import array, struct, sys
d = open('$TMP/z.bin', 'rb').read()
t = array.array('H'); t.frombytes(d[1024:])
sys.exit(0 if struct.unpack('<3i', d[:12]) == (20240520, 1, 100000) and len(t) == 100000 and max(t) < 1000 and
         abs(t.count(0) - 13359) < 668 else 1)"
expect "zipf_tokens.py refuses ids that do not fit uint16" 2 "--vocab must be in" $PY scripts/zipf_tokens.py --vocab 70000 "$TMP/z2.bin"

# (d) side_by_side.py on hand-made GPU logs: llm.c's own step lines, a batch that did not fit
H=$TMP/side_gpu
mkdir -p "$H/logs"
printf 'mode: gpu\ngpu: NVIDIA H100 80GB HBM3\ndriver: 580.1\ntoolkit: CUDA 13.0\ncommit: abc1234\nllmc_commit: f1e2ace651495b74ae22d45d1723443fd00ecd3a\nrounds: 1\nsteps: 3\nwarmup: 1\ndate: 2026-11-26 00:00 UTC\ndata: zipf\n' > "$H/meta.txt"
jsonl() { local i=1 m; for m in "$@"; do echo "{\"step\": $i, \"loss\": 11.0, \"ms\": $m}"; i=$((i + 1)); done; }
llmc_log() {
  local i=1 m
  echo "| device                | NVIDIA H100 80GB HBM3                              |"
  for m in "$@"; do
    printf 'step %4d/%d | loss 10.990000 (+0.00z)| norm 1.2345 (+0.00z)| lr 3.00e-04 | %.2f ms | 40.1%% bf16 MFU | 65000 tok/s\n' $i $# "$m"
    i=$((i + 1))
  done
  echo "total average iteration time: 1.0 ms"
}
jsonl 500 100 110 90 > "$H/logs/f8.jsonl"
llmc_log 400 120 130 125 > "$H/logs/l8.txt"
jsonl 900 700 700 700 > "$H/logs/f64.jsonl"
echo "out of memory: cudaMalloc of 123 bytes failed" > "$H/logs/l64.txt"
jsonl 900 200 200 200 > "$H/logs/f32.jsonl"
llmc_log 400 180 180 180 > "$H/logs/l32.txt"
{
  printf 'side\tmodel\tbatch\tseq\tround\tformat\tlog\tstatus\tnote\n'
  printf 'fsdp.c\tgpt2-124m\t8\t1024\t1\tjsonl\tlogs/f8.jsonl\tok\t\n'
  printf 'llm.c\tgpt2-124m\t8\t1024\t1\tllmc-cuda\tlogs/l8.txt\tok\t\n'
  printf 'llm.c+cudnn\tgpt2-124m\t8\t1024\t1\t-\t-\tskipped\tno cudnn-frontend headers\n'
  printf 'fsdp.c\tgpt2-124m\t64\t1024\t1\tjsonl\tlogs/f64.jsonl\tok\t\n'
  printf 'llm.c\tgpt2-124m\t64\t1024\t1\tllmc-cuda\tlogs/l64.txt\toom\tdoes not fit at batch 64\n'
  printf 'fsdp.c\tgpt2-124m\t32\t1024\t1\tjsonl\tlogs/f32.jsonl\tok\t\n'
  printf 'llm.c\tgpt2-124m\t32\t1024\t1\tllmc-cuda\tlogs/l32.txt\tok\t\n'
  printf -- '-\tgpt2-124m\t32\t1024\t-\t-\t-\tnote\tbatch lowered from 64: llm.c does not fit at 64\n'
} > "$H/runs.tsv"
$PY scripts/side_by_side.py "$H" > /dev/null 2>&1
check "side_by_side.py on hand-made GPU logs exits 0" test $? = 0
want=$($PY -c "
import sys; sys.path.insert(0, 'scripts'); from bench_report import model_flops, parse_model
f = model_flops(parse_model('gpt2-124m'), 8, 1024, 0)
print('%.1f | %.1f%%' % (f / 0.125 / 1e12, 100 * f / 0.125 / 989e12))")
check "llm.c's row: its median 125 ms of the timed steps, 65536 tokens/s, TFLOPS and MFU from fsdp.c's FLOP count ($want), fsdp.c 1.25x" \
  grep -qF "| gpt2-124m | 8x1024 | llm.c train_gpt2cu (bf16) | 3 | 125.0 | 120.0 | 130.0 | 8% | 65536 | $want | 1.25x |" "$H/results.md"
check "fsdp.c's row: median 100 ms, 81920 tokens/s" \
  grep -qE '^\| gpt2-124m \| 8x1024 \| fsdp\.c train_gpt \(bf16, --shard full, 1 rank\) \| 3 \| 100\.0 \| 90\.0 \| 110\.0 \| 20% \| 81920 \|' "$H/results.md"
check "a batch that did not fit: out of the table, with the lowered batch noted" bash -c \
  "! grep -q '| 64x1024 |' '$H/results.md' && grep -q 'gpt2-124m B=64: llm.c does not fit at this batch' '$H/results.md' &&
   grep -q 'batch lowered from 64: llm.c does not fit at 64' '$H/results.md' && grep -q '| 32x1024 | llm.c .* | 0.90x |' '$H/results.md'"
check "the headline: the largest batch of the smallest model both ran (B=32: 0.90)" $PY -c "
import json, sys; h = json.load(open('$H/results.json'))['headline']
sys.exit(0 if (h['model'], h['batch'], h['against'], round(h['ratio'], 4)) == ('gpt2-124m', 32, 'llm.c', 0.9) else 1)"

# (e) results_section.py: the README's results section from a GPU report folder (the folder
# above as its llmc/, the hand-made bench report as its bench/) and a CPU folder; a planted
# inverted ratio in either input is caught before anything is written
R2=$TMP/gpu_report
mkdir -p "$R2/bench"
cp -r "$H" "$R2/llmc"
cp "$G/results.json" "$R2/bench/results.json"
printf 'date: 2026-11-26 00:00 UTC\ncommit: abc1234\ngpu: NVIDIA H100 80GB HBM3\ngpu_memory: 81559 MiB\ndriver: 580.1\ntoolkit: CUDA 13.0\ntorch: 2.11.0\n' > "$R2/meta.txt"
printf 'ok   kernels\n407 passed, 0 failed\n' > "$R2/test-bf16.txt"
cp README.md "$TMP/README.md"
$PY scripts/results_section.py --gpu "$R2" --cpu "$A" --out "$R2/results.md" --write "$TMP/README.md" > /dev/null 2>&1
check "results_section.py exits 0" test $? = 0
check "the section leads with fsdp.c against llm.c, the GPU, driver, toolkit and commits" grep -qF \
  "**fsdp.c: 0.90x llm.c's tokens/s** for gpt2-124m at B=32, T=1024 (163840 against 182044 tokens/s, llm.c), on one NVIDIA H100 80GB HBM3 (81559 MiB, driver 580.1, CUDA 13.0, torch 2.11.0), 2026-11-26 00:00 UTC, fsdp.c commit abc1234, llm.c commit f1e2ace65149." "$R2/results.md"
check "one GPU table: gpt2-124m B=8 with llm.c (1.25x) and PyTorch on 1 GPU (100 ms, 0.75x); t5-base from the PyTorch sweep" \
  bash -c "grep -qE '^\| gpt2-124m \| 8x1024 \| 100\.0 \| 65 \(6\.6%\) \| 125\.0 \| - \| 100\.0 \| 1\.25x \| 0\.75x \|$' '$R2/results.md' &&
           grep -qE '^\| t5-base \| 16x\(512\+114\) \| 100\.0 \| 300 \(30\.3%\) \| - \| - \| - \| - \| - \|$' '$R2/results.md'"
check "make test-gpu's summary and the CPU table in the section" bash -c \
  "grep -q 'make test-gpu\`: bf16 407 passed, 0 failed' '$R2/results.md' && grep -q '^\*\*CPU\.\*\* ' '$R2/results.md'"
check "--write replaced only the text between the README's results markers" $PY -c "
import sys
new, old, sec = open('$TMP/README.md').read(), open('README.md').read(), open('$R2/results.md').read()
s, e = '<!-- results -->\n', '<!-- end of results -->'
sys.exit(0 if new == old[:old.index(s) + len(s)] + sec + old[old.index(e):] else 1)"
cp "$TMP/README.md" "$TMP/README.before"
cp -r "$R2/llmc" "$TMP/llmc.good"
$PY - "$R2/llmc/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = [c for c in r["configs"] if c["batch"] == 8][0]["sides"]["llm.c"]
s["fsdp_over_this"] = 1 / s["fsdp_over_this"]  # the plant: llm.c's throughput over fsdp.c's
json.dump(r, open(sys.argv[1], "w"))
PY
expect "a planted inverted fsdp.c / llm.c ratio is caught, naming the file and the row" 1 \
  "llmc/results.json: gpt2-124m B=8 llm.c: fsdp.c / this is 0.8, but the medians give 1.25 .*inverted or stale ratio" \
  $PY scripts/results_section.py --gpu "$R2" --write "$TMP/README.md"
check "... and the README is left as it was" cmp -s "$TMP/README.md" "$TMP/README.before"
rm -rf "$R2/llmc" && mv "$TMP/llmc.good" "$R2/llmc"
$PY - "$R2/bench/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
row = [x for x in r["rows"] if x["run"] == "model-gpt2-124m-B8"][0]
row["ratio_tuned"] = 1 / row["ratio_tuned"]  # the plant: PyTorch's throughput over fsdp.c's
json.dump(r, open(sys.argv[1], "w"))
PY
expect "a planted inverted fsdp.c / PyTorch ratio is caught" 1 "model-gpt2-124m-B8 pytorch-tuned: ratio_tuned is 1.33.*inverted or stale ratio" \
  $PY scripts/results_section.py --gpu "$R2"
printf 'no markers here\n' > "$TMP/nomarkers.md"
expect "--write refuses a file without the results markers" 1 "has no '<!-- results -->' ... '<!-- end of results -->' markers" \
  $PY scripts/results_section.py --cpu "$A" --write "$TMP/nomarkers.md"

# (f) gpu_report.sh: the plan of everything that needs a GPU, printed without a GPU
expect "gpu_report.sh refuses an unknown part" 2 "unknown part 'bogus'" scripts/gpu_report.sh --parts bogus --dry-run
FAKE=$TMP/fake-llmc  # a directory shaped like an llm.c checkout: the dry run reads nothing in it
mkdir -p "$FAKE/llmc" && touch "$FAKE/train_gpt2.c"
LLMC_DIR=$FAKE scripts/gpu_report.sh --dry-run --out "$TMP/gr" > "$TMP/gr.txt" 2>&1
check "gpu_report.sh --dry-run exits 0 without a GPU" test $? = 0
check "the plan: every part, in order" diff <(grep -o '^part [a-z0-9-]*' "$TMP/gr.txt") \
  <(printf 'part %s\n' build test test-fp16 peak llmc torch profile kernels)
check "the plan: each part with its expected minutes" test "$(grep -cE '^part [a-z0-9-]+: .*   # about [0-9]+-[0-9]+ min' "$TMP/gr.txt")" = 8
check "the plan: make test-gpu in both precisions" bash -c \
  "grep -q '^part test: make --no-print-directory test-gpu 2>&1' '$TMP/gr.txt' && grep -q '^part test-fp16: make --no-print-directory test-gpu PRECISION=fp16' '$TMP/gr.txt'"
n=$(grep -cE -- "train_gpt2cu -e d(12|24|36|48) -i .* -b (8|64) -t 1024 -x 13 .* -r 0 -c 0.1" "$TMP/gr.txt")
check "the plan: llm.c d12..d48 at B=8 and 64, plain and with cuDNN (16 runs, $n)" test "$n" = 16
check "the plan: d48 with -ge 1, as llm.c's own script; fsdp.c --shard full at the same shapes (8 runs)" bash -c \
  "grep -q -- '-e d48 .* -ge 1' '$TMP/gr.txt' && test \$(grep -cE -- './train_gpt --model gpt2-(124m|350m|774m|1.5b) .*--batch (8|64) --seq 1024 .*/llmc/logs/fsdp.c-.* --shard full' '$TMP/gr.txt') = 8"
check "the plan: PyTorch tuned on 1 GPU and FSDP2, ncu on gpt2-124m and t5-base" bash -c \
  "grep -q 'bench_torch.py --model gpt2-124m .*--tuned' '$TMP/gr.txt' && grep -q 'bench_torch.py --model t5-base .*--compile' '$TMP/gr.txt' &&
   test \$(grep -cE '^    ncu .* --model (gpt2-124m|t5-base) ' '$TMP/gr.txt') = 2"
env -u LLMC_DIR scripts/gpu_report.sh --dry-run --parts llmc --out "$TMP/gr2" > "$TMP/gr2.txt" 2>&1
check "without LLMC_DIR the plan says llm.c is skipped and has no llm.c run" bash -c \
  "grep -q 'LLMC_DIR is unset: llm.c is skipped' '$TMP/gr2.txt' && ! grep -q train_gpt2cu '$TMP/gr2.txt'"

# bench_adamw.sh: the host AdamW of --offload optim beside PyTorch's, a table with three rows.
bash scripts/bench_adamw.sh --elements 200000 --rounds 1 --trials 2 > "$TMP/adamw.md" 2>&1
check "bench_adamw.sh prints fsdp.c and both PyTorch AdamW rows with bandwidths" \
  test "$(grep -cE '^\| (fsdp.c adamw_update_host|torch.optim.AdamW \((single tensor|foreach)\)) \| [0-9.]+ \|' "$TMP/adamw.md")" = 3
bash scripts/bench_adamw.sh --elements 0 > /dev/null 2>&1
[ $? = 2 ] && ok "bench_adamw.sh refuses a zero element count (exit 2)" || bad "bench_adamw.sh refuses --elements 0"

cases_summary
[ $fail = 0 ]
