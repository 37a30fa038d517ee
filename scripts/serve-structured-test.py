#!/usr/bin/env python3
"""toy serve's structured outputs and tool calls against the official `openai` client (issue 14).

Needs a live server (`--base-url`; scripts/serve-openai-test.sh starts one). Checks:
- 20 varied JSON schemas (nested objects, arrays, enums, required and optional fields, numbers with
  bounds, strings with patterns and lengths) through `response_format`: every reply `json.loads` and
  validates against its schema (`jsonschema`), non-streamed (sampled) and streamed (greedy);
- `tool_choice` "required" and the named form give a valid call of an allowed tool every time (20
  tries each at temperature 0.8; arguments validate against the tool's parameters), "none" never calls;
- streamed tool calls reassemble to the non-streamed result at temperature 0;
- the SDK's `chat.completions.parse` with a pydantic model;
- a schema that does not compile is a 400 (BadRequestError).
Prints `serve-structured: N passed, M failed`; exits 1 on any failure.
"""
import argparse
import json
import sys
import time
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                      "population": {"type": "integer", "minimum": 0}},
     "required": ["city", "population"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "object", "properties": {"fruits": {"type": "array", "items": {"type": "string"},
                                                 "minItems": 1, "maxItems": 5}},
     "required": ["fruits"]},
    {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                                                  "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}},
                 "required": ["id", "email"]},
        "active": {"type": "boolean"}}, "required": ["user", "active"]},
    {"type": "object", "properties": {"temperature": {"type": "number", "minimum": -50, "maximum": 60},
                                      "unit": {"enum": ["C", "F"]}},
     "required": ["temperature", "unit"]},
    {"type": "object", "properties": {"title": {"type": "string", "minLength": 3, "maxLength": 60},
                                      "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
                                      "rating": {"type": "number", "minimum": 0, "maximum": 10}},
     "required": ["title", "year"]},
    {"type": "object", "properties": {"steps": {"type": "array", "maxItems": 4, "items": {
        "type": "object", "properties": {"n": {"type": "integer"}, "text": {"type": "string", "maxLength": 80}},
        "required": ["n", "text"]}}}, "required": ["steps"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
     "required": ["code"]},
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no", "maybe"]},
                                      "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["answer", "confidence"]},
    {"type": "object", "properties": {"name": {"type": "string"}, "nickname": {"type": "string"},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
     "required": ["name"]},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"],
        "additionalProperties": False}}, "required": ["point"], "additionalProperties": False},
    {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 3, "items": {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3}}},
     "required": ["matrix"]},
    {"type": "object", "properties": {"status": {"const": "ok"}, "count": {"type": "integer", "exclusiveMinimum": 0}},
     "required": ["status", "count"]},
    {"type": "object", "properties": {"date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
                                      "event": {"type": "string", "maxLength": 50}},
     "required": ["date", "event"]},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 20}]}},
     "required": ["value"]},
    {"type": "object", "properties": {"person": {"type": "object", "properties": {
        "first": {"type": "string", "maxLength": 30}, "last": {"type": "string", "maxLength": 30},
        "address": {"type": "object", "properties": {"street": {"type": "string", "maxLength": 50},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["zip"]}}, "required": ["first", "last", "address"]}}, "required": ["person"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 40}},
     "required": ["ok", "note"]},
    {"type": "object", "properties": {"scores": {"type": "array", "minItems": 2, "maxItems": 4,
                                                 "items": {"type": "number", "minimum": 0, "maximum": 100}}},
     "required": ["scores"]},
    {"type": "object", "properties": {"language": {"enum": ["python", "rust", "go"]},
                                      "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+$"},
                                      "features": {"type": "array", "items": {"type": "string", "maxLength": 30},
                                                   "maxItems": 3}},
     "required": ["language", "version"]},
]

ASKS = ["Describe a person.", "Name a big city.", "Pick a colour.", "List some fruits.", "Make up a user account.",
        "What is the weather like?", "Recommend a film.", "How do I make tea?", "Invent a product code.",
        "Will it rain tomorrow?", "Describe a friend.", "Give me a point on a plane.", "Write a small matrix.",
        "Report a status.", "Name a historic event.", "Give me a value.", "Describe someone's address.",
        "Is everything fine?", "List some test scores.", "Pick a programming language."]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                   "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 40}},
                   "required": ["timezone"]}}}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


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
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="none")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url.rstrip("/") + "/v1", api_key=args.api_key, max_retries=0,
                           timeout=300)
    model = client.models.list().data[0].id
    checks = Checks()

    def fmt(i):
        return {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": SCHEMAS[i], "strict": True}}

    def twenty_schemas_validate_non_streamed():
        for i, schema in enumerate(SCHEMAS):
            r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": ASKS[i]}],
                                               response_format=fmt(i), temperature=0.7, seed=i, max_tokens=400)
            c = r.choices[0]
            assert c.finish_reason == "stop", f"schema {i}: finish {c.finish_reason}: {c.message.content!r}"
            jsonschema.validate(json.loads(c.message.content), schema)

    def twenty_schemas_validate_streamed():
        for i, schema in enumerate(SCHEMAS):
            text, finish = "", None
            for ch in client.chat.completions.create(model=model, messages=[{"role": "user", "content": ASKS[i]}],
                                                     response_format=fmt(i), temperature=0, max_tokens=400,
                                                     stream=True):
                if ch.choices:
                    text += ch.choices[0].delta.content or ""
                    finish = ch.choices[0].finish_reason or finish
            assert finish == "stop", f"schema {i}: finish {finish}: {text!r}"
            jsonschema.validate(json.loads(text), schema)

    def call_checked(choice, temperature, allowed):
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What time is it in Tokyo, and the weather in Paris?"}],
                                           tools=TOOLS, tool_choice=choice, temperature=temperature, max_tokens=200)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", f"{choice}: finish {c.finish_reason}: {c.message}"
        assert c.message.tool_calls, f"{choice}: no calls: {c.message}"
        for call in c.message.tool_calls:
            assert call.type == "function" and call.id, call
            assert call.function.name in allowed, f"{choice}: called {call.function.name}"
            jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])
        return c.message.tool_calls

    def tool_choice_required_always_calls_a_tool():
        for _ in range(20):
            call_checked("required", 0.8, {"get_weather", "get_time"})

    def tool_choice_named_always_calls_that_tool():
        for _ in range(20):
            call_checked({"type": "function", "function": {"name": "get_time"}}, 0.8, {"get_time"})

    def tool_choice_none_never_calls():
        for _ in range(5):
            r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                                               tools=TOOLS, tool_choice="none", temperature=0.8, max_tokens=40)
            c = r.choices[0]
            assert not c.message.tool_calls and c.finish_reason != "tool_calls", c
            assert isinstance(c.message.content, str)

    def streamed_tool_calls_reassemble_to_the_non_streamed_result():
        ask = [{"role": "user", "content": "What is the weather in Rome?"}]
        for choice in ("required", "auto"):
            r = client.chat.completions.create(model=model, messages=ask, tools=TOOLS, tool_choice=choice,
                                               temperature=0, max_tokens=200)
            want = [(t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls or []]
            calls, finish, content = {}, None, ""
            for ch in client.chat.completions.create(model=model, messages=ask, tools=TOOLS, tool_choice=choice,
                                                     temperature=0, max_tokens=200, stream=True):
                if not ch.choices:
                    continue
                d = ch.choices[0].delta
                content += d.content or ""
                for t in d.tool_calls or []:
                    e = calls.setdefault(t.index, {"name": "", "arguments": "", "id": None})
                    e["id"] = e["id"] or t.id
                    e["name"] += (t.function.name or "") if t.function else ""
                    e["arguments"] += (t.function.arguments or "") if t.function else ""
                finish = ch.choices[0].finish_reason or finish
            got = [(calls[k]["name"], calls[k]["arguments"]) for k in sorted(calls)]
            assert got == want, f"{choice}: streamed {got} vs {want}"
            assert all(calls[k]["id"] for k in calls)
            assert finish == r.choices[0].finish_reason, (finish, r.choices[0].finish_reason)
            if not want:
                assert content == r.choices[0].message.content

    def tool_results_in_the_history_are_accepted():
        msgs = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}]
        r = client.chat.completions.create(model=model, messages=msgs, tools=TOOLS, temperature=0, max_tokens=60)
        c = r.choices[0]
        assert c.finish_reason in ("stop", "tool_calls", "length"), c
        assert c.message.content or c.message.tool_calls

    class Film(pydantic.BaseModel):
        title: str = pydantic.Field(max_length=60)
        year: int = pydantic.Field(ge=1900, le=2030)
        genre: Literal["drama", "comedy", "action", "horror"]
        actors: List[str] = pydantic.Field(max_length=3)
        sequel: Optional[str] = None

    def sdk_parse_with_a_pydantic_model():
        parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
        r = parse(model=model, messages=[{"role": "user", "content": "Recommend a film."}],
                  response_format=Film, temperature=0, max_tokens=300)
        film = r.choices[0].message.parsed
        assert isinstance(film, Film), f"parsed {film!r}"
        assert 1900 <= film.year <= 2030

    def a_schema_that_does_not_compile_is_a_bad_request():
        bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
            "a": {"type": "no-such-type"}}}}}
        try:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                           response_format=bad, max_tokens=4)
        except openai.BadRequestError as e:
            assert e.status_code == 400
            assert "response_format" in str(e), e
        else:
            raise AssertionError("accepted a schema that does not compile")
        assert client.models.list().data

    for check in (twenty_schemas_validate_non_streamed, twenty_schemas_validate_streamed,
                  tool_choice_required_always_calls_a_tool, tool_choice_named_always_calls_that_tool,
                  tool_choice_none_never_calls, streamed_tool_calls_reassemble_to_the_non_streamed_result,
                  tool_results_in_the_history_are_accepted, sdk_parse_with_a_pydantic_model,
                  a_schema_that_does_not_compile_is_a_bad_request):
        checks.run(check)
    print(f"serve-structured: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
