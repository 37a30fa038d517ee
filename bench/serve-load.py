#!/usr/bin/env python3
"""Load bench for `toy serve` (issue 5): continuous batching's throughput, correctness and stability.

Load mode (default), against a server started with --parallel >= CLIENTS:
  1. each of CLIENTS prompts alone, one after another: a greedy (temperature 0) streamed
     completion of TOKENS tokens -> the single-client tok/s and each prompt's reference output;
  2. CLIENTS concurrent clients, one prompt each, ROUNDS times -> aggregate tok/s (all tokens /
     wall time), time to first token (mean/p50/p90), and every output compared with its lone one.
  Reports the ratio aggregate/single (target >= --min-ratio, 2.0 by default; llama-server: 1.6x).

Soak mode (--soak SECONDS --clients N; bench/serve-load.sh --soak 1800 --clients 64 is the
30-minute run, and starts the server with --spec ngram and a LoRA adapter at default scale 0).
Before the clients start, alone: a greedy reference completion, the prompt tokens of each
completion prompt, the greedy replies of the `spec` and `lora` prompts; then /metrics is read.
Each client loops until SECONDS have passed, picking each request with its own seeded RNG
(--seed) among these kinds (weights in KINDS):
  chat_stream  streamed chat, sampled, with usage;          chat  the same, not streamed
  drop         streamed greedy completion, the connection closed after 1-4 text chunks
  json_schema  response_format json_schema (strict): a reply that ends with "stop" must
               json.loads and validate against the schema (jsonschema, no unlisted properties)
  regex        `regex`: a "stop" reply must re.fullmatch the regex
  grammar      `grammar` (Lark): a "stop" reply must match the grammar's language
  tools        two function tools, tool_choice "required": the reply must end with "tool_calls"
               (or "length": cut by max_tokens, counted as `cut`), each call names a given tool
               and its arguments validate against its parameters
  n            n = 2..4: exactly n choices, indices 0..n-1
  spec         greedy chat on a prompt whose reply copies it (prompt lookup drafts from it):
               the reply must equal its lone greedy reference. Speculation is server-wide
               (`toy serve --spec ngram` / `--draft`); no request field turns it on or off, so
               every generation request of the soak is speculated; these ones accept drafts.
  lora         `lora: [{"id": ID, "scale": S}]` (ID from GET /lora-adapters): greedy at scale
               1 (the reply must equal its lone reference) or sampled at scale 0.25..1
  embeddings   1-4 inputs: one finite vector each, all the same length
  malformed    invalid JSON, a non-object body, wrong field types or values: 400 with an
               OpenAI error {"error": {"message", "type", "param", "code"}} naming the field
  oversized    a body over the 4 MiB limit (up to 5 MiB): 413 with code body_too_large
Streams (any kind) run to `data: [DONE]` with one id throughout, a finish_reason per choice and
a usage chunk (except `drop`); replies have n choices and usage.completion_tokens <= n x max_tokens.
A status answers as expected or the run fails: 200, or the kind's 400/413 with the error shape;
429 (queue full) is allowed and counted (with the expected 4xx); any 5xx, an error event inside
a 200 stream, a connection error, an unexpected 4xx or a failed reply check fails the run.

At the end the clients finish their last request, then /metrics is polled (up to 30 s) until
toy_active_slots and toy_queue_depth are 0 and the request counters have settled, and the
deltas are checked against what the clients received:
  - toy_requests_total{route,status} on /v1/chat/completions, /v1/completions, /v1/embeddings:
    equal to the clients' count for every status, except that a dropped stream is counted by
    the server as 200 (it had sent everything before it saw the close) or 499 (client gone):
    server 200 + server 499 == client 200 + dropped, and server 499 <= dropped.
  - toy_prompt_tokens_total (counted per sequence, so a prompt n times): == the sum of
    usage.prompt_tokens x n over completed requests, plus each dropped stream's prompt tokens
    (measured alone before the soak). Exact.
  - toy_completion_tokens_total: completed requests contribute their usage.completion_tokens
    (exact); a dropped stream generated at least the text chunks the client read (one token
    each: held-back text only goes out at the end) and at most its max_tokens. So
    known + sum(chunks read) <= delta <= known + sum(max_tokens of dropped); == when none dropped.
  - toy_cancelled_sequences_total delta <= the server's 499s (only a dropped stream cancels).
  - toy_spec_accepted <= toy_spec_drafted, and (--expect-spec) drafted > 0.
  - every slot freed: toy_active_slots == 0 and toy_queue_depth == 0.
RSS (--pid) is sampled every 2 s into --rss-csv (seconds,rss_mib) and printed per minute (max);
the max after the warm-up (--rss-warmup: the first 5 minutes, or in a run shorter than 30
minutes the first sixth but at least a minute, or half the run) must stay under 1.05 x the
warm-up's max. Afterwards the greedy reference must come
back unchanged and /health answer 200. Closing line: `serve-load soak: N ok, N expected 4xx,
N 5xx, N connection errors, ok|FAILED`, with per-kind counts above it.
Exits 1 when a check fails. Plain asyncio + httpx + jsonschema (scripts/serve-requirements.txt).
"""
import argparse
import asyncio
import collections
import json
import math
import os
import random
import re
import statistics
import sys
import time

import httpx

try:
    import jsonschema
except ImportError:  # the soak then checks JSON replies parse, without the schema
    jsonschema = None

PROMPTS = [
    "Once upon a time, in a small village by the sea, there lived",
    "The history of the Roman Empire begins",
    "Here is a recipe for a simple tomato soup. First,",
    "The three laws of motion, as described by Isaac Newton, are",
    "In computer science, a hash table is",
    "The best way to learn a new language is",
    "Dear diary, today I went to the market and",
    "The planets of the solar system, in order from the sun, are",
]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def stream(client, path, body, abort_after=None):
    """POST a streamed request; returns dict(status, text, tokens, ttft, secs). Text is the joined
    deltas; tokens come from the usage chunk (or count text chunks when there is none)."""
    t0 = time.perf_counter()
    out = {"status": None, "text": "", "tokens": 0, "ttft": None, "secs": None}
    chunks = 0
    async with client.stream("POST", path, json=body) as r:
        out["status"] = r.status_code
        if r.status_code != 200:
            await r.aread()
            out["error"] = r.text[:300]
            return out
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("error"):
                out["error"] = json.dumps(ev["error"])[:300]
                out["status"] = 599  # an error inside a 200 stream: count it as a server failure
                break
            if ev.get("usage"):
                out["tokens"] = ev["usage"]["completion_tokens"]
            for ch in ev.get("choices", []):
                piece = ch.get("text") if "text" in ch else (ch.get("delta") or {}).get("content")
                if piece:
                    if out["ttft"] is None:
                        out["ttft"] = time.perf_counter() - t0
                    out["text"] += piece
                    chunks += 1
            if abort_after is not None and chunks >= abort_after:
                break  # leaving the block closes the connection midway: the server must free the slot
    out["secs"] = time.perf_counter() - t0
    out["tokens"] = out["tokens"] or chunks
    return out


def greedy_body(model, prompt, tokens):
    return {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}


async def load(args, client, model):
    prompts = (PROMPTS * (args.clients // len(PROMPTS) + 1))[:args.clients]
    await stream(client, "/v1/completions", greedy_body(model, "Hello", 8))  # warm-up
    alone = []
    for p in prompts:
        alone.append(await stream(client, "/v1/completions", greedy_body(model, p, args.tokens)))
        assert alone[-1]["status"] == 200, alone[-1]
    single_tok_s = sum(r["tokens"] for r in alone) / sum(r["secs"] for r in alone)
    print(f"1 client : {single_tok_s:7.1f} tok/s  ({sum(r['tokens'] for r in alone)} tokens over {len(prompts)} "
          f"prompts, one at a time; TTFT mean {statistics.mean(r['ttft'] for r in alone) * 1000:.0f} ms)")
    aggs, ttfts, mismatches = [], [], 0
    for rnd in range(args.rounds):
        t0 = time.perf_counter()
        res = await asyncio.gather(*(stream(client, "/v1/completions", greedy_body(model, p, args.tokens))
                                     for p in prompts))
        wall = time.perf_counter() - t0
        for i, r in enumerate(res):
            assert r["status"] == 200, r
            if r["text"] != alone[i]["text"]:
                mismatches += 1
                print(f"  MISMATCH round {rnd + 1} client {i}:\n    alone {alone[i]['text']!r}\n    load  {r['text']!r}")
        aggs.append(sum(r["tokens"] for r in res) / wall)
        ttfts += [r["ttft"] for r in res]
        print(f"{args.clients} clients: {aggs[-1]:7.1f} tok/s aggregate (round {rnd + 1}: "
              f"{sum(r['tokens'] for r in res)} tokens in {wall:.2f} s)")
    agg = statistics.median(aggs)
    ratio = agg / single_tok_s
    ms = [t * 1000 for t in ttfts]
    print(f"TTFT under load ({len(ms)} requests): mean {statistics.mean(ms):.0f} ms, p50 {pct(ms, 50):.0f} ms, "
          f"p90 {pct(ms, 90):.0f} ms")
    n = args.rounds * args.clients
    print(f"outputs equal to the lone greedy output: {n - mismatches}/{n}")
    ok = mismatches == 0 and ratio >= args.min_ratio
    print(f"serve-load: 1 client {single_tok_s:.1f} tok/s, {args.clients} clients {agg:.1f} tok/s, ratio {ratio:.2f}x "
          f"(target {args.min_ratio:.1f}x), TTFT p50 {pct(ms, 50):.0f} ms p90 {pct(ms, 90):.0f} ms, "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_warmup(soak_s):
    """Seconds of RSS warm-up before the growth check: 5 minutes of a 30-minute (or longer) run, a
    sixth of a shorter one, but at least a minute (or half the run): under 16 clients the server's
    RSS still climbs for about 50 s (KV caches filling, the allocator's arenas) and then holds."""
    if soak_s >= 1800:
        return 300.0
    return max(soak_s / 6, min(60.0, soak_s / 2))


# ---- soak: the mixed workload --------------------------------------------------------------

CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
GEN_ROUTES = (CHAT, COMPLETIONS, EMBEDDINGS)
BODY_LIMIT = 4 << 20  # toy serve's request body limit (crates/serve/src/config.rs)

# (kind, weight): how often a client picks each
KINDS = [("chat_stream", 14), ("chat", 10), ("drop", 10), ("json_schema", 8), ("regex", 5), ("grammar", 5),
         ("tools", 8), ("n", 8), ("spec", 8), ("lora", 8), ("embeddings", 6), ("malformed", 8), ("oversized", 2)]

# replies that copy their prompt: prompt lookup (--spec ngram) drafts tokens the model keeps
SPEC_PROMPTS = [
    "Repeat this sentence exactly, twice: the quick brown fox jumps over the lazy dog.",
    "Copy this list, one per line: apples, oranges, pears, plums, cherries, grapes, lemons, limes.",
    "Write the days of the week in order: Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday.",
]
SPEC_TOKENS = 48
LORA_PROMPTS = ["What is the capital of Peru?", "Is the sky green?", "How many legs does a spider have?"]
LORA_TOKENS = 32

SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False},
    {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
     "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 3}}},
    {"type": "object", "additionalProperties": False, "required": ["answer", "confidence"],
     "properties": {"answer": {"type": "boolean"}, "confidence": {"type": "number"}}},
]
SCHEMA_PROMPTS = ["Capital of Peru?", "Describe a person as JSON.", "Is water wet? Answer with your confidence."]
REGEXES = [r"(red|green|blue)", r"[0-9]{1,3}", r"(yes|no), because [a-z ]{1,40}\."]
# (Lark grammar, a Python regex for its language)
GRAMMARS = [
    ('start: "yes" | "no" | "maybe"', r"yes|no|maybe"),
    ('start: NAME " wrote it in " YEAR "."\nNAME: /[A-Z][a-z]+( [A-Z][a-z]+)?/\nYEAR: /1[5-6][0-9][0-9]/',
     r"[A-Z][a-z]+( [A-Z][a-z]+)? wrote it in 1[5-6][0-9][0-9]\."),
]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
]
TOOL_PROMPTS = ["What is the weather in Lima?", "What is 17 plus 25?", "Is it raining in Oslo?", "Add 3 and 4."]

_U = [{"role": "user", "content": "Hi"}]
# (route, body: bytes sent as is or an object sent as JSON, the `param` the error must name (None: any))
MALFORMED = [
    (CHAT, b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8', None),
    (CHAT, b"[1, 2, 3]", None),
    (COMPLETIONS, b"not json at all", None),
    (EMBEDDINGS, b'{"input": "a",}', None),
    (CHAT, {"messages": "hi"}, "messages"),
    (CHAT, {"messages": []}, "messages"),
    (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (CHAT, {"messages": _U, "max_tokens": "8"}, "max_tokens"),
    (CHAT, {"messages": _U, "n": 99}, "n"),
    (CHAT, {"messages": _U, "temperature": "hot"}, "temperature"),
    (CHAT, {"messages": _U, "stream_options": {"include_usage": True}}, "stream_options"),
    (CHAT, {"messages": _U, "stream": "yes"}, "stream"),
    (CHAT, {"messages": _U, "regex": "("}, "regex"),
    (CHAT, {"messages": _U, "response_format": {"type": "json_schema",
                                                "json_schema": {"name": "a", "schema": {"type": "bogus"}}}},
     "response_format"),
    (CHAT, {"messages": _U, "lora": [{"id": 99, "scale": 1}]}, "lora"),
    (CHAT, {"messages": _U, "lora": "all"}, "lora"),
    (CHAT, {"messages": _U, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    (CHAT, {"messages": _U, "functions": []}, "functions"),
    (COMPLETIONS, {"prompt": 5}, "prompt"),
    (COMPLETIONS, {"prompt": "x", "max_tokens": -1}, "max_tokens"),
    (COMPLETIONS, {"prompt": "x", "stop": 7}, "stop"),
    (COMPLETIONS, {}, "prompt"),
    (EMBEDDINGS, {"input": 123}, "input"),
    (EMBEDDINGS, {}, "input"),
]


def parse_metrics(text):
    """Prometheus text -> ({(route, status): n} of toy_requests_total, {name: value} of the unlabelled)."""
    reqs, vals = collections.Counter(), {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("toy_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', name))
            reqs[(labels["route"], labels["status"])] += int(float(value))
        elif "{" not in name:
            vals[name] = float(value)
    return reqs, vals


def error_shape(data, param):
    """None when `data` is an OpenAI error naming `param` (when given), else what is wrong."""
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str) or not isinstance(err.get("type"), str):
        return f"not an OpenAI error object: {json.dumps(data)[:200]}"
    if param is not None and err.get("param") != param:
        return f"error names param {err.get('param')!r}, expected {param!r}: {err['message'][:120]}"
    return None


async def sse(client, path, body, abort_after=None):
    """A streamed request read into choices {index: {text, finish, calls {i: {name, arguments}}}}, usage,
    the number of text chunks, `dropped` (closed by us after abort_after text chunks), `problem`
    (an error event, no [DONE], mixed ids) and, on a non-200, the body."""
    t0 = time.perf_counter()
    out = {"status": None, "choices": {}, "usage": None, "chunks": 0, "dropped": False, "problem": None,
           "ttft": None, "body": None, "error_event": False}
    async with client.stream("POST", path, json=body) as r:
        out["status"] = r.status_code
        if r.status_code != 200:
            await r.aread()
            out["body"] = r.text
            return out
        ids, done = set(), False
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            if ev.get("error"):
                out["problem"] = f"error event in a 200 stream: {json.dumps(ev['error'])[:200]}"
                out["error_event"] = True
                continue
            ids.add(ev.get("id"))
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            for ch in ev.get("choices") or []:
                c = out["choices"].setdefault(ch["index"], {"text": "", "finish": None, "calls": {}})
                if "text" in ch:
                    piece = ch["text"]
                else:
                    delta = ch.get("delta") or {}
                    piece = delta.get("content")
                    for tc in delta.get("tool_calls") or []:
                        call = c["calls"].setdefault(tc.get("index", 0), {"name": None, "arguments": ""})
                        fn = tc.get("function") or {}
                        call["name"] = fn.get("name") or call["name"]
                        call["arguments"] += fn.get("arguments") or ""
                if piece:
                    c["text"] += piece
                    out["chunks"] += 1
                    if out["ttft"] is None:
                        out["ttft"] = time.perf_counter() - t0
                if ch.get("finish_reason"):
                    c["finish"] = ch["finish_reason"]
            if abort_after is not None and out["chunks"] >= abort_after:
                out["dropped"] = True
                break  # leaving the block closes the connection midway: the server must free the slot
        if not done and not out["dropped"] and not out["problem"]:
            out["problem"] = "the stream ended without data: [DONE]"
        if len(ids) > 1:
            out["problem"] = f"chunks of one stream carry {len(ids)} ids"
    return out


async def post(client, path, body):
    """A non-streamed request, read into the shape sse() returns."""
    if isinstance(body, bytes):
        resp = await client.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        resp = await client.post(path, json=body)
    out = {"status": resp.status_code, "choices": {}, "usage": None, "chunks": 0, "dropped": False,
           "problem": None, "ttft": None, "body": resp.text, "error_event": False, "json": None}
    try:
        out["json"] = data = resp.json()
    except ValueError:
        out["problem"] = f"the body is not JSON: {resp.text[:200]!r}"
        return out
    if resp.status_code != 200 or path == EMBEDDINGS:
        return out
    out["usage"] = data.get("usage")
    for ch in data.get("choices") or []:
        if "text" in ch:
            text, calls = ch["text"], {}
        else:
            msg = ch.get("message") or {}
            text = msg.get("content") or ""
            calls = {i: {"name": (tc.get("function") or {}).get("name"),
                         "arguments": (tc.get("function") or {}).get("arguments")}
                     for i, tc in enumerate(msg.get("tool_calls") or [])}
        out["choices"][ch.get("index")] = {"text": text, "finish": ch.get("finish_reason"), "calls": calls}
    return out


def check_shape(r, n, max_tokens, finishes=("stop", "length")):
    """What is wrong with a completed generation reply (None: nothing)."""
    if r["problem"]:
        return r["problem"]
    if sorted(r["choices"]) != list(range(n)):
        return f"choices {sorted(r['choices'])}, expected indices 0..{n - 1}"
    for i, c in r["choices"].items():
        if c["finish"] not in finishes:
            return f"choice {i} finish_reason {c['finish']!r}"
    u = r["usage"]
    if not isinstance(u, dict) or not isinstance(u.get("completion_tokens"), int) \
            or not isinstance(u.get("prompt_tokens"), int):
        return f"no usage: {u!r}"
    if u["completion_tokens"] > n * max_tokens:
        return f"usage.completion_tokens {u['completion_tokens']} > n x max_tokens = {n * max_tokens}"
    return None


def strict(schema):
    """The schema as `strict: true` enforces it: no unlisted properties."""
    if not isinstance(schema, dict):
        return schema
    s = {k: strict(v) if k in ("items",) else v for k, v in schema.items()}
    if "properties" in s:
        s["properties"] = {k: strict(v) for k, v in s["properties"].items()}
        s.setdefault("additionalProperties", False)
    return s


def validate(value, schema):
    if jsonschema is None:
        return None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return f"{json.dumps(value)[:150]} does not validate: {e.message[:150]}"
    return None


class Soak:
    def __init__(self, args, client, model):
        self.args, self.client, self.model = args, client, model
        self.kinds = {k: collections.Counter() for k, _ in KINDS}
        self.seen = collections.Counter()  # (route, status) as the clients saw them; dropped streams: "drop"
        self.prompt_tokens = 0  # expected toy_prompt_tokens_total delta
        self.completion_tokens = 0  # of completed requests (their usage)
        self.dropped_lo = self.dropped_hi = 0  # bounds of the tokens dropped streams generated
        self.failures = []
        self.ttfts = []
        self.lora_id = None
        self.prompt_len = {}  # completion prompt -> its prompt tokens
        self.spec_ref, self.lora_ref = {}, {}

    def fail(self, kind, what):
        if len(self.failures) < 200:
            self.failures.append(f"{kind}: {what}")

    async def prepare(self):
        """Alone, before the soak: prompt sizes, greedy references, the LoRA adapter's id."""
        for p in PROMPTS:
            r = await post(self.client, COMPLETIONS, {"model": self.model, "prompt": p, "max_tokens": 1})
            assert r["status"] == 200 and r["usage"], r
            self.prompt_len[p] = r["usage"]["prompt_tokens"]
        lr = await self.client.get("/lora-adapters")
        adapters = lr.json() if lr.status_code == 200 else []
        if adapters:
            self.lora_id = adapters[0]["id"]
            print(f"LoRA adapter {self.lora_id}: {adapters[0].get('path')} (default scale {adapters[0].get('scale')})")
        for p in SPEC_PROMPTS:
            r = await post(self.client, CHAT, self.spec_body(p))
            assert r["status"] == 200 and r["choices"], r
            self.spec_ref[p] = r["choices"][0]["text"]
        if self.lora_id is not None:
            for p in LORA_PROMPTS:
                r = await post(self.client, CHAT, self.lora_body(p, 1.0, greedy=True))
                assert r["status"] == 200 and r["choices"], r
                self.lora_ref[p] = r["choices"][0]["text"]

    def spec_body(self, prompt):
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": SPEC_TOKENS,
                "temperature": 0}

    def lora_body(self, prompt, scale, greedy, seed=0):
        b = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": LORA_TOKENS,
             "lora": [{"id": self.lora_id, "scale": scale}]}
        b.update({"temperature": 0} if greedy else {"temperature": 0.8, "seed": seed})
        return b

    async def gen(self, route, body, stream, abort_after=None):
        body = dict(body, model=self.model)
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
            return await sse(self.client, route, body, abort_after)
        return await post(self.client, route, body)

    def account(self, r, n, prompt=None, max_tokens=None):
        """Add a 200 generation reply to the expected token counters."""
        if r["dropped"]:
            self.prompt_tokens += self.prompt_len[prompt]
            self.dropped_lo += r["chunks"]
            self.dropped_hi += max_tokens
        elif isinstance(r["usage"], dict):
            self.prompt_tokens += r["usage"].get("prompt_tokens", 0) * n
            self.completion_tokens += r["usage"].get("completion_tokens", 0)

    async def one(self, kind, rng):
        """One request of `kind`: returns (route, response, expected non-200 status or None, problem)."""
        msg = lambda p: [{"role": "user", "content": p}]  # noqa: E731
        stream = rng.random() < 0.5
        seed = rng.randint(0, 1 << 30)
        if kind in ("chat_stream", "chat"):
            mt = rng.randint(8, 64)
            r = await self.gen(CHAT, {"messages": msg(rng.choice(PROMPTS)), "max_tokens": mt, "temperature": 0.8,
                                      "seed": seed}, kind == "chat_stream")
            if r["status"] == 200:
                self.account(r, 1)
                if r["ttft"] is not None:
                    self.ttfts.append(r["ttft"] * 1000)
            return CHAT, r, None, r["status"] == 200 and check_shape(r, 1, mt)
        if kind == "drop":
            p, mt = rng.choice(PROMPTS), rng.randint(32, 96)
            r = await self.gen(COMPLETIONS, {"prompt": p, "max_tokens": mt, "temperature": 0}, True,
                               abort_after=rng.randint(1, 4))
            if r["status"] != 200:
                return COMPLETIONS, r, None, None
            self.account(r, 1, p, mt)
            return COMPLETIONS, r, None, None if r["dropped"] else check_shape(r, 1, mt)
        if kind == "json_schema":
            i = rng.randrange(len(SCHEMAS))
            mt = 96
            r = await self.gen(CHAT, {"messages": msg(SCHEMA_PROMPTS[i]), "max_tokens": mt, "temperature": 0.8,
                                      "seed": seed, "response_format": {"type": "json_schema", "json_schema": {
                                          "name": f"s{i}", "strict": True, "schema": SCHEMAS[i]}}}, stream)
            if r["status"] != 200:
                return CHAT, r, None, None
            self.account(r, 1)
            problem = check_shape(r, 1, mt)
            c = r["choices"].get(0)
            if not problem and c["finish"] == "stop":
                try:
                    problem = validate(json.loads(c["text"]), strict(SCHEMAS[i]))
                except ValueError:
                    problem = f"reply is not JSON: {c['text'][:150]!r}"
            return CHAT, r, None, problem
        if kind in ("regex", "grammar"):
            mt = 32
            if kind == "regex":
                pattern = rng.choice(REGEXES)
                field, check = {"regex": pattern}, pattern
                prompt = rng.choice(["Pick a colour.", "How old is the oldest tree?", "Is the sea salty? Say why."])
            else:
                grammar, check = rng.choice(GRAMMARS)
                field = {"grammar": grammar}
                prompt = rng.choice(["Who wrote Hamlet and when?", "Will it rain tomorrow?"])
            r = await self.gen(CHAT, {"messages": msg(prompt), "max_tokens": mt, "temperature": 0.8, "seed": seed,
                                      **field}, stream)
            if r["status"] != 200:
                return CHAT, r, None, None
            self.account(r, 1)
            problem = check_shape(r, 1, mt)
            c = r["choices"].get(0)
            if not problem and c["finish"] == "stop" and not re.fullmatch(check, c["text"]):
                problem = f"reply {c['text']!r} does not match {check!r}"
            return CHAT, r, None, problem
        if kind == "tools":
            mt = 128
            r = await self.gen(CHAT, {"messages": msg(rng.choice(TOOL_PROMPTS)), "max_tokens": mt,
                                      "temperature": 0.8, "seed": seed, "tools": TOOLS, "tool_choice": "required"},
                               stream)
            if r["status"] != 200:
                return CHAT, r, None, None
            self.account(r, 1)
            problem = check_shape(r, 1, mt, finishes=("tool_calls", "length"))
            c = r["choices"].get(0)
            if problem:
                return CHAT, r, None, problem
            if c["finish"] == "length":
                self.kinds[kind]["cut"] += 1
                return CHAT, r, None, None
            if not c["calls"]:
                return CHAT, r, None, "finish_reason tool_calls without tool_calls"
            params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
            for call in c["calls"].values():
                if call["name"] not in params:
                    return CHAT, r, None, f"call of an unknown tool {call['name']!r}"
                try:
                    problem = validate(json.loads(call["arguments"]), strict(params[call["name"]]))
                except (TypeError, ValueError):
                    problem = f"arguments are not JSON: {call['arguments']!r}"
                if problem:
                    return CHAT, r, None, problem
            return CHAT, r, None, None
        if kind == "n":
            n, mt = rng.randint(2, 4), rng.randint(8, 32)
            route = rng.choice([CHAT, COMPLETIONS])
            p = rng.choice(PROMPTS)
            body = {"max_tokens": mt, "n": n, "temperature": 0.9, "seed": seed}
            body.update({"messages": msg(p)} if route == CHAT else {"prompt": p})
            r = await self.gen(route, body, stream)
            if r["status"] != 200:
                return route, r, None, None
            self.account(r, n)
            return route, r, None, check_shape(r, n, mt)
        if kind == "spec":
            p = rng.choice(SPEC_PROMPTS)
            r = await self.gen(CHAT, self.spec_body(p), stream)
            if r["status"] != 200:
                return CHAT, r, None, None
            self.account(r, 1)
            problem = check_shape(r, 1, SPEC_TOKENS)
            if not problem and r["choices"][0]["text"] != self.spec_ref[p]:
                problem = f"greedy reply {r['choices'][0]['text']!r} != its lone reference {self.spec_ref[p]!r}"
            return CHAT, r, None, problem
        if kind == "lora":
            p = rng.choice(LORA_PROMPTS)
            greedy = rng.random() < 0.5
            r = await self.gen(CHAT, self.lora_body(p, 1.0 if greedy else rng.choice([0.25, 0.5, 1.0]), greedy, seed),
                               stream)
            if r["status"] != 200:
                return CHAT, r, None, None
            self.account(r, 1)
            problem = check_shape(r, 1, LORA_TOKENS)
            if not problem and greedy and r["choices"][0]["text"] != self.lora_ref[p]:
                problem = f"greedy LoRA reply {r['choices'][0]['text']!r} != its lone reference {self.lora_ref[p]!r}"
            return CHAT, r, None, problem
        if kind == "embeddings":
            inputs = rng.sample(PROMPTS, rng.randint(1, 4))
            r = await post(self.client, EMBEDDINGS, {"model": self.model, "input": inputs})
            if r["status"] != 200 or r["problem"]:
                return EMBEDDINGS, r, None, r["problem"]
            data = (r["json"] or {}).get("data") or []
            vecs = [d.get("embedding") for d in data]
            if len(vecs) != len(inputs) or not all(isinstance(v, list) and v for v in vecs) \
                    or len({len(v) for v in vecs}) != 1 \
                    or not all(isinstance(x, (int, float)) and math.isfinite(x) for v in vecs for x in v):
                return EMBEDDINGS, r, None, f"{len(vecs)} embeddings for {len(inputs)} inputs, or not finite vectors"
            return EMBEDDINGS, r, None, None
        if kind == "malformed":
            route, body, param = rng.choice(MALFORMED)
            if not isinstance(body, bytes):
                body = json.dumps(dict(body, model=self.model) if body else body).encode()
            r = await post(self.client, route, body)
            problem = None
            if r["status"] == 400:
                problem = r["problem"] or error_shape(r["json"], param)
            elif r["status"] == 200:
                problem = f"a malformed body was answered 200: {body[:120]!r}"
            return route, r, 400, problem
        if kind == "oversized":
            route = rng.choice(GEN_ROUTES)
            filler = "x" * (BODY_LIMIT + rng.randint(1, 1 << 20))
            body = {CHAT: {"messages": [{"role": "user", "content": filler}], "max_tokens": 4},
                    COMPLETIONS: {"prompt": filler, "max_tokens": 4}, EMBEDDINGS: {"input": filler}}[route]
            r = await post(self.client, route, json.dumps(dict(body, model=self.model)).encode())
            problem = None
            if r["status"] == 413:
                problem = r["problem"] or error_shape(r["json"], None)
                if not problem and r["json"]["error"].get("code") != "body_too_large":
                    problem = f"413 with code {r['json']['error'].get('code')!r}"
            elif r["status"] == 200:
                problem = "an oversized body was answered 200"
            return route, r, 413, problem
        raise ValueError(kind)

    async def client_loop(self, i, deadline):
        rng = random.Random(f"{self.args.seed}/{i}")
        names, weights = zip(*[(k, w) for k, w in KINDS if k != "lora" or self.lora_id is not None])
        while time.monotonic() < deadline:
            kind = rng.choices(names, weights)[0]
            tally = self.kinds[kind]
            try:
                route, r, expected, problem = await self.one(kind, rng)
            except httpx.TransportError as e:
                tally["conn"] += 1
                self.fail(kind, f"{type(e).__name__}: {e}")
                await asyncio.sleep(0.5)
                continue
            except Exception as e:  # a reply this code cannot read (a stream line that is not JSON, ...)
                tally["bad"] += 1
                self.fail(kind, f"{type(e).__name__}: {e}")
                continue
            status = r["status"]
            if r["error_event"]:
                tally["5xx"] += 1  # an error inside a 200 stream: a server failure
                self.fail(kind, r["problem"])
                self.seen[(route, "drop" if r["dropped"] else str(status))] += 1
                continue
            if r["dropped"]:
                self.seen[(route, "drop")] += 1
                tally["ok"] += 1
                tally["dropped"] += 1
                continue
            self.seen[(route, str(status))] += 1
            if problem:
                tally["bad"] += 1
                self.fail(kind, problem)
            elif status == 200 and expected is None:
                tally["ok"] += 1
            elif status == expected:
                tally["expected_4xx"] += 1
            elif status == 429:
                tally["429"] += 1
                await asyncio.sleep(rng.uniform(0.2, 1.0))
            elif status >= 500:
                tally["5xx"] += 1
                self.fail(kind, f"status {status}: {(r['body'] or '')[:200]}")
            else:
                tally["unexpected_4xx"] += 1
                self.fail(kind, f"status {status} (expected {expected or 200}): {(r['body'] or '')[:200]}")

    def total(self, key):
        return sum(t[key] for t in self.kinds.values())

    async def metrics(self):
        resp = await self.client.get("/metrics")
        resp.raise_for_status()
        return parse_metrics(resp.text)

    async def run(self):
        args = self.args
        ref_body = greedy_body(self.model, PROMPTS[0], 32)
        ref = await stream(self.client, COMPLETIONS, ref_body)
        assert ref["status"] == 200, ref
        await self.prepare()
        if self.lora_id is None:
            print("no LoRA adapter is served (GET /lora-adapters is empty): the `lora` kind is skipped")
        reqs0, vals0 = await self.metrics()
        samples = []  # (seconds since the clients started, RSS MiB)
        start = time.monotonic()
        deadline = start + args.soak
        stopped = asyncio.Event()
        csv = None
        if args.pid:
            os.makedirs(os.path.dirname(os.path.abspath(args.rss_csv)), exist_ok=True)
            csv = open(args.rss_csv, "w")
            csv.write("seconds,rss_mib\n")

        async def monitor():
            while not stopped.is_set():
                if args.pid:
                    m = rss_mib(args.pid)
                    samples.append((time.monotonic() - start, m))
                    if m is not None:
                        csv.write(f"{samples[-1][0]:.1f},{m:.1f}\n")
                        csv.flush()
                try:
                    await asyncio.wait_for(stopped.wait(), 2)
                except asyncio.TimeoutError:
                    pass

        async def progress():
            every = 15 if args.soak <= 300 else 60
            while True:
                try:
                    await asyncio.wait_for(stopped.wait(), every)
                    return
                except asyncio.TimeoutError:
                    pass
                rss = f", RSS {samples[-1][1]:.0f} MiB" if samples and samples[-1][1] else ""
                print(f"  {time.monotonic() - start:5.0f} s: {self.total('ok')} ok ({self.total('dropped')} dropped), "
                      f"{self.total('expected_4xx')} expected 4xx, {self.total('429')} 429, {self.total('5xx')} 5xx, "
                      f"{self.total('conn')} conn errors, {self.total('unexpected_4xx')} unexpected 4xx, "
                      f"{self.total('bad')} bad replies{rss}", flush=True)

        async def clients():
            await asyncio.gather(*(self.client_loop(i, deadline) for i in range(args.clients)))
            # in-flight work drains: every slot freed, every request counted (a dropped stream's
            # 499 is counted once the engine lets go of its job)
            client_total = sum(v for k, v in self.seen.items() if k[1] != "conn")
            t_end = time.monotonic()
            while True:
                reqs, vals = await self.metrics()
                server_total = sum(reqs[k] - reqs0[k] for k in reqs if k[0] in GEN_ROUTES)
                idle = vals.get("toy_active_slots") == 0 and vals.get("toy_queue_depth") == 0
                if (idle and server_total >= client_total) or time.monotonic() - t_end > 30:
                    break
                await asyncio.sleep(0.5)
            self.drain_s = time.monotonic() - t_end
            stopped.set()
            return reqs, vals

        _, _, (reqs1, vals1) = await asyncio.gather(monitor(), progress(), clients())
        if csv:
            csv.close()
        wall = time.monotonic() - start
        ok = True

        # counts
        total = sum(sum(t.values()) - t["dropped"] - t["cut"] for t in self.kinds.values())
        print(f"soak {args.soak:.0f} s ({wall:.0f} s with the drain of {self.drain_s:.1f} s), {args.clients} clients, "
              f"seed {args.seed}: {total} requests")
        cols = {"ok": "ok", "dropped": "dropped", "cut": "cut", "expected_4xx": "exp 4xx", "429": "429",
                "unexpected_4xx": "unexp 4xx", "5xx": "5xx", "conn": "conn err", "bad": "bad"}
        print(f"  {'kind':12}" + "".join(f"{h:>10}" for h in cols.values()))
        for k, _ in KINDS:
            print(f"  {k:12}" + "".join(f"{self.kinds[k][c]:>10}" for c in cols))
        if self.ttfts:
            print(f"TTFT of streamed chat under {args.clients} clients: mean {statistics.mean(self.ttfts):.0f} ms, "
                  f"p50 {pct(self.ttfts, 50):.0f} ms, p90 {pct(self.ttfts, 90):.0f} ms ({len(self.ttfts)} requests)")
        for f in self.failures[:8]:
            print(f"  e.g. {f}")
        n5, nconn, n4, nbad = self.total("5xx"), self.total("conn"), self.total("unexpected_4xx"), self.total("bad")
        if n5 or nconn or n4 or nbad:
            print(f"FAIL: {n5} 5xx, {nconn} connection errors, {n4} unexpected 4xx, {nbad} replies failing their check")
            ok = False
        if self.total("ok") < args.clients:
            print("FAIL: fewer successful requests than clients")
            ok = False

        # /metrics against what the clients received
        print("/metrics deltas against the clients (route, status: clients / server):")
        for route in GEN_ROUTES:
            statuses = sorted({s for (r, s) in self.seen if r == route and s != "conn"}
                              | {s for (r, s) in reqs1 if r == route and reqs1[(r, s)] != reqs0[(r, s)]})
            d = {s: reqs1[(route, s)] - reqs0[(route, s)] for s in statuses if s != "drop"}
            c = {s: self.seen[(route, s)] for s in statuses}
            line = ", ".join(f"{s}: {c.get(s, 0)} / {d.get(s, '-')}" for s in statuses)
            print(f"  {route}: {line}")
            dropped = c.get("drop", 0)
            if d.get("200", 0) + d.get("499", 0) != c.get("200", 0) + dropped or d.get("499", 0) > dropped:
                print(f"FAIL: {route}: server 200 + 499 = {d.get('200', 0)} + {d.get('499', 0)}, clients 200 + dropped "
                      f"= {c.get('200', 0)} + {dropped} (and 499 <= dropped)")
                ok = False
            for s in statuses:
                if s not in ("200", "499", "drop") and d.get(s, 0) != c.get(s, 0):
                    print(f"FAIL: {route} status {s}: the clients got {c.get(s, 0)}, the server counted {d.get(s, 0)}")
                    ok = False

        def delta(name):
            return vals1.get(name, 0) - vals0.get(name, 0)

        dp, dc = delta("toy_prompt_tokens_total"), delta("toy_completion_tokens_total")
        print(f"  toy_prompt_tokens_total: +{dp:.0f}, expected {self.prompt_tokens} "
              f"(usage x n, dropped streams' prompts)")
        if dp != self.prompt_tokens:
            print("FAIL: prompt tokens counted by the server differ from the clients'")
            ok = False
        lo, hi = self.completion_tokens + self.dropped_lo, self.completion_tokens + self.dropped_hi
        print(f"  toy_completion_tokens_total: +{dc:.0f}, expected {lo}..{hi} ({self.completion_tokens} in usage of "
              f"completed replies, {self.dropped_lo}..{self.dropped_hi} in {self.total('dropped')} dropped streams)")
        if not lo <= dc <= hi:
            print("FAIL: completion tokens counted by the server outside what the clients account for")
            ok = False
        d499 = sum(reqs1[k] - reqs0[k] for k in reqs1 if k[0] in GEN_ROUTES and k[1] == "499")
        dcancel = delta("toy_cancelled_sequences_total")
        print(f"  toy_cancelled_sequences_total: +{dcancel:.0f} "
              f"(499s: {d499}, dropped streams: {self.total('dropped')})")
        if dcancel > d499:
            print("FAIL: more cancelled sequences than requests the server saw go away")
            ok = False
        drafted, accepted = delta("toy_spec_drafted_tokens_total"), delta("toy_spec_accepted_tokens_total")
        rate = f" ({accepted / drafted:.0%} kept)" if drafted else ""
        print(f"  speculative: +{drafted:.0f} drafted, +{accepted:.0f} accepted{rate}")
        if accepted > drafted or (args.expect_spec and drafted == 0):
            print("FAIL: speculative counters: accepted > drafted, or nothing drafted under --expect-spec")
            ok = False
        active, queued = vals1.get("toy_active_slots"), vals1.get("toy_queue_depth")
        print(f"  at the end: toy_active_slots {active:.0f}, toy_queue_depth {queued:.0f} "
              f"(after {self.drain_s:.1f} s of drain)")
        if active != 0 or queued != 0:
            print("FAIL: not every slot was freed at the end")
            ok = False
        if args.expect_lora and self.lora_id is None:
            print("FAIL: --expect-lora but the server lists no adapter")
            ok = False

        # RSS
        if args.pid:
            rss = [(t, m) for t, m in samples if m is not None]
            if rss_mib(args.pid) is None or not rss:
                print("FAIL: the server process is gone")
                return False
            warm = args.rss_warmup if args.rss_warmup is not None else rss_warmup(args.soak)
            print(f"server RSS (MiB) by minute, {len(rss)} samples every 2 s in {args.rss_csv}:")
            print("  minute   max    min")
            by_min = collections.defaultdict(list)
            for t, m in rss:
                by_min[int(t // 60)].append(m)
            for k in sorted(by_min):
                print(f"  {k:6d} {max(by_min[k]):6.0f} {min(by_min[k]):6.0f}")
            first = max([m for t, m in rss if t <= warm] or [rss[0][1]])
            later = [m for t, m in rss if t > warm]
            if later:
                growth = max(later) / first - 1
                print(f"RSS: start {rss[0][1]:.0f} MiB, max in the first {warm:.0f} s {first:.0f} MiB, max after "
                      f"{max(later):.0f} MiB ({growth:+.1%}), end {rss[-1][1]:.0f} MiB")
                if max(later) >= first * 1.05:
                    print("FAIL: RSS grew by 5% or more after the warm-up")
                    ok = False

        after = await stream(self.client, COMPLETIONS, ref_body)
        if after["status"] != 200 or after["text"] != ref["text"]:
            print(f"FAIL: after the soak the greedy output changed or failed: {after}")
            ok = False
        health = await self.client.get("/health")
        if health.status_code != 200:
            print(f"FAIL: /health answers {health.status_code} after the soak")
            ok = False
        n_ok = self.total("ok")
        exp4 = self.total("expected_4xx") + self.total("429")
        print(f"serve-load soak: {n_ok} ok, {exp4} expected 4xx, {n5} 5xx, {nconn} connection errors, "
              f"{'ok' if ok else 'FAILED'}")
        return ok


async def soak(args, client, model):
    return await Soak(args, client, model).run()


async def amain(args):
    limits = httpx.Limits(max_connections=args.clients + 8, max_keepalive_connections=args.clients + 8)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(base_url=args.base_url, timeout=httpx.Timeout(300, connect=30), limits=limits,
                                 headers=headers) as client:
        models = (await client.get("/v1/models")).json()["data"]
        model = args.model or models[0]["id"]
        print(f"server {args.base_url}, model {model}, pid {args.pid or '?'} "
              f"(RSS {rss_mib(args.pid) if args.pid else float('nan'):.0f} MiB), {os.cpu_count()} CPUs")
        if args.soak:
            return await soak(args, client, model)
        return await load(args, client, model)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", help="model id (default: the first of /v1/models)")
    ap.add_argument("--api-key")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="concurrent rounds (the median is reported)")
    ap.add_argument("--min-ratio", type=float, default=2.0)
    ap.add_argument("--soak", type=float, help="soak for this many seconds instead of the load test")
    ap.add_argument("--pid", type=int, help="the server's pid, to sample its RSS")
    ap.add_argument("--seed", type=int, default=0, help="soak: seeds the clients' choices (client i: SEED/i)")
    ap.add_argument("--rss-csv", default="target/serve-soak-rss.csv", help="soak: the RSS curve (seconds,rss_mib)")
    ap.add_argument("--rss-warmup", type=float,
                    help="soak: seconds before the RSS growth check (default 300, or max(run/6, 60) below 30 min)")
    ap.add_argument("--expect-spec", action="store_true",
                    help="soak: the server runs --spec/--draft, so fail when nothing was drafted")
    ap.add_argument("--expect-lora", action="store_true", help="soak: fail when the server serves no LoRA adapter")
    args = ap.parse_args()
    ok = asyncio.run(amain(args))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
