#!/usr/bin/env python3
"""The tables of bench/coder.sh from its outputs in OUT (argv[1]); argv[2] is the number of code prompts,
argv[3] how many times each ran plain and with --draft (medians compared).
Prints a JSON summary and a Markdown table; exits 1 when a speculative output differs from plain greedy."""
import json
import re
import statistics
import sys
from pathlib import Path

out, n = Path(sys.argv[1]), int(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 1
j = lambda name: json.loads((out / name).read_text())
toy = j("toy-bench.json")
llama = {(r["n_prompt"], r["n_gen"]): r["avg_ts"] for r in j("llama-bench.json")}
pp = [v for (p, g), v in llama.items() if p > 0 and g == 0][0]
tg = [v for (p, g), v in llama.items() if p == 0 and g > 0][0]
s = {"alone": {"toy_prefill": toy["prefill_tok_s"]["mean"], "llama_prefill": pp,
               "toy_decode": toy["decode_tok_s"]["mean"], "llama_decode": tg}}
s["alone"]["prefill_ratio"] = s["alone"]["toy_prefill"] / pp
s["alone"]["decode_ratio"] = s["alone"]["toy_decode"] / tg
same, rows = True, []
for i in range(1, n + 1):
    plains = [j(f"plain-{i}-{r}.json") for r in range(1, reps + 1)]
    drafts = [j(f"draft-{i}-{r}.json") for r in range(1, reps + 1)]
    plain, draft = plains[0], drafts[0]
    same_i = all(x["ids"] == plain["ids"] for x in plains + drafts)
    same &= same_i
    med = lambda runs: statistics.median(x["decode_tok_s"] for x in runs)
    pairs = [d["decode_tok_s"] / p["decode_tok_s"] for p, d in zip(plains, drafts)]
    text = (out / f"llama-spec-{i}.log").read_text() + (out / f"llama-spec-{i}.out").read_text()
    m = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", text)
    a = re.search(r"accept\s+=\s+([\d.]+)%", text)
    sp = draft["spec"]
    rows.append({"prompt": i, "toy_plain": med(plains), "toy_draft": med(drafts),
                 "toy_speedup": med(drafts) / med(plains), "pair_speedups": pairs,
                 "toy_accept": sp["accepted"] / max(1, sp["drafted"]),
                 "llama_spec": float(m.group(1)) if m else None, "llama_accept": float(a.group(1)) / 100 if a else None,
                 "same_output": same_i})
s["draft"] = rows
ep, en = j("edit-plain.json"), j("edit-ngram.json")
same &= ep["ids"] == en["ids"]
s["ngram_edit"] = {"plain": ep["decode_tok_s"], "ngram": en["decode_tok_s"], "speedup": en["decode_tok_s"] / ep["decode_tok_s"],
                   "accept": en["spec"]["accepted"] / max(1, en["spec"]["drafted"]), "same_output": ep["ids"] == en["ids"]}
tp = j("toy-ppl.json")["ppl"]
m = re.search(r"Final estimate: PPL = ([\d.]+)", (out / "llama-ppl.out").read_text())
lp = float(m.group(1)) if m else None
ti = j("toy-ppl-int8.json")["ppl"]
s["ppl"] = {"toy": tp, "toy_int8": ti, "llama": lp, "rel_diff": (tp - lp) / lp if lp else None,
            "rel_diff_int8": (ti - lp) / lp if lp else None}
print(json.dumps(s, indent=1))
a = s["alone"]
print(f"\n| | toy | llama.cpp | ratio |\n|---|---|---|---|")
print(f"| prefill pp (tok/s) | {a['toy_prefill']:.1f} | {pp:.1f} | {a['prefill_ratio']:.2f}x |")
print(f"| decode tg (tok/s) | {a['toy_decode']:.2f} | {tg:.2f} | {a['decode_ratio']:.2f}x |")
print(f"\ntoy plain and --draft: medians of {reps} alternating runs; pairs: each run's ratio, lowest to highest")
print("\n| prompt | toy plain | toy --draft | speedup | pairs | accept | llama-speculative | accept | same |\n|---|---|---|---|---|---|---|---|---|")
for r in rows:
    ls = f"{r['llama_spec']:.2f}" if r["llama_spec"] else "-"
    la = f"{r['llama_accept']:.0%}" if r["llama_accept"] is not None else "-"
    pr = f"{min(r['pair_speedups']):.2f}-{max(r['pair_speedups']):.2f}x"
    print(f"| {r['prompt']} | {r['toy_plain']:.2f} | {r['toy_draft']:.2f} | {r['toy_speedup']:.2f}x | {pr} | {r['toy_accept']:.0%} | {ls} | {la} | {r['same_output']} |")
e = s["ngram_edit"]
print(f"\nngram on the edit: {e['plain']:.2f} -> {e['ngram']:.2f} tok/s ({e['speedup']:.2f}x, accept {e['accept']:.0%}, same {e['same_output']})")
if lp:
    p = s["ppl"]
    print(f"ppl: toy {tp:.4f} ({p['rel_diff']:+.3%}), integer kernels {ti:.4f} ({p['rel_diff_int8']:+.3%}), llama.cpp {lp}")
else:
    print(f"ppl: toy {tp:.4f}, integer kernels {ti:.4f}, llama.cpp missing")
sys.exit(0 if same else 1)
