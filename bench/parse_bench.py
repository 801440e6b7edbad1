"""Microbenchmark: `parse_chat_request` (Rust) on a typical 2 KB chat request, next to a
pure-Python baseline doing the same job with stdlib json (duplicate-key detection, the
top-level allow-list, the common value checks, message shapes, and the canonical body
with the model replaced). The baseline checks fewer rules than the Rust parser, so the
comparison flatters Python."""

from __future__ import annotations

import json
import math
import statistics
import timeit

from edgegw._core import parse_chat_request

TYPICAL = {
    "model": "openai/gpt-4o-mini",
    "messages": [
        {
            "role": "system",
            "content": "You are a careful assistant for an edge deployment. Answer briefly, cite the "
            "tool results you used, and never invent numbers. If a question needs live data, call a tool.",
        },
        {
            "role": "user",
            "content": "What is the weather in Lisbon today, and should I take an umbrella?",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"temp_c":17,"rain_probability":0.64,"wind_kph":21}',
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And tomorrow morning, around 8am? Keep it short please."}
            ],
        },
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current and forecast weather for a city, by hour.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name, e.g. Lisbon"},
                        "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                        "units": {"type": "string", "enum": ["metric", "imperial"]},
                    },
                    "required": ["city"],
                },
            },
        }
    ],
    "tool_choice": "auto",
    "temperature": 0.3,
    "top_p": 0.95,
    "max_completion_tokens": 512,
    "stream": True,
    "stream_options": {"include_usage": True},
    "user": "user-1234",
    "seed": 42,
}

ALLOWED = {
    "model",
    "messages",
    "max_completion_tokens",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "frequency_penalty",
    "presence_penalty",
    "top_k",
    "repetition_penalty",
    "min_tokens",
    "chat_template_kwargs",
    "n",
    "best_of",
    "lora_adapter",
    "user",
    "safety_identifier",
    "seed",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "prompt_cache_key",
    "routing_key",
    "response_format",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "reasoning_format",
}
ROLES = {"system", "user", "assistant", "tool", "developer"}


def _no_dupes(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("duplicate key")
    return d


def _const(_name):
    raise ValueError("NaN/Infinity")


def python_parse(body: bytes) -> bytes:
    """The baseline: stdlib json plus the main rules, in plain Python."""
    doc = json.loads(body, object_pairs_hook=_no_dupes, parse_constant=_const)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("model")
    for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
        v = doc.get(name)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        ):
            raise ValueError(name)
    for name in ("max_completion_tokens", "max_tokens", "seed", "n"):
        v = doc.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(name)
    if "stream" in doc and not isinstance(doc["stream"], bool):
        raise ValueError("stream")
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ValueError("role")
        content = m.get("content")
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
                    raise ValueError("part")
        elif content is not None and not isinstance(content, str):
            raise ValueError("content")
    for tool in doc.get("tools") or ():
        if tool.get("type") != "function" or not tool.get("function", {}).get("name"):
            raise ValueError("tools")
    for key in sorted(doc):
        if key not in ALLOWED:
            raise ValueError(key)
    doc["model"] = model.partition("/")[2]
    return json.dumps(doc, separators=(",", ":")).encode()


def rust_parse(body: bytes) -> bytes:
    req = parse_chat_request(body)
    return req.upstream_body(req.model.partition("/")[2])


def measure(fn, body: bytes, number: int = 20000, repeat: int = 7) -> float:
    """Median µs per call over `repeat` runs."""
    times = timeit.repeat(lambda: fn(body), number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def run() -> dict[str, float]:
    body = json.dumps(TYPICAL, indent=2).encode()
    assert json.loads(rust_parse(body)) == json.loads(python_parse(body))
    return {
        "body_bytes": len(body),
        "rust_parse_only_us": measure(parse_chat_request, body),
        "rust_parse_and_body_us": measure(rust_parse, body),
        "python_baseline_us": measure(python_parse, body),
    }
