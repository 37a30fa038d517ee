#!/usr/bin/env python3
"""What constrained decoding costs in `toy serve` (issue 14): decode tok/s of JSON-schema-constrained
requests against the same requests unconstrained, at 1 client and at CLIENTS concurrent clients.

Every request generates exactly --tokens tokens (end-of-generation tokens banned, and a schema that
cannot be complete that soon: an array of at least 1000 objects), greedy, non-streamed; a round is
CLIENTS requests at once and its rate is all completion tokens over the round's wall time. Rounds
alternate plain / constrained (--rounds each; the median is reported), so both see the same machine.
Target: constrained >= 90% of plain at 1 and at CLIENTS. Prints JSON; exits 1 below --min-share.
"""
import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx

SCHEMA = {"type": "object", "properties": {"rows": {"type": "array", "minItems": 1000, "items": {
    "type": "object", "properties": {"id": {"type": "integer", "minimum": 0},
                                    "name": {"type": "string", "maxLength": 40},
                                    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}},
    "required": ["id", "name", "tags"]}}}, "required": ["rows"]}
ASKS = ["List many users as JSON.", "Describe a big inventory as JSON.", "Write a long table of cities as JSON.",
        "Give me a list of books as JSON.", "Make up a catalogue of parts as JSON.", "List many animals as JSON.",
        "Write a list of songs as JSON.", "Describe many planets as JSON."]


async def one(client, url, i, tokens, constrained):
    body = {"messages": [{"role": "user", "content": ASKS[i % len(ASKS)]}], "max_tokens": tokens,
            "temperature": 0, "logit_bias": {"0": -100, "1": -100, "2": -100}}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "rows", "schema": SCHEMA}}
    r = await client.post(url + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"]


async def round_(url, clients, tokens, constrained):
    async with httpx.AsyncClient() as c:
        t0 = time.time()
        n = await asyncio.gather(*(one(c, url, i, tokens, constrained) for i in range(clients)))
        return sum(n) / (time.time() - t0), sum(n)


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-share", type=float, default=0.9)
    a = ap.parse_args()
    url = a.base_url.rstrip("/")
    out, ok = {}, True
    await round_(url, 1, 8, True)  # warm: the token table is built on the first constrained request
    for clients in (1, a.clients):
        rates = {False: [], True: []}
        for _ in range(a.rounds):
            for constrained in (False, True):
                rate, n = await round_(url, clients, a.tokens, constrained)
                assert n == clients * a.tokens, f"{n} tokens, expected {clients * a.tokens}"
                rates[constrained].append(rate)
        plain, cons = statistics.median(rates[False]), statistics.median(rates[True])
        out[f"clients_{clients}"] = {"plain_tok_s": plain, "constrained_tok_s": cons, "share": cons / plain,
                                     "rounds": {"plain": rates[False], "constrained": rates[True]}}
        ok &= cons / plain >= a.min_share
    print(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
