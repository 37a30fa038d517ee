#!/usr/bin/env python3
"""Make crates/toy/tests/fixtures/spm-small.gguf: a SentencePiece vocabulary of a few thousand
pieces cut from Gemma 3's (its control, user-defined and byte tokens, its first pieces by id,
and every single character of the test strings), with add_space_prefix on as Llama 2 and
Mistral have it, and the llama keys llama.cpp reads to load a vocabulary alone. Then record
llama-tokenize's ids of the test strings on it (and on Gemma 3 itself) as fixtures.

Usage: scripts/make-spm-fixture.py models/gemma-3-270m-q4_k_m.gguf STRINGS.json
(needs `pip install gguf` and target/llama-cpp/build-gcc/bin/llama-tokenize)."""
import json, os, subprocess, sys, tempfile
import gguf

src, strings_path = sys.argv[1], sys.argv[2]
fix = "crates/toy/tests/fixtures"
r = gguf.GGUFReader(src)
f = {k: v for k, v in r.fields.items()}
def arr(key):
    fl = f[key]
    return [fl.contents(i) for i in range(len(fl.data))] if False else fl.contents()
tokens, scores, types = arr("tokenizer.ggml.tokens"), arr("tokenizer.ggml.scores"), arr("tokenizer.ggml.token_type")
strings = json.load(open(strings_path))
chars = {c for s in strings for c in s.replace(" ", "\u2581")}
keep = [i for i in range(len(tokens))
        if i < 3000 or types[i] in (2, 3, 4, 6) and i < 6000 or types[i] == 6 or tokens[i] in chars]
out = f"{fix}/spm-small.gguf"
w = gguf.GGUFWriter(out + ".tmp", "llama")
w.add_context_length(64); w.add_embedding_length(8); w.add_block_count(1)
w.add_feed_forward_length(16); w.add_head_count(1); w.add_layer_norm_rms_eps(1e-5)
w.add_tokenizer_model("llama"); w.add_tokenizer_pre("default")
w.add_token_list([tokens[i] for i in keep]); w.add_token_scores([scores[i] for i in keep])
w.add_token_types([types[i] for i in keep])
w.add_bos_token_id(keep.index(2)); w.add_eos_token_id(keep.index(1)); w.add_unk_token_id(keep.index(3))
w.add_add_bos_token(True); w.add_add_space_prefix(True)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
os.replace(out + ".tmp", out)
print(f"{out}: {len(keep)} tokens", file=sys.stderr)

B = "target/llama-cpp/build-gcc/bin"
def record(model, name):
    rows = []
    for s in strings:
        with tempfile.NamedTemporaryFile(delete=False) as t:
            t.write(s.encode()); p = t.name
        res = subprocess.run([f"{B}/llama-tokenize", "-m", model, "-f", p, "--no-escape", "--ids", "--log-disable"],
                             capture_output=True, env={**os.environ, "LD_LIBRARY_PATH": B}, check=True)
        os.unlink(p)
        line = [l for l in res.stdout.decode().splitlines() if l.startswith("[")][-1]
        rows.append({"text": s, "ids": json.loads(line)})
    meta = "llama-tokenize of llama.cpp 0c1e570 (llama-cpp-python 0.3.36): BOS as the model asks, specials parsed"
    with open(f"{fix}/{name}", "w") as o:
        json.dump({"model": os.path.basename(model), "tool": meta, "cases": rows}, o, ensure_ascii=False, indent=0)
record(out, "spm-small-ids.json")
record(src, "gemma3-spm-ids.json")
