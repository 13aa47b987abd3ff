"""compare_losses.py A.json B.json [FIRST LATER]: two --log files of the same run on the CUDA
(bf16) and CPU (fp32) backends. Step 1 must agree within 1%, later steps within 3% (relative);
the reasoning is at the top of test/gpu/test_gpu.sh. FIRST and LATER replace those bounds (the
fp16 build's are 8 times tighter: fp16 keeps 3 more bits). Prints a table; exits 1 when a step is
out of bounds."""
import json
import sys


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


a, b = losses(sys.argv[1]), losses(sys.argv[2])
first, later = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (0.01, 0.03)
if len(a) != len(b) or not a:
    print("  different numbers of steps: %d vs %d" % (len(a), len(b)))
    sys.exit(1)
ok = True
print("  step   cuda          cpu           rel diff   bound")
for i, (x, y) in enumerate(zip(a, b)):
    tol = first if i == 0 else later
    r = abs(x - y) / abs(y)
    good = r <= tol
    ok = ok and good
    print("  %4d   %-12.6f  %-12.6f  %-9.2e  %.5f %s" % (i + 1, x, y, r, tol, "" if good else "<-- FAIL"))
sys.exit(0 if ok else 1)
