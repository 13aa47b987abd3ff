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
#   - bench_cpu.sh on a tiny model: interleaved fsdp.c and PyTorch runs, the table's rows and
#     their step counts, refused options
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
done
[ -z "$missing" ] && ok "GPU sweep: all 8 models with fsdp.c, PyTorch and torch.compile runs" || bad "GPU sweep models" "missing$missing"
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
header="| model | params | backend | strategy | prefetch | K | sim link | B x T | step ms median (min-max) | tokens/s per GPU | model TFLOPS per GPU | MFU | MFU (measured peak) | exposed comm ms | memory GiB | ours / PyTorch | predicted step ms (measured / predicted) | run |"
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
check("predicted step filled on the fsdp.c model rows", all(pred.match(c[16]) for c in fs if c[6] == "-"),
      [c[16] for c in fs if c[6] == "-"])
check("no prediction on simulated-link and PyTorch rows", all(c[16] == "-" for c in cells if c[6] != "-" or
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
    cell = [c[16] for c in cells if c[-1] == r["run"]]
    check("measured / predicted = the median over the prediction", cell and pred.match(cell[0]) and
          abs(float(pred.match(cell[0]).group(3)) - r["step_ms_median"] / r["predicted_step_ms"]) < 0.006, cell)
else:
    check("a GPT model row to check the prediction on", False)
torch_rows = [c for c in cells if c[2] == "pytorch"]
if have_torch:
    check("PyTorch baseline rows (GPT and T5)", len(torch_rows) == 2, torch_rows)
    filled = [c for c in fs if c[6] == "-"]
    check("ratio column ours / PyTorch filled on the fsdp.c model rows",
          filled and all(re.match(r"^\d+\.\d\d", c[15]) for c in filled), [c[15] for c in filled])
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
check "GPU report: ours / PyTorch as eager / torch.compile (1.50 / 1.20), predicted 80 ms (measured 100: 1.25x)" \
  grep -q "| 1.50 / 1.20 | 80.00 (1.25x) | model-gpt2-124m-B8 |" "$GM"
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
printf 'profile-gpt2-124m-B8\tprofile\tfsdp.c\tgpt2-124m\t8\t--seq 1024\tfull\tboth\t2\t-\t-\tprofile/profile-gpt2-124m-B8.csv\t-\tok\t2 steps\n' >> "$G/manifest.tsv"
$PY scripts/bench_report.py "$G" > /dev/null 2>&1
check "profile report: 0.30 ms of kernels per step in 2 launches" grep -q "(\`profile-gpt2-124m-B8\`): 0.30 ms of kernels per step in 2 launches" "$GM"
check "profile report: cuBLAS kernels as one line (1 per step, 0.200 ms, 200 us each, 66.7%)" \
  grep -q "^| matmuls (cuBLAS) | 1 | 0.200 | 200.0 | 66.7% |$" "$GM"
check "profile report: ns with thousands separators, namespace and arguments dropped" \
  grep -q "^| attn_fwd_kernel<64, 0> | 1 | 0.100 | 100.0 | 33.3% |$" "$GM"
sed -i 's/"ns","150,000"/"furlongs","150,000"/' "$G/profile/profile-gpt2-124m-B8.csv"
$PY scripts/bench_report.py "$G" > /dev/null 2>&1
check "profile report: an unknown ncu unit is named, not summed" grep -q "unreadable profile: unknown ncu unit 'furlongs'" "$GM"

# ---- bench_cpu.sh: fsdp.c and PyTorch side by side on the CPU --------------------------
out=$(scripts/bench_cpu.sh --help 2>&1)
check "bench_cpu.sh --help prints the usage" grep -q -- "--threads" <<< "$out"
scripts/bench_cpu.sh --threads 0 >/dev/null 2>&1
[ $? = 2 ] && ok "bench_cpu.sh refuses --threads 0 (exit 2)" || bad "bench_cpu.sh refuses --threads 0 (exit 2)"
C=$TMP/cpu
scripts/bench_cpu.sh --model gpt:L=1,C=32,H=2,V=128,T=16 --batch 2 --seq 16 --threads 1 \
  --rounds 2 --steps 2 --warmup 1 --out "$C" > "$TMP/bench_cpu.txt" 2>&1
rc=$?
check "bench_cpu.sh on a tiny model exits 0" test $rc = 0
check "bench_cpu.sh interleaves the runs" diff <(grep -o '^round [0-9]/2: [a-z.]*' "$TMP/bench_cpu.txt") \
  <(printf 'round 1/2: fsdp.c\nround 1/2: pytorch\nround 2/2: fsdp.c\nround 2/2: pytorch\n')
check "bench_cpu.sh table: fsdp.c row with 4 timed steps and a ratio" \
  grep -qE '^\| fsdp\.c \(CPU, fp32\) \| 4 \| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9]+% \| [0-9]+ \| [0-9.]+x \|$' "$C/results.md"
check "bench_cpu.sh table: PyTorch row with 4 timed steps" \
  grep -qE '^\| PyTorch .* eager \(fp32\) \| 4 \| [0-9]+ \|' "$C/results.md"
check "bench_cpu.sh names the machine and the load" grep -q "load average" "$C/results.md"

# bench_adamw.sh: the host AdamW of --offload optim beside PyTorch's, a table with three rows.
bash scripts/bench_adamw.sh --elements 200000 --rounds 1 --trials 2 > "$TMP/adamw.md" 2>&1
check "bench_adamw.sh prints fsdp.c and both PyTorch AdamW rows with bandwidths" \
  test "$(grep -cE '^\| (fsdp.c adamw_update_host|torch.optim.AdamW \((single tensor|foreach)\)) \| [0-9.]+ \|' "$TMP/adamw.md")" = 3
bash scripts/bench_adamw.sh --elements 0 > /dev/null 2>&1
[ $? = 2 ] && ok "bench_adamw.sh refuses a zero element count (exit 2)" || bad "bench_adamw.sh refuses --elements 0"

cases_summary
[ $fail = 0 ]
