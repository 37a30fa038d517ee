"""PyTorch's training speed on the shape of recipes/hybrid-small.toml: transformers'
Qwen3_5ForCausalLM (its pure-torch Gated DeltaNet, no flash-linear-attention kernels, which
need a GPU), f32, AdamW as toy's recipe (lr 1e-3, betas 0.9/0.95, weight decay 0.1), batches
of 8 x 256 random tokens. Prints one JSON line: median tokens/s over the timed steps, and the
loss of the first and last step. Run by bench/hybrid-train.sh in the venv of
scripts/qwen35-reference.sh (torch and transformers).
"""

import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(
        vocab_size=4096, hidden_size=288, intermediate_size=768, num_hidden_layers=8,
        layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
        num_attention_heads=6, num_key_value_heads=6, head_dim=48,
        linear_conv_kernel_dim=4, linear_num_key_heads=3, linear_num_value_heads=6,
        linear_key_head_dim=48, linear_value_head_dim=48, rms_norm_eps=1e-5,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [3, 2, 1], "mrope_interleaved": True},
        tie_word_embeddings=True, torch_dtype="float32")
    model = Qwen3_5ForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    b, t = 8, 256
    g = torch.Generator().manual_seed(7)
    rates, losses = [], []
    for step in range(a.warmup + a.steps):
        x = torch.randint(0, 4096, (b, t), generator=g)
        t0 = time.perf_counter()
        # transformers shifts the labels itself (position i predicts token i + 1)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= a.warmup:
            rates.append(b * t / dt)
    print(json.dumps({"framework": "pytorch", "torch": torch.__version__,
                      "params": sum(p.numel() for p in model.parameters()),
                      "tok_s": statistics.median(rates), "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
