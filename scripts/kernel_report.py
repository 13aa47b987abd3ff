#!/usr/bin/env python3
"""kernel_report.py: what ptxas makes of every CUDA kernel, without a GPU.

    scripts/kernel_report.py [--out docs/kernel_report.md] [--root DIR] [--table-bin BIN]
    scripts/kernel_report.py --check-spills LOG...
    scripts/kernel_report.py --sass CUBIN|OBJECT|SASS...

The report compiles each kernels/cuda/*.cu once per precision (bf16 and the fp16 build) for
sm_90, with ptxas's resource report (-Xptxas -v) and the PTX kept, and writes one table row per
kernel: registers per thread, spill stores and loads, static and dynamic shared memory, the block
size, and the theoretical occupancy that follows on an H100 (sm_90: 64K registers, 228 KiB of
shared memory and 64 warps per SM). For the fused attention kernels it adds the instruction mix
of their main loop counted in the PTX: mma.sync products, the bytes that ldmatrix and ld.shared
bring from shared memory, and their ratio, the shared-memory bytes loaded per 16x8x16 product.

Where the numbers come from:
  registers, spills, static shared memory   ptxas -v
  block size                                the launch in the .cu file (its <<<grid, block>>>,
                                            the #defines and dim3 it names), or __launch_bounds__
  dynamic shared memory (attention)         attention.cu's own table (attention_kernel_table),
                                            printed by test_kernels_gpu --launch-table; the bias
                                            variants at T5's max_distance, 128
  main loop                                 the outermost PTX loop (a label and a later branch
                                            back to it) that holds mma.sync; a loop the compiler
                                            kept rolled counts once
  machine code (every kernel on the step's  cuobjdump -sass of the same cubins (CUDA_HOME/bin,
  path)                                     PATH, or the nvidia-cuda-cuobjdump wheel): its main
                                            loop's HMMA, LDSM, MUFU.EX2, global loads and the
                                            round trips waited for, memory barriers by kind, and
                                            a flag for a sequentially consistent fence or a
                                            dependent chain of global loads there (see "SASS")

--check-spills reads ptxas -v logs (the build writes one beside each CUDA object, e.g.
build/cuda/kernels/cuda/attention.o.ptxas) and fails, naming the kernels, when a kernel on the
training step's path spills registers (every kernel but the simple attention path and the
matmul fallback, which run only where the fused kernels and cuBLASLt cannot). It prints a line
per log and "N passed, M failed".

--sass prints only the machine-code table of the given cubins, objects or saved cuobjdump -sass
text, and exits 1 when a kernel is flagged (test/test_kernel_report.sh's planted kernel).
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

# sm_90 (H100 SXM), as the CUDA occupancy calculator takes them.
SM_REGS = 65536
SM_SMEM = 233472           # 228 KiB of shared memory per SM
SMEM_RESERVED = 1024       # per block, reserved by the system
SMEM_GRAIN = 128
REG_GRAIN = 256            # registers are allocated per warp in units of 256
SM_WARPS = 64
SM_BLOCKS = 32
T5_MAX_DISTANCE = 128

# Kernels that run only where the fused kernels or cuBLASLt cannot: not on a step's path.
OFF_PATH = re.compile(r"^(attn_simple_|matmul_fallback_kernel|delay_kernel)")


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\n")))


def short_name(demangled):
    """'void (anonymous namespace)::attn_fwd_kernel<64, true>((anonymous namespace)::AttnArgs)'
    -> 'attn_fwd_kernel<64, true>'."""
    s = re.sub(r"\(anonymous namespace\)::", "", demangled)
    s = re.sub(r"^void ", "", s)
    if s.startswith("cub::"):  # cub's radix sort (the embedding backward): its kernel's own name
        m = re.match(r"cub::(?:\w+::)*?(\w+Kernel)\b", s)
        return "cub " + m.group(1) if m else s
    depth = 0
    for i, ch in enumerate(s):  # cut at the parameter list (the first '(' outside <>)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return s[:i]
    return s


def parse_ptxas(text):
    """ptxas -v output -> {mangled: {regs, stack, spill_st, spill_ld, smem, barriers}}."""
    res, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line) or re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1)
            res.setdefault(cur, {})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            res[cur].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers(.*)", line)
        if m:
            rest = m.group(2)
            sm = re.search(r"(\d+) bytes smem", rest)
            bar = re.search(r"used (\d+) barriers", rest)
            res[cur].update(regs=int(m.group(1)), smem=int(sm.group(1)) if sm else 0,
                            barriers=int(bar.group(1)) if bar else 0)
    return {k: v for k, v in res.items() if "regs" in v}


# ---- PTX ---------------------------------------------------------------------------------

LDSM_BYTES = {"x1": 128, "x2": 256, "x4": 512}  # per warp: 1, 2 or 4 8x8 matrices of 16 bits


def ld_shared_bytes(line):
    """Bytes one thread loads with an ld.shared instruction (0 if the line is not one)."""
    m = re.match(r"\s*(?:@!?%p\d+\s+)?ld\.shared(?:\.\w+)*?(\.v[24])?\.(b|u|s|f)(8|16|32|64)\b", line)
    if not m:
        return 0
    vec = int(m.group(1)[2]) if m.group(1) else 1
    return vec * int(m.group(3)) // 8


def mix(lines):
    """mma products, ldmatrix bytes and ld.shared bytes (per warp) in a list of PTX lines."""
    mma = ldsm = lds = 0
    for line in lines:
        if "mma.sync.aligned.m16n8k16" in line:
            mma += 1
        m = re.search(r"ldmatrix\.sync\.aligned\.m8n8\.(x[124])", line)
        if m:
            ldsm += LDSM_BYTES[m.group(1)]
        lds += 32 * ld_shared_bytes(line)
    return mma, ldsm, lds


def ptx_entries(ptx):
    """{mangled: (maxntid or None, body lines)} for every .entry of a PTX file."""
    out = {}
    lines = ptx.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*\.(?:visible\s+)?\.?entry\s+(\S+?)\(", lines[i]) or re.match(r"\s*\.entry\s+(\S+)", lines[i])
        if not m:
            i += 1
            continue
        name, ntid, body, depth, started = m.group(1).rstrip("("), None, [], 0, False
        while i < len(lines):
            line = lines[i]
            mt = re.search(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)", line)
            if mt and not started:
                ntid = int(mt.group(1)) * int(mt.group(2)) * int(mt.group(3))
            if "{" in line:
                started = True
            depth += line.count("{") - line.count("}")
            body.append(line)
            i += 1
            if started and depth == 0:
                break
        out[name] = (ntid, body)
    return out


def main_loop(body):
    """The outermost loop of a kernel body that holds mma.sync: (first, last) line indices."""
    labels = {}
    for i, line in enumerate(body):
        m = re.match(r"\s*(\$L__\w+):", line)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, line in enumerate(body):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i))
    with_mma = [(a, b) for a, b in loops if any("mma.sync" in body[k] for k in range(a, b + 1))]
    if not with_mma:
        return None
    return max(with_mma, key=lambda ab: ab[1] - ab[0])


# ---- block sizes from the sources ----------------------------------------------------------

def eval_expr(expr, defines):
    expr = expr.strip()
    for _ in range(5):
        expr = re.sub(r"\b([A-Z_][A-Z0-9_]*|k[A-Z]\w*)\b", lambda m: "(" + defines[m.group(1)] + ")"
                      if m.group(1) in defines else m.group(1), expr)
    if not re.fullmatch(r"[\d\s()+\-*/]+", expr):
        return None
    try:
        return int(eval(expr, {"__builtins__": {}}))
    except Exception:
        return None


def launch_blocks(root):
    """{kernel base name: threads per block} from the <<<grid, block, ...>>> launches."""
    defines = {}
    paths = [os.path.join(root, d, f) for d in ("kernels", "kernels/cuda")
             for f in sorted(os.listdir(os.path.join(root, d)))]
    for path in paths:
        if path.endswith((".cu", ".cuh", ".h")):
            text = open(path).read()
            for m in re.finditer(r"^\s*#define\s+([A-Z_][A-Z0-9_]*)\s+([^\n/]+)", text, re.M):
                defines.setdefault(m.group(1), m.group(2).strip())
            for m in re.finditer(r"^\s*constexpr\s+int\s+(k[A-Z]\w*)\s*=\s*([^;]+);", text, re.M):
                defines.setdefault(m.group(1), m.group(2).strip())
    blocks = {}
    for f in sorted(os.listdir(os.path.join(root, "kernels/cuda"))):
        if not f.endswith(".cu"):
            continue
        src = open(os.path.join(root, "kernels/cuda", f)).read()
        dims = {m.group(1): m.group(2) for m in re.finditer(r"dim3\s+(\w+)\(([^()]*)\)", src)}
        for m in re.finditer(r"(\w+)(?:<[^<>]*>)?<<<(.*?)>>>", src, re.S):
            args = [a.strip() for a in re.split(r",(?![^()]*\))", m.group(2))]
            if len(args) < 2:
                continue
            block = args[1]
            if block in dims:
                parts = [eval_expr(p, defines) for p in dims[block].split(",")]
                n = math.prod(parts) if all(p is not None for p in parts) else None
            else:
                n = eval_expr(block, defines)
            if n:
                blocks.setdefault(m.group(1), n)
    return blocks


def attention_table(binary):
    """{'attn_fwd_kernel<64, true>': (threads, dynamic smem)} from test_kernels_gpu --launch-table."""
    if not binary:
        return {}
    out = subprocess.run([binary, "--launch-table", str(T5_MAX_DISTANCE)], capture_output=True, text=True)
    table = {}
    for line in out.stdout.splitlines():
        m = re.match(r"launch (\S.*\S) threads (\d+) smem (\d+)$", line)
        if m:
            table[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return table


def occupancy(regs, threads, smem):
    """(blocks per SM, warps per SM, the limit) on sm_90."""
    warps = -(-threads // 32)
    warp_regs = -(-max(regs, 1) * 32 // REG_GRAIN) * REG_GRAIN
    lim = {"warps": SM_WARPS // warps, "blocks": SM_BLOCKS,
           "registers": SM_REGS // (warp_regs * warps),
           "shared memory": SM_SMEM // (-(-(smem + SMEM_RESERVED) // SMEM_GRAIN) * SMEM_GRAIN)}
    which = min(lim, key=lambda k: lim[k])
    return lim[which], lim[which] * warps, which


# ---- SASS (the machine code, cuobjdump -sass for sm_90) --------------------------------------
#
# The main loop of a kernel is the outermost loop of its SASS (a backward branch and its target)
# that holds tensor-core instructions (HMMA), or, in a kernel without them, its longest loop.
# Counted there, once per instruction in address order (every path of the body, a loop the
# compiler kept rolled once): HMMA, LDSM (ldmatrix: shared-memory fragment loads), MUFU.EX2
# (exp2, the softmax) per HMMA, global loads (LDG, LD; cp.async's LDGSTS writes shared memory
# and no register), memory barriers by kind (MEMBAR.SC: a __threadfence, fence.sc; MEMBAR.ALL:
# the fence of a release or an acquire-release), and the global round trips the warp waits for:
# a register a global load wrote, read by a later instruction with no HMMA between them (nothing
# that hides the load's latency), is a wait; loads issued before the previous wait are covered
# by it. Two waits or more in one iteration are a dependent chain (a round trip that cannot start
# before another has ended). Waits are counted on the loop's straight-line path: not inside
# loops nested in it without HMMA (tile copies, a flag's spin), nor for a value stored to shared
# memory as loaded (the element-wise copy of a tile whose rows cp.async cannot take). A main
# loop with a sequentially consistent fence or a dependent chain is flagged.

SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
REG = re.compile(r"\bR(\d+)\b")


def find_cuobjdump():
    """cuobjdump from CUOBJDUMP, the CUDA toolkit, PATH, or the nvidia-cuda-cuobjdump wheel (installed
    by test/setup.sh into build/tools/python, or in python3's own site-packages)."""
    cands = [os.environ.get("CUOBJDUMP", "")]
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cands.append(os.path.join(home, "bin", "cuobjdump"))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        cands.append(os.path.join(d, "cuobjdump"))
    bases = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "tools", "python", "nvidia")]
    try:
        import nvidia  # the pip wheels' namespace package
        bases += list(nvidia.__path__)
    except ImportError:
        pass
    for base in bases:  # test/setup.sh installs the wheel into build/tools/python
        cands += [os.path.join(base, sub, "bin", "cuobjdump") for sub in ("cu13", "cuda_cuobjdump")]
    # cuobjdump runs nvdisasm, found beside it (the wheels) or on PATH (the toolkit).
    return next((c for c in cands if c and os.access(c, os.X_OK) and
                 (os.access(os.path.join(os.path.dirname(c), "nvdisasm"), os.X_OK) or shutil.which("nvdisasm"))), None)


def parse_sass(text):
    """cuobjdump -sass text -> {mangled: [(address, opcode, operands)]}."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = SASS_LINE.search(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(3), m.group(4).strip()))
    return out


def reg_width(opcode):
    """Registers written by a load of this opcode (.64: 2, .128: 4)."""
    return 4 if ".128" in opcode else 2 if ".64" in opcode else 1


def operand_regs(operand):
    """The registers an operand names (R4.64: R4 and R5)."""
    regs = set()
    for m in re.finditer(r"\bR(\d+)(\.64)?\b", operand):
        r = int(m.group(1))
        regs.add(r)
        if m.group(2):
            regs.add(r + 1)
    return regs


def is_global_load(opcode):
    return (opcode.startswith("LDG") and not opcode.startswith("LDGSTS") and not opcode.startswith("LDGDEPBAR")) or \
        opcode == "LD" or opcode.startswith("LD.")


def sass_loops(instrs):
    """Every loop of a function's SASS: (first, last) indices of a backward branch's target and
    the branch."""
    index = {a: i for i, (a, _, _) in enumerate(instrs)}
    loops = []
    for i, (a, op, ops) in enumerate(instrs):
        if op.startswith("BRA"):
            m = re.match(r"(?:`?\(?\.?L?_?\w*\)?\s*)?0x([0-9a-f]+)", ops)
            if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in index:
                loops.append((index[int(m.group(1), 16)], i))
    return loops


def sass_main_loop(instrs, loops):
    """(first, last) indices of the main loop (see above), or None."""
    if not loops:
        return None
    hmma = [(s, e) for s, e in loops if any(instrs[k][1].startswith("HMMA") for k in range(s, e + 1))]
    return max(hmma or loops, key=lambda se: se[1] - se[0])


def sass_loop_stats(instrs):
    """The main loop's counts (see above) as a dict, or None without a loop."""
    loops = sass_loops(instrs)
    loop = sass_main_loop(instrs, loops)
    if not loop:
        return None
    body = instrs[loop[0]:loop[1] + 1]
    # Loops nested in the main one without tensor-core work (tile copies, a flag's spin) run apart
    # from its straight-line path: their waits are not the main loop's chain.
    inner = set()
    for s, e in loops:
        if loop[0] <= s and e <= loop[1] and (s, e) != loop and \
                not any(instrs[k][1].startswith("HMMA") for k in range(s, e + 1)):
            inner.update(range(s - loop[0], e - loop[0] + 1))
    st = {"instrs": len(body), "hmma": 0, "ldsm": 0, "ex2": 0, "loads": 0, "waits": 0, "membar": {}}
    pending = {}  # register -> (wait epoch at issue, hidden by an HMMA since)
    epoch = 0
    for k_ins, (_, op, ops) in enumerate(body):
        parts = [p.strip() for p in ops.split(",")] if ops else []
        writes_first = not op.startswith(("ST", "RED", "ATOM", "BRA", "BAR", "ISETP", "FSETP", "MEMBAR", "BSYNC",
                                          "BSSY", "WARPSYNC", "NANOSLEEP", "CCTL", "EXIT", "RET", "CALL", "DEPBAR",
                                          "LDGDEPBAR", "ERRBAR", "FENCE", "NOP", "LDGSTS"))
        if op.startswith(("MEMBAR", "FENCE")):
            st["membar"][op] = st["membar"].get(op, 0) + 1
        if k_ins in inner:
            pending = {}
            st["loads"] += is_global_load(op)
            continue
        srcs = set()
        for k, p in enumerate(parts):
            if k == 0 and writes_first:
                continue
            srcs |= operand_regs(p)
        used = [r for r in srcs if r in pending]
        if used:
            # A value stored to shared memory as loaded is a copy (the element-wise form of a
            # tile's cp.async, for unaligned rows): not a wait of the computation's path.
            if not op.startswith("STS") and any(pending[r][0] == epoch and not pending[r][1] for r in used):
                st["waits"] += 1
                epoch += 1
            for r in used:
                pending.pop(r, None)
        if op.startswith("HMMA"):
            st["hmma"] += 1
            pending = {r: (e, True) for r, (e, _) in pending.items()}
        elif op.startswith("LDSM"):
            st["ldsm"] += 1
        elif op.startswith("MUFU.EX2"):
            st["ex2"] += 1
        dst = operand_regs(parts[0]) if parts and writes_first else set()
        if is_global_load(op):
            st["loads"] += 1
            first = min(dst) if dst else None
            if first is not None:
                for r in range(first, first + reg_width(op)):
                    pending[r] = (epoch, False)
        else:
            for r in dst:
                pending.pop(r, None)
    reasons = []
    if any(k.startswith("MEMBAR.SC") for k in st["membar"]):
        reasons.append("MEMBAR.SC (a __threadfence) in the loop")
    if st["waits"] >= 2:
        reasons.append(f"a dependent chain of {st['waits']} global round trips")
    st["flag"] = "; ".join(reasons)
    return st


def sass_of_cubin(cubin, cuobjdump):
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"kernel_report: cuobjdump failed on {cubin}:\n{r.stderr[-2000:]}")
    return r.stdout


def fmt_sass_rows(rows):
    out = ["| kernel | prec | loop instructions | HMMA | LDSM | MUFU.EX2 / HMMA | global loads | global waits | "
           "memory barriers | flagged |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r.get("sass")
        if not s:
            continue
        ex2 = f"{s['ex2'] / s['hmma']:.2f}" if s["hmma"] else "-"
        bars = ", ".join(f"{k} {v}" for k, v in sorted(s["membar"].items())) or "-"
        out.append(f"| {r['name']} | {r['prec']} | {s['instrs']} | {s['hmma']} | {s['ldsm']} | {ex2} | {s['loads']} | "
                   f"{s['waits']} | {bars} | {s['flag'] or '-'} |")
    return "\n".join(out)


def sass_only(paths):
    """--sass: the main-loop table of cubins or saved cuobjdump -sass text; exit 1 when any flagged."""
    cuobjdump = None
    rows = []
    for path in paths:
        if path.endswith((".cubin", ".o")):
            cuobjdump = cuobjdump or find_cuobjdump()
            if not cuobjdump:
                sys.exit("kernel_report: no cuobjdump (CUDA_HOME/bin, PATH, or pip install nvidia-cuda-cuobjdump)")
            text = sass_of_cubin(path, cuobjdump)
        else:
            text = open(path).read()
        funcs = parse_sass(text)
        dem = demangle(list(funcs))
        for mangled, instrs in funcs.items():
            rows.append(dict(name=short_name(dem[mangled]), prec=os.path.basename(path), sass=sass_loop_stats(instrs)))
    print(fmt_sass_rows(rows))
    flagged = [r["name"] for r in rows if r["sass"] and r["sass"]["flag"]]
    print(f"flagged: {len(flagged)}" + (" (" + ", ".join(flagged) + ")" if flagged else ""))
    return not flagged


# ---- the report ------------------------------------------------------------------------------

def compile_one(root, cu, fp16, tmp):
    """One nvcc pass: the cubin for sm_90 with ptxas -v, and the PTX kept. -> (ptxas text, ptx text)."""
    name = os.path.splitext(os.path.basename(cu))[0] + ("-fp16" if fp16 else "")
    keep = os.path.join(tmp, name)
    os.makedirs(keep, exist_ok=True)
    cmd = [os.environ.get("NVCC", "nvcc"), "-O3", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90", "-I", root,
           "-DFSDP_CUDA", "-Xptxas", "-v", "--keep", "--keep-dir", keep, "-cubin", "-o",
           os.path.join(keep, name + ".cubin"), cu] + (["-DFSDP_FP16"] if fp16 else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kernel_report: nvcc failed on {cu}:\n{r.stderr[-3000:]}")
    ptx = "".join(open(os.path.join(keep, f)).read() for f in os.listdir(keep) if f.endswith(".ptx"))
    cuobjdump = find_cuobjdump()
    sass = sass_of_cubin(os.path.join(keep, name + ".cubin"), cuobjdump) if cuobjdump else ""
    return r.stderr, ptx, sass


def report(args):
    root = os.path.abspath(args.root)
    cus = sorted(os.path.join(root, "kernels/cuda", f) for f in os.listdir(os.path.join(root, "kernels/cuda"))
                 if f.endswith(".cu"))
    if args.files:
        cus = [c for c in cus if os.path.basename(c) in args.files]
    blocks = launch_blocks(root)
    table = attention_table(args.table_bin)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        jobs = [(cu, fp16, pool.submit(compile_one, root, cu, fp16, tmp)) for fp16 in (False, True) for cu in cus]
        for cu, fp16, job in jobs:
            ptxas, ptx, sass = job.result()
            res = parse_ptxas(ptxas)
            entries = ptx_entries(ptx)
            funcs = parse_sass(sass)
            dem = demangle(list(res))
            for mangled, r in res.items():
                name = short_name(dem[mangled])
                base = re.sub(r"<.*", "", name)
                ntid, body = entries.get(mangled, (None, []))
                threads, dyn = ntid or blocks.get(base), 0
                if name in table:
                    threads, dyn = table[name]
                row = dict(r, name=name, file=os.path.basename(cu), prec="fp16" if fp16 else "bf16",
                           threads=threads, dyn=dyn)
                if threads:
                    row["blocks_sm"], row["warps_sm"], row["limit"] = occupancy(r["regs"], threads, r["smem"] + dyn)
                if mangled in funcs and not OFF_PATH.match(name):
                    row["sass"] = sass_loop_stats(funcs[mangled])
                if base.startswith("attn_") and body:
                    row["whole"] = mix(body)
                    loop = main_loop(body)
                    row["loop"] = mix(body[loop[0]:loop[1] + 1]) if loop else None
                rows.append(row)
    return rows


def fmt_rows(rows, attention_only=False):
    out = ["| kernel | prec | threads | regs | spills (st/ld B) | smem static + dynamic (B) | blocks/SM | "
           "occupancy | limited by | main loop: mma, smem B/mma |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if attention_only and not r["name"].startswith("attn_"):
            continue
        occ = f"{r['warps_sm'] / SM_WARPS:.0%} ({r['warps_sm']} warps)" if r.get("warps_sm") else "-"
        loop = "-"
        if r.get("loop"):
            mma, ldsm, lds = r["loop"]
            loop = f"{mma}, {(ldsm + lds) / mma:.0f}" if mma else "-"
        out.append(f"| {r['name']} | {r['prec']} | {r['threads'] or '?'} | {r['regs']} | "
                   f"{r.get('spill_st', 0)}/{r.get('spill_ld', 0)} | {r['smem']} + {r['dyn']} | "
                   f"{r.get('blocks_sm', '-')} | {occ} | {r.get('limit', '-')} | {loop} |")
    return "\n".join(out)


def write_report(rows, path, root):
    hot = [r for r in rows if not OFF_PATH.match(r["name"])]
    spills = [r for r in hot if r.get("spill_st", 0) or r.get("spill_ld", 0)]
    text = ["# CUDA kernel report (sm_90, no GPU needed)", "",
            "Written by `make kernel-report` (scripts/kernel_report.py): every kernel of kernels/cuda/ compiled for",
            "sm_90 in the bf16 and the fp16 build, as ptxas reports it, with the theoretical occupancy on an H100",
            "(64K registers, 228 KiB of shared memory and 64 warps per SM). The attention kernels' dynamic shared",
            "memory is what they launch with, the bias variants at T5's max_distance (128). The last column counts",
            "the main loop of the fused attention kernels in the PTX: its mma.sync products and the shared-memory",
            "bytes ldmatrix and ld.shared load per product (a loop the compiler kept rolled counts once).", "",
            f"Kernels on a training step's path that spill registers: {len(spills)}"
            + (" (" + ", ".join(sorted({r['name'] for r in spills})) + ")" if spills else "") + ".", ""]
    text.append(fmt_rows(rows))
    flagged = sorted({r["name"] for r in hot if r.get("sass") and r["sass"]["flag"]})
    text += ["", "## Main loops in the machine code (sm_90 SASS)", "",
             "From cuobjdump's SASS of the same builds, for every kernel on the step's path (" +
             ("cuobjdump not found: none" if not any(r.get("sass") for r in rows) else "a kernel without a loop: none") +
             ").", "The main loop is the outermost loop holding tensor-core instructions (HMMA), else the longest;",
             "counted once per instruction in address order (every path): HMMA, LDSM (ldmatrix: shared-memory",
             "fragment loads), MUFU.EX2 per HMMA, global loads, the global round trips the warp waits for on the",
             "loop's straight-line path (a loaded register read with no HMMA between: two or more are a dependent",
             "chain), and memory barriers by kind (MEMBAR.SC: a __threadfence; MEMBAR.ALL: a release's fence).",
             "A sequentially consistent fence or a dependent chain in the main loop flags the kernel. A flag is a",
             "fact about the loop, not a measured cost: a kernel that keeps many warps on an SM (the occupancy above)",
             "hides one warp's waits behind the others'; at 8 warps per SM (the fused attention) nothing hides them.", "",
             f"Kernels on the step's path flagged: {len(flagged)}" + (" (" + ", ".join(flagged) + ")" if flagged else "") + ".",
             "", fmt_sass_rows([r for r in hot if r.get("sass")])]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(text) + "\n")


def check_spills(logs):
    passed = failed = 0
    for log in logs:
        res = parse_ptxas(open(log).read())
        dem = demangle(list(res))
        if not res:
            print(f"ok   {log}: no kernels (host code only)")
            passed += 1
            continue
        bad = sorted({short_name(dem[k]) for k, r in res.items()
                      if (r.get("spill_st", 0) or r.get("spill_ld", 0)) and not OFF_PATH.match(short_name(dem[k]))})
        if bad:
            print(f"FAIL {log}: {len(bad)} kernel(s) on the step's path spill registers: {', '.join(bad)}")
            failed += 1
        else:
            print(f"ok   {log}: {len(res)} kernels, none on the step's path spills registers")
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return failed == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/kernel_report.md")
    ap.add_argument("--root", default=".", help="the source tree to compile (default: this one)")
    ap.add_argument("--table-bin", help="test_kernels_gpu, for the attention kernels' launch table")
    ap.add_argument("--files", nargs="*", help="only these .cu files (names)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--print-attention", action="store_true", help="print the attention kernels' rows")
    ap.add_argument("--check-spills", nargs="*", metavar="LOG")
    ap.add_argument("--sass", nargs="*", metavar="FILE",
                    help="only the SASS main-loop table of these cubins or objects (cuobjdump) or saved -sass "
                         "text; exit 1 when a kernel is flagged")
    args = ap.parse_args()
    if args.check_spills is not None:
        sys.exit(0 if check_spills(args.check_spills) else 1)
    if args.sass is not None:
        sys.exit(0 if sass_only(args.sass) else 1)
    rows = report(args)
    write_report(rows, args.out, args.root)
    if args.print_attention:
        print(fmt_rows(rows, attention_only=True))
    print(f"kernel report: {args.out} ({len(rows)} kernels)")


if __name__ == "__main__":
    main()
