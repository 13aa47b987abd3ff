"""compare_losses.py A.json B.json: two --log files of the same run on the CUDA (bf16) and CPU
(fp32) backends. Step 1 must agree within 1%, later steps within 3% (relative); the reasoning
is at the top of test/gpu/test_gpu.sh. Prints a table; exits 1 when a step is out of bounds."""
import json
import sys


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) != len(b) or not a:
    print("  different numbers of steps: %d vs %d" % (len(a), len(b)))
    sys.exit(1)
ok = True
print("  step   cuda          cpu           rel diff   bound")
for i, (x, y) in enumerate(zip(a, b)):
    tol = 0.01 if i == 0 else 0.03
    r = abs(x - y) / abs(y)
    good = r <= tol
    ok = ok and good
    print("  %4d   %-12.6f  %-12.6f  %-9.2e  %.3f %s" % (i + 1, x, y, r, tol, "" if good else "<-- FAIL"))
sys.exit(0 if ok else 1)
