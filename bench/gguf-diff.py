#!/usr/bin/env python3
"""Compares the tensors of two GGUF files by name: type, shape and bytes (identical or not).
Prints one line per tensor that differs and a summary line; exit 0 either way.
Usage: bench/gguf-diff.py A.gguf B.gguf   (needs llama.cpp's gguf-py on PYTHONPATH)"""
import sys
from gguf import GGUFReader

def tensors(path):
    r = GGUFReader(path)
    return {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape), bytes(t.data.tobytes())) for t in r.tensors}

a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
same = diff_type = diff_bytes = 0
for name in sorted(set(a) | set(b)):
    if name not in a or name not in b:
        print(f"{name}: only in {'A' if name in a else 'B'}")
        continue
    (ta, sa, da), (tb, sb, db) = a[name], b[name]
    if ta != tb or sa != sb:
        diff_type += 1
        print(f"{name}: {ta}{list(sa)} vs {tb}{list(sb)}")
    elif da != db:
        diff_bytes += 1
        n = sum(x != y for x, y in zip(da, db))
        print(f"{name}: {ta}, {n} of {len(da)} bytes differ")
    else:
        same += 1
print(f"identical {same}, different type {diff_type}, different bytes {diff_bytes}, of {len(set(a) | set(b))}")
