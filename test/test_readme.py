#!/usr/bin/env python3
"""Every command block of README.md runs as written, so the README cannot rot.

The blocks (indented or fenced) are taken from README.md in order. A block whose first word is
a command (make, mkdir, python3, mpirun, ./...) runs, unchanged, in bash -e from a copy of the
repository's top level made of links (the build, the binaries, the sources and the built-in
data are the repository's; what the commands write stays in the copy). Long runs are shortened
by the environment only: FSDP_STEPS_LIMIT (the trainer trains the first N steps of the run as
given, then ends as at its last step) and T, the part a nested `make test` runs. Each block must
exit 0 with no "error:" line, and print what it is there to show. The other blocks (the
reading order, the layout) name files: each must exist. Prints ok/FAIL per check and "N passed,
M failed". TEST_FILTER picks blocks by their first line.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = ("make", "mkdir", "python3", "mpirun", "./")
STEPS_LIMIT = "20"
NESTED_PART = "includes"  # what `make test` runs inside this part: a short part, a real suite run
# What a block is there to show, by a word of its first line: patterns its output must have.
SHOWS = {
    "make run": [r"exact-match accuracy", r"^\d+ passed, 0 failed"],
    "prepare_text.py": [r"tokenizer\.json: byte-level BPE", r"exported runs/guide_hf",
                        r"wrote runs/guide\.png", r"^continuation: ", r"the run's settings from runs/guide/meta\.json",
                        r"resumed from runs/guide after step 20", r"^step +40/40"],
    "mpirun": [r"exact-match accuracy", r"^params_digest [0-9a-f]{16}$"],
    "make predict_gpt": [r"^fits: "],
}
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name, flush=True)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, str(detail)[-1500:]), flush=True)


def wanted(name):
    f = os.environ.get("TEST_FILTER", "")
    return not f or re.search(f, name, re.IGNORECASE) is not None


def blocks(text):
    """The code blocks of a Markdown text, in order: indented ones (after a blank line, outside
    lists) and fenced ones."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("\n".join(lines[i + 1:j]))
            i = j + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or (not lines[j].strip() and j + 1 < len(lines) and
                                                                    lines[j + 1].startswith("    "))):
                j += 1
            out.append("\n".join(l[4:] for l in lines[i:j]).rstrip("\n"))
            i = j
            continue
        i += 1
    return out


def is_command(block):
    first = block.split("\n", 1)[0].split()
    return bool(first) and first[0].startswith(COMMANDS)


def named_paths(block):
    """The files a non-command block names: each line's first column (before two spaces),
    'a, b' naming two."""
    paths = []
    for line in block.split("\n"):
        if not line.strip() or line.startswith(" "):
            continue  # a continuation of the line above
        head = re.split(r"\s{2,}", line.strip())[0]
        paths += [p.strip().rstrip("/") for p in head.split(",") if p.strip()]
    return paths


def farm(tmp):
    """A copy of the repository's top level made of links, with a data/ of its own."""
    for name in os.listdir(ROOT):
        if name in ("data", "runs", ".git"):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(tmp, name))
    os.mkdir(os.path.join(tmp, "data"))
    for name in os.listdir(os.path.join(ROOT, "data")):
        if name != "guide":
            os.symlink(os.path.join(ROOT, "data", name), os.path.join(tmp, "data", name))


def main():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    found = blocks(text)
    commands = [b for b in found if is_command(b)]
    check(f"README.md has its command blocks ({len(commands)} of {len(found)} blocks)", len(commands) >= 4,
          [b.split(chr(10))[0] for b in found])
    for b in found:
        if is_command(b):
            continue
        missing = [p for p in named_paths(b) if not os.path.exists(os.path.join(ROOT, p))]
        first = b.split("\n")[0].strip()
        check(f"the files the block '{first[:40]}...' names exist ({len(named_paths(b))})", not missing, missing)
    tmp = tempfile.mkdtemp()
    farm(tmp)
    env = dict(os.environ, FSDP_STEPS_LIMIT=STEPS_LIMIT, T=NESTED_PART, F="", OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("TEST_FILTER", None)
    env.pop("MAKEFLAGS", None)
    env.pop("MAKELEVEL", None)
    for b in commands:
        first = b.split("\n")[0]
        if not wanted(first):
            continue
        start = time.time()
        r = subprocess.run(["bash", "-e", "-c", b], cwd=tmp, env=env, capture_output=True, text=True, errors="replace")
        out = r.stdout + r.stderr
        errors = [l for l in out.splitlines() if re.match(r"(\[rank \d+\] )?error:", l)]
        shows = next((pats for key, pats in SHOWS.items() if key in b.split("\n")[0] or key in b), [])
        missing = [p for p in shows if not re.search(p, out, re.M)]
        check(f"README block '{first[:60]}' runs as written ({time.time() - start:.1f} s)",
              r.returncode == 0 and not errors and not missing,
              f"exit {r.returncode}; errors {errors[:3]}; missing {missing}\n" + "\n".join(out.splitlines()[-25:]))
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
