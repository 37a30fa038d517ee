#!/usr/bin/env python3
"""Compares two GGUF importance matrices (llama-imatrix's format): entries, chunk counts and,
per entry, the relative difference of the mean squared activations (sums / counts) per column.
Usage: bench/imatrix-diff.py A.gguf B.gguf   (needs llama.cpp's gguf-py on PYTHONPATH)"""
import sys
import numpy as np
from gguf import GGUFReader

def load(path):
    r = GGUFReader(path)
    t = {x.name: np.array(x.data, dtype=np.float64).reshape(-1) for x in r.tensors}
    meta = {f.name: f.parts[f.data[0]].tolist() for f in r.fields.values() if f.name.startswith("imatrix.") and f.data}
    out = {}
    for name, v in t.items():
        if name.endswith(".in_sum2"):
            base = name[: -len(".in_sum2")]
            out[base] = v / t[base + ".counts"][0]
    return out, meta

a, ma = load(sys.argv[1])
b, mb = load(sys.argv[2])
print("A:", len(a), "entries", ma.get("imatrix.chunk_count"), "chunks;", "B:", len(b), "entries", mb.get("imatrix.chunk_count"), "chunks")
only = sorted(set(a) ^ set(b))
if only:
    print("only in one:", only[:8], "..." if len(only) > 8 else "")
rel = []
for name in sorted(set(a) & set(b)):
    x, y = a[name], b[name]
    r = np.abs(x - y) / np.maximum(np.abs(x), 1e-30)
    rel.append((np.median(r), r.max(), name))
med = np.array([m for m, _, _ in rel])
mx = np.array([m for _, m, _ in rel])
print(f"per-column relative difference over {len(rel)} entries: median of medians {np.median(med):.2e}, worst median {med.max():.2e}, worst column {mx.max():.2e} ({max(rel, key=lambda t: t[1])[2]})")
