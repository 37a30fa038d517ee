"""toy's llama3 / qwen2 / qwen3 support (inference and training) against transformers.

Driven by scripts/families-test.sh, in this order (the venv, the llama.cpp sdist and the SmolLM2
tokenizer come from scripts/qwen35-reference.sh / scripts/qwen35-reference.py, whose functions
this file imports):

  model HF_DIR --family F      SmolLM2's rebuilt tokenizer and a random tiny F model (f32, seeded;
                               every RMSNorm weight moved away from 1, Qwen2's q/k/v biases
                               nonzero), saved as an HF checkpoint
  convert LLAMA_CPP_DIR ARGS.. llama.cpp's convert_hf_to_gguf.py ARGS.., with one transformers 5
                               quirk undone (see cmd_convert)
  reference HF_DIR OUT_JSON    transformers' next-token log-probabilities of IDS (float64 of its
                               float32 logits), their sum and mean NLL; the same with K and V
                               rounded to f16 where attention reads them (toy's KV cache); and the
                               NLL of an "ablated" model without the family's own part (llama3: no
                               rope scaling; qwen2: no q/k/v biases; qwen3: no q/k norms), to show
                               that the check would see a reader that ignored it
  check-gguf GGUF HF_DIR --family F
                               the converted GGUF has the family's parts: llama3 a rope_freqs
                               tensor with divisors != 1 (and equal to transformers' own
                               llama3 inverse frequencies), qwen2 the q/k/v biases, qwen3 the q/k
                               norms and key_length 32 != n_embd / n_head
  mutate GGUF OUT --family F   a copy of the GGUF without the family's part, as the ablation
                               (llama3: rope_freqs all 1; qwen2: q/k/v biases 0; none for qwen3,
                               whose ablation, no q/k norm at all, is no tensor change): `toy
                               score` on it must give transformers' ablated NLL, so toy is seen
                               to read that part, and the check to tell the two apart
  compare OUT_DIR --toy TOY    `toy score` (per-token log-probs and mean NLL) and `toy finetune`
                               (step-0 held-out loss and step-1 training loss of a full and a LoRA
                               run on the one {"tokens"} record) on every family's GGUF against
                               transformers' mean NLL; prints a table, exits 1 on any failure

FAMILIES: llama3 (LlamaForCausalLM, rope_type llama3, own output head), qwen2 (Qwen2ForCausalLM,
tied embeddings), qwen3 (Qwen3ForCausalLM, head_dim 32 with hidden 64 and 4 heads, own head).
All: 2 layers, hidden 64, 4 query heads / 2 KV heads (GQA), intermediate 128, SmolLM2's 49152
tokens, max_position_embeddings 512. IDS: 96 ids drawn from a seeded RNG below the vocabulary.
"""

import argparse
import importlib.util
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SEED = 4321
N_IDS = 96
FAMILIES = ("llama3", "qwen2", "qwen3")
# relative tolerance on a mean NLL (about ln 49152 = 10.8 here, so 1e-4 is ~1e-3 absolute)
REL_TOL = 1e-4
# `toy score` keeps its KV cache in f16 (transformers and the trainer are f32 throughout). Its
# mean NLL still meets REL_TOL (measured 1.7e-6 .. 1.4e-5), but single log-probs move by up to
# 6.3e-3 (qwen2, whose k/v biases make large keys). So per token it is held to transformers
# with K and V rounded to f16 as they enter attention (measured 1.2e-4 .. 3.8e-4), and only
# loosely to plain f32 transformers.
SCORE_TOKEN_TOL_KV16 = 1e-3
SCORE_TOKEN_TOL_F32 = 1e-2
# an ablation must move the mean NLL by this many tolerances (measured 88x .. 199x)
SENSITIVITY = 10


def q35():
    """scripts/qwen35-reference.py as a module (its name has a dash): tokenizer rebuilding,
    log_softmax64, the GGUF reader."""
    spec = importlib.util.spec_from_file_location("qwen35_reference", HERE / "qwen35-reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def record_ids(vocab):
    import numpy as np
    return [int(i) for i in np.random.default_rng(SEED).integers(0, vocab, N_IDS)]


# ------------------------------------------------------------------------------------------------
# model

def tiny_config(family, vocab, bos, eos):
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        max_position_embeddings=512,
        # larger than the usual 0.02 so that attention is sharp (positions, and so RoPE, matter)
        # and the logits spread (the NLL moves when anything is read wrong)
        initializer_range=0.2,
        bos_token_id=bos,
        eos_token_id=eos,
        torch_dtype="float32",
    )
    if family == "llama3":
        from transformers import LlamaConfig
        # = rope_scaling={...} of transformers 4 (5.x still takes that and stores this). With
        # head_dim 16 and theta 1e4 the 8 wavelengths are 6.3 ... 19869: one kept (< 64/4), two
        # smoothed, five divided by 8 (> 64)
        return LlamaConfig(**common, head_dim=16, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64})
    if family == "qwen2":
        from transformers import Qwen2Config
        return Qwen2Config(**common, tie_word_embeddings=True,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if family == "qwen3":
        from transformers import Qwen3Config
        # head_dim * heads = 128 != hidden 64
        return Qwen3Config(**common, head_dim=32, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    raise ValueError(family)


def model_class(family):
    import transformers
    return getattr(transformers, {"llama3": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                                  "qwen3": "Qwen3ForCausalLM"}[family])


def cmd_model(args):
    import torch
    from transformers import AutoTokenizer

    rc = q35().cmd_tokenizer(argparse.Namespace(gguf=args.tokenizer_gguf, out_dir=args.hf_dir))
    if rc:
        return rc
    tok = AutoTokenizer.from_pretrained(args.hf_dir)
    cfg = tiny_config(args.family, len(tok), tok.bos_token_id, tok.eos_token_id)
    torch.manual_seed(SEED)
    model = model_class(args.family)(cfg).to(torch.float32).eval()
    g = torch.Generator().manual_seed(SEED + 1)
    moved = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):        # RMSNorm w * x/rms(x), init 1 (q/k norms too)
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.3)
                moved.append(name)
            elif name.endswith(".bias"):            # Qwen2's q/k/v biases, init 0
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
                moved.append(name)
    model.save_pretrained(args.hf_dir, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {args.family} {type(model).__name__}, {n} parameters, {len(moved)} norms/biases "
          f"moved -> {args.hf_dir}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------
# convert

def cmd_convert(args):
    """The converter recognises the tokenizer by the ids its AutoTokenizer gives (the "smollm"
    chkhsh). transformers 5 lists model_type "qwen2" in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS,
    so for a Qwen2 checkpoint AutoTokenizer ignores tokenizer_config.json's class and builds a
    Qwen2Tokenizer from the vocabulary and merges, with Qwen2's own pre-tokenizer regex in place
    of SmolLM2's tokenizer.json one: other ids, an unknown chkhsh, and the converter stops ("BPE
    pre-tokenizer was not recognized"). Here the checkpoint's tokenizer really is SmolLM2's, so
    qwen2 is taken off that list for this process before the converter runs as __main__."""
    import runpy
    import transformers.models.auto.tokenization_auto as ta
    ta.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS.discard("qwen2")
    script = os.path.join(args.llama_cpp_dir, "convert_hf_to_gguf.py")
    sys.path.insert(0, args.llama_cpp_dir)
    sys.argv = [script] + args.args
    runpy.run_path(script, run_name="__main__")
    return 0


# ------------------------------------------------------------------------------------------------
# reference

def nll_of(model, ids):
    """(sum, mean) next-token NLL in float64 and the per-position log-probs of ids[1:]."""
    import torch
    m = q35()
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].double().numpy()
    lp = m.log_softmax64(logits)
    tok = [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
    s = -math.fsum(tok)
    return s, s / len(tok), tok


def cmd_reference(args):
    import torch
    import transformers

    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    with open(os.path.join(args.hf_dir, "config.json")) as f:
        hf_config = json.load(f)
    family = args.family
    cls = model_class(family)
    model = cls.from_pretrained(args.hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    ids = record_ids(model.config.vocab_size)
    nll_sum, nll_mean, tok = nll_of(model, ids)

    # the same weights without the family's own part
    if family == "llama3":
        what = "rope_type default (no llama3 scaling, rope_freqs ignored)"
        cfg = cls.config_class.from_pretrained(args.hf_dir)
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_parameters["rope_theta"]}
        ablated = cls.from_pretrained(args.hf_dir, config=cfg, dtype=torch.float32,
                                      attn_implementation="eager").eval()
    elif family == "qwen2":
        what = "q/k/v biases zeroed"
        ablated = model
        with torch.no_grad():
            for name, p in ablated.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
    else:
        what = "q_norm/k_norm replaced by identity"
        ablated = model
        for layer in ablated.model.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()
    _, abl_mean, _ = nll_of(ablated, ids)

    # K and V rounded to f16 where attention reads them, as in toy's (and llama.cpp's) f16 KV
    # cache; the modeling module's eager attention is swapped for this run only
    mod = sys.modules[type(model).__module__]
    eager = mod.eager_attention_forward

    def eager_kv16(module, query, key, value, *a, **kw):
        return eager(module, query, key.half().float(), value.half().float(), *a, **kw)

    model = cls.from_pretrained(args.hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    mod.eager_attention_forward = eager_kv16
    try:
        _, kv16_mean, kv16_tok = nll_of(model, ids)
    finally:
        mod.eager_attention_forward = eager

    ref = {
        "about": "transformers' next-token NLL of ids (natural log, float64 of float32 logits); "
                 "token_logprobs[i] = log p(ids[i+1] | ids[..=i]); made by scripts/families-test.sh",
        "family": family,
        "ids": ids,
        "nll_sum": nll_sum,
        "nll_mean": nll_mean,
        "token_logprobs": tok,
        "ablation": {"what": what, "nll_mean": abl_mean},
        "kv16": {"about": "the same with K and V rounded to f16 as attention reads them",
                 "nll_mean": kv16_mean, "token_logprobs": kv16_tok},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "hf_config": hf_config,
    }
    with open(args.out_json, "w") as f:
        json.dump(ref, f, indent=1)
    print(f"reference: {family}: mean NLL {nll_mean:.6f} over {len(tok)} tokens; {what}: "
          f"{abl_mean:.6f}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------
# check-gguf

def cmd_check_gguf(args):
    import numpy as np
    m = q35().Gguf(args.gguf)
    arch = m.kv["general.architecture"]
    want_arch = {"llama3": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[args.family]
    bad = []
    if arch != want_arch:
        bad.append(f"architecture {arch}, expected {want_arch}")
    if m.kv.get("tokenizer.ggml.pre") != "smollm":
        bad.append(f"tokenizer.ggml.pre {m.kv.get('tokenizer.ggml.pre')!r}, expected 'smollm'")
    names = set(m.t)
    if args.family == "llama3":
        f = m.t.get("rope_freqs.weight")
        if f is None:
            bad.append("no rope_freqs.weight")
        else:
            # transformers' own llama3 frequencies: base ones divided by these
            import torch
            from transformers import LlamaConfig
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
            cfg = LlamaConfig.from_pretrained(args.hf_dir)
            inv, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
            d = cfg.head_dim
            base = 1.0 / (cfg.rope_parameters["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
            hf_div = (base / inv.double()).numpy()
            print(f"check-gguf: rope_freqs {np.round(f, 4).tolist()}; transformers' "
                  f"{np.round(hf_div, 4).tolist()}", file=sys.stderr)
            if not (f != 1.0).any():
                bad.append("rope_freqs all 1")
            if (f == 1.0).sum() == 0 or (f == 8.0).sum() == 0 or ((f > 1) & (f < 8)).sum() == 0:
                bad.append("rope_freqs lacks a kept, a smoothed or a scaled pair")
            if not np.allclose(f, hf_div, rtol=1e-5):
                bad.append("rope_freqs differs from transformers' llama3 inverse frequencies")
        if "output.weight" not in names:
            bad.append("no output.weight (expected an untied head)")
    if args.family == "qwen2":
        for il in range(int(m.k("block_count"))):
            for p in ("attn_q", "attn_k", "attn_v"):
                b = m.t.get(f"blk.{il}.{p}.bias")
                if b is None or not np.abs(b).max() > 0:
                    bad.append(f"blk.{il}.{p}.bias missing or zero")
        if "output.weight" in names:
            bad.append("output.weight present (expected tied embeddings)")
    if args.family == "qwen3":
        for il in range(int(m.k("block_count"))):
            for p in ("attn_q_norm", "attn_k_norm"):
                if f"blk.{il}.{p}.weight" not in names:
                    bad.append(f"no blk.{il}.{p}.weight")
        kl, n_embd, n_head = int(m.k("attention.key_length", 0)), int(m.k("embedding_length")), int(m.k("attention.head_count"))
        if kl != 32 or kl == n_embd // n_head:
            bad.append(f"attention.key_length {kl} (n_embd {n_embd}, {n_head} heads)")
    norms = [n for n in names if n.endswith("norm.weight")]
    if any(np.allclose(m.t[n], 1.0) for n in norms):
        bad.append("a norm still at 1")
    print(f"check-gguf: {args.family}: {arch}, {len(names)} tensors"
          f"{', ' + '; '.join(bad) if bad else ', ok'}", file=sys.stderr)
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------------
# mutate

MUTANT = {"llama3": ("rope_freqs.weight", 1.0), "qwen2": (".bias", 0.0)}


def cmd_mutate(args):
    import gguf
    suffix, value = MUTANT[args.family]
    shutil.copyfile(args.gguf, args.out)
    r = gguf.GGUFReader(args.out, "r+")
    hit = [t.name for t in r.tensors if t.name.endswith(suffix)]
    for t in r.tensors:
        if t.name.endswith(suffix):
            t.data[...] = value
    r.data.flush()
    del r
    print(f"mutate: {args.family}: {', '.join(hit)} set to {value:g} -> {args.out}", file=sys.stderr)
    return 0 if hit else 1


# ------------------------------------------------------------------------------------------------
# compare (toy against the references)

def toy_score(toy, gguf, ids):
    out = subprocess.run(
        [toy, "score", "-m", str(gguf), "--prompt-ids", str(ids[0]),
         "--continuation-ids", ",".join(map(str, ids[1:])), "--top", "1", "--json"],
        capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"toy score failed:\n{out.stderr[-3000:]}")
    toks = json.loads(out.stdout)["tokens"]
    if [t["id"] for t in toks] != ids[1:]:
        raise RuntimeError("toy score scored other tokens")
    return [float(t["logprob"]) for t in toks]


RECIPE = """# written by scripts/families-reference.py: one step on one fixed record, to read the
# loss of the initial weights (step 1's loss is computed before the update)
name = "families-{family}-{method}"

[base]
model = "{gguf}"

[finetune]
method = "{method}"
{lora}
[data]
train = "{data}"
val = "{data}"
on_long = "error"
shuffle = false

[train]
ctx = {ctx}
batch = 1
grad_accum = 1
steps = 1
seed = 0

[optim]
lr = 1e-5
min_lr = 1e-5
warmup = 0
weight_decay = 0.0

[eval]
interval = 1

[checkpoint]
interval = 1
"""


def toy_finetune(toy, gguf, ids, work, family, method):
    """step-0 held-out loss and step-1 training loss of a one-record run."""
    work = pathlib.Path(work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    data = work / "record.jsonl"
    data.write_text(json.dumps({"tokens": ids}) + "\n")
    lora = 'targets = "all-linear"\nrank = 4\nalpha = 8\n' if method == "lora" else ""
    recipe = work / "recipe.toml"
    recipe.write_text(RECIPE.format(family=family, method=method, gguf=pathlib.Path(gguf).resolve(),
                                    lora=lora, data=data.resolve(), ctx=len(ids)))
    runs = work / "runs"
    out = subprocess.run([toy, "finetune", str(recipe), "--runs-dir", str(runs)],
                         capture_output=True, text=True)
    (work / "finetune.log").write_text(out.stdout + out.stderr)
    if out.returncode:
        raise RuntimeError(f"toy finetune ({method}) failed:\n{out.stderr[-3000:]}")
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    ev = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    step1 = [e["loss"] for e in ev if e["type"] == "step" and e["step"] == 1]
    eval0 = [e["val_loss"] for e in ev if e["type"] == "eval" and e["step"] == 0]
    if len(step1) != 1 or len(eval0) != 1:
        raise RuntimeError(f"{run}/events.jsonl: no step-1 loss or step-0 eval")
    # the checkpoints (f32 GGUFs) are not needed
    for p in run.glob("ckpt-*"):
        p.unlink()
    return float(eval0[0]), float(step1[0])


def rel(a, b):
    return abs(a - b) / abs(b)


def cmd_compare(args):
    out_dir = pathlib.Path(args.out_dir)
    rows, failures = [], []
    lora = not args.no_lora
    for family in FAMILIES:
        ref = json.loads((out_dir / f"reference-{family}.json").read_text())
        gguf = out_dir / f"tiny-{family}.f32.gguf"
        ids, want = ref["ids"], ref["nll_mean"]
        row = {"family": family, "hf": want}
        try:
            lp = toy_score(args.toy, gguf, ids)
            row["score"] = -math.fsum(lp) / len(lp)
            row["score_tok"] = max(abs(a - b) for a, b in zip(lp, ref["token_logprobs"]))
            row["score_tok16"] = max(abs(a - b) for a, b in zip(lp, ref["kv16"]["token_logprobs"]))
            row["ft_eval0"], row["ft_step1"] = toy_finetune(args.toy, gguf, ids, out_dir / f"ft-{family}-full",
                                                            family, "full")
            if lora:
                row["lora_eval0"], row["lora_step1"] = toy_finetune(args.toy, gguf, ids,
                                                                    out_dir / f"ft-{family}-lora", family, "lora")
        except RuntimeError as e:
            failures.append(f"{family}: {e}")
            rows.append(row)
            continue
        abl = ref["ablation"]
        row["abl"], row["abl_what"] = abl["nll_mean"], abl["what"]
        mutant = out_dir / f"tiny-{family}-ablated.f32.gguf"
        if family in MUTANT:
            try:
                mlp = toy_score(args.toy, mutant, ids)
            except (RuntimeError, FileNotFoundError) as e:
                failures.append(f"{family}: toy score on {mutant.name}: {e}")
            else:
                row["abl_toy"] = -math.fsum(mlp) / len(mlp)
                if rel(row["abl_toy"], row["abl"]) > REL_TOL:
                    failures.append(f"{family}: toy score on {mutant.name} {row['abl_toy']:.6f} against "
                                    f"transformers' ablated {row['abl']:.6f}")
        for key in ("score", "ft_eval0", "ft_step1", "lora_eval0", "lora_step1"):
            if key in row and rel(row[key], want) > REL_TOL:
                failures.append(f"{family}: {key} {row[key]:.6f} against transformers' {want:.6f} "
                                f"(relative {rel(row[key], want):.2e} > {REL_TOL:g})")
        if row["score_tok16"] > SCORE_TOKEN_TOL_KV16:
            failures.append(f"{family}: toy score per-token max |dlogprob| {row['score_tok16']:.2e} against "
                            f"transformers with an f16 KV > {SCORE_TOKEN_TOL_KV16:g}")
        if row["score_tok"] > SCORE_TOKEN_TOL_F32:
            failures.append(f"{family}: toy score per-token max |dlogprob| {row['score_tok']:.2e} against "
                            f"f32 transformers > {SCORE_TOKEN_TOL_F32:g}")
        # the check sees the family's own part: without it the NLL moves by far more than REL_TOL
        if rel(row["abl"], want) < SENSITIVITY * REL_TOL:
            failures.append(f"{family}: ablation ({abl['what']}) moves the NLL by only "
                            f"{rel(row['abl'], want):.2e}: the check is not sensitive to it")
        rows.append(row)

    def f(v, fmt):
        return fmt.format(v) if v is not None else "-"

    head = ["family", "transformers NLL", "toy score NLL", "rel err", "max |dlogp| f32 / f16-KV",
            "finetune step-1", "rel err", "eval step-0 rel"]
    if lora:
        head += ["LoRA step-1", "rel err"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["family"], f(r.get("hf"), "{:.6f}"), f(r.get("score"), "{:.6f}"),
                 f(rel(r["score"], r["hf"]) if "score" in r else None, "{:.1e}"),
                 (f(r.get("score_tok"), "{:.1e}") + " / " + f(r.get("score_tok16"), "{:.1e}")),
                 f(r.get("ft_step1"), "{:.6f}"),
                 f(rel(r["ft_step1"], r["hf"]) if "ft_step1" in r else None, "{:.1e}"),
                 f(rel(r["ft_eval0"], r["hf"]) if "ft_eval0" in r else None, "{:.1e}")]
        if lora:
            cells += [f(r.get("lora_step1"), "{:.6f}"),
                      f(rel(r["lora_step1"], r["hf"]) if "lora_step1" in r else None, "{:.1e}")]
        print("| " + " | ".join(cells) + " |")
    print()
    print("sensitivity (transformers, same weights, without the family's own part):")
    for r in rows:
        if "abl" in r:
            print(f"  {r['family']}: {r['hf']:.6f} -> {r['abl']:.6f} with {r['abl_what']} "
                  f"(relative {rel(r['abl'], r['hf']):.2e}, tolerance {REL_TOL:g})"
                  + (f"; toy score on the GGUF without it: {r['abl_toy']:.6f} (relative to "
                     f"transformers' {rel(r['abl_toy'], r['abl']):.1e})" if "abl_toy" in r else ""))
    for msg in failures:
        print(f"FAIL {msg}")
    print(f"families: {len(FAMILIES) - len({m.split(':')[0] for m in failures})} of {len(FAMILIES)} "
          f"families passed (relative tolerance {REL_TOL:g} on the mean NLL)")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("model")
    p.add_argument("hf_dir")
    p.add_argument("--family", choices=FAMILIES, required=True)
    p.add_argument("--tokenizer-gguf", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p = sub.add_parser("convert")
    p.add_argument("llama_cpp_dir")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p = sub.add_parser("reference")
    p.add_argument("hf_dir")
    p.add_argument("out_json")
    p.add_argument("--family", choices=FAMILIES, required=True)
    p = sub.add_parser("check-gguf")
    p.add_argument("gguf")
    p.add_argument("hf_dir")
    p.add_argument("--family", choices=FAMILIES, required=True)
    p = sub.add_parser("mutate")
    p.add_argument("gguf")
    p.add_argument("out")
    p.add_argument("--family", choices=FAMILIES, required=True)
    p = sub.add_parser("compare")
    p.add_argument("out_dir")
    p.add_argument("--toy", required=True)
    p.add_argument("--no-lora", action="store_true")
    args = ap.parse_args()
    fn = {"model": cmd_model, "convert": cmd_convert, "reference": cmd_reference, "check-gguf": cmd_check_gguf, "mutate": cmd_mutate,
          "compare": cmd_compare}[args.cmd]
    return fn(args)


if __name__ == "__main__":
    sys.exit(main())
