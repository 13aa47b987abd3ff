#!/usr/bin/python3
"""--eval-choices: llm.c's multiple-choice evaluation files, written here in their format
(test/choices_file.py), against an accuracy computed here.

A small GPT learns the built-in addition data; a file of addition problems asks it to choose
the answer among four (the right sum and three others, the label drawn at random), with
contexts and completions of several lengths, more examples than ranks or rows divide evenly.
The reference: the run's final parameters (--dump-params) in the plain-torch GPT-2 of
test/ref_gpt.py, each completion scored by its mean cross-entropy over its tokens after the
context, the lowest score chosen (the first of equal ones, as llm.c), compared with the label.
Checked: the trainer's accuracy is the reference's on 1 rank, and the same on 3 ranks (each
its share of the examples, the counts summed) and with a micro-batch smaller than an
example's completions; the trained model beats chance; the log has it; files that cannot be
run are refused naming the example. Prints ok/FAIL per check and "N passed, M failed".
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from choices_file import choices_bytes  # noqa: E402
from ref_gpt import gpt_forward  # noqa: E402

MODEL = "gpt:L=2,C=64,H=4,V=256,T=12"
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name, flush=True)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, str(detail)[-600:]), flush=True)


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=ROOT, env=env)
    return r.returncode, r.stdout + r.stderr


def accuracy_line(out):
    m = re.search(r"multiple-choice accuracy ([0-9.]+)% on (\d+) examples", out)
    return (float(m.group(1)), int(m.group(2))) if m else None


def addition_examples(rng, n):
    """Addition problems as the built-in data writes them ("ab+cd=" then the sum in three digits,
    reversed, and a newline), with four completions: the right one at the label and three wrong
    sums, some a digit shorter; a few contexts shortened to vary the lengths."""
    exs = []
    for _ in range(n):
        a, b = rng.randrange(10, 100), rng.randrange(10, 100)
        ctx = f"{a}+{b}=".encode()
        if rng.random() < 0.1:
            ctx = ctx[rng.randrange(1, 4):]
        right = f"{a + b:03d}"[::-1] + "\n"
        wrong = set()
        while len(wrong) < 3:  # wrong sums, some a digit shorter
            w = f"{max(0, a + b + rng.choice([-100, -10, -1, 1, 10, 100, rng.randrange(-50, 50)])):03d}"[::-1] + "\n"
            w = w[1:] if rng.random() < 0.2 else w
            if w != right:
                wrong.add(w)
        comps = sorted(wrong)
        label = rng.randrange(4)
        comps.insert(label, right)
        exs.append((list(ctx), [list(c.encode()) for c in comps], label))
    return exs


def reference(params_path, examples):
    """The accuracy of the dumped parameters by the definition above, in plain torch."""
    table = json.load(open(params_path + ".json"))
    flat = torch.frombuffer(bytearray(open(params_path, "rb").read()), dtype=torch.float32)
    P, at = {}, 0
    for p in table:
        P[f"{p['unit']}.{p['name']}"] = flat[at:at + p["count"]].view(*p["shape"])
        at += p["count"]
    meta = {"L": 2, "C": 64, "H": 4}
    right = 0
    for ctx, comps, label in examples:
        scores = []
        for c in comps:
            tokens = torch.tensor([ctx + c])
            with torch.no_grad():
                logp = gpt_forward(P, meta, tokens)[0].log_softmax(-1)
            n = len(ctx)
            scores.append(-sum(logp[n - 1 + i, t].item() for i, t in enumerate(c)) / len(c))
        best = min(range(len(comps)), key=lambda i: (scores[i], i))
        right += best == label
    return right / len(examples)


def main():
    tmp = tempfile.mkdtemp()
    rng = random.Random(5)
    examples = addition_examples(rng, 37)  # 37: no multiple of 3 ranks nor of the rows a forward holds
    path = os.path.join(tmp, "addition_choices.bin")
    open(path, "wb").write(choices_bytes(examples))
    ck, params, log = (os.path.join(tmp, n) for n in ("ck", "params.bin", "log.jsonl"))
    base = ["--data", "data/addition/train_*.bin", "--seq", "10", "--eval-choices", path]
    rc, out = run(["./train_gpt_cpu", "--model", MODEL, "--batch", "64", "--steps", "500", "--lr", "3e-3", "--warmup", "20",
                   "--save", ck, "--dump-params", params, "--log", log] + base)
    got = accuracy_line(out)
    check("a run with --eval-choices reports the accuracy on the file's 37 examples", rc == 0 and got and got[1] == 37,
          out[-400:])
    if not got:
        print(f"{passed} passed, {failed} failed")
        return 1
    ref = reference(params, examples)
    check(f"the accuracy is the reference's (plain torch, mean loss per completion token): {got[0]:.2f}% vs "
          f"{100 * ref:.2f}%", abs(got[0] - 100 * ref) < 0.005, (got, ref))
    check("the trained model chooses better than chance (25%; 46% after 500 steps)", got[0] > 35, got)
    logged = [json.loads(l) for l in open(log) if "choice_accuracy" in l]
    check("the log has the accuracy as a fraction", logged and abs(logged[-1]["choice_accuracy"] - ref) < 1e-12, logged)
    # The same parameters evaluated again (one step at learning rate 0 from the checkpoint's
    # weights), on 3 ranks and with 3 rows a forward (an example's 4 completions across forwards).
    again = ["--init-from", ck, "--steps", "1", "--lr", "0", "--weight-decay", "0"] + base
    for name, cmd in (("3 ranks, each its share", ["mpirun", "--oversubscribe", "-np", "3", "./train_gpt_cpu", "--batch", "4"]),
                      ("1 rank, 3 rows a forward", ["./train_gpt_cpu", "--batch", "3"]),
                      ("2 ranks, 5 rows a forward", ["mpirun", "--oversubscribe", "-np", "2", "./train_gpt_cpu", "--batch", "5"])):
        rc, out = run(cmd + again)
        check(f"{name}: the same accuracy", rc == 0 and accuracy_line(out) == got, (accuracy_line(out), out[-300:]))

    # Files that cannot be run are refused before the first step, naming the example.
    long_ctx = [(list(b"12+34=12+34="), [list(b"640\n")], 0)]
    for what, exs, want in (("a context and completion longer than --seq", long_ctx, "example 0 .* 16 tokens, more than a sequence of 10"),
                            ("a token beyond the vocabulary", [([300], [[1]], 0)], "example 0 .* token id 300 is not in the model's vocabulary of 256"),
                            ("a label beyond the completions", [([1], [[1], [2]], 2)], "example 0 .* label 2 of 2 completions")):
        bad = os.path.join(tmp, "bad.bin")
        open(bad, "wb").write(choices_bytes(exs))
        rc, out = run(["./train_gpt_cpu", "--model", MODEL, "--steps", "1", "--data", "data/addition/train_*.bin", "--seq", "10",
                       "--eval-choices", bad])
        check(f"{what} is refused, naming the example", rc == 1 and re.search(want, out) and "step    1" not in out, out[-300:])
    rc, out = run(["./train_gpt_cpu", "--model", "t5:L=1,C=32,H=2,D=16,F=64,V=256", "--data", "data/addition/train_*.bin",
                   "--enc-len", "16", "--dec-len", "8", "--steps", "1", "--eval-choices", path])
    check("--eval-choices is refused for T5", rc == 2 and "for GPT models" in out, out[-200:])
    print(f"{passed} passed, {failed} failed")
    subprocess.run(["rm", "-rf", tmp])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
