#!/usr/bin/env python3
"""llmc_patch.py: the changes scripts/bench_llmc.sh makes to its build copy of llm.c, and why.

    python3 scripts/llmc_patch.py cpu|cuda SRC_DIR [--nvml-events]   # patch a copy in place
    python3 scripts/llmc_patch.py --list                              # print the table below

Nothing of llm.c is kept in this repository: bench_llmc.sh copies the user's checkout (LLMC_DIR)
into build/llmc/ and patches the copy. Each patch replaces one exact piece of text that must
occur exactly once; when llm.c has moved on and a text is gone or repeated, this says which
patch and file, and stops, rather than building something else. The patches were written
against llm.c commit f1e2ace651495b74ae22d45d1723443fd00ecd3a (docs/performance.md: "Against llm.c").

cpu (train_gpt2.c, the fp32 CPU trainer) has no command line: B, T and the number of steps are
constants, and every 10 steps it evaluates, every 20 it samples 64 tokens with a full forward
each. The patch reads B, T and the step count from LLMC_BENCH_B, LLMC_BENCH_T and
LLMC_BENCH_STEPS; with LLMC_BENCH_STEPS set it skips the evaluation and the sampling (outside
its timed region, but minutes of forwards on a CPU) and reads its batches in order instead of
shuffled, as fsdp.c reads them, so the two trainers' first losses can be compared. Without
the variables the binary does what llm.c's does.
cuda (train_gpt2.cu) with the CUDA 13 toolkit: see the table.
"""
import os
import sys

# (mode, file, title, why, old text, new text); "cuda-nvml" patches apply with --nvml-events
PATCHES = [
    ("cpu", "train_gpt2.c", "benchmark settings from the environment",
     "B, T and the step count are constants in llm.c's CPU main()",
     "int main() {\n",
     "int main() {\n"
     "    // LLMC_BENCH_STEPS (with LLMC_BENCH_B, LLMC_BENCH_T): a benchmark run of that many steps,\n"
     "    // without evaluation or sampling, on batches read in order\n"
     "    const char* bench_steps = getenv(\"LLMC_BENCH_STEPS\");\n"),
    ("cpu", "train_gpt2.c", "batch size from LLMC_BENCH_B", "B = 4 is a constant",
     "    int B = 4;",
     "    int B = getenv(\"LLMC_BENCH_B\") ? atoi(getenv(\"LLMC_BENCH_B\")) : 4;"),
    ("cpu", "train_gpt2.c", "sequence length from LLMC_BENCH_T", "T = 64 is a constant",
     "    int T = 64;",
     "    int T = getenv(\"LLMC_BENCH_T\") ? atoi(getenv(\"LLMC_BENCH_T\")) : 64;"),
    ("cpu", "train_gpt2.c", "batches in order in a benchmark run",
     "the training loader shuffles; fsdp.c reads windows in order, and the step-0 loss check needs the same batch",
     "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);",
     "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, bench_steps ? 0 : 1);"),
    ("cpu", "train_gpt2.c", "step count from LLMC_BENCH_STEPS", "41 steps are a constant",
     "    for (int step = 0; step <= 40; step++) {",
     "    int last_step = bench_steps ? atoi(bench_steps) - 1 : 40;\n"
     "    for (int step = 0; step <= last_step; step++) {"),
    ("cpu", "train_gpt2.c", "no evaluation in a benchmark run", "5 validation forwards every 10 steps",
     "        if (step % 10 == 0) {",
     "        if (!bench_steps && step % 10 == 0) {"),
    ("cpu", "train_gpt2.c", "no sampling in a benchmark run", "63 full forwards every 20 steps",
     "        if (step > 0 && step % 20 == 0) {",
     "        if (!bench_steps && step > 0 && step % 20 == 0) {"),
    ("cuda", "llmc/cuda_utils.cuh", "no managed-memory fallback: out of memory is an error",
     "CUDA 13's cudaMemAdvise takes a cudaMemLocation, so the fallback's call no longer compiles; and a run "
     "that falls back to managed memory trains from host memory at a fraction of the speed (managed memory "
     "beyond the free device memory can also hang the GPU): the benchmark halves the batch instead",
     "        cudaGetLastError(); // reset the error before the next API call\n"
     "        cudaCheck_(cudaMallocManaged(out, bytes), file, line);\n"
     "        cudaCheck_(cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId), file, line);\n"
     "        return 1;\n",
     "        fprintf(stderr, \"out of memory: cudaMalloc of %zu bytes failed (%s:%d)\\n\", bytes, file, line);\n"
     "        exit(EXIT_FAILURE);\n"),
    ("cuda-nvml", "llmc/mfu.h", "NVML clock event names",
     "nvmlDeviceGetCurrentClocksThrottleReasons and the Sw/All throttle-reason macros are deprecated since "
     "NVML 12.2 in favour of the ClocksEvent names (only used by -lg, GPU logging)",
     "nvmlDeviceGetCurrentClocksThrottleReasons(", "nvmlDeviceGetCurrentClocksEventReasons("),
    ("cuda-nvml", "llmc/mfu.h", "NVML clock event names (power cap)", "deprecated macro name",
     "nvmlClocksThrottleReasonSwPowerCap", "nvmlClocksEventReasonSwPowerCap"),
    ("cuda-nvml", "llmc/mfu.h", "NVML clock event names (thermal)", "deprecated macro name",
     "nvmlClocksThrottleReasonSwThermalSlowdown", "nvmlClocksEventReasonSwThermalSlowdown"),
    ("cuda-nvml", "llmc/mfu.h", "NVML clock event names (all)", "deprecated macro name",
     "nvmlClocksThrottleReasonAll", "nvmlClocksEventReasonAll"),
]


def apply(mode, src, nvml_events):
    """Patch the copy in SRC; returns the list of lines describing what was applied."""
    wanted = {mode} | ({"cuda-nvml"} if mode == "cuda" and nvml_events else set())
    done = []
    for pmode, rel, title, why, old, new in PATCHES:
        if pmode not in wanted:
            continue
        path = os.path.join(src, rel)
        try:
            text = open(path).read()
        except OSError as e:
            raise SystemExit("error: llm.c patch '%s': cannot read %s: %s" % (title, path, e))
        n = text.count(old)
        if n != 1:
            raise SystemExit("error: llm.c patch '%s': %s holds the text it replaces %d times, not once: this llm.c "
                             "differs from commit f1e2ace (docs/performance.md, 'Against llm.c'); the text:\n%s" % (title, path, n, old))
        with open(path, "w") as f:
            f.write(text.replace(old, new))
        done.append("%s: %s (%s)" % (rel, title, why))
    return done


def main(argv):
    if argv[:1] == ["--list"]:
        for pmode, rel, title, why, _, _ in PATCHES:
            print("%-9s %s: %s (%s)" % (pmode, rel, title, why))
        return 0
    if len(argv) < 2 or argv[0] not in ("cpu", "cuda") or any(a != "--nvml-events" for a in argv[2:]):
        print("usage: llmc_patch.py cpu|cuda SRC_DIR [--nvml-events] | --list", file=sys.stderr)
        return 2
    for line in apply(argv[0], argv[1], "--nvml-events" in argv[2:]):
        print("patched " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
