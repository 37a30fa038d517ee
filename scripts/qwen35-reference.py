"""Reference outputs for toy's qwen35 (Qwen3.5 hybrid: Gated DeltaNet + gated attention) support.

Driven by scripts/qwen35-reference.sh, which makes the venv (target/qwen35-venv) and then runs,
in this order:

  cuda-stubs TORCH_LIB OUT_DIR  stub shared libraries for the CUDA libraries that the PyPI torch
                                wheel links against (so `pip install --no-deps torch` imports on
                                a CPU-only machine without the GBs of nvidia-* wheels)
  tokenizer SMOLLM_GGUF HF_DIR  rebuild SmolLM2's HF tokenizer (tokenizer.json +
                                tokenizer_config.json) from the GGUF's tokens/merges and check that
                                llama.cpp's converter recognises it ("smollm" chkhsh)
  model HF_DIR --variant V      a randomly initialised tiny Qwen3_5ForCausalLM (f32, seeded), with
                                norms / A_log / dt_bias perturbed away from their defaults
  reference HF_DIR OUT_DIR      transformers' next-token log-probabilities on a fixed token sequence
                                (reference.json, reference-full.json) and consistency checks
                                (T=1 prefix, token-by-token decode through the cache)
  dump GGUF OUT_TXT             metadata keys and tensor list of a GGUF (gguf-py)
  check-transforms HF_DIR GGUF  every GGUF tensor recomputed from the HF safetensors with the
                                converter transforms that docs/hybrids.md lists (1+w norms,
                                -exp(A_log), V-head reordering, ...), and compared
  check-numpy GGUF REF_JSON     an independent numpy implementation of llama.cpp's qwen35 graph
                                (docs/hybrids.md) run on the converted GGUF, compared with
                                transformers; plus "mutations" (deliberate convention errors) that
                                must each move the log-probs by far more than the tolerance
  check-llama GGUF REF_JSON     llama.cpp (llama-cpp-python) on the same ids (optional)
"""

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys

TEXT = ("The quick brown fox jumps over the lazy dog. In 1905, Albert Einstein published four "
        "papers that changed physics; 3 of them are still taught today, 120 years later.")
SEED = 1234
TOP = 20
# positions whose full log-softmax goes into reference-full.json
FULL_POSITIONS = (0, 1, -1)
SMOLLM_CHKHSH = "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249"


# ------------------------------------------------------------------------------------------------
# cuda-stubs

def cmd_cuda_stubs(args):
    """Build empty stand-ins for every CUDA library that torch's own libraries name in DT_NEEDED
    but that is neither bundled in torch/lib nor on the system. Each stub defines the symbols
    torch imports from it (with the symbol versions torch asks for), as functions that return an
    error code (100 = cudaErrorNoDevice / CUDA_ERROR_NO_DEVICE), or a static string for the
    *ErrorString/*GetErrorName family. torch then imports, sees no GPU, and runs on the CPU."""
    import glob
    import tempfile

    err_str = re.compile(r"(ErrorString|ErrorName|StatusString|StatusName)$")
    cuda_name = re.compile(r"^(cu|nccl|nvshmem|cufile|nvrtc|cudnn|nvtx|cupti|CUpti)|nvshmem", re.I)

    def sh(*cmd):
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

    torch_lib = args.torch_lib
    libs = sorted(glob.glob(os.path.join(torch_lib, "*.so*")) +
                  glob.glob(os.path.join(torch_lib, "..", "_C*.so")))
    present = {os.path.basename(p) for p in libs}
    defined = set()
    for p in libs:
        for line in sh("nm", "-D", "--defined-only", p).splitlines():
            defined.add(line.split()[-1].split("@")[0])
    system = sh("ldconfig", "-p")
    wanted = {}  # soname -> {version name -> symbols}
    ver_file = {}
    unversioned = set()
    for p in libs:
        for m in re.finditer(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", sh("readelf", "-dW", p)):
            name = m.group(1)
            if name not in present and f"{name} " not in system:
                wanted.setdefault(name, {})
        cur = None
        for line in sh("readelf", "-VW", p).splitlines():
            m = re.search(r"File: (\S+)", line)
            if m:
                cur = m.group(1)
                continue
            m = re.search(r"Name: (\S+)", line)
            if m and cur in wanted:
                ver_file[m.group(1)] = cur
                wanted[cur].setdefault(m.group(1), set())
        for line in sh("nm", "-D", "--undefined-only", p).splitlines():
            kind, sym = line.split()[-2:]
            if kind != "U":
                continue  # weak references may stay unresolved
            name, _, ver = sym.partition("@")
            ver = ver.lstrip("@")
            if ver:
                if ver in ver_file:
                    wanted[ver_file[ver]][ver].add(name)
            elif name not in defined and cuda_name.search(name):
                unversioned.add(name)
    if not wanted:
        print("cuda-stubs: torch needs no missing library", file=sys.stderr)
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    # unversioned CUDA symbols (driver API, NCCL, cuFile, cuSPARSELt) go into libcudart's stub,
    # which every torch library that needs one of them also loads
    catch_all = "libcudart.so.13" if "libcudart.so.13" in wanted else sorted(wanted)[0]
    with tempfile.TemporaryDirectory() as tmp:
        for soname, vers in sorted(wanted.items()):
            syms = set().union(*vers.values()) if vers else set()
            if soname == catch_all:
                syms |= unversioned
            src = ['static const char stub_msg[] = "CUDA library stub (no GPU)";']
            for s in sorted(syms):
                if err_str.search(s):
                    src.append(f"const char *{s}(void) {{ return stub_msg; }}")
                else:
                    src.append(f"long {s}(void) {{ return 100; }}")
            c_path = os.path.join(tmp, soname + ".c")
            with open(c_path, "w") as f:
                f.write("\n".join(src) + "\n")
            cmd = ["gcc", "-shared", "-fPIC", "-O0", "-o", os.path.join(args.out_dir, soname), c_path,
                   f"-Wl,-soname,{soname}"]
            if vers:
                map_path = os.path.join(tmp, soname + ".map")
                with open(map_path, "w") as f:
                    for i, (v, vsyms) in enumerate(sorted(vers.items())):
                        body = set(vsyms) | (unversioned if i == 0 and soname == catch_all else set())
                        f.write(f"{v} {{ global: {''.join(s + '; ' for s in sorted(body))}")
                        f.write("local: *; };\n" if i == 0 else "};\n")
                cmd.append(f"-Wl,--version-script={map_path}")
            subprocess.run(cmd, check=True)
            print(f"cuda-stubs: {soname} ({len(syms)} symbols)", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------
# tokenizer

def gguf_field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def cmd_tokenizer(args):
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    r = gguf.GGUFReader(args.gguf)
    assert gguf_field(r, "tokenizer.ggml.model") == "gpt2", "expected a GPT-2 BPE vocabulary"
    assert gguf_field(r, "tokenizer.ggml.pre") == "smollm", "expected SmolLM's pre-tokenizer"
    tokens = gguf_field(r, "tokenizer.ggml.tokens")
    types = gguf_field(r, "tokenizer.ggml.token_type")
    merges = gguf_field(r, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges], dropout=None,
                     unk_token=None, fuse_unk=False, byte_fallback=False)
    tk = Tokenizer(bpe)
    # SmolLM's tokenizer.json: digits split one by one, then GPT-2's byte-level regex split
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tk.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    control = [tokens[i] for i, t in enumerate(types) if t == gguf.TokenType.CONTROL]
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    os.makedirs(args.out_dir, exist_ok=True)
    tk.save(os.path.join(args.out_dir, "tokenizer.json"))

    def tok(key):
        i = gguf_field(r, key)
        return None if i is None else tokens[int(i)]

    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": bool(gguf_field(r, "tokenizer.ggml.add_bos_token") or False),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 8192,
        "bos_token": tok("tokenizer.ggml.bos_token_id"),
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "unk_token": tok("tokenizer.ggml.unknown_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "chat_template": gguf_field(r, "tokenizer.chat_template"),
    }
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)

    # the converter's check (conversion/base.py get_vocab_base_pre): sha256 of str(ids) of chktxt
    from transformers import AutoTokenizer
    at = AutoTokenizer.from_pretrained(args.out_dir)
    chktxt = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis '
              'concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 '
              'កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български '
              '\'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you sure? '
              '\'M not sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL')
    chkhsh = hashlib.sha256(str(at.encode(chktxt)).encode()).hexdigest()
    print(f"tokenizer: {len(tokens)} tokens, {len(merges)} merges, {len(control)} control; "
          f"chkhsh {chkhsh}", file=sys.stderr)
    if chkhsh != SMOLLM_CHKHSH:
        print(f"tokenizer: chkhsh differs from smollm's {SMOLLM_CHKHSH}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------------
# model

def tiny_config(variant, vocab_size, bos, eos):
    from transformers import Qwen3_5TextConfig
    return Qwen3_5TextConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        # 3 Gated DeltaNet layers : 1 gated attention layer, attention every 4th (layer 3)
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        # head_dim * n_head = 128 != hidden_size on purpose (as in the real models)
        head_dim=32,
        linear_conv_kernel_dim=4,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        # rotary dim = 32 * 0.25 = 8 (4 frequency pairs); sections sum to rotary_dim / 2 like the
        # real [11, 11, 10] for 64; a small theta so that 40 positions rotate visibly
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        tie_word_embeddings=(variant == "tied"),
        initializer_range=0.1,
        bos_token_id=bos,
        eos_token_id=eos,
        torch_dtype="float32",
    )


def cmd_model(args):
    import torch
    from transformers import AutoTokenizer, Qwen3_5ForCausalLM

    tok = AutoTokenizer.from_pretrained(args.hf_dir)
    vocab = len(tok)
    cfg = tiny_config(args.variant, vocab, tok.bos_token_id, tok.eos_token_id)
    torch.manual_seed(args.seed)
    model = Qwen3_5ForCausalLM(cfg).to(torch.float32).eval()
    g = torch.Generator().manual_seed(args.seed + 1)

    def rnd(shape, std):
        return torch.randn(shape, generator=g) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):      # gated RMSNorm: plain w (init 1)
                p.copy_(1.0 + rnd(p.shape, 0.3))
            elif name.endswith("norm.weight"):                # Qwen3_5RMSNorm: (1 + w) (init 0)
                p.copy_(rnd(p.shape, 0.3))
            elif name.endswith("A_log"):                      # decay rate A = exp(A_log) in [0.05, 1]
                p.copy_(torch.empty(p.shape).uniform_(math.log(0.05), 0.0, generator=g))
            elif name.endswith("dt_bias"):                    # softplus(dt_bias) in ~[0.13, 1.3]
                p.copy_(torch.empty(p.shape).uniform_(-2.0, 1.0, generator=g))
            elif name.endswith("conv1d.weight"):
                p.copy_(rnd(p.shape, 0.5))
    model.save_pretrained(args.hf_dir, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {args.variant}, {n} parameters -> {args.hf_dir}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------
# reference

def log_softmax64(x):
    import numpy as np
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def cmd_reference(args):
    import numpy as np
    import torch
    import transformers
    from transformers import AutoTokenizer, Qwen3_5ForCausalLM

    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    tok = AutoTokenizer.from_pretrained(args.hf_dir)
    ids = tok.encode(TEXT, add_special_tokens=False)
    model = Qwen3_5ForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        full = model(torch.tensor([ids]), use_cache=False).logits[0].double().numpy()
        # T = 1: the first position alone
        one = model(torch.tensor([ids[:1]]), use_cache=False).logits[0].double().numpy()
        # a prefix alone (chunked delta rule over fewer tokens)
        half = len(ids) // 2
        pre = model(torch.tensor([ids[:half]]), use_cache=False).logits[0].double().numpy()
        # token by token through the cache: HF's recurrent delta rule and causal_conv1d_update
        out = model(torch.tensor([ids[:1]]), use_cache=True)
        cache = out.past_key_values
        steps = [out.logits[0, -1].double().numpy()]
        for t in ids[1:]:
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits[0, -1].double().numpy())
        steps = np.stack(steps)
    lp = log_softmax64(full)
    checks = {
        "t1_vs_full": float(np.abs(log_softmax64(one[0]) - lp[0]).max()),
        "prefix_vs_full": float(np.abs(log_softmax64(pre) - lp[:half]).max()),
        "stepwise_vs_full": float(np.abs(log_softmax64(steps) - lp).max()),
    }
    positions = []
    for i in range(len(ids) - 1):
        top = np.argsort(-lp[i], kind="stable")[:TOP]
        positions.append({
            "id": int(ids[i + 1]),
            "logprob": float(lp[i, ids[i + 1]]),
            "top": [{"id": int(j), "logprob": float(lp[i, j])} for j in top],
        })
    with open(os.path.join(args.hf_dir, "config.json")) as f:
        hf_config = json.load(f)
    ref = {
        "about": "transformers' next-token log-softmax (float64 of its float32 logits) of a random "
                 "tiny Qwen3_5ForCausalLM; tokens[i] scores ids[i+1] given ids[0..=i] (toy score "
                 "--prompt-ids ids[0] --continuation-ids ids[1..] shape); generated by "
                 "scripts/qwen35-reference.sh",
        "gguf": args.gguf_name,
        "text": TEXT,
        "ids": [int(i) for i in ids],
        "n_vocab": int(lp.shape[1]),
        "top_k": TOP,
        "tokens": positions,
        "checks": checks,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "hf_config": hf_config,
    }
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, args.name + ".json"), "w") as f:
        json.dump(ref, f, indent=1)
    full_pos = sorted({p % (len(ids) - 1) for p in FULL_POSITIONS})
    with open(os.path.join(args.out_dir, args.name + "-full.json"), "w") as f:
        json.dump({"about": "full log-softmax rows (all n_vocab) at the given positions; row p "
                            "scores ids[p+1]", "ids": ref["ids"],
                   "rows": {str(p): [round(float(v), 7) for v in lp[p]] for p in full_pos}}, f)
    np.save(os.path.join(args.out_dir, args.name + "-logprobs.npy"), lp[:-1].astype(np.float32))
    print(f"reference: {len(ids)} ids, checks {checks}", file=sys.stderr)
    bad = {k: v for k, v in checks.items() if v > 1e-4}
    if bad:
        print(f"reference: transformers is not self-consistent: {bad}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------------
# dump

def cmd_dump(args):
    import gguf
    r = gguf.GGUFReader(args.gguf)
    lines = [f"# {os.path.basename(args.gguf)}: {len(r.fields)} keys, {len(r.tensors)} tensors", "## metadata"]
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        t = "/".join(x.name for x in f.types)
        if isinstance(v, list) and len(v) > 8:
            v = f"[{', '.join(map(repr, v[:4]))}, ... {len(v)} items]"
        elif isinstance(v, str) and len(v) > 80:
            v = repr(v[:77] + "...")
        lines.append(f"{k} ({t}) = {v}")
    lines.append("## tensors (name, ggml ne, type)")
    for t in r.tensors:
        lines.append(f"{t.name} ne={list(map(int, t.shape))} {t.tensor_type.name}")
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


# ------------------------------------------------------------------------------------------------
# check-transforms

def cmd_check_transforms(args):
    import numpy as np
    from safetensors.numpy import load_file

    hf = load_file(os.path.join(args.hf_dir, "model.safetensors"))
    with open(os.path.join(args.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    r = hv // hk

    def tiled(x, axis, d):
        """V heads from HF's grouped order (v head = g*r + j serves key head g) to ggml's tiled
        order (new v head = j*Hk + g, which serves key head new % Hk)."""
        x = np.moveaxis(x, axis, 0)
        shape = x.shape
        x = x.reshape(hk, r, d, *shape[1:]).transpose(1, 0, 2, *range(3, x.ndim + 2)).reshape(shape)
        return np.moveaxis(x, 0, axis)

    one = np.float32(1.0)
    want = {"token_embd.weight": hf["model.embed_tokens.weight"],
            "output_norm.weight": one + hf["model.norm.weight"]}
    if "lm_head.weight" in hf:
        want["output.weight"] = hf["lm_head.weight"]
    for il, kind in enumerate(cfg["layer_types"]):
        p, b = f"model.layers.{il}.", f"blk.{il}."
        want[b + "attn_norm.weight"] = one + hf[p + "input_layernorm.weight"]
        want[b + "post_attention_norm.weight"] = one + hf[p + "post_attention_layernorm.weight"]
        for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
            want[b + g + ".weight"] = hf[p + "mlp." + h + ".weight"]
        if kind == "linear_attention":
            la = p + "linear_attn."
            qkv = hf[la + "in_proj_qkv.weight"]
            want[b + "attn_qkv.weight"] = np.concatenate([qkv[:2 * hk * dk], tiled(qkv[2 * hk * dk:], 0, dv)])
            want[b + "attn_gate.weight"] = tiled(hf[la + "in_proj_z.weight"], 0, dv)
            want[b + "ssm_beta.weight"] = tiled(hf[la + "in_proj_b.weight"], 0, 1)
            want[b + "ssm_alpha.weight"] = tiled(hf[la + "in_proj_a.weight"], 0, 1)
            want[b + "ssm_a"] = tiled(-np.exp(hf[la + "A_log"]), 0, 1)
            want[b + "ssm_dt.bias"] = tiled(hf[la + "dt_bias"], 0, 1)
            conv = hf[la + "conv1d.weight"][:, 0, :]                 # (C, 1, K) -> (C, K)
            want[b + "ssm_conv1d.weight"] = np.concatenate([conv[:2 * hk * dk], tiled(conv[2 * hk * dk:], 0, dv)])
            want[b + "ssm_norm.weight"] = hf[la + "norm.weight"]      # no 1+w
            want[b + "ssm_out.weight"] = tiled(hf[la + "out_proj.weight"], 1, dv)
        else:
            sa = p + "self_attn."
            for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
                want[b + g + ".weight"] = hf[sa + h + ".weight"]
            want[b + "attn_q_norm.weight"] = one + hf[sa + "q_norm.weight"]
            want[b + "attn_k_norm.weight"] = one + hf[sa + "k_norm.weight"]
    m = Gguf(args.gguf)
    bad = sorted(set(want) ^ set(m.t))
    for name, w in want.items():
        if name in m.t:
            got = m.t[name]
            if got.shape != w.shape or not np.allclose(got, w.astype(np.float64), rtol=2e-7, atol=0):
                bad.append(name)
    print(f"check-transforms: {len(m.t)} tensors, {len(bad)} differ{': ' + ', '.join(bad) if bad else ''}",
          file=sys.stderr)
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------------
# check-numpy: llama.cpp's qwen35 graph in numpy, straight from the GGUF

class Gguf:
    def __init__(self, path):
        import gguf
        import numpy as np
        r = gguf.GGUFReader(path)
        self.kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
        self.t = {}
        for t in r.tensors:
            # gguf-py gives numpy arrays in row-major order of the reversed ne: ne [a, b] -> (b, a)
            self.t[t.name] = np.asarray(t.data, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])

    def k(self, key, default=None):
        return self.kv.get(f"{self.kv['general.architecture']}.{key}", default)


def forward_numpy(m, ids, mut=frozenset()):
    """llama.cpp 0c1e570 src/models/qwen35.cpp, for one sequence of text tokens, no cache. `mut`
    names deliberate mistakes (see MUTATIONS) to show that the reference catches them."""
    import numpy as np

    n_layer = int(m.k("block_count")) - int(m.k("nextn_predict_layers", 0))
    eps = float(m.k("attention.layer_norm_rms_epsilon"))
    n_head = int(m.k("attention.head_count"))
    n_head_kv = int(m.k("attention.head_count_kv"))
    d_head = int(m.k("attention.key_length"))
    n_rot = int(m.k("rope.dimension_count"))
    base = float(m.k("rope.freq_base", 10000.0))
    d_conv = int(m.k("ssm.conv_kernel"))
    d_state = int(m.k("ssm.state_size"))       # head_k_dim (= head_v_dim)
    n_kh = int(m.k("ssm.group_count"))         # linear key heads
    n_vh = int(m.k("ssm.time_step_rank"))      # linear value heads
    d_inner = int(m.k("ssm.inner_size"))       # n_vh * head_v_dim
    d_v = d_inner // n_vh
    recr = m.k("attention.recurrent_layers")
    if recr is None:
        interval = int(m.k("full_attention_interval", 4))
        recr = [(i + 1) % interval != 0 for i in range(n_layer)]
    T = len(ids)

    def rms(x, w, plus_one=False):
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        return y * ((1.0 + w) if plus_one else w)

    def silu(x):
        return x / (1.0 + np.exp(-x))

    def sigmoid(x):
        return 1.0 / (1.0 + np.exp(-x))

    def softplus(x):
        return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))

    def l2(x):  # ggml: rms_norm(x, eps/n) / sqrt(n) == x / sqrt(sum(x^2) + eps)
        return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)

    def W(name):
        return m.t[name]

    norm_p1 = "norm_plus_one" in mut
    x = W("token_embd.weight")[ids]                                   # (T, n_embd)
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms(x, W(p + "attn_norm.weight"), norm_p1)
        if recr[il]:
            qkv = h @ W(p + "attn_qkv.weight").T                      # (T, 2*Hk*Dk + Hv*Dv)
            z = (h @ W(p + "attn_gate.weight").T).reshape(T, n_vh, d_v)
            beta = h @ W(p + "ssm_beta.weight").T                     # (T, Hv)
            beta = beta if "no_beta_sigmoid" in mut else sigmoid(beta)
            alpha = h @ W(p + "ssm_alpha.weight").T                   # (T, Hv)
            a = W(p + "ssm_a")                                        # -exp(A_log)
            if "a_is_a_log" in mut:
                a = -np.exp(a)
            dt = 0.0 if "no_dt_bias" in mut else W(p + "ssm_dt.bias")
            g = softplus(alpha + dt) * a                              # log of the decay, <= 0
            kern = W(p + "ssm_conv1d.weight")                         # (C, d_conv)
            if "conv_reversed" in mut:
                kern = kern[:, ::-1]
            xp = np.concatenate([np.zeros((d_conv - 1, qkv.shape[1])), qkv], 0)
            conv = np.stack([(xp[t:t + d_conv] * kern.T).sum(0) for t in range(T)])
            conv = silu(conv)
            kd = n_kh * d_state
            q = l2(conv[:, :kd].reshape(T, n_kh, d_state))
            k = l2(conv[:, kd:2 * kd].reshape(T, n_kh, d_state))
            v = conv[:, 2 * kd:].reshape(T, n_vh, d_v)
            scale = 1.0 if "no_q_scale" in mut else 1.0 / math.sqrt(d_state)
            o = np.zeros((T, n_vh, d_v))
            for hv in range(n_vh):
                hk = hv // (n_vh // n_kh) if "grouped_heads" in mut else hv % n_kh
                S = np.zeros((d_state, d_v))                          # S[i, j]: key i, value j
                for t in range(T):
                    S = S * math.exp(g[t, hv])
                    delta = (v[t, hv] - S.T @ k[t, hk]) * beta[t, hv]
                    S = S + np.outer(k[t, hk], delta)
                    o[t, hv] = (S.T @ q[t, hk]) * scale
            y = rms(o, W(p + "ssm_norm.weight"), "ssm_norm_plus_one" in mut) * silu(z)
            y = y.reshape(T, d_inner) @ W(p + "ssm_out.weight").T
        else:
            qg = (h @ W(p + "attn_q.weight").T)                       # (T, H * 2 * Dh)
            if "qgate_halves" in mut:
                q = qg[:, :n_head * d_head].reshape(T, n_head, d_head)
                gate = qg[:, n_head * d_head:]
            else:
                qg = qg.reshape(T, n_head, 2 * d_head)
                q, gate = qg[:, :, :d_head], qg[:, :, d_head:].reshape(T, n_head * d_head)
            k = (h @ W(p + "attn_k.weight").T).reshape(T, n_head_kv, d_head)
            v = (h @ W(p + "attn_v.weight").T).reshape(T, n_head_kv, d_head)
            q = rms(q, W(p + "attn_q_norm.weight"), norm_p1)
            k = rms(k, W(p + "attn_k_norm.weight"), norm_p1)
            nr = d_head if "full_rotary" in mut else n_rot
            half = nr // 2
            pos = np.arange(T, dtype=np.float64)[:, None]
            theta = pos * base ** (-2.0 * np.arange(half) / nr)       # (T, nr/2)
            cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]

            def rope(x):
                x = x.copy()
                if "rope_adjacent" in mut:                            # GPT-J pairs (2i, 2i+1)
                    x0, x1 = x[..., 0:nr:2].copy(), x[..., 1:nr:2].copy()
                    x[..., 0:nr:2], x[..., 1:nr:2] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
                else:                                                 # NeoX pairs (i, i + nr/2)
                    x0, x1 = x[..., :half].copy(), x[..., half:nr].copy()
                    x[..., :half], x[..., half:nr] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
                return x

            q, k = rope(q), rope(k)
            att = np.zeros((T, n_head, d_head))
            mask = np.triu(np.full((T, T), -np.inf), 1)
            for hq in range(n_head):
                hk = hq % n_head_kv if "attn_tiled_heads" in mut else hq // (n_head // n_head_kv)
                s = q[:, hq] @ k[:, hk].T / math.sqrt(d_head) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                att[:, hq] = (s / s.sum(-1, keepdims=True)) @ v[:, hk]
            att = att.reshape(T, n_head * d_head)
            if "no_attn_gate" not in mut:
                att = att * sigmoid(gate)
            y = att @ W(p + "attn_output.weight").T
        x = x + y
        h = rms(x, W(p + "post_attention_norm.weight"), norm_p1)
        x = x + (silu(h @ W(p + "ffn_gate.weight").T) * (h @ W(p + "ffn_up.weight").T)) @ W(p + "ffn_down.weight").T
    x = rms(x, W("output_norm.weight"), norm_p1)
    out = W("output.weight") if "output.weight" in m.t else W("token_embd.weight")
    return x @ out.T                                                  # (T, n_vocab)


MUTATIONS = {
    "norm_plus_one": "apply 1+w to the stored (already 1+w) RMSNorm weights",
    "ssm_norm_plus_one": "apply 1+w to ssm_norm too",
    "a_is_a_log": "read ssm_a as A_log (a = -exp(ssm_a))",
    "no_dt_bias": "forget ssm_dt.bias",
    "no_beta_sigmoid": "beta without sigmoid",
    "conv_reversed": "conv taps reversed (tap 0 on the current token)",
    "grouped_heads": "GDN value head h reads key head h / (Hv/Hk) (HF's order) instead of h % Hk",
    "no_q_scale": "no 1/sqrt(head_k_dim) on q in the delta rule",
    "qgate_halves": "attn_q rows split as [all q | all gate] instead of per-head [q_h | gate_h]",
    "no_attn_gate": "no sigmoid(gate) on the attention output",
    "full_rotary": "rotate all head dims instead of rope.dimension_count",
    "rope_adjacent": "GPT-J (adjacent) rope pairs instead of NeoX halves",
    "attn_tiled_heads": "attention q head h uses kv head h % Hkv instead of h / (H/Hkv)",
}


def compare(lp, ref):
    import numpy as np
    d = 0.0
    for i, tok in enumerate(ref["tokens"]):
        d = max(d, abs(lp[i, tok["id"]] - tok["logprob"]))
        for t in tok["top"]:
            d = max(d, abs(lp[i, t["id"]] - t["logprob"]))
    return float(d)


def cmd_check_numpy(args):
    import numpy as np
    with open(args.ref) as f:
        ref = json.load(f)
    m = Gguf(args.gguf)
    ids = ref["ids"]
    lp = log_softmax64(forward_numpy(m, ids))
    full = np.load(args.ref.replace(".json", "-logprobs.npy")).astype(np.float64)
    res = {"max_abs_diff_top": compare(lp, ref),
           "max_abs_diff_full": float(np.abs(lp[:-1] - full).max()),
           "mutations": {}}
    ok = res["max_abs_diff_top"] <= args.tol and res["max_abs_diff_full"] <= 1e-4 + 1e-6
    if not args.no_mutations:
        for name in MUTATIONS:
            d = compare(log_softmax64(forward_numpy(m, ids, frozenset([name]))), ref)
            res["mutations"][name] = d
            if d < 100 * args.tol:
                ok = False
                print(f"check-numpy: mutation {name} moves the log-probs by only {d:.2e}", file=sys.stderr)
    res["ok"] = ok
    print(json.dumps(res, indent=1))
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------------
# check-llama

def cmd_check_llama(args):
    import numpy as np
    from llama_cpp import Llama
    with open(args.ref) as f:
        ref = json.load(f)
    ids = ref["ids"]
    res = {}
    for label, kw in (("kv_f16_flash", {"flash_attn": True}), ("kv_f32", {"type_k": 0, "type_v": 0, "flash_attn": False})):
        llm = Llama(model_path=args.gguf, logits_all=True, n_ctx=256, n_threads=2, verbose=False, **kw)
        llm.reset()
        llm.eval(ids)
        lp = log_softmax64(np.array(llm.scores[: len(ids)]))
        res[label] = compare(lp, ref)
        if label == "kv_f16_flash" and args.out:
            # llama.cpp's own numbers, in reference.json's shape (its default attention path:
            # flash attention over an f16 KV cache, the path toy's attention follows)
            out = {k: ref[k] for k in ("gguf", "text", "ids", "n_vocab", "top_k")}
            out["about"] = ("llama.cpp 0c1e570 (llama-cpp-python 0.3.36, CPU, flash attention, f16 KV "
                            "cache) next-token log-softmax; same shape as reference.json")
            out["tokens"] = []
            for i in range(len(ids) - 1):
                top = np.argsort(-lp[i], kind="stable")[:ref["top_k"]]
                out["tokens"].append({"id": int(ids[i + 1]), "logprob": float(lp[i, ids[i + 1]]),
                                      "top": [{"id": int(j), "logprob": float(lp[i, j])} for j in top]})
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)
        # token by token through llama.cpp's recurrent state
        llm.reset()
        for t in ids:
            llm.eval([t])
        lp2 = log_softmax64(np.array(llm.scores[: len(ids)]))
        res[label + "_stepwise"] = compare(lp2, ref)
        tok = llm.tokenize(ref["text"].encode(), add_bos=False, special=False)
        res["tokenizer_agrees"] = list(tok) == list(ids)
        del llm
    res["ok"] = all(v <= args.tol for k, v in res.items() if k.startswith("kv_")) and res["tokenizer_agrees"]
    print(json.dumps(res, indent=1))
    return 0 if res["ok"] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("cuda-stubs")
    p.add_argument("torch_lib")
    p.add_argument("out_dir")
    p = sub.add_parser("tokenizer")
    p.add_argument("gguf")
    p.add_argument("out_dir")
    p = sub.add_parser("model")
    p.add_argument("hf_dir")
    p.add_argument("--variant", choices=["tied", "untied"], default="tied")
    p.add_argument("--seed", type=int, default=SEED)
    p = sub.add_parser("reference")
    p.add_argument("hf_dir")
    p.add_argument("out_dir")
    p.add_argument("--name", default="reference")
    p.add_argument("--gguf-name", default="tiny-qwen35.f32.gguf")
    p = sub.add_parser("dump")
    p.add_argument("gguf")
    p.add_argument("out")
    p = sub.add_parser("check-transforms")
    p.add_argument("hf_dir")
    p.add_argument("gguf")
    p = sub.add_parser("check-numpy")
    p.add_argument("gguf")
    p.add_argument("ref")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--no-mutations", action="store_true")
    p = sub.add_parser("check-llama")
    p.add_argument("gguf")
    p.add_argument("ref")
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--out", help="write llama.cpp's log-probs (f16 KV, flash attention) here")
    args = ap.parse_args()
    fn = {"cuda-stubs": cmd_cuda_stubs, "tokenizer": cmd_tokenizer, "model": cmd_model,
          "reference": cmd_reference, "dump": cmd_dump, "check-transforms": cmd_check_transforms,
          "check-numpy": cmd_check_numpy,
          "check-llama": cmd_check_llama}[args.cmd]
    return fn(args)


if __name__ == "__main__":
    sys.exit(main())
