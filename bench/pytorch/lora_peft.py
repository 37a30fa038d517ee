#!/usr/bin/env python3
"""PyTorch + peft side of bench/lora-peft.sh: LoRA on SmolLM2-135M in f32, replaying toy.

The base is transformers' `LlamaForCausalLM` built from toy's dequantized GGUF (`toy quantize
--type F32`): the state dict is read with `gguf.GGUFReader`, and attn_q / attn_k rows are
un-permuted (llama.cpp's converter permutes them for ggml's adjacent-pair RoPE; HF rotates
halves). The adapter is peft's `LoraConfig(r, lora_alpha, all seven linear parts, dropout 0)`
with A and B copied from toy's starting adapter (ckpt-000000.gguf; B rows of attn_q / attn_k
un-permuted like the weight rows). The batches are toy's own (`toy finetune --dump-batches`),
and the optimizer mirrors toy's: AdamW (betas, eps, weight decay from the run's config.toml),
global-norm clipping to optim.grad_clip, lr per step `lr_at(step - 1, warmup, steps, lr,
min_lr)` (linear warm-up, cosine to min_lr). Loss: mean cross-entropy over non-null targets.

Subcommands:
  check  --base F32.gguf --toy BIN --ids 1,2,3... [--model-q GGUF]
         HF log-probs of every position of a token sequence (target and top-5 tokens) against
         `toy score` on the F32 base: with K/V rounded to f16 as toy's inference cache holds
         them (the gate) and in plain f32; and against the quantized base for information.
         With --batches/--toy-loss, also HF's loss on the first dumped batch against toy's
         step-1 loss on the F32 base (toy's f32 training path, no cache rounding).
         Prints the max |diff|s, JSON on the last line.
  train  --base F32.gguf --adapter ckpt-000000.gguf --batches batches.jsonl --config
         config.toml --out result.json [--threads 2]
         Trains on every batch in the file; times only the steps.
"""

import argparse
import json
import math
import subprocess
import sys
import time
import warnings

import numpy as np

PARTS = {  # toy / llama.cpp name -> HF module path under model.layers.N
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def log(msg):
    print(f"[lora_peft] {msg}", file=sys.stderr, flush=True)


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py's LlamaModel.permute on the rows (dim 0) of w."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.contents()


def tensors_of(reader):
    import gguf

    out = {}
    for t in reader.tensors:
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            a = gguf.quants.dequantize(t.data, t.tensor_type)
        else:
            a = np.asarray(t.data)
        # GGUFReader's numpy shape is ggml's ne reversed, i.e. row-major (rows, cols)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        out[t.name] = np.ascontiguousarray(a.reshape(shape), dtype=np.float32)
    return out


def load_base(path):
    """(LlamaForCausalLM in f32, eval mode; n_head, n_kv) from a llama GGUF."""
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"{path}: architecture {arch!r}, expected llama")
    g = lambda k: field(r, f"llama.{k}")
    n_head, n_kv = int(g("attention.head_count")), int(g("attention.head_count_kv"))
    d = int(g("embedding_length"))
    ts = tensors_of(r)
    vocab = ts["token_embd.weight"].shape[0]
    tied = "output.weight" not in ts
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=int(g("feed_forward_length")),
        num_hidden_layers=int(g("block_count")),
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        head_dim=d // n_head,
        max_position_embeddings=int(g("context_length") or 8192),
        rms_norm_eps=float(g("attention.layer_norm_rms_epsilon")),
        rope_theta=float(g("rope.freq_base") or 10000.0),
        tie_word_embeddings=tied,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=field(r, "tokenizer.ggml.bos_token_id"),
        eos_token_id=field(r, "tokenizer.ggml.eos_token_id"),
        pad_token_id=field(r, "tokenizer.ggml.padding_token_id"),
        torch_dtype="float32",
    )
    # transformers 5 keeps rope settings in rope_parameters; set both spellings
    try:
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": float(g("rope.freq_base") or 10000.0)}
    except Exception:
        pass
    cfg._attn_implementation = "sdpa"
    with torch.device("cpu"):
        model = LlamaForCausalLM(cfg).to(torch.float32)
    sd = {"model.embed_tokens.weight": ts["token_embd.weight"], "model.norm.weight": ts["output_norm.weight"]}
    if not tied:
        sd["lm_head.weight"] = ts["output.weight"]
    for i in range(cfg.num_hidden_layers):
        p = f"blk.{i}."
        h = f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = ts[p + "attn_norm.weight"]
        sd[h + "post_attention_layernorm.weight"] = ts[p + "ffn_norm.weight"]
        for part, mod in PARTS.items():
            w = ts[p + part + ".weight"]
            if part == "attn_q":
                w = unpermute(w, n_head)
            elif part == "attn_k":
                w = unpermute(w, n_kv)
            sd[h + mod + ".weight"] = w
    with warnings.catch_warnings():  # read-only memory maps; load_state_dict copies them
        warnings.simplefilter("ignore", UserWarning)
        sd = {k: torch.from_numpy(v) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (tied and m == "lm_head.weight") and "rotary" not in m]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if tied:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model.eval()
    return model, n_head, n_kv


def toy_score(toy, model, ids, threads):
    cmd = [toy, "-t", str(threads), "score", "-m", model, "--prompt-ids", str(ids[0]),
           "--continuation-ids", ",".join(map(str, ids[1:])), "--top", "5", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens"]


def hf_logprobs(model, ids, f16_kv):
    """Log-probs (T, V) in f64 of every position; with f16_kv, keys (after RoPE) and values
    rounded to f16 as toy's inference cache holds them (llama.cpp's default cache)."""
    import torch
    import transformers.models.llama.modeling_llama as ml

    orig = ml.apply_rotary_pos_emb
    hooks = []
    if f16_kv:
        def rope16(q, k, cos, sin, unsqueeze_dim=1):
            q, k = orig(q, k, cos, sin, unsqueeze_dim)
            return q, k.half().float()

        ml.apply_rotary_pos_emb = rope16
        for layer in model.model.layers:
            hooks.append(layer.self_attn.v_proj.register_forward_hook(lambda m, i, o: o.half().float()))
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].double()
    finally:
        ml.apply_rotary_pos_emb = orig
        for h in hooks:
            h.remove()
    return torch.log_softmax(logits, -1)


def cmd_check(a):
    import torch

    torch.set_num_threads(a.threads)
    ids = [int(x) for x in a.ids.split(",") if x]
    if len(ids) < 2:
        raise SystemExit("check needs at least 2 token ids")
    model, _, _ = load_base(a.base)
    lp32, lp16 = hf_logprobs(model, ids, False), hf_logprobs(model, ids, True)

    def diff(lp, tokens):
        worst = 0.0
        for pos, tk in enumerate(tokens):  # position pos predicts ids[pos + 1]
            row = lp[pos]
            worst = max(worst, abs(row[tk["id"]].item() - tk["logprob"]))
            for t in tk["top"]:
                worst = max(worst, abs(row[t["id"]].item() - t["logprob"]))
        return worst

    n = len(ids) - 1
    toy32 = toy_score(a.toy, a.base, ids, a.threads)
    res = {"n_positions": n,
           "max_abs_diff_f16kv": diff(lp16, toy32),
           "max_abs_diff_f32": diff(lp32, toy32)}
    log(f"HF (f32, K/V rounded to f16 as toy's cache) vs toy score on the F32 base: "
        f"max |log-prob diff| = {res['max_abs_diff_f16kv']:.3g} over {n} positions (target and top-5 tokens)")
    log(f"HF (plain f32) vs toy score on the F32 base: max |log-prob diff| = {res['max_abs_diff_f32']:.3g}")
    if a.model_q:
        res["max_abs_diff_quant"] = diff(lp32, toy_score(a.toy, a.model_q, ids, a.threads))
        log(f"HF (plain f32) vs toy score on {a.model_q}: max |log-prob diff| = "
            f"{res['max_abs_diff_quant']:.3g} (toy's quantized kernels, Q8_1 activations; information only)")
    if a.batches:
        # the training path: toy's step-1 loss on the F32 base (B = 0, so the base alone)
        with open(a.batches) as f:
            bt = json.loads(f.readline())
        b, t = bt["b"], bt["t"]
        x = torch.tensor(bt["inputs"], dtype=torch.long).view(b, t)
        y = torch.tensor([-100 if v is None else v for v in bt["targets"]], dtype=torch.long)
        with torch.no_grad():
            logits = model(input_ids=x, use_cache=False).logits.view(b * t, -1)
        hf = torch.nn.functional.cross_entropy(logits.double(), y, ignore_index=-100).item()
        res.update(hf_loss_batch1=hf, toy_f32_loss_batch1=a.toy_loss,
                   loss_rel_diff_batch1=abs(hf - a.toy_loss) / abs(a.toy_loss))
        log(f"step-1 loss (training path, batch {b}x{t}): HF {hf:.6f}, toy on the F32 base "
            f"{a.toy_loss:.6f}, relative diff {res['loss_rel_diff_batch1']:.2e}")
    print(json.dumps(res))


def lr_at(step, warmup, total, max_lr, min_lr):
    """tinynn::optim::lr_at (0-based step)."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total or total <= warmup:
        return min_lr
    ratio = (step - warmup) / (total - warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (max_lr - min_lr)


def cmd_train(a):
    import tomllib

    import gguf
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config, "rb") as f:
        cfg = tomllib.load(f)
    ft, tr, op = cfg["finetune"], cfg["train"], cfg["optim"]
    if ft.get("method", "lora") != "lora" or ft.get("rslora", False) or ft.get("dropout", 0.0) != 0.0:
        raise SystemExit(f"only plain LoRA with dropout 0 is mirrored; the run has {ft}")
    targets = ft.get("targets", "all-linear")
    if targets != "all-linear" and sorted(targets) != sorted(PARTS):
        raise SystemExit(f"only all-linear targets are mirrored; the run has {targets}")
    if tr.get("grad_accum", 1) != 1:
        raise SystemExit("only grad_accum = 1 is mirrored")
    rank, alpha = int(ft["rank"]), float(ft["alpha"])
    total, warmup = int(tr["steps"]), int(op["warmup"])
    lr_max, lr_min = float(op["lr"]), float(op["min_lr"])
    betas = (float(op.get("beta1", 0.9)), float(op.get("beta2", 0.95)))
    eps, wd = float(op.get("eps", 1e-8)), float(op.get("weight_decay", 0.1))
    clip = float(op.get("grad_clip", 1.0))

    t_load = time.perf_counter()
    model, n_head, n_kv = load_base(a.base)
    lcfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, lcfg)

    # toy's starting adapter
    ar = gguf.GGUFReader(a.adapter)
    file_alpha = float(field(ar, "adapter.lora.alpha"))
    if abs(file_alpha / rank - alpha / rank) > 1e-6:
        raise SystemExit(f"adapter alpha {file_alpha} != recipe alpha {alpha}")
    ats = tensors_of(ar)
    mods = dict(model.named_modules())
    n_copied = 0
    with torch.no_grad():
        for name, arr in ats.items():
            if not name.endswith(".lora_a"):
                continue
            base = name[: -len(".weight.lora_a")]  # blk.N.part
            _, n, part = base.split(".", 2)
            A, B = arr, ats[base + ".weight.lora_b"]  # (r, in), (out, r)
            if part == "attn_q":
                B = unpermute(B, n_head)
            elif part == "attn_k":
                B = unpermute(B, n_kv)
            m = mods[f"base_model.model.model.layers.{n}.{PARTS[part]}"]
            la, lb = m.lora_A["default"].weight, m.lora_B["default"].weight
            if tuple(la.shape) != A.shape or tuple(lb.shape) != B.shape:
                raise SystemExit(f"{base}: peft A {tuple(la.shape)} B {tuple(lb.shape)}, toy A {A.shape} B {B.shape}")
            if abs(m.scaling["default"] - file_alpha / rank) > 1e-6:
                raise SystemExit(f"peft scaling {m.scaling['default']} != toy's {file_alpha / rank}")
            la.copy_(torch.from_numpy(A))
            lb.copy_(torch.from_numpy(B))
            n_copied += 1
    n_lora = sum(1 for k in mods if k.endswith(".lora_A"))
    if n_copied != n_lora:
        raise SystemExit(f"copied {n_copied} adapters from {a.adapter}, peft has {n_lora}")
    params = [p for p in model.parameters() if p.requires_grad]
    n_trainable = sum(p.numel() for p in params)
    log(f"peft model: {n_lora} adapters, {n_trainable} trainable params, scale {file_alpha / rank}; "
        f"AdamW betas {betas} eps {eps} wd {wd}, clip {clip}, lr {lr_max}->{lr_min} warmup {warmup} of {total}")
    opt = torch.optim.AdamW(params, lr=lr_max, betas=betas, eps=eps, weight_decay=wd, foreach=True)
    model.train()
    load_s = time.perf_counter() - t_load

    batches = []
    with open(a.batches) as f:
        for line in f:
            if line.strip():
                batches.append(json.loads(line))
    if not batches:
        raise SystemExit(f"{a.batches}: no batches")
    steps = []
    for k, bt in enumerate(batches):
        step, b, t = bt["step"], bt["b"], bt["t"]
        if step != k + 1:
            raise SystemExit(f"{a.batches}: line {k + 1} is step {step} (grad_accum > 1 or a resumed dump?)")
        x = torch.tensor(bt["inputs"], dtype=torch.long).view(b, t)
        y = torch.tensor([-100 if v is None else v for v in bt["targets"]], dtype=torch.long).view(b, t)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.view(b * t, -1), y.view(-1), ignore_index=-100, reduction="mean")
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        lr = lr_at(step - 1, warmup, total, lr_max, lr_min)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        dt = time.perf_counter() - t0
        del logits
        rec = {"step": step, "loss": loss.item(), "lr": lr, "grad_norm": gn.item(), "tokens": b * t, "secs": dt}
        steps.append(rec)
        log(f"step {step:3d}/{len(batches)}  b*t {b}x{t}  loss {rec['loss']:.4f}  lr {lr:.3g}  "
            f"|g| {rec['grad_norm']:.3f}  {b * t / dt:.0f} tok/s")
    tok = sum(s["tokens"] for s in steps)
    secs = sum(s["secs"] for s in steps)
    res = {"impl": "pytorch+peft", "torch": torch.__version__, "threads": a.threads, "load_s": load_s,
           "trainable_params": n_trainable, "steps": steps, "tokens": tok, "step_secs": secs,
           "tok_s": tok / secs}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    log(f"{len(steps)} steps, {tok} positions in {secs:.1f} s: {tok / secs:.0f} tok/s (load {load_s:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--base", required=True)
    c.add_argument("--toy", required=True)
    c.add_argument("--ids", required=True)
    c.add_argument("--model-q")
    c.add_argument("--batches", help="toy's dumped batches of a run on the F32 base (first line used)")
    c.add_argument("--toy-loss", type=float, help="that run's step-1 loss")
    c.add_argument("--threads", type=int, default=2)
    t = sub.add_parser("train")
    t.add_argument("--base", required=True)
    t.add_argument("--adapter", required=True)
    t.add_argument("--batches", required=True)
    t.add_argument("--config", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    {"check": cmd_check, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    main()
