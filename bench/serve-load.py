#!/usr/bin/env python3
"""Load bench for `toy serve` (issue 5): continuous batching's throughput, correctness and stability.

Load mode (default), against a server started with --parallel >= CLIENTS:
  1. each of CLIENTS prompts alone, one after another: a greedy (temperature 0) streamed
     completion of TOKENS tokens -> the single-client tok/s and each prompt's reference output;
  2. CLIENTS concurrent clients, one prompt each, ROUNDS times -> aggregate tok/s (all tokens /
     wall time), time to first token (mean/p50/p90), and every output compared with its lone one.
  Reports the ratio aggregate/single (target >= --min-ratio, 2.0 by default; llama-server: 1.6x).
Soak mode (--soak SECONDS --clients 64): the clients loop for SECONDS on a mix of streamed chat,
  completions, embeddings and streams dropped midway; counts 5xx (must be 0), connection errors,
  samples the server's RSS (--pid) every 2 s and checks it stays bounded, and that the server
  still answers the same greedy output afterwards.
Exits 1 when a check fails. Plain asyncio + httpx (scripts/serve-requirements.txt).
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

import httpx

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


async def soak(args, client, model):
    ref_body = greedy_body(model, PROMPTS[0], 32)
    ref = await stream(client, "/v1/completions", ref_body)
    assert ref["status"] == 200, ref
    deadline = time.monotonic() + args.soak
    counts = {"ok": 0, "429": 0, "4xx": 0, "5xx": 0, "errors": 0, "aborted": 0}
    samples = []  # (seconds since start, RSS MiB)
    ttfts = []  # ms, streamed chat requests
    failures = []
    start = time.monotonic()

    async def one_client(i):
        rng = random.Random(i)
        while time.monotonic() < deadline:
            kind = rng.random()
            n = rng.randint(8, 64)
            try:
                if kind < 0.5:
                    r = await stream(client, "/v1/chat/completions", {
                        "model": model, "max_tokens": n, "temperature": 0.8, "stream": True, "seed": rng.randint(0, 9999),
                        "messages": [{"role": "user", "content": rng.choice(PROMPTS)}]})
                    status = r["status"]
                    if r.get("error"):
                        failures.append(r["error"])
                    elif r["ttft"] is not None:
                        ttfts.append(r["ttft"] * 1000)
                elif kind < 0.6:
                    r = await stream(client, "/v1/completions", greedy_body(model, rng.choice(PROMPTS), 64),
                                     abort_after=3)
                    status = r["status"]
                    counts["aborted"] += status == 200
                elif kind < 0.9:
                    resp = await client.post("/v1/completions", json={
                        "model": model, "prompt": rng.choice(PROMPTS), "max_tokens": n, "temperature": 0})
                    status = resp.status_code
                    if status >= 500:
                        failures.append(resp.text[:300])
                else:
                    resp = await client.post("/v1/embeddings", json={"model": model, "input": rng.sample(PROMPTS, 3)})
                    status = resp.status_code
            except (httpx.TransportError, json.JSONDecodeError) as e:
                counts["errors"] += 1
                failures.append(f"{type(e).__name__}: {e}")
                await asyncio.sleep(0.5)
                continue
            if status == 200:
                counts["ok"] += 1
            elif status == 429:
                counts["429"] += 1
                await asyncio.sleep(0.2)
            elif status >= 500:
                counts["5xx"] += 1
            else:
                counts["4xx"] += 1
                failures.append(f"status {status}")

    async def monitor():
        while time.monotonic() < deadline:
            if args.pid:
                samples.append((time.monotonic() - start, rss_mib(args.pid)))
            await asyncio.sleep(2)

    async def progress():
        while time.monotonic() < deadline:
            await asyncio.sleep(15)
            rss = f", RSS {samples[-1][1]:.0f} MiB" if samples and samples[-1][1] else ""
            print(f"  {time.monotonic() - start:5.0f} s: {counts}{rss}", flush=True)

    await asyncio.gather(monitor(), progress(), *(one_client(i) for i in range(args.clients)))
    ok = True
    total = sum(v for k, v in counts.items() if k != "aborted")
    print(f"soak {args.soak:.0f} s, {args.clients} clients: {total} requests: {counts}")
    if ttfts:
        print(f"TTFT of streamed chat under {args.clients} clients: mean {statistics.mean(ttfts):.0f} ms, "
              f"p50 {pct(ttfts, 50):.0f} ms, p90 {pct(ttfts, 90):.0f} ms ({len(ttfts)} requests)")
    for f in failures[:5]:
        print(f"  e.g. {f}")
    if counts["5xx"] or counts["errors"] or counts["4xx"]:
        print("FAIL: 5xx, connection errors or unexpected 4xx during the soak")
        ok = False
    if counts["ok"] < args.clients:
        print("FAIL: fewer successful requests than clients")
        ok = False
    if args.pid:
        alive = rss_mib(args.pid) is not None
        rss = [m for _, m in samples if m is not None]
        if not alive or not rss:
            print("FAIL: the server process is gone")
            return False
        half = len(rss) // 2
        first, second = max(rss[:max(1, half)]), max(rss[half:])
        print(f"server RSS: start {rss[0]:.0f} MiB, max first half {first:.0f} MiB, max second half {second:.0f} MiB, "
              f"end {rss[-1]:.0f} MiB ({len(rss)} samples)")
        if second > first * 1.25 + 32:
            print("FAIL: RSS keeps growing (second half > 1.25 x first half + 32 MiB)")
            ok = False
    after = await stream(client, "/v1/completions", ref_body)
    if after["status"] != 200 or after["text"] != ref["text"]:
        print(f"FAIL: after the soak the greedy output changed or failed: {after}")
        ok = False
    health = await client.get("/health")
    if health.status_code != 200:
        print(f"FAIL: /health answers {health.status_code} after the soak")
        ok = False
    print(f"serve-load soak: {counts['ok']} ok, {counts['5xx']} 5xx, {counts['errors']} connection errors, "
          f"{'ok' if ok else 'FAILED'}")
    return ok


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
    args = ap.parse_args()
    ok = asyncio.run(amain(args))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
