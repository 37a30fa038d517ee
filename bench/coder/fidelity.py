"""Summary of bench/coder-fidelity.sh: ppl, KL divergence to the F32 reference and top-token
agreement for llama-perplexity and toy, one JSON object and a table."""
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])


def llama(name):
    """llama-perplexity's --kl-divergence report (its plain-text statistics)."""
    t = (out / name).read_text()
    num = r"([-\d.e+]+)"
    f = lambda pat: float(re.search(pat, t).group(1))  # noqa: E731
    return {
        "ppl_q": f(r"Mean PPL\(Q\)\s*:\s*" + num),
        "ppl_base": f(r"Mean PPL\(base\)\s*:\s*" + num),
        "kld_mean": f(r"Mean\s+KLD:\s*" + num),
        "same_top_p": f(r"Same top p:\s*" + num) / 100,
    }


def toy(name):
    j = json.loads((out / name).read_text())
    return {
        "ppl_q": j["ppl_q"]["value"],
        "ppl_base": j["ppl_base"]["value"],
        "kld_mean": j["kld_mean"]["value"],
        "same_top_p": j["same_top_p"]["value"],
    }


rows = {
    "llama-perplexity Q4_K_M": llama("llama-q.out"),
    "toy Q4_K_M (default)": toy("toy-q.json"),
    "toy Q4_K_M (TOY_NO_AMX=1)": toy("toy-q-int8.json"),
    "toy F32": toy("toy-f32.json"),
}
lp = rows["llama-perplexity Q4_K_M"]["ppl_q"]
for r in rows.values():
    r["vs_llama_ppl"] = (r["ppl_q"] - lp) / lp
    r["vs_reference_ppl"] = (r["ppl_q"] - r["ppl_base"]) / r["ppl_base"]
print(json.dumps(rows, indent=1))
print(f"{'':28} {'ppl':>8} {'vs llama':>9} {'vs ref':>8} {'mean KL':>10} {'same top':>9}")
for k, r in rows.items():
    print(
        f"{k:28} {r['ppl_q']:8.4f} {r['vs_llama_ppl']:+9.3%} {r['vs_reference_ppl']:+8.3%}"
        f" {r['kld_mean']:10.6f} {r['same_top_p']:9.3%}"
    )
