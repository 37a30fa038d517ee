#!/usr/bin/env python3
"""Writes crates/toy/tests/fixtures/llama-quant-mix.json: the type llama-quantize (llama.cpp
0c1e570) gives every tensor of some models under every file type toy writes, with and without
an importance matrix and with its override flags, from `llama-quantize --dry-run`. The test
(crates/toy/tests/quantize_mix.rs) feeds the same names, shapes and hparams to toy's rules.
Usage: scripts/quant-mix-reference.py LLAMA_BIN IMATRIX MODEL.gguf...   (not run in CI)
The committed fixture: SmolLM2-135M-Instruct.F32.gguf, qwen2.5-coder-0.5b-instruct-q4_k_m.gguf,
gemma-3-270m-q4_k_m.gguf and tiny-hybrid.gguf (crates/serve/tests/hybrid.rs writes it: qwen35,
8 layers, 6 of them gated delta-net); --dry-run reads only names and shapes."""
import json, os, re, subprocess, sys
from gguf import GGUFReader

bin_dir, imatrix, models = sys.argv[1], sys.argv[2], sys.argv[3:]
env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[([^\]]*)\], type =\s+(\S+), size =.*?(?:-> .*\((\S+)\))?$")
TYPES = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
         "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "IQ4_XS", "IQ3_S", "IQ3_M", "F16", "BF16"]
CASES = [(t, []) for t in TYPES]
CASES += [(t, ["--imatrix", imatrix]) for t in ["Q2_K_S", "Q2_K", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "Q4_K_M",
                                                "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M"]]
CASES += [("Q4_K_M", ["--pure"]), ("Q4_K_M", ["--leave-output-tensor"]),
          ("Q5_K_M", ["--output-tensor-type", "q8_0", "--token-embedding-type", "q4_0"])]

def hparams(path):
    r = GGUFReader(path)
    def get(key):
        f = r.fields.get(key)
        if f is None:
            return None
        v = f.parts[f.data[0]].tolist()
        return v[0] if isinstance(v, list) else v
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    n_head = get(f"{arch}.attention.head_count") or 0
    n_kv = get(f"{arch}.attention.head_count_kv") or n_head
    return {"arch": arch, "n_layer": get(f"{arch}.block_count"), "n_gqa": n_head // n_kv if n_kv else 0,
            "n_expert": get(f"{arch}.expert_count") or 0}

out = []
for m in models:
    entry = {"name": os.path.basename(m), **hparams(m), "tensors": None, "cases": []}
    for ftype, flags in CASES:
        p = subprocess.run([f"{bin_dir}/llama-quantize", "--dry-run", *flags, m, "/tmp/unused.gguf", ftype],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"llama-quantize {flags} {ftype} on {m} failed:\n{p.stderr[-2000:]}")
        rows = []
        for line in (p.stdout + p.stderr).splitlines():
            g = LINE.match(line.strip())
            if g:
                name, dims, cur, new = g.groups()
                dims = [int(d) for d in dims.split(",")]
                while len(dims) > 1 and dims[-1] == 1:
                    dims.pop()
                rows.append((name, dims, cur.upper(), (new or cur).upper()))
        tensors = [[n, d, c] for n, d, c, _ in rows]
        if entry["tensors"] is None:
            entry["tensors"] = tensors
        assert entry["tensors"] == tensors, "tensor list changed between runs"
        flags_out = [f for f in flags if f != imatrix]
        entry["cases"].append({"ftype": ftype, "flags": flags_out, "types": [t for *_, t in rows]})
    out.append(entry)
path = "crates/toy/tests/fixtures/llama-quant-mix.json"
with open(path, "w") as f:
    json.dump({"llama_cpp": "0c1e570", "models": out}, f, separators=(",", ":"))
print(f"wrote {path}: {sum(len(m['cases']) for m in out)} cases over {len(out)} models")
