#!/usr/bin/env python3
"""--plan, the memory refusal and --bench JSON, against layouts computed here by hand.

The expected plan is derived independently from the layout rules (parameters aligned to 64
elements, units padded to F x 128, shards = padded / F) and the list of regions a GPT run
needs; each region starts 256-byte aligned. Prints ok/FAIL per check and "N passed, M failed".
"""
import json
import os
import re
import subprocess
import sys
import tempfile

BIN = "./train_gpt_cpu"
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, detail))


def up(x, m):
    return (x + m - 1) // m * m


def unit_numel(shapes):
    end = 0
    for n in shapes:
        end = up(end, 64) + n
    return end


def gpt_plan(L, C, H, V, T, B, W, strategy, K=2, sync=True, recompute="none", wrap="block", offload=(), host=None,
             accum=1):
    """Bytes of every region of one rank's plan, in fp32 (the CPU backend). With --offload the
    offloaded regions go to the pinned host part, whose total is stored in host["bytes"]. Where a
    shard is the whole unit (F = 1) each unit keeps its working copy instead of the root buffer and
    the slots (unless its master is offloaded), and with one micro-step its gradient goes straight
    into its shard: no unsharded gradient buffers (unless the gradient is offloaded)."""
    Vp = up(V, 128)
    root = unit_numel([Vp * C, T * C, C, C])
    if wrap == "block":
        blocks = [unit_numel([C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C])]
    else:  # a unit per matmul weight: [ln1, qkv] [proj] [ln2, fc] [fc proj]
        blocks = [unit_numel([C, C, 3 * C * C, 3 * C]), unit_numel([C * C, C]), unit_numel([C, C, 4 * C * C, 4 * C]),
                  unit_numel([4 * C * C, C])]
    hpz = strategy.startswith("hpz:")  # full sharding with a secondary shard per block, 1/F2 of it
    F = {"full": W, "grad-op": W, "none": 1}.get(strategy) or (W if hpz else int(strategy.split(":")[1]))
    reshard = strategy == "full" or strategy.startswith(("hybrid", "hpz"))
    pr = up(root, F * 128)
    pbs = [up(b, F * 128) for b in blocks]
    pb = max(pbs)  # the slot size: the largest non-root unit
    shard_total = pr // F + L * sum(p // F for p in pbs)
    units = L * len(blocks)
    nslots = min(K if reshard else units, units)
    ngrad = min(2 if K > 1 else 1, units) if sync else units  # --limit-all-gathers 1: one buffer
    N, f = B * T, 4
    # --recompute: one shared slice for what is recomputed (block: all but the block outputs;
    # selective: norms, their statistics and the GELU), L slices for the rest.
    Lm = 1 if recompute == "block" else L
    Lc = L if recompute == "none" else 1
    sb, one = shard_total * f, max(pr // F, pb // F) * f  # all shards; the largest one (staging)
    dev, hst = [], []
    # master, gradient, adamw m, v: on the host when offloaded
    for what, n in (("params", sb), ("grads", sb), ("optim", sb), ("optim", sb)):
        (hst if what in offload else dev).append(n)
    # slots (or the working copies), hpz's secondary shards (16-bit, which is fp32 here: padded /
    # F2 of every block unit), grad buffers (none when direct)
    working = F == 1 and "params" not in offload
    direct = F == 1 and accum == 1 and "grads" not in offload
    dev += [(pr + L * sum(pbs)) * f] if working else [pr * f, nslots * pb * f]
    if hpz:
        dev.append(L * sum(p // int(strategy.split(":")[1]) for p in pbs) * f)
    dev += [] if direct else [pr * f, ngrad * pb * f]
    # gradient norm blocks, words (10 int64 per unit) and their total (9 limbs and a flag per unit)
    dev += [one // 4 // 128 * 8, (units + 1) * 10 * 8, (9 + units + 1) * 8]
    # staging: a master / gradient shard crossing PCIe (device); the optimizer step's two pairs
    # of copies of the shards kept across PCIe from it (host step: optim; device step: params or
    # grads on the host, its first pair the device staging above)
    dev += [one] * (("params" in offload) + ("grads" in offload))
    if "optim" in offload:
        hst += [one] * 2 * (("params" not in offload) + ("grads" not in offload))
    else:
        dev += [one] * (("params" in offload) + ("grads" in offload))
    # activations: ln1, qkv, atty, res2, ln2, fch, fch_gelu, block outputs (or their device ring
    # of 3, the L outputs on the host), stats, lse, encoded, lnf, lnf stats, logits, losses,
    # loss sum
    dev += [Lc * N * C * f, Lm * N * 3 * C * f, Lm * N * C * f, Lm * N * C * f, Lc * N * C * f,
            Lm * N * 4 * C * f, Lc * N * 4 * C * f]
    if "activations" in offload:
        hst.append(L * N * C * f)
        dev.append(3 * N * C * f)
    else:
        dev.append(L * N * C * f)
    dev += [4 * Lc * N * f, Lm * N * H * f, N * C * f, N * C * f, 2 * N * f, N * Vp * f, N * f, 8,
            # workspace: scratch, dresidual, dln, dqkv, datty, dfch, tokens
            N * C * f, N * C * f, N * C * f, N * 3 * C * f, N * C * f, N * 4 * C * f, 2 * N * 4,
            512]  # the step's control values (train/step.c)
    # pinned host: the step's inputs and outcomes (2 x 2 of 512 bytes), its micro-batches (2 sets of
    # `accum`, each inputs and targets)
    hst += [4 * 512, 2 * accum * 2 * N * 4]
    total = host_total = 0
    for r in dev:
        total = up(total, 256) + r
    for r in hst:
        host_total = up(host_total, 256) + r
    if host is not None:
        host["bytes"] = host_total
    return total, shard_total


def run(args):
    p = subprocess.run([BIN] + args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def plan_bytes(out, key="plan_bytes_per_rank"):
    for line in out.splitlines():
        if line.startswith(key + " "):
            return int(line.split()[1])
    return None


configs = [
    ("gpt:L=3,C=72,H=3,V=509,T=32", dict(L=3, C=72, H=3, V=509, T=32), 2, 32),
    ("gpt:L=2,C=40,H=5,V=131,T=17", dict(L=2, C=40, H=5, V=131, T=17), 3, 17),
    ("gpt2-124m", dict(L=12, C=768, H=12, V=50257, T=1024), 4, 1024),
]
for spec, shape, B, T in configs:
    for W, strategy in [(1, "full"), (3, "full"), (4, "grad-op"), (4, "none"), (8, "hybrid:4"), (4, "hpz:2"), (6, "hpz:3")]:
        rc, out = run(["--plan", "--backend", "cpu", "--world", str(W), "--model", spec, "--batch", str(B), "--seq", str(T), "--shard", strategy])
        want, _ = gpt_plan(B=B, W=W, strategy=strategy, **dict(shape, T=shape["T"]))
        # the activations use the run's T (--seq), the position table the model's T
        got = plan_bytes(out)
        check("plan %s W=%d %s: %s bytes" % (spec, W, strategy, got), rc == 0 and got == want,
              "got %s, computed by hand %d" % (got, want))
rc, out = run(["--plan", "--backend", "cpu", "--world", "2", "--model", "gpt:L=3,C=72,H=3,V=509,T=32", "--batch", "2", "--seq", "32",
               "--limit-all-gathers", "3", "--no-sync-accum"])
want, _ = gpt_plan(3, 72, 3, 509, 32, 2, 2, "full", K=3, sync=False)
check("plan with --limit-all-gathers 3 --no-sync-accum", plan_bytes(out) == want, "%s vs %d" % (plan_bytes(out), want))
check("plan prints the FSDP paper's formula", "FSDP paper formula" in out, out[-300:])
# Activation checkpointing: every block's saved tensors but its output shrink to one slice.
for spec, shape, B, T in configs:
    for mode in ("block", "selective"):
        rc, out = run(["--plan", "--backend", "cpu", "--world", "2", "--model", spec, "--batch", str(B), "--seq", str(T), "--recompute", mode])
        want, _ = gpt_plan(B=B, W=2, strategy="full", recompute=mode, **shape)
        check("plan %s --recompute %s: %s bytes" % (spec, mode, plan_bytes(out)), rc == 0 and plan_bytes(out) == want,
              "got %s, computed by hand %d" % (plan_bytes(out), want))
# --wrap linear: four units per block, slots and gradient buffers the size of the largest
# matmul unit; --limit-all-gathers 1 also leaves one gradient buffer.
for spec, shape, B, T in configs:
    for W, strategy, mode, K in [(1, "full", "none", 2), (3, "full", "block", 2), (4, "grad-op", "none", 2), (8, "hybrid:4", "selective", 3),
                                 (2, "full", "block", 1), (8, "hpz:2", "block", 1)]:
        rc, out = run(["--plan", "--backend", "cpu", "--world", str(W), "--model", spec, "--batch", str(B), "--seq", str(T), "--shard", strategy,
                       "--wrap", "linear", "--recompute", mode, "--limit-all-gathers", str(K)])
        want, _ = gpt_plan(B=B, W=W, strategy=strategy, recompute=mode, K=K, wrap="linear", **shape)
        check("plan %s W=%d %s --wrap linear --recompute %s -K %d: %s bytes" % (spec, W, strategy, mode, K, plan_bytes(out)),
              rc == 0 and plan_bytes(out) == want, "got %s, computed by hand %d" % (plan_bytes(out), want))
# --offload: the offloaded regions move to the pinned host part, staging takes their place.
for spec, shape, B, T in configs:
    for W, strategy, mode, wrap, off in [(1, "full", "none", "block", "optim"), (3, "full", "block", "linear", "params,grads"),
                                         (4, "grad-op", "selective", "block", "params,optim,grads,activations"),
                                         (2, "hybrid:2", "block", "linear", "optim,activations"), (2, "full", "none", "block", "grads,optim"),
                                         (6, "hpz:2", "selective", "linear", "params,optim,grads,activations")]:
        rc, out = run(["--plan", "--backend", "cpu", "--world", str(W), "--model", spec, "--batch", str(B), "--seq", str(T), "--shard", strategy,
                       "--recompute", mode, "--wrap", wrap, "--offload", off])
        h = {}
        want, _ = gpt_plan(B=B, W=W, strategy=strategy, recompute=mode, wrap=wrap, offload=off.split(","), host=h, **shape)
        got, got_h = plan_bytes(out), plan_bytes(out, "plan_host_bytes_per_rank")
        check("plan %s W=%d %s --recompute %s --wrap %s --offload %s: %s + %s host bytes" % (spec, W, strategy, mode, wrap, off, got, got_h),
              rc == 0 and got == want and got_h == h["bytes"], "got %s + %s, computed by hand %d + %d" % (got, got_h, want, h["bytes"]))
# --plan says what each option not in use would save, each equal to the difference of two plans.
base = ["--plan", "--backend", "cpu", "--world", "2", "--model", "gpt2-124m", "--batch", "4"]
rc, out = run(base)
for flag in ("--recompute block", "--wrap linear", "--offload optim", "--offload activations", "--limit-all-gathers 1"):
    line = [l for l in out.splitlines() if l.strip().startswith(flag + " ")]
    _, other = run(base + flag.split())
    d, h = plan_bytes(other) - plan_bytes(out), plan_bytes(other, "plan_host_bytes_per_rank") - plan_bytes(out, "plan_host_bytes_per_rank")
    want = "%+9.2f GiB device" % (d / 2**30) + (", %+9.2f GiB pinned host" % (h / 2**30) if h else "")
    check("--plan: %s would change the plan by %s" % (flag, want.replace("  ", "")), len(line) == 1 and line[0].endswith(want),
          "%s vs %s" % (line, want))
# --shard hpz: --plan shows the secondary shards as a region of their own and prints their formula;
# "--shard full" would save exactly them; without F2 a plan (which knows no nodes) is refused.
hz = ["--plan", "--backend", "cpu", "--world", "8", "--model", "gpt:L=3,C=72,H=3,V=509,T=32", "--batch", "2", "--seq", "32"]
rc, out = run(hz + ["--shard", "hpz:4"])
_, full = run(hz)
blocks3 = [unit_numel([72, 72, 3 * 72 * 72, 3 * 72, 72 * 72, 72, 72, 72, 4 * 72 * 72, 4 * 72, 4 * 72 * 72, 72])]
sec = 3 * up(blocks3[0], 8 * 128) // 4 * 4  # 3 blocks, padded to 8 x 128, a quarter each, 4 bytes
lines = [l for l in out.splitlines() if "secondary shards (1/4 of each unit)" in l]
saving = [l for l in out.splitlines() if l.strip().startswith("--shard full ")]
want = "%+9.2f GiB device" % ((plan_bytes(full) - plan_bytes(out)) / 2**30)
check("--plan --shard hpz:4: a 'secondary' region of %d bytes, its formula, and --shard full saving it (%s)" % (sec, want.strip()),
      rc == 0 and len(lines) == 1 and "%.2f MiB" % (sec / 2**20) in lines[0] and "+ secondary shards (--shard hpz)" in out
      and plan_bytes(full) - plan_bytes(out) in (-sec, -up(sec, 256)) and len(saving) == 1 and saving[0].endswith(want),
      "%s; %s; %s vs %s" % (lines, saving, plan_bytes(out), plan_bytes(full)))
rc, out = run(hz + ["--shard", "hpz"])
check("--plan --shard hpz without F2 is refused, asking for hpz:F2", rc != 0 and "give the node group size with --shard hpz:F2" in out,
      out[-300:])
rc, out = run(hz + ["--shard", "hpz:8"])
check("--plan --shard hpz:8 on 8 ranks is refused (the node group would be the world)", rc != 0 and "use --shard full" in out,
      out[-300:])
blk = plan_bytes(run(["--plan", "--backend", "cpu", "--world", "128", "--model", "gpt3-175b", "--batch", "20", "--seq", "512", "--recompute", "block"])[1])
lin = plan_bytes(run(["--plan", "--backend", "cpu", "--world", "128", "--model", "gpt3-175b", "--batch", "20", "--seq", "512", "--recompute", "block",
                      "--wrap", "linear"])[1])
check("gpt3-175b on 128 ranks: --wrap linear plans less than --wrap block (%.1f vs %.1f GiB)" % (lin / 2**30, blk / 2**30), lin < blk)
# Sharding divides the per-rank state: 16 bytes per padded element / F.
_, s1 = gpt_plan(12, 768, 12, 50257, 1024, 4, 1, "full")
_, s8 = gpt_plan(12, 768, 12, 50257, 1024, 4, 8, "full")
check("per-rank shard elements fall with the world size (gpt2-124m: %d -> %d)" % (s1, s8), s8 * 7 < s1)
rc, out = run(["--plan", "--backend", "cpu", "--world", "1", "--model", "gpt3-175b", "--batch", "1"])
check("--plan works for gpt3-175b without allocating", rc == 0 and plan_bytes(out) > 2 * 10**12, out[-200:])
rc, out = run(["--plan", "--backend", "cpu", "--world", "512", "--model", "gpt-1t", "--batch", "1", "--recompute", "block"])
check("--plan works for the gpt-1t preset (128 x 25600, 160 heads)", rc == 0 and "L=128 C=25600 H=160" in out.replace("  ", " ")
      and plan_bytes(out) is not None, out[-300:])
# Over --memory-limit, --plan names the first memory-saving option that fits, checked against
# the plans of those options.
need = {mode: plan_bytes(run(["--plan", "--backend", "cpu", "--model", "gpt2-124m", "--batch", "8", "--recompute", mode])[1])
        for mode in ("none", "selective", "block")}
limit = (need["selective"] + need["block"]) / 2 / 2**30  # block fits, selective does not
rc, out = run(["--plan", "--backend", "cpu", "--model", "gpt2-124m", "--batch", "8", "--memory-limit", "%.4f" % limit])
check("--plan over --memory-limit recommends --recompute block, the first option that fits",
      rc == 1 and "does not fit" in out and "add --recompute block to fit on 1 rank (%.2f GiB" % (need["block"] / 2**30) in out,
      out[-300:])
rc, out = run(["--plan", "--backend", "cpu", "--model", "gpt2-124m", "--batch", "8", "--memory-limit", "%.4f" % (need["none"] / 2**30 + 0.01)])
check("--plan within --memory-limit says it fits", rc == 0 and "fits: " in out, out[-200:])
rc, out = run(["--model", "gpt:L=2,C=64,H=4,V=256,T=64", "--data", "data/addition/train_000.bin", "--batch", "8",
               "--steps", "1", "--memory-limit", "0.0001"])
check("a run that does not fit says what would, before allocating", rc != 0 and "recommendation:" in out, out[-300:])
rc, out = run(["--plan", "--backend", "cpu", "--model", "t5-3b", "--batch", "2", "--world", "8"])
check("--plan works for T5 presets", rc == 0 and plan_bytes(out) is not None, out[-200:])
# T5 --offload activations: the L encoder outputs (B x enc-len x C) and Ld decoder outputs
# (B x dec-len x C) move to the host; a ring of 3 of the larger size stays on the device.
t5 = ["--plan", "--backend", "cpu", "--model", "t5:L=4,M=3,C=48,H=3,D=16,F=96,V=512", "--batch", "3", "--enc-len", "40",
      "--dec-len", "12"]
rc0, out0 = run(t5)
rc1, out1 = run(t5 + ["--offload", "activations"])
outs = (4 * 3 * 40 + 3 * 3 * 12) * 48 * 4
ring = up(3 * 3 * 40 * 48 * 4, 256)
dev0, dev1 = plan_bytes(out0), plan_bytes(out1)
host1 = plan_bytes(out1, "plan_host_bytes_per_rank") - plan_bytes(out0, "plan_host_bytes_per_rank")  # (the step's own)
check("T5 --offload activations: %d bytes of block outputs to the host, a ring of %d on the device" % (outs, ring),
      rc0 == 0 and rc1 == 0 and host1 == up(outs, 256) and dev0 - dev1 in (up(outs, 256) - ring, up(outs, 256) - ring + 256),
      "device %s -> %s, host %s" % (dev0, dev1, host1))
# --plan plans the CUDA backend by default, from this CPU binary and without a GPU: the same
# plan the CUDA build prints for itself (train_gpt_sim is that build, on the simulator).
for args in (["--model", "gpt:L=3,C=72,H=3,V=509,T=32", "--batch", "2", "--world", "2"],
             ["--model", "t5:L=2,C=48,H=3,D=16,F=96,V=512", "--batch", "2", "--enc-len", "40", "--dec-len", "12"],
             ["--model", "gpt2-124m", "--batch", "4", "--world", "8", "--recompute", "selective"],
             ["--model", "gpt:L=3,C=72,H=3,V=509,T=32", "--batch", "2", "--world", "4", "--shard", "hpz:2"]):
    rc, out = run(["--plan"] + args)
    sim = subprocess.run(["./train_gpt_sim", "--plan"] + args, capture_output=True, text=True)
    cpu = plan_bytes(run(["--plan", "--backend", "cpu"] + args)[1])
    check("--plan %s: the cuda plan by default (%s bytes), as train_gpt plans it, below the fp32 plan (%s)"
          % (args[1], plan_bytes(out), cpu), rc == 0 and "plan for the cuda backend" in out and
          plan_bytes(out) == plan_bytes(sim.stdout) and plan_bytes(out) < cpu, out[-300:] + sim.stderr[-200:])

# A run whose plan exceeds the memory refuses to start and says what to change.
data = "data/addition/train_000.bin"
rc, out = run(["--model", "gpt:L=2,C=64,H=4,V=256,T=64", "--data", data, "--batch", "8", "--steps", "1",
               "--memory-limit", "0.001"])
check("a plan over --memory-limit is refused", rc != 0 and "memory plan needs" in out and "--batch" in out, out[-300:])

# --bench prints its table and writes JSON with every field.
with tempfile.TemporaryDirectory() as tmp:
    js = os.path.join(tmp, "bench.json")
    rc, out = run(["--model", "gpt:L=2,C=64,H=4,V=256,T=64", "--data", data, "--batch", "4", "--steps", "3",
                   "--bench", "--bench-warmup", "1", "--bench-json", js, "--peak"])
    check("--bench prints the summary table", rc == 0 and "step time median (ms)" in out and "MFU" in out, out[-400:])
    try:
        j = json.load(open(js))
    except Exception as e:  # noqa: BLE001
        j = {}
    fields = ["model", "device", "backend", "ranks", "shard", "step_ms_median", "step_ms_min", "step_ms_max",
              "tokens_per_s_per_rank", "model_tflops_per_rank", "hardware_tflops_per_rank", "mfu", "peak_tflops",
              "exposed_comm_ms_median", "memory_bytes_per_rank", "steps"]
    missing = [f for f in fields if f not in j]
    check("--bench-json has every field", not missing, "missing %s" % missing)
    check("--bench measured 3 steps after 1 warm-up", j.get("steps") == 3, str(j.get("steps")))
    check("--peak gives an MFU between 0 and 1", isinstance(j.get("mfu"), float) and 0 < j["mfu"] < 1, str(j.get("mfu")))
    check("median lies between min and max", j and j["step_ms_min"] <= j["step_ms_median"] <= j["step_ms_max"], str(j))

# The simulated link: every collective waits as long as a ring all-gather / reduce-scatter of
# its unit on W ranks at the given bandwidth: (W-1)/W x bytes / bandwidth.
def unit_sizes(L, C, H, V, T):
    Vp = up(V, 128)
    root = up(unit_numel([Vp * C, T * C, C, C]), 128)
    block = up(unit_numel([C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]), 128)
    return root, block


W_SIM, GBPS = 8, 0.05
root, block = unit_sizes(2, 64, 4, 256, 64)
ring = lambda elems: (W_SIM - 1) / W_SIM * elems * 4 / (GBPS * 1e9) * 1e3  # ms, fp32 on the CPU
want_ms = ring(root) + 4 * ring(block) + ring(root) + 2 * ring(block)  # AG: root + 2 per block; RS: 1 each
with tempfile.TemporaryDirectory() as tmp:
    js = os.path.join(tmp, "sim.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([BIN, "--model", "gpt:L=2,C=64,H=4,V=256,T=64", "--data", data, "--batch", "2", "--steps", "2",
                        "--bench", "--bench-warmup", "1", "--bench-json", js, "--sim-world", str(W_SIM), "--sim-link",
                        str(GBPS)], capture_output=True, text=True, env=env)
    got = json.load(open(js))["exposed_comm_ms_median"] if p.returncode == 0 else None
    link = re.search(r"collectives per step: .*, ([0-9.]+) ms of simulated link", p.stdout)
    # the link time the schedule asked for is exact; the wait it causes is at least that long
    # (a timed upper bound would measure the machine's load, not the schedule)
    check("--sim-world %d --sim-link %g: %s ms of simulated link per step, the ring model's %.3f" % (
          W_SIM, GBPS, link and link.group(1), want_ms), link and abs(float(link.group(1)) - want_ms) <= 1e-3 * want_ms,
          p.stdout[-300:] + p.stderr[-300:])
    check("--sim-world: the exposed communication (%s ms) is at least the link's" % got,
          got is not None and got >= want_ms * 0.999, p.stdout[-300:] + p.stderr[-300:])

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
