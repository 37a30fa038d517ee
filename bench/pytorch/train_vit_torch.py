"""The PyTorch side of bench/vit-pytorch.sh: trains the ViT of a toy recipe (`[vit]`) in plain
PyTorch (eager or torch.compile) on toy's image shards, with the images toy's trainer draws
(`toy::vision::train::epoch_order`: a SplitMix64 Fisher-Yates shuffle per epoch), toy's initial
weights (--init-from its ckpt-000000.gguf), AdamW (decay on matrices only), the same warm-up +
cosine schedule and label smoothing, and prints one JSON line: median images/s of steady-state
steps, losses, peak RSS.

The model is timm's VisionTransformer as toy builds it (`toy::vision::vit`): a strided Conv2d
patch embedding, a CLS token and learned positions, pre-LN blocks (LayerNorm eps 1e-6, fused
qkv with bias, non-causal scaled_dot_product_attention, GELU (tanh) MLP), a final LayerNorm of
the CLS row and a linear head. Run without augmentation (toy's is drawn from its own
generator): the comparison sets data.crop_pad = 0 and data.flip = false.
"""

import argparse
import json
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch import SplitMix64, lr_at, read_gguf_f32, set_override  # noqa: E402


def read_shard(path):
    """(labels u16 (N,), pixels u8 (N, H, W, C)) of a TOYIMG1 shard (toy::images::shard)."""
    b = open(path, "rb").read()
    assert b[:8] == b"TOYIMG1\0", f"{path}: not a toy image shard"
    h, w, c, n = np.frombuffer(b, dtype="<u4", count=4, offset=8)
    labels = np.frombuffer(b, dtype="<u2", count=n, offset=24)
    pixels = np.frombuffer(b, dtype=np.uint8, count=n * h * w * c, offset=24 + 2 * n)
    return labels.astype(np.int64), pixels.reshape(n, h, w, c)


def order(n, batch, seed, step):
    """toy::vision::train::Order::step, index for index."""
    per_epoch = max(n // batch, 1)
    epoch, k = divmod(step, per_epoch)
    rng = SplitMix64(seed ^ (((epoch + 1) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)))
    idx = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return idx[k * batch:min((k + 1) * batch, n)]


class Block(nn.Module):
    def __init__(self, c, heads, mlp):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(c, eps=1e-6)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c, eps=1e-6)
        self.fc1 = nn.Linear(c, mlp)
        self.fc2 = nn.Linear(mlp, c)

    def forward(self, x):
        b, t, c = x.shape
        # (B, T, 3C) -> 3 x (B, nh, T, hs)
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Vit(nn.Module):
    def __init__(self, v):
        super().__init__()
        c, p = v["width"], v["patch"]
        n = (v["image"] // p) ** 2
        self.patch = nn.Conv2d(v["channels"], c, p, stride=p)
        self.cls = nn.Parameter(torch.zeros(1, 1, c))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, c))
        self.blocks = nn.ModuleList(Block(c, v["heads"], v["mlp"]) for _ in range(v["depth"]))
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.head = nn.Linear(c, v["classes"])
        self.pool = v.get("pool", "cls")

    def forward(self, x, y, smoothing):
        # (B, Ch, H, W) -> (B, N, C), CLS first, positions added
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        # the CLS row, or (pool = "mean") the patch rows' mean
        logits = self.head(self.norm(x[:, 0] if self.pool == "cls" else x[:, 1:].mean(dim=1)))
        return F.cross_entropy(logits, y, label_smoothing=smoothing)


def load_toy_weights(model, v, path):
    """Copies a toy ViT checkpoint (vit.* F32 tensors, flat) into `model`."""
    t = {k[len("vit."):]: torch.from_numpy(a.reshape(-1)) for k, a in read_gguf_f32(path).items()}
    c, p, ch = v["width"], v["patch"], v["channels"]
    with torch.no_grad():
        # toy's patch rows are (dy, dx, ch): (C, P*P*Ch) -> (C, Ch, P, P)
        model.patch.weight.copy_(t["patch.weight"].view(c, p, p, ch).permute(0, 3, 1, 2))
        model.patch.bias.copy_(t["patch.bias"])
        model.cls.copy_(t["cls"].view_as(model.cls))
        model.pos.copy_(t["pos"].view_as(model.pos))
        names = {"ln1": "ln1", "attn.qkv": "qkv", "attn.proj": "proj", "ln2": "ln2",
                 "mlp.fc1": "fc1", "mlp.fc2": "fc2"}
        for i, blk in enumerate(model.blocks):
            for toy_name, mod in names.items():
                m = getattr(blk, mod)
                m.weight.copy_(t[f"blk.{i}.{toy_name}.weight"].view_as(m.weight))
                m.bias.copy_(t[f"blk.{i}.{toy_name}.bias"].view_as(m.bias))
        for name in ("norm", "head"):
            m = getattr(model, name)
            m.weight.copy_(t[f"{name}.weight"].view_as(m.weight))
            m.bias.copy_(t[f"{name}.bias"].view_as(m.bias))


def batch(labels, pixels, idx, v, d):
    """toy::vision::batch::batch without augmentation: bilinear resize (half-pixel centres),
    grey replicated to the model's channels, normalised per channel. -> (B, Ch, S, S), (B,)"""
    x = torch.from_numpy(pixels[idx]).permute(0, 3, 1, 2).float() / 255.0
    s = v["image"]
    if x.shape[-1] != s or x.shape[-2] != s:
        x = F.interpolate(x, size=(s, s), mode="bilinear", align_corners=False)
    if x.shape[1] != v["channels"]:
        x = x[:, -1:].expand(-1, v["channels"], -1, -1)
    mean = torch.tensor(d["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(d["std"]).view(1, -1, 1, 1)
    return ((x - mean) / std).contiguous(), torch.from_numpy(labels[idx])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--bf16", action="store_true",
                    help="torch.autocast('cpu', dtype=torch.bfloat16) around the forward (f32 master weights)")
    ap.add_argument("--steps", type=int, required=True, help="steps to run (schedule uses train.steps)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the median")
    ap.add_argument("--init-from", help="start from the weights of this toy checkpoint GGUF")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    with open(args.recipe, "rb") as f:
        rec = tomllib.load(f)
    for kv in args.set:
        set_override(rec, kv)
    v, d, tr = rec["vit"], rec["data"], rec["train"]
    # the optimizer keys live in [optim] (older recipes kept them in [train])
    op = rec.get("optim", tr)
    assert not d.get("crop_pad", 0) and not d.get("flip", False), \
        "run without augmentation: --set data.crop_pad=0 --set data.flip=false"
    labels, pixels = read_shard(os.path.join(d["dir"], "train.img"))

    torch.manual_seed(tr.get("seed", 0))
    model = Vit(v)
    if args.init_from:
        load_toy_weights(model, v, args.init_from)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() >= 2]
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in ids]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": op.get("weight_decay", 0.0)},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=op["lr"], betas=(op.get("beta1", 0.9), op.get("beta2", 0.999)), eps=op.get("eps", 1e-8),
    )
    step_fn = torch.compile(model) if args.mode == "compile" else model
    smoothing = tr.get("label_smoothing", 0.0)

    losses, img_s = [], []
    for step in range(args.steps):
        idx = order(len(labels), tr["batch"], tr.get("seed", 0), step)
        x, y = batch(labels, pixels, idx, v, d)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = step_fn(x, y, smoothing)
        loss.backward()
        lr = lr_at(step, op["warmup"], tr["steps"], op["lr"], op.get("min_lr", 0.0))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        img_s.append(len(idx) / dt)
    steady = img_s[args.warmup_steps:] or img_s
    print(json.dumps({
        "who": f"torch-{args.mode}" + ("-bf16" if args.bf16 else ""),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "tok_s": statistics.median(steady),
        "losses": losses,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
