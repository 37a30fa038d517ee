#!/usr/bin/env python3
"""toy serve against the official `openai` Python client (issue 5): the OpenAI API reference
(https://platform.openai.com/docs/api-reference) as the client library reads it.

Needs a live server: `--base-url http://127.0.0.1:PORT` (scripts/serve-openai-test.sh starts one
on a free port). Checks chat (plain, greedy determinism, seed, stop, max_tokens, logprobs, n),
streaming chat with stream_options.include_usage (one id and created on every chunk, a final
finish_reason, usage on one extra chunk with empty choices, the same text as non-streamed),
completions with legacy logprobs and echo, embeddings (float and base64), models list/retrieve,
and errors (a model id not served -> NotFoundError 404 model_not_found on /v1/models/{id}, while a
request naming another model is answered by the one served; bad input -> BadRequestError 400).
Prints `serve-openai: N passed, M failed`; exits 1 on any failure.
"""
import argparse
import base64
import concurrent.futures
import math
import struct
import sys
import time

import httpx
import openai

CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, fn):
        name = fn.__name__.replace("_", " ")
        t0 = time.time()
        try:
            fn()
            self.passed += 1
            print(f"ok   {name} ({time.time() - t0:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="the server, e.g. http://127.0.0.1:4567")
    ap.add_argument("--api-key", default="none")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url.rstrip("/") + "/v1", api_key=args.api_key, max_retries=0,
                           timeout=300)
    print(f"openai {openai.__version__} against {args.base_url}")
    model = client.models.list().data[0].id
    checks = Checks()
    greedy = {}  # text of the greedy chat answer, shared by the checks that compare against it

    def models_list_and_retrieve():
        models = client.models.list().data
        assert models, "no models"
        ids = [m.id for m in models]
        assert len(set(ids)) == len(ids), f"duplicate ids {ids}"
        for m in models:
            assert m.object == "model" and m.owned_by == "toy" and isinstance(m.created, int), m
            got = client.models.retrieve(m.id)
            assert got.id == m.id and got.object == "model", got

    def chat():
        r = client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0)
        assert r.object == "chat.completion" and r.id and r.model, r
        assert len(r.choices) == 1 and r.choices[0].index == 0, r.choices
        c = r.choices[0]
        assert c.message.role == "assistant", c.message
        assert isinstance(c.message.content, str) and c.message.content.strip(), f"empty answer: {c.message}"
        assert c.finish_reason in ("stop", "length"), c.finish_reason
        u = r.usage
        assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 24, u
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
        greedy["text"], greedy["usage"], greedy["finish"] = c.message.content, u, c.finish_reason
        print(f"     answer: {c.message.content!r}")

    def chat_greedy_is_deterministic_and_seed_repeats():
        again = client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0)
        assert again.choices[0].message.content == greedy["text"], (again.choices[0].message.content, greedy["text"])
        sampled = [client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=1.0,
                                                  seed=1234).choices[0].message.content for _ in range(2)]
        assert sampled[0] == sampled[1], f"same seed, different text: {sampled}"

    def chat_streaming_with_include_usage():
        chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
        assert len(chunks) >= 3, f"{len(chunks)} chunks"
        assert len({c.id for c in chunks}) == 1, f"ids differ: {sorted({c.id for c in chunks})}"
        assert len({c.created for c in chunks}) == 1, f"created differs: {sorted({c.created for c in chunks})}"
        assert all(c.object == "chat.completion.chunk" for c in chunks), {c.object for c in chunks}
        *body, last = chunks
        assert last.choices == [] and last.usage is not None, f"last chunk is not the usage chunk: {last}"
        assert all(c.usage is None for c in body), "usage on a chunk before the last"
        assert all(len(c.choices) == 1 for c in body), [len(c.choices) for c in body]
        finishes = [c.choices[0].finish_reason for c in body]
        assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1]), finishes
        assert body[0].choices[0].delta.role == "assistant", f"first delta has no role: {body[0].choices[0].delta}"
        text = "".join(c.choices[0].delta.content or "" for c in body)
        assert text == greedy["text"], f"streamed {text!r} != non-streamed {greedy['text']!r}"
        assert finishes[-1] == greedy["finish"], (finishes[-1], greedy["finish"])
        u = last.usage
        assert (u.prompt_tokens, u.completion_tokens) == (greedy["usage"].prompt_tokens,
                                                          greedy["usage"].completion_tokens), (u, greedy["usage"])

    def chat_streaming_without_include_usage_sends_no_usage():
        chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=8, temperature=0,
                                                     stream=True))
        assert chunks and all(c.usage is None for c in chunks), [c.usage for c in chunks]
        assert all(len(c.choices) == 1 for c in chunks), "a chunk without choices although usage was not asked"
        assert chunks[-1].choices[0].finish_reason in ("stop", "length"), chunks[-1]

    def chat_max_tokens_ends_with_length():
        for kw in ({"max_tokens": 3}, {"max_completion_tokens": 3}):
            r = client.chat.completions.create(model=model, messages=CHAT, temperature=0, **kw)
            assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", (kw, r)

    def chat_stop_string_is_not_leaked():
        words = greedy["text"].split()
        assert len(words) >= 3, f"greedy answer too short to cut: {greedy['text']!r}"
        stop = " " + words[2]
        cut = greedy["text"].index(stop)
        r = client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0, stop=[stop, "zzqx"])
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        assert c.message.content == greedy["text"][:cut], f"{c.message.content!r} != {greedy['text'][:cut]!r}"

    def chat_streaming_holds_back_the_stop_string():
        words = greedy["text"].split()
        stop = " " + words[3][:2]  # a stop string likely to span tokens, and a prefix of a word
        cut = greedy["text"].find(stop)
        assert cut > 0, (stop, greedy["text"])
        chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0,
                                                     stop=stop, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == greedy["text"][:cut], f"streamed {text!r}, expected {greedy['text'][:cut]!r} (stop {stop!r})"
        assert chunks[-1].choices[0].finish_reason == "stop", chunks[-1]

    def different_seeds_sample_differently():
        texts = {client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=1.0,
                                                seed=s).choices[0].message.content for s in (1, 2, 3)}
        assert len(texts) >= 2, f"three seeds gave one text: {texts}"

    def streamed_text_equals_non_streamed_with_non_ascii():
        for prompt in ("Le café près de l'école s'appelle", "東京は日本の首都です。東京には", "Emoji weather report: ☀️"):
            whole = client.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0)
            parts = list(client.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0,
                                                   stream=True))
            text = "".join(c.choices[0].text for c in parts if c.choices)
            assert text == whole.choices[0].text, f"{prompt!r}: streamed {text!r} != {whole.choices[0].text!r}"
            assert "\ufffd" not in text, f"{prompt!r}: a broken UTF-8 sequence in {text!r}"

    def chat_streaming_n_choices():
        chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=6, temperature=0, n=2,
                                                     stream=True))
        texts, finishes = {0: "", 1: ""}, {}
        for c in chunks:
            for ch in c.choices:
                texts[ch.index] += ch.delta.content or ""
                if ch.finish_reason:
                    finishes[ch.index] = ch.finish_reason
        assert sorted(finishes) == [0, 1], f"finish_reason per choice: {finishes}"
        assert texts[0] == texts[1] == client.chat.completions.create(
            model=model, messages=CHAT, max_tokens=6, temperature=0).choices[0].message.content, texts

    def seeded_sampling_is_the_same_alone_and_in_a_batch():
        kw = {"model": model, "max_tokens": 24, "temperature": 0.9, "top_p": 0.95}
        alone = client.chat.completions.create(messages=CHAT, seed=99, **kw).choices[0].message.content
        others = [[{"role": "user", "content": f"Tell me about the number {i}."}] for i in range(5)]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futs = [pool.submit(client.chat.completions.create, messages=m, seed=i, **kw) for i, m in enumerate(others)]
            batched = pool.submit(client.chat.completions.create, messages=CHAT, seed=99, **kw)
            texts = [f.result().choices[0].message.content for f in futs]
        assert all(texts), texts
        assert batched.result().choices[0].message.content == alone, (batched.result().choices[0].message.content, alone)

    def multi_turn_chat_reuses_the_cached_prefix():
        # the server reuses a prefix only where a cold prefill would have had the same 64-token
        # chunks (so a warm answer has the bits of a cold one): the first turn must be longer
        # than a chunk
        system = {"role": "system", "content": "You are a patient poet. " * 20 +
                  "Write short poems about nature, four lines each."}
        turn1 = [system] + CHAT
        first = client.chat.completions.create(model=model, messages=turn1, max_tokens=16, temperature=0)
        turn2 = turn1 + [{"role": "assistant", "content": first.choices[0].message.content},
                         {"role": "user", "content": "And one about the mountains."}]
        second = client.chat.completions.create(model=model, messages=turn2, max_tokens=8, temperature=0)
        details = second.usage.prompt_tokens_details
        cached = details.cached_tokens if details else None
        p1, p2 = first.usage.prompt_tokens, second.usage.prompt_tokens
        assert p1 > 64 and cached and max(64, p1 - 64) <= cached < p2, \
            f"cached_tokens {cached}, first prompt {p1}, second {p2}"

    def chat_logprobs():
        r = client.chat.completions.create(model=model, messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
                                           top_logprobs=3)
        content = r.choices[0].logprobs.content
        assert len(content) == r.usage.completion_tokens, (len(content), r.usage)
        assert "".join(t.token for t in content) == r.choices[0].message.content, content
        for t in content:
            assert t.logprob <= 0 and len(t.top_logprobs) == 3, t
            best = max(x.logprob for x in t.top_logprobs)
            assert abs(t.logprob - best) < 1e-4, f"greedy token {t.token!r} is not the top logprob: {t}"

    def chat_n_choices():
        r = client.chat.completions.create(model=model, messages=CHAT, max_tokens=8, temperature=1.0, n=3, seed=7)
        assert sorted(c.index for c in r.choices) == [0, 1, 2], [c.index for c in r.choices]
        assert all(c.message.content for c in r.choices), r.choices
        assert 3 <= r.usage.completion_tokens <= 24, r.usage

    def completions_with_logprobs_and_echo():
        prompt = "The capital of France is"
        r = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, logprobs=3, echo=True)
        assert r.object == "text_completion", r.object
        c = r.choices[0]
        assert c.text.startswith(prompt) and len(c.text) > len(prompt), c.text
        lp = c.logprobs
        n = r.usage.prompt_tokens + r.usage.completion_tokens
        # a BOS the model puts in front counts in the usage but is not echoed (it is no text)
        bos = len(lp.tokens) == n - 1
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == len(lp.top_logprobs) == n - bos, \
            (len(lp.tokens), len(lp.token_logprobs), len(lp.text_offset), len(lp.top_logprobs), r.usage)
        assert "".join(lp.tokens) == c.text, (lp.tokens, c.text)
        if not bos:
            assert lp.token_logprobs[0] is None, f"the first prompt token has no logprob, got {lp.token_logprobs[0]}"
        assert all(x <= 0 for x in lp.token_logprobs[1 - bos:]), lp.token_logprobs
        assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0, lp.text_offset
        for tok, logp, top in list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))[r.usage.prompt_tokens - bos:]:
            assert len(top) == 3 and abs(max(top.values()) - logp) < 1e-4, f"greedy {tok!r} {logp} not the top of {top}"
        plain = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0)
        assert prompt + plain.choices[0].text == c.text, (plain.choices[0].text, c.text)

    def completions_prompt_list_and_token_ids():
        r = client.completions.create(model=model, prompt=["Once upon a time", "1, 2, 3,"], max_tokens=4, temperature=0)
        assert sorted(c.index for c in r.choices) == [0, 1], r.choices
        by_index = {c.index: c.text for c in r.choices}
        alone = client.completions.create(model=model, prompt="1, 2, 3,", max_tokens=4, temperature=0)
        assert by_index[1] == alone.choices[0].text, (by_index, alone.choices[0].text)
        # with the BOS the model puts in front of text prompts (none for SmolLM2), as llama-server's
        # /tokenize gives it with add_special: token prompts are taken as they are
        tok = httpx.post(args.base_url.rstrip("/") + "/tokenize", json={"content": "1, 2, 3,", "add_special": True},
                         headers={"Authorization": f"Bearer {args.api_key}"}, timeout=60)
        tok.raise_for_status()
        ids = tok.json()["tokens"]
        assert ids and all(isinstance(i, int) for i in ids), ids
        by_ids = client.completions.create(model=model, prompt=ids, max_tokens=4, temperature=0)
        assert by_ids.choices[0].text == alone.choices[0].text, (by_ids.choices[0].text, alone.choices[0].text)
        assert by_ids.usage.prompt_tokens == len(ids), (by_ids.usage, ids)

    def embeddings_float_and_base64():
        inputs = ["The sea is blue.", "The ocean is blue.", "Tax forms are due in April."]
        r = client.embeddings.create(model=model, input=inputs, encoding_format="float")
        assert [d.index for d in r.data] == [0, 1, 2], [d.index for d in r.data]
        vecs = [d.embedding for d in r.data]
        dim = len(vecs[0])
        assert dim > 0 and all(len(v) == dim for v in vecs), [len(v) for v in vecs]
        for v in vecs:
            assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3, "not L2-normalised"
        def cos(a, b):
            return sum(x * y for x, y in zip(a, b))
        assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2]), "sea/ocean should be closer than sea/tax"
        assert r.usage.prompt_tokens > 0, r.usage
        b = client.embeddings.create(model=model, input=inputs[0], encoding_format="base64")
        raw = base64.b64decode(b.data[0].embedding)
        assert len(raw) == 4 * dim, (len(raw), dim)
        from_b64 = struct.unpack(f"<{dim}f", raw)
        assert max(abs(x - y) for x, y in zip(from_b64, vecs[0])) < 1e-6, "base64 and float embeddings differ"
        default = client.embeddings.create(model=model, input=inputs[0])  # the client asks base64 and decodes
        assert max(abs(x - y) for x, y in zip(default.data[0].embedding, vecs[0])) < 1e-6

    def another_model_name_is_answered_and_an_unknown_id_is_not_found():
        # one model served: a hard-coded name is answered by it, under its own name
        r = client.chat.completions.create(model="gpt-3.5-turbo", messages=CHAT, max_tokens=4)
        assert r.model == model, (r.model, model)
        try:
            client.models.retrieve("no-such-model")
        except openai.NotFoundError as e:
            assert e.status_code == 404 and e.code == "model_not_found", (e.status_code, e.code, e.body)
        else:
            raise AssertionError("no error for an unknown model id")

    def bad_input_is_a_bad_request():
        cases = [
            ("empty messages", lambda: client.chat.completions.create(model=model, messages=[])),
            ("unknown role", lambda: client.chat.completions.create(
                model=model, messages=[{"role": "wizard", "content": "hi"}])),
            ("a tool_choice naming no tool", lambda: client.chat.completions.create(
                model=model, messages=CHAT, max_tokens=4,
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                tool_choice={"type": "function", "function": {"name": "g"}})),
            ("negative max_tokens", lambda: client.chat.completions.create(model=model, messages=CHAT, max_tokens=-1)),
        ]
        for what, call in cases:
            try:
                call()
            except openai.BadRequestError as e:
                assert e.status_code == 400 and e.message, (what, e)
                if what == "a tool_choice naming no tool":
                    assert "tool_choice" in str(e.message), f"the 400 does not name the field: {e.message}"
            else:
                raise AssertionError(f"{what}: no 400")
        # and the server still answers
        assert client.models.list().data

    for check in (models_list_and_retrieve, chat, chat_greedy_is_deterministic_and_seed_repeats,
                  chat_streaming_with_include_usage, chat_streaming_without_include_usage_sends_no_usage,
                  chat_max_tokens_ends_with_length, chat_stop_string_is_not_leaked,
                  chat_streaming_holds_back_the_stop_string, different_seeds_sample_differently,
                  streamed_text_equals_non_streamed_with_non_ascii, chat_streaming_n_choices,
                  seeded_sampling_is_the_same_alone_and_in_a_batch, multi_turn_chat_reuses_the_cached_prefix, chat_logprobs,
                  chat_n_choices,
                  completions_with_logprobs_and_echo, completions_prompt_list_and_token_ids,
                  embeddings_float_and_base64, another_model_name_is_answered_and_an_unknown_id_is_not_found,
                  bad_input_is_a_bad_request):
        checks.run(check)
    print(f"serve-openai: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
