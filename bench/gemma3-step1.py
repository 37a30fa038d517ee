#!/usr/bin/env python3
"""Gemma 3's step-1 training loss against `toy score` (issue 42): on one record of the first
96 tokens of ../shared/golden/gpl-3.txt, `toy score`'s mean NLL of tokens 2..96 after token 1
and the step-1 loss of a one-step `toy finetune` (full on the F32 model, LoRA on the Q4_K_M
file as stored) over the same record (step 1's loss comes before its update). Prints the three
and their relative differences; exits 1 when one is over 1e-4.
Usage: bench/gemma3-step1.py [TOY] (after scripts/fetch-gemma.sh; the F32 copy is made with
`toy quantize --type F32` when missing)."""
import json, math, pathlib, subprocess, sys, tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
from importlib import import_module

ref = import_module("families-reference")  # toy_score, toy_finetune: the families test's own

root = pathlib.Path(__file__).resolve().parent.parent
toy = sys.argv[1] if len(sys.argv) > 1 else str(root / "target/release/toy")
q = root / "models/gemma-3-270m-q4_k_m.gguf"
f = root / "models/gemma-3-270m-q4_k_m.f32.gguf"
if not f.exists():
    subprocess.run([toy, "quantize", "--type", "F32", str(q), str(f)], check=True)
text = (root / "../shared/golden/gpl-3.txt").read_text()[:2000]
ids = json.loads(subprocess.run([toy, "tokenize", "-m", str(q), "--json", text],
                                capture_output=True, text=True, check=True).stdout)["ids"][:96]
work = pathlib.Path(tempfile.mkdtemp(prefix="gemma3-step1-"))
rows = []
for name, gguf, method in [("full, F32", f, "full"), ("LoRA, Q4_K_M as stored", q, "lora")]:
    lp = ref.toy_score(toy, gguf, ids)
    score = -math.fsum(lp) / len(lp)
    eval0, step1 = ref.toy_finetune(toy, gguf, ids, work / method, "gemma3", method)
    rows.append((name, score, step1, eval0))
bad = False
for name, score, step1, eval0 in rows:
    r1, r0 = abs(step1 - score) / score, abs(eval0 - score) / score
    bad |= r1 > 1e-4 or r0 > 1e-4
    print(f"{name}: toy score {score:.6f}, finetune step-1 loss {step1:.6f} (rel {r1:.1e}), "
          f"step-0 held-out {eval0:.6f} (rel {r0:.1e})")
sys.exit(1 if bad else 0)
