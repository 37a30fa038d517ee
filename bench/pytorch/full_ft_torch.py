#!/usr/bin/env python3
"""PyTorch side of bench/full-ft-llama.sh: a full fine-tune of a llama GGUF in f32, every
parameter trained (the embedding tied to the head where the GGUF ties them), on `{"tokens"}`
windows in file order, one window a step, AdamW with llama-finetune's defaults (lr 1e-5
constant, betas (0.9, 0.999), eps 1e-8, no weight decay, no clipping). The model is
transformers' `LlamaForCausalLM` built by lora_peft.load_base. Prints one JSON object:
{"loss": [per-step mean cross-entropy], "tok_s": ...}.

Usage: full_ft_torch.py --base F32.gguf --windows windows.jsonl [--steps N] [--threads 2] [--bf16]
"""

import argparse
import json
import sys
import time

from lora_peft import load_base


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--windows", required=True)
    p.add_argument("--steps", type=int)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="the forward under bf16 autocast")
    a = p.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    with open(a.windows) as f:
        windows = [json.loads(line)["tokens"] for line in f if line.strip()]
    windows = windows[: a.steps or len(windows)]
    model, _, _ = load_base(a.base)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    losses, t = [], 0.0
    for i, w in enumerate(windows):
        x = torch.tensor([w[:-1]])
        y = torch.tensor(w[1:])
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(input_ids=x, use_cache=False).logits[0]
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t += time.perf_counter() - t0
        losses.append(loss.item())
        print(f"[full_ft_torch] step {i + 1}/{len(windows)} loss {losses[-1]:.5f}", file=sys.stderr, flush=True)
    print(json.dumps({"loss": losses, "tok_s": sum(len(w) - 1 for w in windows) / t}))


if __name__ == "__main__":
    main()
