"""toy's --lora against llama.cpp's LoRA on the same base GGUF and toy-written adapter.

llama.cpp (through llama-cpp-python 0.3.36, `Llama(model_path, lora_path, lora_scale,
logits_all=True)`) applies the adapter at run time, y = W x + s * B (A x)
(`build_lora_mm` in src/llama-graph.cpp); toy merges it into W in f32 at load. Both score
the next-token log-probabilities of the same token ids; the script prints the max |delta|
with the adapter, the max |delta| without it (the engines' own difference on this base),
how much the adapter moves llama.cpp's log-probabilities (so a no-op adapter cannot pass),
and llama.cpp's own run-time LoRA against llama.cpp on the model `toy merge` wrote (one
engine, so only the adapter's meaning differs). Exit 1 when that last delta or the
toy-vs-llama.cpp delta with the adapter is over --tol. Use an F32 base (`toy quantize
BASE OUT --type F32`) so that neither engine rounds activations for its integer kernels.

  python scripts/lora-llama-cpp.py --toy target/debug/toy --base BASE.gguf --adapter A.gguf
"""

import argparse
import json
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

TEXT = ("The quick brown fox jumps over the lazy dog. Once upon a time, in a small town by "
        "the sea, there lived an old fisherman who told stories to the children.")


def llama_logprobs(base, ids, lora=None, scale=1.0):
    kw = dict(lora_path=lora, lora_scale=scale) if lora else {}
    llm = Llama(model_path=base, logits_all=True, n_ctx=max(64, len(ids)), n_batch=512,
                verbose=False, **kw)
    llm.eval(ids)
    x = np.array(llm.scores[: len(ids)], dtype=np.float64)
    x = x - x.max(axis=1, keepdims=True)
    lp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    # the log-probability of token i + 1 after tokens 0..=i
    out = [lp[i, ids[i + 1]] for i in range(len(ids) - 1)]
    return np.array(out)


def toy_logprobs(toy, base, ids, lora=None, scale=1.0):
    cmd = [toy, "score", "-m", base, "--prompt-ids", str(ids[0]),
           "--continuation-ids", ",".join(map(str, ids[1:])), "--top", "1", "--json"]
    if lora:
        cmd += ["--lora", f"{lora}:{scale}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return np.array([t["logprob"] for t in json.loads(out.stdout)["tokens"]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--tol", type=float, default=3e-2)
    a = ap.parse_args()

    llm = Llama(model_path=a.base, vocab_only=True, verbose=False)
    ids = llm.tokenize(a.text.encode(), add_bos=True)
    del llm

    llama_base = llama_logprobs(a.base, ids)
    llama_lora = llama_logprobs(a.base, ids, a.adapter, a.scale)
    toy_base = toy_logprobs(a.toy, a.base, ids)
    toy_lora = toy_logprobs(a.toy, a.base, ids, a.adapter, a.scale)

    with tempfile.TemporaryDirectory() as tmp:
        merged = f"{tmp}/merged.gguf"
        subprocess.run([a.toy, "merge", a.base, a.adapter, merged, "--scale", str(a.scale)],
                       check=True, capture_output=True)
        llama_merged = llama_logprobs(merged, ids)

    d_merged = np.abs(llama_merged - llama_lora).max()
    d_lora = np.abs(toy_lora - llama_lora).max()
    d_base = np.abs(toy_base - llama_base).max()
    effect = np.abs(llama_lora - llama_base).max()
    toy_effect = np.abs(toy_lora - toy_base).max()
    print(f"{len(ids) - 1} next-token log-probs, adapter scale {a.scale}")
    print(f"  with the adapter:    max |toy - llama.cpp| = {d_lora:.3e}")
    print(f"  without it:          max |toy - llama.cpp| = {d_base:.3e}")
    print(f"  adapter effect:      max |lora - base| llama.cpp {effect:.3e}, toy {toy_effect:.3e}")
    print(f"  llama.cpp run-time LoRA vs llama.cpp on toy's merged model: {d_merged:.3e}")
    ok = d_lora <= a.tol and d_merged <= a.tol and effect > 3 * a.tol
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
