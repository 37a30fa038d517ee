"""toy against the qwen35 references of scripts/qwen35-reference.sh: for each reference JSON
(transformers' next-token log-probabilities of a random tiny Qwen3.5, tied and untied head;
llama.cpp's when LLAMA=1 made them), runs `toy score` on the same GGUF and ids and compares
the log-probability of every next token and of every reference top-20 token that toy also
ranks in its top 50. Prints one line per reference; exit 1 when any difference is over --tol
or when the top tokens disagree (fewer than 15 of the reference's top 20 in toy's top 50).
"""

import argparse
import json
import pathlib
import subprocess
import sys


def compare(toy, ref_path, tol):
    ref = json.loads(ref_path.read_text())
    gguf = ref_path.parent / pathlib.Path(ref["gguf"]).name
    ids = ref["ids"]
    out = subprocess.run(
        [toy, "score", "-m", str(gguf), "--prompt-ids", str(ids[0]),
         "--continuation-ids", ",".join(map(str, ids[1:])), "--top", "50", "--json"],
        capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)["tokens"]
    if len(got) != len(ref["tokens"]):
        return False, f"{len(got)} positions scored, reference has {len(ref['tokens'])}"
    worst, where, overlap_min = 0.0, None, 20
    for i, (r, g) in enumerate(zip(ref["tokens"], got)):
        if r["id"] != g["id"]:
            return False, f"position {i}: scored token {g['id']}, reference {r['id']}"
        diffs = [(abs(r["logprob"] - g["logprob"]), r["id"])]
        mine = {t["id"]: t["logprob"] for t in g["top"]}
        shared = [t for t in r["top"] if t["id"] in mine]
        overlap_min = min(overlap_min, len(shared))
        diffs += [(abs(t["logprob"] - mine[t["id"]]), t["id"]) for t in shared]
        d, tid = max(diffs)
        if d > worst:
            worst, where = d, (i, tid)
    ok = worst <= tol and overlap_min >= 15
    return ok, (f"max |dlogprob| {worst:.2e} (position {where[0]}, token {where[1]}), "
                f"top-20 overlap >= {overlap_min}/20, tolerance {tol:g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--toy", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    refs = sorted(a.dir.glob("reference*.json")) + sorted(a.dir.glob("llama-reference*.json"))
    refs = [p for p in refs if not p.name.endswith("-full.json")]
    if not refs:
        print(f"qwen35: no reference JSON in {a.dir}", file=sys.stderr)
        return 1
    failed = 0
    for p in refs:
        ok, msg = compare(a.toy, p, a.tol)
        print(f"{'ok  ' if ok else 'FAIL'} {p.name}: {msg}")
        failed += not ok
    print(f"qwen35: {len(refs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
