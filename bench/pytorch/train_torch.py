"""The PyTorch side of bench/compare-pytorch.sh: trains the model of a toy recipe in PyTorch
(eager or torch.compile) on toy's own token shards, with the batches toy draws, the same init
scheme (GPT-2/nanoGPT: N(0, 0.02), residual projections N(0, 0.02/sqrt(2*n_layer)), norms 1,
biases 0; or toy's own initial weights with --init-from ckpt-000000.gguf), AdamW (decay on matrices only), global-norm clipping and warm-up + cosine schedule,
and prints one JSON line: median tokens/s of steady-state steps, losses, peak RSS.

Architectures as toy's `toy::train` builds them (and llama.cpp runs them):
  llama: RMSNorm, RoPE in ggml's NORMAL mode (adjacent pairs), GQA, SwiGLU, no biases, tied head
         unless model.tied = false.
  gpt2:  LayerNorm with bias, learned positions, fused qkv with bias, GELU (tanh), tied head.
Optional depth scaling multiplies block l's normalised input by 1/sqrt(l+1).
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
import tomllib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


class SplitMix64:
    """toy::train::rng::SplitMix64, bit for bit."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return (self.next_u64() * n) >> 64


class Batcher:
    """toy::train::shards::Batcher: B random windows of T + 1 tokens."""

    def __init__(self, tokens, seed, b, t):
        self.tokens, self.rng, self.b, self.t = tokens, SplitMix64(seed), b, t

    def next(self):
        starts = max(len(self.tokens) + 1 - (self.t + 1), 1)
        rows = []
        for _ in range(self.b):
            s = self.rng.below(starts)
            rows.append(self.tokens[s : s + self.t + 1].astype(np.int64))
        w = torch.from_numpy(np.stack(rows))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def rope_tables(t, d, base):
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):
    # x: (B, H, T, D); NORMAL mode turns the pairs (2i, 2i + 1).
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[: x.shape[2]], sin[: x.shape[2]]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(c)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(nn.Module):
    def __init__(self, m, l):
        super().__init__()
        c, hs = m["d_model"], m["d_model"] // m["n_head"]
        self.nh, self.nkv, self.hs = m["n_head"], m["n_kv_head"], hs
        self.scale = 1 / math.sqrt(l + 1) if m["depth_scale"] else 1.0
        self.attn_norm, self.ffn_norm = RMSNorm(c, m["norm_eps"]), RMSNorm(c, m["norm_eps"])
        self.q = nn.Linear(c, self.nh * hs, bias=False)
        self.k = nn.Linear(c, self.nkv * hs, bias=False)
        self.v = nn.Linear(c, self.nkv * hs, bias=False)
        self.o = nn.Linear(self.nh * hs, c, bias=False)
        self.gate = nn.Linear(c, m["d_ff"], bias=False)
        self.up = nn.Linear(c, m["d_ff"], bias=False)
        self.down = nn.Linear(m["d_ff"], c, bias=False)
        self.residual = [self.o, self.down]

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.attn_norm(x) * self.scale
        q = self.q(h).view(b, t, self.nh, self.hs).transpose(1, 2)
        k = self.k(h).view(b, t, self.nkv, self.hs).transpose(1, 2)
        v = self.v(h).view(b, t, self.nkv, self.hs).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, c))
        h = self.ffn_norm(x) * self.scale
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Gpt2Block(nn.Module):
    def __init__(self, m, l):
        super().__init__()
        c = m["d_model"]
        self.nh, self.hs = m["n_head"], c // m["n_head"]
        self.scale = 1 / math.sqrt(l + 1) if m["depth_scale"] else 1.0
        self.ln1 = nn.LayerNorm(c, eps=m["norm_eps"])
        self.ln2 = nn.LayerNorm(c, eps=m["norm_eps"])
        self.qkv = nn.Linear(c, 3 * c)
        self.o = nn.Linear(c, c)
        self.up = nn.Linear(c, m["d_ff"])
        self.down = nn.Linear(m["d_ff"], c)
        self.residual = [self.o, self.down]

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x) * self.scale).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, self.hs).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.ln2(x) * self.scale), approximate="tanh"))


class Model(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.gpt2 = m["arch"] == "gpt2"
        c, v = m["d_model"], m["vocab"]
        self.embd = nn.Embedding(v, c)
        self.pos = nn.Embedding(m["ctx"], c) if self.gpt2 else None
        block = Gpt2Block if self.gpt2 else LlamaBlock
        self.blocks = nn.ModuleList(block(m, l) for l in range(m["n_layer"]))
        self.norm = nn.LayerNorm(c, eps=m["norm_eps"]) if self.gpt2 else RMSNorm(c, m["norm_eps"])
        tied = self.gpt2 or m["tied"]
        self.head = None if tied else nn.Linear(c, v, bias=False)
        cos, sin = rope_tables(m["ctx"], c // m["n_head"], m["rope_base"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        # GPT-2 / nanoGPT init, as toy's.
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
        for blk in self.blocks:
            for lin in blk.residual:
                nn.init.normal_(lin.weight, 0.0, 0.02 / math.sqrt(2 * m["n_layer"]))

    def forward(self, idx, targets):
        x = self.embd(idx)
        if self.pos is not None:
            x = x + self.pos.weight[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        x = self.norm(x)
        w = self.head.weight if self.head is not None else self.embd.weight
        logits = x @ w.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def read_gguf_f32(path):
    """{name: float32 array shaped row-major (GGUF dims reversed)} of a GGUF file's F32 tensors."""
    import struct

    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return buf[pos - n : pos].decode()

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(ty):
        if ty == 8:
            return string()
        if ty == 9:
            inner, n = take("I"), take("Q")
            return [value(inner) for _ in range(n)]
        return take(sizes[ty])

    assert buf[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    _version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        ty, off = take("I"), take("Q")
        assert ty == 0, f"{name}: type {ty}, expected F32"
        infos.append((name, dims, off))
    align = meta.get("general.alignment", 32)
    start = (pos + align - 1) // align * align
    out = {}
    for name, dims, off in infos:
        n = int(np.prod(dims))
        a = np.frombuffer(buf, dtype="<f4", count=n, offset=start + off)
        out[name] = a.reshape(list(reversed(dims))).copy()
    return out


def load_toy_weights(model, path):
    """Copies the weights of a toy checkpoint GGUF (no depth scaling) into `model`."""
    t = read_gguf_f32(path)
    used = set()

    def put(param, name):
        used.add(name)
        with torch.no_grad():
            param.copy_(torch.from_numpy(t[name]).reshape(param.shape))

    put(model.embd.weight, "token_embd.weight")
    if model.pos is not None:
        put(model.pos.weight, "position_embd.weight")
    for i, blk in enumerate(model.blocks):
        n = lambda s: f"blk.{i}.{s}"
        if model.gpt2:
            pairs = [(blk.ln1, "attn_norm"), (blk.qkv, "attn_qkv"), (blk.o, "attn_output"),
                     (blk.ln2, "ffn_norm"), (blk.up, "ffn_up"), (blk.down, "ffn_down")]
        else:
            pairs = [(blk.attn_norm, "attn_norm"), (blk.q, "attn_q"), (blk.k, "attn_k"),
                     (blk.v, "attn_v"), (blk.o, "attn_output"), (blk.ffn_norm, "ffn_norm"),
                     (blk.gate, "ffn_gate"), (blk.up, "ffn_up"), (blk.down, "ffn_down")]
        for mod, base in pairs:
            put(mod.weight, n(base + ".weight"))
            if getattr(mod, "bias", None) is not None:
                put(mod.bias, n(base + ".bias"))
    put(model.norm.weight, "output_norm.weight")
    if model.gpt2:
        put(model.norm.bias, "output_norm.bias")
    if model.head is not None:
        put(model.head.weight, "output.weight")
    missing = set(t) - used
    assert not missing, f"tensors not loaded: {sorted(missing)}"


def lr_at(step, warmup, total, max_lr, min_lr):
    """tinynn::optim::lr_at."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total or total <= warmup:
        return min_lr
    ratio = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


def set_override(rec, kv):
    key, raw = kv.split("=", 1)
    try:
        val = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        val = raw
    *parents, last = key.split(".")
    t = rec
    for p in parents:
        t = t.setdefault(p, {})
    t[last] = val


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--bf16", action="store_true",
                    help="torch.autocast('cpu', dtype=torch.bfloat16) around the forward (f32 master weights)")
    ap.add_argument("--steps", type=int, required=True, help="steps to run (schedule uses train.steps)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=10, help="steps left out of the median")
    ap.add_argument("--init-from", help="start from the weights of this toy checkpoint GGUF")
    ap.add_argument("--init-seed", type=int, default=None,
                    help="seed of the initial weights (default train.seed; batches always follow toy's)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    with open(args.recipe, "rb") as f:
        rec = tomllib.load(f)
    for kv in args.set:
        set_override(rec, kv)
    m, tr, o = rec["model"], rec["train"], rec["optim"]
    m.setdefault("n_kv_head", m["n_head"])
    m.setdefault("norm_eps", 1e-5)
    m.setdefault("rope_base", 10000.0)
    m.setdefault("depth_scale", False)
    m.setdefault("tied", True)
    data = rec["data"]["dir"]
    with open(os.path.join(data, "meta.json")) as f:
        meta = json.load(f)
    assert meta["vocab_size"] == m["vocab"], (meta["vocab_size"], m["vocab"])
    dtype = np.uint16 if meta["dtype"] == "u16" else np.uint32
    tokens = np.memmap(os.path.join(data, "train.bin"), dtype=dtype, mode="r")

    torch.manual_seed(tr.get("seed", 0) if args.init_seed is None else args.init_seed)
    model = Model(m)
    if args.init_from:
        assert not m["depth_scale"], "--init-from reads depth-folded norms: use depth_scale = false"
        load_toy_weights(model, args.init_from)
    decay = [p for p in model.parameters() if p.dim() == 2 and p is not model.embd.weight
             and (model.pos is None or p is not model.pos.weight)]
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in ids]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": o.get("weight_decay", 0.1)},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.95)), eps=o.get("eps", 1e-8),
    )
    step_fn = torch.compile(model) if args.mode == "compile" else model
    b, t, accum = tr["batch"], m["ctx"], tr.get("grad_accum", 1)
    batches = Batcher(tokens, tr.get("seed", 0) ^ 0xDA7A, b, t)
    clip = o.get("grad_clip", 1.0)

    losses, tok_s = [], []
    t_start = time.perf_counter()
    for step in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(accum):
            x, y = batches.next()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = step_fn(x, y)
            (loss / accum).backward()
            total += loss.item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        lr = lr_at(step, o["warmup"], tr["steps"], o["lr"], o["min_lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(total / accum)
        tok_s.append(b * t * accum / dt)
    steady = tok_s[args.warmup_steps:] or tok_s
    out = {
        "who": f"torch-{args.mode}" + ("-bf16" if args.bf16 else ""),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "params": sum(p.numel() for p in model.parameters()),
        "init": args.init_from or f"seed {tr.get('seed', 0) if args.init_seed is None else args.init_seed}",
        "tok_s": statistics.median(steady),
        "losses": losses,
        "wall_s": time.perf_counter() - t_start,
        # ru_maxrss is in KiB on Linux
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
