"""The llama.cpp check of bench/compare-pytorch.sh: loads a toy checkpoint GGUF in
llama-cpp-python (logits_all), checks llama.cpp tokenizes a text as toy does, and compares
its next-token log-probabilities at every position with `toy score --json --top V` (the full
distribution). log-softmax differs from the logits only by a per-position constant, so equal
log-probabilities mean equal logits up to that shift. Prints one JSON line; exit 1 when the
largest difference is over --tol.
"""

import argparse
import json
import subprocess
import sys

import numpy as np
from llama_cpp import Llama


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("--toy", required=True, help="the toy binary")
    ap.add_argument("--text", default="fn main() {\n    let x = 5;\n    println!(\"{x}\");\n}\n")
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()

    # Flash attention: toy computes attention as ggml's flash-attention CPU path does (f16
    # queries and value accumulation), which is what llama.cpp runs by default where it can.
    llm = Llama(model_path=args.gguf, logits_all=True, n_ctx=0, n_threads=2, verbose=False,
                flash_attn=True)
    n_ctx, n_vocab = llm.n_ctx(), llm.n_vocab()
    ll_ids = llm.tokenize(args.text.encode(), add_bos=False, special=False)
    toy_tok = json.loads(subprocess.check_output(
        [args.toy, "tokenize", "-m", args.gguf, "--json", args.text]))
    toy_ids = toy_tok["ids"]
    ids = toy_ids[: n_ctx]
    if len(ids) < 2:
        sys.exit(f"need at least 2 tokens, got {ids}")

    llm.reset()
    llm.eval(ids)
    ll = log_softmax(np.array(llm.scores[: len(ids) - 1]))

    out = subprocess.check_output([
        args.toy, "score", "-m", args.gguf, "--json", "--top", str(n_vocab),
        "--prompt-ids", str(ids[0]), "--continuation-ids", ",".join(map(str, ids[1:])),
    ])
    toy = np.full((len(ids) - 1, n_vocab), -np.inf)
    for i, s in enumerate(json.loads(out)["tokens"]):
        for t in s["top"]:
            toy[i, t["id"]] = t["logprob"]
    diff = np.abs(toy - ll)
    res = {
        "gguf": args.gguf,
        "n_vocab": n_vocab,
        "positions": len(ids) - 1,
        "tokenizer_agrees": list(ll_ids) == list(toy_ids),
        "max_abs_logprob_diff": float(diff.max()),
        "argmax_agrees": bool((toy.argmax(-1) == ll.argmax(-1)).all()),
    }
    res["ok"] = res["tokenizer_agrees"] and res["max_abs_logprob_diff"] <= args.tol
    print(json.dumps(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
