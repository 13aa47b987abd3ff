#!/usr/bin/env python3
"""Compares two parameter dumps (--dump-params: fp32, global order) and two JSON step logs.

usage: compare_params.py A.bin B.bin A.json B.json TOL
Passes when every parameter value and every step loss agree within TOL relative
(|a-b| <= TOL * max(|a|, |b|, 1e-3)); TOL 0 demands identical bits. Prints the largest error.
"""
import json
import struct
import sys


def floats(path):
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def losses(path):
    out = []
    for line in open(path):
        obj = json.loads(line)
        if "loss" in obj:
            out.append(obj["loss"])
    return out


def main():
    a, b, la, lb, tol = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
    pa, pb = floats(a), floats(b)
    if len(pa) != len(pb):
        print("parameter counts differ: %d vs %d" % (len(pa), len(pb)))
        return 1
    sa, sb = losses(la), losses(lb)
    if len(sa) != len(sb) or not sa:
        print("step counts differ: %d vs %d" % (len(sa), len(sb)))
        return 1
    worst = 0.0
    for x, y in list(zip(pa, pb)) + list(zip(sa, sb)):
        if x != x or y != y:
            print("NaN in the compared values")
            return 1
        err = abs(x - y) / max(abs(x), abs(y), 1e-3)
        worst = max(worst, err)
    print("max relative error %.3e over %d parameters and %d losses" % (worst, len(pa), len(sa)))
    if tol == 0.0:
        return 0 if (pa == pb and sa == sb) else 1
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
