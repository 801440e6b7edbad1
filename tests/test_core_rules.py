"""Table-driven tests for the request parser in ``edgegw._core``.

Each table row is one body (a small valid base request with overrides, or raw bytes for the
strict-JSON rules) and either "accepted" or the rejection it must produce.  A rejection is
checked by status, code and param, never by message text.  Every accepted body is also checked
for ``.model``, ``.stream``, ``.fields`` and the ``upstream_body`` round trip.  A third kind
of row is accepted by OpenAI's schema and refused by the SIE contract: the parser accepts it
and ``.local_rejection`` carries the refusal a local target answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from edgegw._core import RequestError, parse_chat_request, parse_completions_request

INV = "invalid_request"
UNS = "unsupported_field"
ERROR_TYPE = "invalid_request_error"
U32_MAX = 2**32 - 1
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

DROP = object()  # an override value that removes the key from the base body

USER = {"role": "user", "content": "hi"}
CHAT_BASE: dict[str, Any] = {"model": "m", "messages": [USER]}
COMPLETIONS_BASE: dict[str, Any] = {"model": "m", "prompt": "Say hi"}

# Routing hints: accepted with any value, but a non-string value is ignored (not a field, not
# forwarded).
STRING_ONLY_HINTS = ("prompt_cache_key", "routing_key")

IMAGE = "data:image/png;base64,iVBORw0KGgo="
TOOL = {"type": "function", "function": {"name": "get_weather"}}
FULL_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look something up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "strict": True,
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
NAMED_CHOICE = {"type": "function", "function": {"name": "get_weather"}}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "sql", "description": "Run SQL"}}
# OpenAI fields outside the SIE contract, one valid value each: accepted, and in
# local_unsupported (a remote provider gets them as sent).
OPENAI_ONLY: dict[str, Any] = {
    "store": False,
    "metadata": {"a": "b"},
    "service_tier": "auto",
    "modalities": ["text"],
    "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "x"},
    "web_search_options": {"search_context_size": "low"},
    "verbosity": "low",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"ttl": "1h"},
    "moderation": {"model": "omni-moderation-latest"},
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "reasoning_effort": "low",
    "reasoning_format": "parsed",
}


# ---------------------------------------------------------------------------------------------
# helpers


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def with_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    body = dict(base)
    for key, value in overrides.items():
        if value is DROP:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def ok(case_id: str, **overrides: Any) -> Any:
    return pytest.param(overrides, id=case_id)


def bad(case_id: str, code: str, param: str | None, **overrides: Any) -> Any:
    return pytest.param(overrides, code, param, id=case_id)


def value_cases(rules: dict[str, tuple[list[Any], list[Any]]]) -> tuple[list[Any], list[Any]]:
    """Expand {field: (accepted values, rejected values)} into ok/bad rows (invalid_request)."""
    accepted, rejected = [], []
    for field, (good, wrong) in rules.items():
        accepted += [ok(f"{field}={short(v)}", **{field: v}) for v in good]
        rejected += [bad(f"{field}={short(v)}", INV, field, **{field: v}) for v in wrong]
    return accepted, rejected


def ignored(key: str, value: Any) -> bool:
    """A member that is accepted but neither a field nor forwarded upstream."""
    return key in STRING_ONLY_HINTS and value is not None and not isinstance(value, str)


def forwarded(body: dict[str, Any], model: str, omit: tuple[str, ...] = ()) -> dict[str, Any]:
    """What upstream_body(model, omit) must decode to: the members as sent (nulls too)."""
    out = {k: v for k, v in body.items() if k not in omit and not ignored(k, v)}
    return {**out, "model": model}


def expected_fields(body: dict[str, Any]) -> tuple[str, ...]:
    # An empty logit_bias counts as absent (SIE: "an empty map is treated as absent").
    return tuple(
        sorted(
            k
            for k, v in body.items()
            if v is not None and not ignored(k, v) and not (k == "logit_bias" and v == {})
        )
    )


def check_accepted(parse: Callable[[bytes], Any], body: dict[str, Any], raw: bytes | None = None):
    req = parse(encode(body) if raw is None else raw)
    assert req.model == body["model"]
    assert req.stream is bool(body.get("stream"))
    assert req.fields == expected_fields(body)
    upstream = req.upstream_body("gpt-x")
    assert isinstance(upstream, bytes)
    assert json.loads(upstream) == forwarded(body, "gpt-x")
    return req


def check_rejected(parse: Callable[[bytes], Any], raw: bytes, code: str, param: str | None):
    with pytest.raises(RequestError) as info:
        parse(raw)
    err = info.value
    assert (err.status, err.type, err.code, err.param) == (400, ERROR_TYPE, code, param)
    assert isinstance(err, ValueError)
    assert isinstance(err.args[0], str)


def assert_compact(data: bytes) -> None:
    """No JSON whitespace outside string literals."""
    in_string = escaped = False
    for index, byte in enumerate(data):
        char = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            assert char not in " \t\r\n", f"whitespace at byte {index}: {data!r}"


# ---------------------------------------------------------------------------------------------
# shared value rules (chat and completions apply the same rule to these fields)

COMMON_VALUE_RULES: dict[str, tuple[list[Any], list[Any]]] = {
    "temperature": ([0, 0.0, 0.7, 2, 100.5], [-0.1, -1, "0.7", True, [0.5], {}]),
    "top_p": ([1, 1.0, 0.5, 1e-9], [0, 0.0, -0.5, 1.0000001, 2, "1", True]),
    "stop": (
        ["END", "", [], ["a"], ["a", "b", "c", "d"]],
        [5, True, ["a", 1], [None], {"a": "b"}, [["a"]]],
    ),
    "frequency_penalty": ([-2, -2.0, 0, 1.5, 2, 2.0], [-2.0001, 2.0001, 3, -3, "1", True]),
    "presence_penalty": ([-2, -2.0, 0, -0.5, 2, 2.0], [-2.0001, 2.0001, 3, -3, "1", True]),
    "seed": ([0, 42, -1, I64_MAX, I64_MIN], [1.5, I64_MAX + 1, I64_MIN - 1, 2**64, "1", True]),
    "stream": ([True, False], ["true", 1, 0, {}]),
}

CHAT_VALUE_RULES: dict[str, tuple[list[Any], list[Any]]] = {
    **COMMON_VALUE_RULES,
    "max_completion_tokens": ([1, 256, U32_MAX], [0, -1, U32_MAX + 1, 1.5, "5", True]),
    "max_tokens": ([1, 256, U32_MAX], [0, -1, U32_MAX + 1, 1.5, "5", True]),
    "top_k": ([1, 40, U32_MAX], [0, -1, 1.5, U32_MAX + 1, "40", True]),
    "repetition_penalty": ([0.01, 1, 1.0, 2, 2.0], [0, 0.0, -1, 2.0001, "1", True]),
    "min_tokens": ([0, 1, 100], [-1, 1.5, "1", True]),
    "chat_template_kwargs": (
        [{}, {"enable_thinking": False}, {"a": {"b": [1, None]}}],
        [[], "x", 1, True],
    ),
    "n": ([1, 2, 128], [0, -1, 129, 1.5, "2", True]),
    "best_of": ([1, 5, 128], [0, -1, 129, 1.5, "2", True]),
    "lora_adapter": (["my-adapter"], ["", 5, [], True]),
    "user": (["user-1", ""], [5, {}, True]),
    "safety_identifier": (["sid", ""], [5, []]),
    "store": ([True, False], ["yes", 1]),
    "metadata": (
        [{}, {"a": "b"}, {f"k{i}": "v" for i in range(16)}],
        [[], "x", {"a": 1}, {f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"a": "v" * 513}],
    ),
    "service_tier": (["auto", "default", "flex", "scale", "priority", "fast"], ["cheap", 1]),
    "modalities": ([[], ["text"], ["text", "audio"]], [["video"], "text", [1]]),
    "audio": ([{"voice": "alloy", "format": "wav"}], ["alloy", []]),
    "prediction": ([{"type": "content", "content": "x"}], ["x", [1]]),
    "web_search_options": ([{}, {"search_context_size": "low"}], ["low", True]),
    "verbosity": (["low", "medium", "high"], ["loud", 1]),
    "prompt_cache_retention": (["in_memory", "24h"], ["1h", 24]),
    "prompt_cache_options": ([{"ttl": "1h"}], ["1h"]),
    "moderation": ([{"model": "omni-moderation-latest"}], ["x"]),
    "functions": (
        [[{"name": "f"}], [{"name": "f", "parameters": {}}]],
        [[], [{}], "f", [{"name": ""}]],
    ),
    "function_call": (["none", "auto", {"name": "f"}], ["required", 1, {}]),
    "logprobs": ([True, False], [1, 0, "true"]),
    "parallel_tool_calls": ([True, False], ["false", 0]),
    "reasoning_effort": (
        ["none", "minimal", "low", "medium", "high", "xhigh", "max"],
        ["", "HIGH", 5],
    ),
    "reasoning_format": (["raw", "parsed", "hidden"], ["summary", "", 1]),
    "prompt_cache_key": (["key-1", "", 5, {"a": 1}, [1], True], []),
    "routing_key": (["key-1", "", 5, {"a": 1}, [1], True], []),
    "response_format": ([], ["json_object", [], 5, True]),
    "stream_options": ([], ["x", [], True]),
    "logit_bias": ([], [[], "x", 5]),
    "tools": ([], [{}, "x", 5]),
}

CHAT_OPTIONAL_FIELDS = [
    "max_completion_tokens", "max_tokens", "temperature", "top_p", "stop", "frequency_penalty",
    "presence_penalty", "top_k", "repetition_penalty", "min_tokens", "chat_template_kwargs", "n",
    "best_of", "lora_adapter", "user", "safety_identifier", "seed", "logprobs", "top_logprobs",
    "logit_bias", "prompt_cache_key", "routing_key", "response_format", "stream",
    "stream_options", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
    "reasoning_format", "store", "metadata", "service_tier", "modalities", "audio", "prediction",
    "web_search_options", "verbosity", "prompt_cache_retention", "prompt_cache_options",
    "moderation", "functions", "function_call",
]  # fmt: skip

_chat_value_ok, _chat_value_bad = value_cases(CHAT_VALUE_RULES)

# ---------------------------------------------------------------------------------------------
# chat: accepted bodies

CHAT_ACCEPTED = [
    ok("base"),
    ok("model-with-slash-and-profile", model="Qwen/Qwen3-8B:h100"),
    ok("model-unicode", model="модель-é"),
    *_chat_value_ok,
    # null counts as absent for every optional field
    *[ok(f"{field}=null", **{field: None}) for field in CHAT_OPTIONAL_FIELDS],
    ok("all-nulls", **{field: None for field in CHAT_OPTIONAL_FIELDS}),
    # top_logprobs
    ok("top_logprobs=0-without-logprobs", top_logprobs=0),
    ok("top_logprobs=0-logprobs-false", top_logprobs=0, logprobs=False),
    ok("top_logprobs=5-logprobs-true", top_logprobs=5, logprobs=True),
    ok("top_logprobs=20-logprobs-true", top_logprobs=20, logprobs=True),
    # n / best_of / stream
    ok("best_of=n", best_of=2, n=2),
    ok("best_of>n", best_of=3, n=2),
    ok("best_of-stream-false", best_of=2, stream=False),
    ok("best_of-null-stream-true", best_of=None, stream=True),
    ok("n>1-stream-true", n=4, stream=True),
    # logit_bias
    ok("logit_bias-empty", logit_bias={}),
    ok("logit_bias-one", logit_bias={"0": 1}),
    ok("logit_bias-bounds", logit_bias={"50256": -100, "1": 100}),
    ok("logit_bias-floats", logit_bias={"7": 0.5, "8": -0.25, "100000": 1.5}),
    ok("logit_bias-1024-keys", logit_bias={str(i): 0 for i in range(1024)}),
    # response_format
    ok("rf-text", response_format={"type": "text"}),
    ok("rf-json_object", response_format={"type": "json_object"}),
    ok("rf-json_schema", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
    ok("rf-json_schema-strict", response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {}}}),
    ok("rf-regex", response_format={"type": "regex", "regex": "[a-z]+"}),
    ok("rf-grammar", response_format={"type": "grammar", "grammar": 'root ::= "a"'}),
    ok("rf-grammar-ebnf", response_format={"type": "grammar", "grammar": 'root ::= "a"', "syntax": "ebnf"}),
    ok("rf-grammar-lark", response_format={"type": "grammar", "grammar": 'start: "a"', "syntax": "lark"}),
    # stream_options
    ok("stream_options-empty", stream_options={}),
    ok("stream_options-include_usage-true", stream_options={"include_usage": True}, stream=True),
    ok("stream_options-include_usage-false", stream_options={"include_usage": False}, stream=True),
    ok("stream_options-with-stream-false", stream_options={"include_usage": True}, stream=False),
    ok("stream_options-include_obfuscation", stream_options={"include_usage": True, "include_obfuscation": False}, stream=True),
    # tools / tool_choice
    ok("tools-one", tools=[TOOL]),
    ok("tools-full", tools=[FULL_TOOL]),
    ok("tools-two", tools=[TOOL, FULL_TOOL]),
    ok("tools-64", tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(64)]),
    ok("tool_choice-auto", tools=[TOOL], tool_choice="auto"),
    ok("tool_choice-none", tools=[TOOL], tool_choice="none"),
    ok("tool_choice-required", tools=[TOOL], tool_choice="required"),
    ok("tool_choice-named", tools=[TOOL], tool_choice=NAMED_CHOICE),
    ok("tool_choice-auto+json_object", tools=[TOOL], tool_choice="auto", response_format={"type": "json_object"}),
    ok("tool_choice-none+regex", tools=[TOOL], tool_choice="none", response_format={"type": "regex", "regex": "a"}),
    ok("tool_choice-required+text", tools=[TOOL], tool_choice="required", response_format={"type": "text"}),
    ok("tool_choice-named+text", tools=[TOOL], tool_choice=NAMED_CHOICE, response_format={"type": "text"}),
    ok("tool_choice-null-without-tools", tool_choice=None),
    ok("parallel_tool_calls-with-tools", tools=[TOOL], parallel_tool_calls=False),
    ok("tools-128", tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(128)]),
    ok("tools-custom", tools=[CUSTOM_TOOL]),
    ok("tool_choice-custom", tools=[CUSTOM_TOOL], tool_choice={"type": "custom", "custom": {"name": "sql"}}),
    ok("tool_choice-allowed_tools", tools=[TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [NAMED_CHOICE]}}),
    ok("tool_choice-required+json_object", tools=[TOOL], tool_choice="required", response_format={"type": "json_object"}),
    *[ok(f"openai-{key}", **{key: value}) for key, value in OPENAI_ONLY.items()],
]  # fmt: skip

# ---------------------------------------------------------------------------------------------
# chat: rejected bodies (top level)


CHAT_REJECTED = [
    # required fields
    bad("model-missing", INV, "model", model=DROP),
    bad("model-null", INV, "model", model=None),
    bad("model-empty", INV, "model", model=""),
    bad("model-number", INV, "model", model=5),
    bad("model-array", INV, "model", model=["m"]),
    bad("messages-missing", INV, "messages", messages=DROP),
    bad("messages-null", INV, "messages", messages=None),
    bad("messages-empty", INV, "messages", messages=[]),
    bad("messages-string", INV, "messages", messages="hi"),
    bad("messages-object", INV, "messages", messages=USER),
    *_chat_value_bad,
    # top_logprobs
    bad("top_logprobs=21", INV, "top_logprobs", top_logprobs=21, logprobs=True),
    bad("top_logprobs=-1", INV, "top_logprobs", top_logprobs=-1, logprobs=True),
    bad("top_logprobs=1.5", INV, "top_logprobs", top_logprobs=1.5, logprobs=True),
    bad("top_logprobs-string", INV, "top_logprobs", top_logprobs="5", logprobs=True),
    bad("top_logprobs>0-without-logprobs", INV, "top_logprobs", top_logprobs=5),
    bad("top_logprobs>0-logprobs-false", INV, "top_logprobs", top_logprobs=1, logprobs=False),
    bad("top_logprobs>0-logprobs-null", INV, "top_logprobs", top_logprobs=5, logprobs=None),
    # best_of
    bad("best_of<n", INV, "best_of", best_of=1, n=2),
    bad("best_of<n-large", INV, "best_of", best_of=64, n=128),
    bad("best_of-stream", UNS, "best_of", best_of=2, stream=True),
    bad("best_of=128-stream", UNS, "best_of", best_of=128, stream=True),
    bad("best_of=1-stream", UNS, "best_of", best_of=1, stream=True),
    # logit_bias
    bad("logit_bias-1025-keys", INV, "logit_bias", logit_bias={str(i): 0 for i in range(1025)}),
    bad("logit_bias-negative-key", INV, "logit_bias", logit_bias={"-1": 1}),
    bad("logit_bias-word-key", INV, "logit_bias", logit_bias={"a": 1}),
    bad("logit_bias-float-key", INV, "logit_bias", logit_bias={"1.5": 1}),
    bad("logit_bias-empty-key", INV, "logit_bias", logit_bias={"": 1}),
    bad("logit_bias-space-key", INV, "logit_bias", logit_bias={" 1": 1}),
    bad("logit_bias-suffix-key", INV, "logit_bias", logit_bias={"1a": 1}),
    bad("logit_bias-value>100", INV, "logit_bias.1", logit_bias={"1": 100.5}),
    bad("logit_bias-value<-100", INV, "logit_bias.1", logit_bias={"1": -101}),
    bad("logit_bias-value-string", INV, "logit_bias.1", logit_bias={"1": "5"}),
    bad("logit_bias-value-bool", INV, "logit_bias.1", logit_bias={"1": True}),
    bad("logit_bias-value-array", INV, "logit_bias.1", logit_bias={"1": [1]}),
    bad("logit_bias-second-value", INV, "logit_bias.4", logit_bias={"3": 1, "4": 200}),
    # response_format
    bad("rf-no-type", INV, "response_format.type", response_format={}),
    bad("rf-no-type-with-schema", INV, "response_format.type", response_format={"json_schema": {"schema": {}}}),
    bad("rf-type-xml", UNS, "response_format.type", response_format={"type": "xml"}),
    bad("rf-type-uppercase", UNS, "response_format.type", response_format={"type": "JSON_OBJECT"}),
    bad("rf-json_schema-missing", INV, "response_format.json_schema", response_format={"type": "json_schema"}),
    bad("rf-json_schema-string", INV, "response_format.json_schema", response_format={"type": "json_schema", "json_schema": "x"}),
    bad("rf-json_schema-no-schema", INV, "response_format.json_schema", response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
    bad("rf-json_schema-schema-string", INV, "response_format.json_schema", response_format={"type": "json_schema", "json_schema": {"schema": "x"}}),
    bad("rf-json_schema-schema-array", INV, "response_format.json_schema", response_format={"type": "json_schema", "json_schema": {"schema": []}}),
    bad("rf-regex-missing", INV, "response_format.regex", response_format={"type": "regex"}),
    bad("rf-regex-number", INV, "response_format.regex", response_format={"type": "regex", "regex": 5}),
    bad("rf-grammar-missing", INV, "response_format.grammar", response_format={"type": "grammar"}),
    bad("rf-grammar-number", INV, "response_format.grammar", response_format={"type": "grammar", "grammar": 5}),
    bad("rf-grammar-syntax-peg", INV, "response_format.syntax", response_format={"type": "grammar", "grammar": "g", "syntax": "peg"}),
    bad("rf-grammar-syntax-number", INV, "response_format.syntax", response_format={"type": "grammar", "grammar": "g", "syntax": 1}),
    # stream_options
    bad("stream_options-unknown", UNS, "stream_options.foo", stream_options={"foo": 1}),
    bad("stream_options-continuous", UNS, "stream_options.continuous_usage_stats", stream_options={"include_usage": True, "continuous_usage_stats": True}),
    bad("stream_options-include_usage-string", INV, "stream_options.include_usage", stream_options={"include_usage": "yes"}),
    bad("stream_options-include_usage-int", INV, "stream_options.include_usage", stream_options={"include_usage": 1}),
    # tools
    bad("tools-empty", INV, "tools", tools=[]),
    bad("tools-129", INV, "tools", tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]),
    bad("tools-custom-no-name", INV, "tools[0].custom.name", tools=[{"type": "custom", "custom": {}}]),
    bad("tools-custom-unknown-key", UNS, "tools[0].custom.x", tools=[{"type": "custom", "custom": {"name": "c", "x": 1}}]),
    bad("tool_choice-custom-unnamed", INV, "tool_choice", tools=[CUSTOM_TOOL], tool_choice={"type": "custom"}),
    bad("stream_options-include_obfuscation-string", INV, "stream_options.include_obfuscation", stream_options={"include_obfuscation": "no"}),
    bad("tools-entry-number", INV, "tools[0]", tools=[5]),
    bad("tools-type-missing", INV, "tools[0].type", tools=[{"function": {"name": "f"}}]),
    bad("tools-type-retrieval", INV, "tools[0].type", tools=[{"type": "retrieval", "function": {"name": "f"}}]),
    bad("tools-function-missing", INV, "tools[0].function", tools=[{"type": "function"}]),
    bad("tools-function-string", INV, "tools[0].function", tools=[{"type": "function", "function": "f"}]),
    bad("tools-name-missing", INV, "tools[0].function.name", tools=[{"type": "function", "function": {}}]),
    bad("tools-name-empty", INV, "tools[0].function.name", tools=[{"type": "function", "function": {"name": ""}}]),
    bad("tools-name-number", INV, "tools[0].function.name", tools=[{"type": "function", "function": {"name": 5}}]),
    bad("tools-description-number", INV, "tools[0].function.description", tools=[{"type": "function", "function": {"name": "f", "description": 5}}]),
    bad("tools-parameters-string", INV, "tools[0].function.parameters", tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
    bad("tools-parameters-array", INV, "tools[0].function.parameters", tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]),
    bad("tools-strict-string", INV, "tools[0].function.strict", tools=[{"type": "function", "function": {"name": "f", "strict": "yes"}}]),
    bad("tools-second-bad", INV, "tools[1].function.name", tools=[TOOL, {"type": "function", "function": {"name": ""}}]),
    # tool_choice
    bad("tool_choice-auto-without-tools", INV, "tool_choice", tool_choice="auto"),
    bad("tool_choice-required-without-tools", INV, "tool_choice", tool_choice="required"),
    bad("tool_choice-named-without-tools", INV, "tool_choice", tool_choice=NAMED_CHOICE),
    bad("tool_choice-tools-null", INV, "tool_choice", tool_choice="auto", tools=None),
    bad("tool_choice-any", INV, "tool_choice", tools=[TOOL], tool_choice="any"),
    bad("tool_choice-number", INV, "tool_choice", tools=[TOOL], tool_choice=5),
    # unknown keys
    bad("unknown-foo", UNS, "foo", foo=1),
    bad("unknown-case-sensitive", UNS, "Model", Model="m"),
    bad("unknown-prompt", UNS, "prompt", prompt="x"),
    bad("unknown-max_new_tokens", UNS, "max_new_tokens", max_new_tokens=5),
    bad("unknown-echo", UNS, "echo", echo=True),
    bad("unknown-empty-key", UNS, "", **{"": 1}),
    # which error wins
    bad("unknown-alphabetical", UNS, "aaa", zzz=1, aaa=1),
    bad("unknown-beside-openai-fields", UNS, "zzz", zzz=1, metadata={}),
    bad("unknown-beside-store", UNS, "aaa", store=True, aaa=1),
    bad("typed-check-before-unknown", INV, "temperature", temperature=-1, foo=1),
    bad("typed-check-before-unknown-n", INV, "n", n=0, aaa=1),
    bad("messages-check-before-unknown", UNS, "messages[0].content", zzz=1, messages=[{"role": "user", "content": 5}]),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# chat: messages


def assistant(**fields: Any) -> dict[str, Any]:
    return {"role": "assistant", **fields}


def user_parts(*parts: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


MESSAGES_ACCEPTED = [
    ok("role-system", messages=[{"role": "system", "content": "be brief"}, USER]),
    ok("role-developer", messages=[{"role": "developer", "content": "be brief"}, USER]),
    ok("role-assistant", messages=[USER, assistant(content="hello"), USER]),
    ok("content-empty-string", messages=[{"role": "user", "content": ""}]),
    ok("name", messages=[{"role": "user", "content": "hi", "name": "bob"}]),
    ok("name-null", messages=[{"role": "user", "content": "hi", "name": None}]),
    ok("refusal", messages=[USER, assistant(content="no", refusal="I can't")]),
    ok("refusal-null", messages=[USER, assistant(content="ok", refusal=None)]),
    ok("part-text", messages=user_parts({"type": "text", "text": "hi"})),
    ok("part-input_text", messages=user_parts({"type": "input_text", "text": "hi"})),
    ok("part-text-empty", messages=user_parts({"type": "text", "text": ""})),
    ok("part-image_url", messages=user_parts({"type": "image_url", "image_url": {"url": IMAGE}})),
    *[
        ok(f"part-image_url-detail-{d}", messages=user_parts({"type": "image_url", "image_url": {"url": IMAGE, "detail": d}}))
        for d in ("auto", "low", "high")
    ],
    ok("part-input_image-string", messages=user_parts({"type": "input_image", "image_url": IMAGE})),
    ok("part-input_image-object", messages=user_parts({"type": "input_image", "image_url": {"url": IMAGE}})),
    ok("part-input_image-detail", messages=user_parts({"type": "input_image", "image_url": {"url": IMAGE, "detail": "low"}})),
    ok("parts-mixed", messages=user_parts({"type": "text", "text": "what is"}, {"type": "image_url", "image_url": {"url": IMAGE}}, {"type": "input_text", "text": "?"})),
    ok("parts-system", messages=[{"role": "system", "content": [{"type": "text", "text": "sys"}]}, USER]),
    ok("tool_calls-content-null", messages=[USER, assistant(content=None, tool_calls=[CALL])]),
    ok("tool_calls-content-absent", messages=[USER, assistant(tool_calls=[CALL])]),
    ok("tool_calls-with-content", messages=[USER, assistant(content="calling", tool_calls=[CALL])]),
    ok("tool_calls-two", messages=[USER, assistant(tool_calls=[CALL, {**CALL, "id": "call_2"}])]),
    ok("tool_calls-null-with-content", messages=[USER, assistant(content="hi", tool_calls=None)]),
    ok("tool-message", messages=[USER, assistant(tool_calls=[CALL]), {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
    ok("reasoning_content", messages=[USER, assistant(content="4", reasoning_content="2+2"), USER]),
    ok("reasoning", messages=[USER, assistant(content="4", reasoning="2+2"), USER]),
    ok("reasoning-null", messages=[USER, assistant(content="4", reasoning=None, reasoning_content=None)]),
    ok("reasoning-with-tool_calls", messages=[USER, assistant(tool_calls=[CALL], reasoning_content="call it")]),
    ok(
        "conversation",
        messages=[
            {"role": "system", "content": "sys"},
            USER,
            assistant(content=None, tool_calls=[CALL]),
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            assistant(content="It is sunny."),
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
        ],
        tools=[TOOL],
    ),
]  # fmt: skip


def call_with(**function_or_fields: Any) -> dict[str, Any]:
    return {**CALL, **function_or_fields}


MESSAGES_REJECTED = [
    # role
    bad("role-missing", INV, "messages[0].role", messages=[{"content": "hi"}]),
    bad("role-null", INV, "messages[0].role", messages=[{"role": None, "content": "hi"}]),
    bad("role-number", INV, "messages[0].role", messages=[{"role": 5, "content": "hi"}]),
    bad("role-bot", INV, "messages[0].role", messages=[{"role": "bot", "content": "hi"}]),
    bad("role-uppercase", INV, "messages[0].role", messages=[{"role": "User", "content": "hi"}]),
    bad("role-second-message", INV, "messages[1].role", messages=[USER, {"role": "bot", "content": "hi"}]),
    # message keys
    bad("key-unknown", UNS, "messages[0].foo", messages=[{"role": "user", "content": "hi", "foo": 1}]),
    bad("key-unknown-third", UNS, "messages[2].thinking", messages=[USER, assistant(content="x"), {"role": "user", "content": "y", "thinking": "z"}]),
    bad("key-audio-string", INV, "messages[1].audio", messages=[USER, assistant(content="x", audio="a")]),
    bad("reasoning_content-number", INV, "messages[1].reasoning_content", messages=[USER, assistant(content="x", reasoning_content=5)]),
    bad("reasoning-object", INV, "messages[1].reasoning", messages=[USER, assistant(content="x", reasoning={"text": "r"})]),
    bad("part-input_audio-missing", INV, "messages[0].content[0].input_audio", messages=user_parts({"type": "input_audio"})),
    bad("name-number", INV, "messages[0].name", messages=[{"role": "user", "content": "hi", "name": 5}]),
    bad("refusal-number", INV, "messages[1].refusal", messages=[USER, assistant(content="x", refusal=5)]),
    # content shape
    bad("content-null-user", UNS, "messages[0].content", messages=[{"role": "user", "content": None}]),
    bad("content-absent-user", UNS, "messages[0].content", messages=[{"role": "user"}]),
    bad("content-absent-system", UNS, "messages[0].content", messages=[{"role": "system"}, USER]),
    bad("content-absent-assistant", UNS, "messages[1].content", messages=[USER, assistant()]),
    bad("content-null-assistant", UNS, "messages[1].content", messages=[USER, assistant(content=None)]),
    bad("content-null-tool", UNS, "messages[2].content", messages=[USER, assistant(tool_calls=[CALL]), {"role": "tool", "tool_call_id": "call_1", "content": None}]),
    bad("content-number", UNS, "messages[0].content", messages=[{"role": "user", "content": 5}]),
    bad("content-bool", UNS, "messages[0].content", messages=[{"role": "user", "content": True}]),
    bad("content-object", UNS, "messages[0].content", messages=[{"role": "user", "content": {"type": "text", "text": "hi"}}]),
    bad("content-empty-array", UNS, "messages[0].content", messages=[{"role": "user", "content": []}]),
    # content parts
    bad("part-type-second", UNS, "messages[0].content[1].type", messages=user_parts({"type": "text", "text": "a"}, {"type": "video_url", "video_url": {"url": "x"}})),
    bad("part-type-third-message", UNS, "messages[2].content[0].type", messages=[{"role": "system", "content": "s"}, USER, {"role": "user", "content": [{"type": "audio"}]}]),
    bad("part-text-missing", INV, "messages[0].content[0].text", messages=user_parts({"type": "text"})),
    bad("part-text-null", INV, "messages[0].content[0].text", messages=user_parts({"type": "text", "text": None})),
    bad("part-text-number", INV, "messages[0].content[0].text", messages=user_parts({"type": "text", "text": 5})),
    bad("part-input_text-missing", INV, "messages[0].content[0].text", messages=user_parts({"type": "input_text"})),
    bad("part-text-second", INV, "messages[0].content[1].text", messages=user_parts({"type": "text", "text": "a"}, {"type": "text", "text": ["b"]})),
    bad("part-image_url-missing", INV, "messages[0].content[0].image_url", messages=user_parts({"type": "image_url"})),
    bad("part-image_url-string", INV, "messages[0].content[0].image_url", messages=user_parts({"type": "image_url", "image_url": IMAGE})),
    bad("part-image_url-no-url", INV, "messages[0].content[0].image_url.url", messages=user_parts({"type": "image_url", "image_url": {}})),
    bad("part-image_url-url-number", INV, "messages[0].content[0].image_url.url", messages=user_parts({"type": "image_url", "image_url": {"url": 5}})),
    bad("part-image_url-detail", INV, "messages[0].content[0].image_url.detail", messages=user_parts({"type": "image_url", "image_url": {"url": IMAGE, "detail": "ultra"}})),
    bad("part-input_image-missing", INV, "messages[0].content[0].image_url", messages=user_parts({"type": "input_image"})),
    bad("part-input_image-number", INV, "messages[0].content[0].image_url", messages=user_parts({"type": "input_image", "image_url": 5})),
    bad("part-input_image-url-number", INV, "messages[0].content[0].image_url.url", messages=user_parts({"type": "input_image", "image_url": {"url": 5}})),
    # tool_calls
    bad("tool_calls-on-user", INV, "messages[0].tool_calls", messages=[{"role": "user", "content": "hi", "tool_calls": [CALL]}]),
    bad("tool_calls-on-system", INV, "messages[0].tool_calls", messages=[{"role": "system", "content": "s", "tool_calls": [CALL]}, USER]),
    bad("tool_calls-empty", INV, "messages[1].tool_calls", messages=[USER, assistant(content="x", tool_calls=[])]),
    bad("tool_calls-string", INV, "messages[1].tool_calls", messages=[USER, assistant(content="x", tool_calls="call")]),
    bad("tool_calls-object", INV, "messages[1].tool_calls", messages=[USER, assistant(content="x", tool_calls=CALL)]),
    bad("tool_calls-entry-number", INV, "messages[1].tool_calls[0]", messages=[USER, assistant(tool_calls=[5])]),
    bad("tool_calls-id-missing", INV, "messages[1].tool_calls[0].id", messages=[USER, assistant(tool_calls=[{k: v for k, v in CALL.items() if k != "id"}])]),
    bad("tool_calls-id-empty", INV, "messages[1].tool_calls[0].id", messages=[USER, assistant(tool_calls=[call_with(id="")])]),
    bad("tool_calls-id-number", INV, "messages[1].tool_calls[0].id", messages=[USER, assistant(tool_calls=[call_with(id=5)])]),
    bad("tool_calls-type-missing", INV, "messages[1].tool_calls[0].type", messages=[USER, assistant(tool_calls=[{k: v for k, v in CALL.items() if k != "type"}])]),
    bad("tool_calls-type-other", INV, "messages[1].tool_calls[0].type", messages=[USER, assistant(tool_calls=[call_with(type="code")])]),
    bad("tool_calls-function-missing", INV, "messages[1].tool_calls[0].function", messages=[USER, assistant(tool_calls=[{"id": "c", "type": "function"}])]),
    bad("tool_calls-name-empty", INV, "messages[1].tool_calls[0].function.name", messages=[USER, assistant(tool_calls=[call_with(function={"name": "", "arguments": "{}"})])]),
    bad("tool_calls-name-missing", INV, "messages[1].tool_calls[0].function.name", messages=[USER, assistant(tool_calls=[call_with(function={"arguments": "{}"})])]),
    bad("tool_calls-arguments-object", INV, "messages[1].tool_calls[0].function.arguments", messages=[USER, assistant(tool_calls=[call_with(function={"name": "f", "arguments": {}})])]),
    bad("tool_calls-arguments-missing", INV, "messages[1].tool_calls[0].function.arguments", messages=[USER, assistant(tool_calls=[call_with(function={"name": "f"})])]),
    bad("tool_calls-second-entry", INV, "messages[1].tool_calls[1].id", messages=[USER, assistant(tool_calls=[CALL, call_with(id="")])]),
    # tool_call_id
    bad("tool_call_id-missing", INV, "messages[1].tool_call_id", messages=[USER, {"role": "tool", "content": "sunny"}]),
    bad("tool_call_id-empty", INV, "messages[1].tool_call_id", messages=[USER, {"role": "tool", "tool_call_id": "", "content": "sunny"}]),
    bad("tool_call_id-number", INV, "messages[1].tool_call_id", messages=[USER, {"role": "tool", "tool_call_id": 5, "content": "sunny"}]),
    bad("tool_call_id-on-user", INV, "messages[0].tool_call_id", messages=[{"role": "user", "content": "hi", "tool_call_id": "call_1"}]),
    bad("tool_call_id-on-assistant", INV, "messages[1].tool_call_id", messages=[USER, assistant(content="x", tool_call_id="call_1")]),
]  # fmt: skip


@pytest.mark.parametrize("overrides", CHAT_ACCEPTED + MESSAGES_ACCEPTED)
def test_chat_accepts(overrides: dict[str, Any]) -> None:
    check_accepted(parse_chat_request, with_overrides(CHAT_BASE, overrides))


@pytest.mark.parametrize(("overrides", "code", "param"), CHAT_REJECTED + MESSAGES_REJECTED)
def test_chat_rejects(overrides: dict[str, Any], code: str, param: str | None) -> None:
    check_rejected(parse_chat_request, encode(with_overrides(CHAT_BASE, overrides)), code, param)


# ---------------------------------------------------------------------------------------------
# chat: OpenAI's schema accepts, the SIE contract refuses (a local target answers local_rejection)

TOOLS_65 = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(65)]
AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}
CUSTOM_CALL = {"id": "c1", "type": "custom", "custom": {"name": "sql", "input": "select 1"}}

CHAT_LOCAL_REJECTED = [
    bad("tools-65", INV, "tools", tools=TOOLS_65),
    bad("tools-custom", INV, "tools[0].type", tools=[CUSTOM_TOOL]),
    bad("tools-custom-second", INV, "tools[1].type", tools=[TOOL, CUSTOM_TOOL]),
    bad("tool_choice-custom", INV, "tool_choice", tools=[TOOL], tool_choice={"type": "custom", "custom": {"name": "sql"}}),
    bad("tool_choice-allowed_tools", INV, "tool_choice", tools=[TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [NAMED_CHOICE]}}),
    bad("tool_choice-required+json_object", INV, "tool_choice", tools=[TOOL], tool_choice="required", response_format={"type": "json_object"}),
    bad("tool_choice-required+json_schema", INV, "tool_choice", tools=[TOOL], tool_choice="required", response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
    bad("tool_choice-required+regex", INV, "tool_choice", tools=[TOOL], tool_choice="required", response_format={"type": "regex", "regex": "a"}),
    bad("tool_choice-required+grammar", INV, "tool_choice", tools=[TOOL], tool_choice="required", response_format={"type": "grammar", "grammar": "g"}),
    bad("tool_choice-named+json_object", INV, "tool_choice", tools=[TOOL], tool_choice=NAMED_CHOICE, response_format={"type": "json_object"}),
    bad("stream_options-include_obfuscation", UNS, "stream_options.include_obfuscation", stream_options={"include_obfuscation": False}, stream=True),
    bad("message-function_call", UNS, "messages[1].function_call", messages=[USER, assistant(content="x", function_call={"name": "f", "arguments": "{}"})]),
    bad("message-audio", UNS, "messages[1].audio", messages=[USER, assistant(content="x", audio={"id": "a"})]),
    bad("role-function", INV, "messages[0].role", messages=[{"role": "function", "name": "f", "content": "hi"}]),
    bad("part-input_audio", UNS, "messages[0].content[0].type", messages=user_parts(AUDIO_PART)),
    bad("part-file", UNS, "messages[0].content[0].type", messages=user_parts({"type": "file", "file": {"file_id": "f"}})),
    bad("part-refusal", UNS, "messages[1].content[0].type", messages=[USER, assistant(content=[{"type": "refusal", "refusal": "no"}])]),
    bad("tool_calls-custom", INV, "messages[1].tool_calls[0].type", messages=[USER, assistant(tool_calls=[CUSTOM_CALL])]),
    # the first one, in check order (messages before tools)
    bad("first-fault-wins", UNS, "messages[0].content[0].type", messages=user_parts(AUDIO_PART), tools=TOOLS_65),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "code", "param"), CHAT_LOCAL_REJECTED)
def test_chat_local_rejections(overrides: dict[str, Any], code: str, param: str | None) -> None:
    body = with_overrides(CHAT_BASE, overrides)
    req = check_accepted(parse_chat_request, body)
    err = req.local_rejection
    assert isinstance(err, RequestError)
    assert (err.status, err.type, err.code, err.param) == (400, ERROR_TYPE, code, param)


# Accepted rows that the SIE contract refuses (the cases above, among CHAT_ACCEPTED).
OPENAI_ONLY_VALUES = {
    "tools-128", "tools-custom", "tool_choice-custom", "tool_choice-allowed_tools",
    "tool_choice-required+json_object", "stream_options-include_obfuscation",
}  # fmt: skip


@pytest.mark.parametrize(
    "overrides", [p for p in CHAT_ACCEPTED + MESSAGES_ACCEPTED if p.id not in OPENAI_ONLY_VALUES]
)
def test_chat_accepts_without_local_rejection(overrides: dict[str, Any]) -> None:
    req = parse_chat_request(encode(with_overrides(CHAT_BASE, overrides)))
    assert req.local_rejection is None


# ---------------------------------------------------------------------------------------------
# completions

_common_ok, _common_bad = value_cases(COMMON_VALUE_RULES)

COMPLETIONS_ACCEPTED = [
    ok("base"),
    ok("prompt-one-element-array", prompt=["Say hi"]),
    ok("prompt-empty-string", prompt=""),
    *_common_ok,
    ok("max_tokens=1", max_tokens=1),
    ok("max_tokens=16", max_tokens=16),
    ok("max_tokens=100000", max_tokens=100000),
    ok("n=1", n=1),
    *[
        ok(f"{field}=null", **{field: None})
        for field in ("max_tokens", "temperature", "top_p", "stop", "frequency_penalty", "presence_penalty", "seed", "stream", "n")
    ],
    ok("everything", max_tokens=32, temperature=0.2, top_p=0.9, stop=["\n"], frequency_penalty=0.1, presence_penalty=-0.1, seed=7, stream=True, n=1),
]  # fmt: skip

COMPLETIONS_REJECTED = [
    # OpenAI's fields outside the SIE contract are checked like the others
    bad("echo-without-model", INV, "model", echo=True, model=DROP),
    bad("suffix-with-bad-temperature", INV, "temperature", suffix="x", temperature=-1),
    bad("logprobs-with-bad-prompt", INV, "prompt", logprobs=5, prompt=5),
    bad("logprobs=6", INV, "logprobs", logprobs=6),
    bad("logprobs-bool", INV, "logprobs", logprobs=True),
    bad("echo-string", INV, "echo", echo="yes"),
    bad("suffix-number", INV, "suffix", suffix=1),
    bad("best_of=21", INV, "best_of", best_of=21),
    bad("best_of-before-unknown", UNS, "aaa", best_of=2, aaa=1),
    bad("best_of-without-prompt", INV, "prompt", best_of=1, prompt=DROP),
    # allow-list
    bad("top_k", UNS, "top_k", top_k=5),
    bad("messages", UNS, "messages", messages=[USER]),
    bad("max_completion_tokens", UNS, "max_completion_tokens", max_completion_tokens=5),
    bad("response_format", UNS, "response_format", response_format={"type": "json_object"}),
    bad("tools", UNS, "tools", tools=[TOOL]),
    bad("foo", UNS, "foo", foo=1),
    bad("unknown-alphabetical", UNS, "top_k", user="u", top_k=1),
    # model
    bad("model-missing", INV, "model", model=DROP),
    bad("model-null", INV, "model", model=None),
    bad("model-empty", INV, "model", model=""),
    bad("model-number", INV, "model", model=5),
    # prompt
    bad("prompt-missing", INV, "prompt", prompt=DROP),
    bad("prompt-null", INV, "prompt", prompt=None),
    bad("prompt-empty-array", INV, "prompt", prompt=[]),
    bad("prompt-number", INV, "prompt", prompt=5),
    bad("prompt-bool", INV, "prompt", prompt=True),
    bad("prompt-object", INV, "prompt", prompt={"text": "x"}),
    bad("prompt-nested-array", INV, "prompt", prompt=[["a"]]),
    bad("prompt-empty-token-array", INV, "prompt", prompt=[[]]),
    bad("prompt-mixed", INV, "prompt", prompt=["a", 1]),
    # n
    bad("n=0", INV, "n", n=0),
    bad("n=129", INV, "n", n=129),
    bad("n-string", INV, "n", n="1"),
    bad("n-bool", INV, "n", n=True),
    # max_tokens
    *[bad(f"max_tokens={short(v)}", INV, "max_tokens", max_tokens=v) for v in (0, -1, 1.5, "16", True, [16])],
    *_common_bad,
]  # fmt: skip


COMPLETIONS_REMOTE_ONLY = [
    ok("echo", echo=True),
    ok("suffix", suffix="x"),
    ok("logprobs", logprobs=5),
    ok("best_of", best_of=2),
    ok("logit_bias", logit_bias={"1": 1}),
    ok("stream_options", stream_options={"include_usage": True}, stream=True),
    ok("user", user="u"),
]

COMPLETIONS_LOCAL_REJECTED = [
    bad("prompt-array-of-number", INV, "prompt", prompt=[5]),
    bad("prompt-token-ids", INV, "prompt", prompt=[[1, 2, 3]]),
    bad("prompt-two-strings", UNS, "prompt", prompt=["a", "b"]),
    bad("prompt-three-strings", UNS, "prompt", prompt=["a", "b", "c"]),
    bad("n=2", UNS, "n", n=2),
    bad("n=128", UNS, "n", n=128),
]


@pytest.mark.parametrize("overrides", COMPLETIONS_ACCEPTED)
def test_completions_accepts(overrides: dict[str, Any]) -> None:
    req = check_accepted(parse_completions_request, with_overrides(COMPLETIONS_BASE, overrides))
    assert req.local_rejection is None and req.local_unsupported == ()


@pytest.mark.parametrize("overrides", COMPLETIONS_REMOTE_ONLY)
def test_completions_openai_fields_are_remote_only(overrides: dict[str, Any]) -> None:
    req = check_accepted(parse_completions_request, with_overrides(COMPLETIONS_BASE, overrides))
    assert req.local_unsupported == tuple(k for k in sorted(overrides) if k != "stream")


@pytest.mark.parametrize(("overrides", "code", "param"), COMPLETIONS_LOCAL_REJECTED)
def test_completions_local_rejections(overrides: dict[str, Any], code: str, param: str) -> None:
    req = check_accepted(parse_completions_request, with_overrides(COMPLETIONS_BASE, overrides))
    err = req.local_rejection
    assert isinstance(err, RequestError)
    assert (err.status, err.type, err.code, err.param) == (400, ERROR_TYPE, code, param)


@pytest.mark.parametrize(("overrides", "code", "param"), COMPLETIONS_REJECTED)
def test_completions_rejects(overrides: dict[str, Any], code: str, param: str | None) -> None:
    body = encode(with_overrides(COMPLETIONS_BASE, overrides))
    check_rejected(parse_completions_request, body, code, param)


# ---------------------------------------------------------------------------------------------
# strict JSON: raw bytes, for both endpoints


def chat_raw(model: bytes = b'"m"', extra: bytes = b"") -> bytes:
    return b'{"model":' + model + b',"messages":[{"role":"user","content":"hi"}]' + extra + b"}"


def completions_raw(model: bytes = b'"m"', extra: bytes = b"") -> bytes:
    return b'{"model":' + model + b',"prompt":"hi"' + extra + b"}"


ENDPOINTS = {
    "chat": (parse_chat_request, chat_raw),
    "completions": (parse_completions_request, completions_raw),
}

Build = Callable[..., bytes]


def raw(case_id: str, make: Callable[[Build], bytes]) -> Any:
    return pytest.param(make, id=case_id)


STRICT_JSON_REJECTED = [
    # not an object
    raw("empty-body", lambda b: b""),
    raw("whitespace-only", lambda b: b" \n"),
    raw("null", lambda b: b"null"),
    raw("array", lambda b: b"[" + b() + b"]"),
    raw("empty-array", lambda b: b"[]"),
    raw("string", lambda b: b'"hi"'),
    raw("number", lambda b: b"1"),
    raw("true", lambda b: b"true"),
    # invalid UTF-8 and BOM
    raw("utf8-invalid-byte", lambda b: b(model=b'"m\xff"')),
    raw("utf8-continuation-only", lambda b: b(model=b'"m\x80"')),
    raw("utf8-overlong", lambda b: b(model=b'"\xc0\xaf"')),
    raw("utf8-truncated", lambda b: b(model=b'"\xe2\x82"')),
    raw("utf8-encoded-surrogate", lambda b: b(model=b'"\xed\xa0\x80"')),
    raw("utf8-above-max", lambda b: b(model=b'"\xf4\x90\x80\x80"')),
    raw("utf8-outside-string", lambda b: b() + b"\xff"),
    raw("utf8-bom", lambda b: b"\xef\xbb\xbf" + b()),
    raw("latin1-body", lambda b: b(model='"café"'.encode("latin-1"))),
    # lone surrogate escapes
    raw("lone-high-surrogate", lambda b: b(model=b'"\\ud800"')),
    raw("lone-low-surrogate", lambda b: b(model=b'"\\udc00"')),
    raw("high-surrogate-then-letter", lambda b: b(model=b'"\\ud800x"')),
    raw("high-surrogate-then-escape", lambda b: b(model=b'"\\ud800\\u0041"')),
    raw("two-high-surrogates", lambda b: b(model=b'"\\ud800\\ud800"')),
    raw("reversed-surrogate-pair", lambda b: b(model=b'"\\ude00\\ud83d"')),
    raw("lone-surrogate-in-key", lambda b: b(extra=b',"stop":[{"\\udfff":1}]')),
    # non-finite numbers
    raw("NaN", lambda b: b(extra=b',"temperature":NaN')),
    raw("Infinity", lambda b: b(extra=b',"temperature":Infinity')),
    raw("-Infinity", lambda b: b(extra=b',"temperature":-Infinity')),
    raw("nan-lowercase", lambda b: b(extra=b',"temperature":nan')),
    # duplicate keys at any depth
    raw("duplicate-top-level", lambda b: b(extra=b',"model":"m"')),
    raw("duplicate-top-level-null", lambda b: b(extra=b',"stop":null,"stop":null')),
    raw("duplicate-nested", lambda b: b(extra=b',"stop":[{"a":1,"a":1}]')),
    raw("duplicate-deep", lambda b: b(extra=b',"stop":[[{"x":{"k":1,"k":2}}]]')),
    raw("duplicate-escaped-spelling", lambda b: b(extra=b',"stop":[{"a":1,"\\u0061":2}]')),
    # nesting
    raw("depth-65", lambda b: b(extra=b',"stop":' + b"[" * 64 + b"]" * 64)),
    raw("depth-100000-arrays", lambda b: b"[" * 100_000 + b"]" * 100_000),
    raw("depth-100000-unclosed", lambda b: b(extra=b',"stop":' + b"[" * 100_000)),
    raw("depth-100000-objects", lambda b: b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    # trailing garbage and truncation
    raw("trailing-letter", lambda b: b() + b"x"),
    raw("trailing-object", lambda b: b() + b"{}"),
    raw("trailing-brace", lambda b: b() + b"}"),
    raw("trailing-comma", lambda b: b() + b","),
    raw("trailing-nul", lambda b: b() + b"\x00"),
    raw("trailing-null", lambda b: b() + b" null"),
    raw("truncated", lambda b: b()[:-1]),
    raw("truncated-in-string", lambda b: b'{"model":"m'),
    # malformed JSON
    raw("object-trailing-comma", lambda b: b()[:-1] + b",}"),
    raw("array-trailing-comma", lambda b: b(extra=b',"stop":["a",]')),
    raw("single-quotes", lambda b: b().replace(b'"', b"'")),
    raw("unquoted-key", lambda b: b().replace(b'"model"', b"model")),
    raw("comment", lambda b: b(extra=b"/* c */")),
    raw("line-comment", lambda b: b(extra=b"// c\n")),
    raw("leading-zero", lambda b: b(extra=b',"seed":01')),
    raw("leading-plus", lambda b: b(extra=b',"seed":+1')),
    raw("dot-without-fraction", lambda b: b(extra=b',"temperature":1.')),
    raw("dot-without-integer", lambda b: b(extra=b',"temperature":.5')),
    raw("exponent-without-digits", lambda b: b(extra=b',"temperature":1e')),
    raw("lone-minus", lambda b: b(extra=b',"temperature":-')),
    raw("hex-number", lambda b: b(extra=b',"seed":0x1')),
    raw("literal-True", lambda b: b(extra=b',"stream":True')),
    raw("literal-truncated", lambda b: b(extra=b',"stream":tru')),
    raw("raw-control-char", lambda b: b(model=b'"a\x01b"')),
    raw("raw-newline-in-string", lambda b: b(model=b'"a\nb"')),
    raw("raw-tab-in-string", lambda b: b(model=b'"a\tb"')),
    raw("invalid-escape-x", lambda b: b(model=b'"\\x41"')),
    raw("invalid-escape-U", lambda b: b(model=b'"\\U0041"')),
    raw("short-unicode-escape", lambda b: b(model=b'"\\u12"')),
    raw("non-hex-unicode-escape", lambda b: b(model=b'"\\u12g4"')),
    raw("missing-colon", lambda b: b().replace(b'"model":', b'"model" ')),
    raw("missing-comma", lambda b: b(extra=b' "stream":true')),
    raw("form-feed-whitespace", lambda b: b"\x0c" + b()),
    raw("nbsp-whitespace", lambda b: "\u00a0".encode() + b()),
]

STRICT_JSON_ACCEPTED = [
    raw("surrounding-whitespace", lambda b: b" \t\r\n" + b() + b" \t\r\n"),
    raw("inner-whitespace", lambda b: b().replace(b":", b" : ").replace(b",", b" ,\n ")),
    raw("surrogate-pair", lambda b: b(model=b'"\\ud83d\\ude00"')),
    raw("raw-4-byte-utf8", lambda b: b(model='"😀"'.encode())),
    raw("escapes", lambda b: b(model=b'"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9"')),
    raw("escaped-nul", lambda b: b(model=b'"a\\u0000b"')),
    raw("raw-del", lambda b: b(model=b'"a\x7fb"')),
    raw("noncharacter", lambda b: b(model=b'"\\uffff"')),
    raw("exponent-upper", lambda b: b(extra=b',"temperature":1E0')),
    raw("exponent-signed", lambda b: b(extra=b',"temperature":5e-1,"top_p":0.1E+1')),
    raw("minus-zero-seed", lambda b: b(extra=b',"seed":-0')),
]  # fmt: skip


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("make", STRICT_JSON_REJECTED)
def test_strict_json_rejects(endpoint: str, make: Callable[[Build], bytes]) -> None:
    parse, build = ENDPOINTS[endpoint]
    check_rejected(parse, make(build), INV, None)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("make", STRICT_JSON_ACCEPTED)
def test_strict_json_accepts(endpoint: str, make: Callable[[Build], bytes]) -> None:
    parse, build = ENDPOINTS[endpoint]
    body = make(build)
    check_accepted(parse, json.loads(body), raw=body)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        pytest.param(b',"temperature":1e400', "temperature", id="temperature-overflows-to-inf"),
        pytest.param(
            b',"temperature":-1e400', "temperature", id="temperature-overflows-to-minus-inf"
        ),
        pytest.param(b',"frequency_penalty":1e400', "frequency_penalty", id="penalty-overflow"),
        pytest.param(b',"logit_bias":{"1":1e400}', "logit_bias.1", id="logit_bias-value-overflow"),
        pytest.param(b',"seed":' + b"1" * 1000, "seed", id="seed-1000-digits"),
        pytest.param(b',"max_tokens":' + b"9" * 30, "max_tokens", id="max_tokens-30-digits"),
    ],
)
def test_valid_number_literals_out_of_range(extra: bytes, param: str) -> None:
    """Valid JSON numbers that do not fit the field are the field's error, not a parse error."""
    check_rejected(parse_chat_request, chat_raw(extra=extra), INV, param)


def nested_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(("depth", "accepted"), [(63, True), (64, True), (65, False), (66, False)])
def test_nesting_limit_is_64(depth: int, accepted: bool) -> None:
    # top-level object (1) > chat_template_kwargs object (2) > depth - 2 arrays
    body = chat_raw(extra=b',"chat_template_kwargs":{"k":' + nested_arrays(depth - 2) + b"}")
    if accepted:
        check_accepted(parse_chat_request, json.loads(body), raw=body)
    else:
        check_rejected(parse_chat_request, body, INV, None)


@pytest.mark.parametrize("depth", [64, 65])
def test_nesting_limit_counts_objects(depth: int) -> None:
    inner = b'{"a":' * (depth - 2) + b"1" + b"}" * (depth - 2)
    body = chat_raw(extra=b',"chat_template_kwargs":{"k":' + inner + b"}")
    if depth <= 64:
        check_accepted(parse_chat_request, json.loads(body), raw=body)
    else:
        check_rejected(parse_chat_request, body, INV, None)


# ---------------------------------------------------------------------------------------------
# attributes of accepted requests


def test_chat_defaults() -> None:
    req = parse_chat_request(encode(CHAT_BASE))
    assert (req.model, req.stream, req.n, req.include_usage) == ("m", False, 1, False)
    assert req.fields == ("messages", "model")


@pytest.mark.parametrize(
    ("overrides", "stream", "n", "include_usage"),
    [
        ({"n": 3}, False, 3, False),
        ({"n": None}, False, 1, False),
        ({"stream": True}, True, 1, False),
        ({"stream": None}, False, 1, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, 1, True),
        ({"stream": True, "stream_options": {"include_usage": False}}, True, 1, False),
        ({"stream": True, "stream_options": {}}, True, 1, False),
        ({"stream": True, "stream_options": None}, True, 1, False),
        ({"stream": False, "stream_options": {"include_usage": True}}, False, 1, True),
        ({"stream": True, "n": 4, "stream_options": {"include_usage": True}}, True, 4, True),
    ],
)
def test_chat_attributes(
    overrides: dict[str, Any], stream: bool, n: int, include_usage: bool
) -> None:
    req = parse_chat_request(encode(with_overrides(CHAT_BASE, overrides)))
    assert (req.stream, req.n, req.include_usage) == (stream, n, include_usage)


def test_fields_are_sorted_and_skip_nulls_and_ignored_hints() -> None:
    body = with_overrides(
        CHAT_BASE,
        {"user": "u", "temperature": 0.5, "seed": None, "routing_key": 5, "prompt_cache_key": "p"},
    )
    req = parse_chat_request(encode(body))
    assert req.fields == ("messages", "model", "prompt_cache_key", "temperature", "user")


def test_completions_attributes() -> None:
    req = parse_completions_request(encode({**COMPLETIONS_BASE, "stream": True, "n": None}))
    assert (req.model, req.stream) == ("m", True)
    assert req.fields == ("model", "prompt", "stream")


def test_model_is_returned_as_sent() -> None:
    req = parse_chat_request(chat_raw(model=b'"Org/M\\u00e9del:prof"'))
    assert req.model == "Org/Médel:prof"


# ---------------------------------------------------------------------------------------------
# upstream_body

FULL_CHAT = with_overrides(
    CHAT_BASE,
    {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "max_completion_tokens": 64,
        "temperature": 0.5,
        "top_p": 0.25,
        "stop": ["\n\n"],
        "seed": I64_MIN,
        "user": "u-1",
        "safety_identifier": "sid",
        "lora_adapter": "ad",
        "logit_bias": {"42": -1.5},
        "tools": [FULL_TOOL],
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
        "chat_template_kwargs": {"enable_thinking": False},
        "min_tokens": None,
    },
)  # fmt: skip


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        pytest.param(parse_chat_request, CHAT_BASE, id="chat-base"),
        pytest.param(parse_chat_request, FULL_CHAT, id="chat-full"),
        pytest.param(parse_completions_request, COMPLETIONS_BASE, id="completions-base"),
        pytest.param(
            parse_completions_request,
            {**COMPLETIONS_BASE, "prompt": ["x"], "max_tokens": 8, "stop": "\n", "n": None},
            id="completions-full",
        ),
    ],
)
@pytest.mark.parametrize("model", ["gpt-x", 'we"ird\\model', "mödel-😀", "m"])
def test_upstream_body_replaces_model(parse: Any, body: dict[str, Any], model: str) -> None:
    req = parse(encode(body))
    out = req.upstream_body(model)
    assert isinstance(out, bytes)
    assert json.loads(out) == forwarded(body, model)
    assert_compact(out)
    assert req.model == body["model"]  # the request itself is unchanged


def test_upstream_body_from_indented_input() -> None:
    # Member values are forwarded byte for byte, so only the value is compared here.
    body = json.dumps(FULL_CHAT, indent=4).encode()
    out = parse_chat_request(body).upstream_body("gpt-x")
    assert json.loads(out) == forwarded(FULL_CHAT, "gpt-x")


def test_upstream_body_drops_ignored_members() -> None:
    body = {**CHAT_BASE, "safety_identifier": "sid", "routing_key": 5, "prompt_cache_key": "p"}
    out = parse_chat_request(encode(body)).upstream_body("gpt-x")
    assert json.loads(out) == {
        **CHAT_BASE,
        "model": "gpt-x",
        "prompt_cache_key": "p",
        "safety_identifier": "sid",
    }


@pytest.mark.parametrize(
    "omit",
    [
        (),
        ("user",),
        ("user", "safety_identifier", "lora_adapter"),
        ("stream_options", "min_tokens"),  # min_tokens is null in FULL_CHAT
        ("user", "not_present"),
        ("user", "user"),
    ],
)
def test_upstream_body_omit(omit: tuple[str, ...]) -> None:
    req = parse_chat_request(encode(FULL_CHAT))
    assert json.loads(req.upstream_body("gpt-x", omit)) == forwarded(FULL_CHAT, "gpt-x", omit)
    assert json.loads(req.upstream_body("gpt-x", omit=omit)) == forwarded(FULL_CHAT, "gpt-x", omit)


def test_upstream_body_omit_completions() -> None:
    body = {**COMPLETIONS_BASE, "seed": 3, "temperature": 0.1}
    out = parse_completions_request(encode(body)).upstream_body("gpt-x", omit=("seed",))
    assert json.loads(out) == {"model": "gpt-x", "prompt": "Say hi", "temperature": 0.1}


def test_upstream_body_keeps_exact_numbers() -> None:
    body = chat_raw(extra=b',"seed":9007199254740993,"temperature":0.1,"logit_bias":{"5":1e2}')
    out = parse_chat_request(body).upstream_body("gpt-x")
    value = json.loads(out)
    assert value["seed"] == 9007199254740993
    assert value["temperature"] == 0.1
    assert value["logit_bias"] == {"5": 100.0}


# upstream_body(..., rename=): provider quirks such as MiniMax's max_tokens -> max_completion_tokens.
# Each row: the members after the base chat body (raw bytes, so value bytes can be checked), omit,
# rename, the JSON the upstream must get (besides model and messages), and byte strings that must
# appear in the output verbatim (the renamed member with its value bytes as sent).

MINIMAX = (("max_tokens", "max_completion_tokens"),)


def rename_case(
    case_id: str,
    extra: bytes,
    rename: tuple[tuple[str, str], ...],
    want: dict[str, Any],
    verbatim: tuple[bytes, ...] = (),
    omit: tuple[str, ...] = (),
) -> Any:
    return pytest.param(extra, omit, rename, want, verbatim, id=case_id)


RENAME_CASES = [
    rename_case(
        "renamed",
        b',"max_tokens":64',
        MINIMAX,
        {"max_completion_tokens": 64},
        (b'"max_completion_tokens":64}',),
    ),
    rename_case(
        "value-bytes-kept",
        b',"max_tokens":  64 ,"user":"\\u00e9\\n","temperature":1.50',
        (*MINIMAX, ("user", "end_user"), ("temperature", "temp")),
        {"max_completion_tokens": 64, "end_user": "\u00e9\n", "temp": 1.5},
        (b'"max_completion_tokens":64,', b'"end_user":"\\u00e9\\n",', b'"temp":1.50}'),
    ),
    rename_case(
        "null-value-renamed",
        b',"max_tokens":null',
        MINIMAX,
        {"max_completion_tokens": None},
    ),
    rename_case(
        "to-present-not-renamed",
        b',"max_tokens":5,"max_completion_tokens":7',
        MINIMAX,
        {"max_tokens": 5, "max_completion_tokens": 7},
    ),
    rename_case(
        "to-present-as-null-not-renamed",
        b',"max_completion_tokens":null,"max_tokens":5',
        MINIMAX,
        {"max_tokens": 5, "max_completion_tokens": None},
    ),
    rename_case("from-absent", b',"top_k":3', MINIMAX, {"top_k": 3}),
    rename_case("no-rename", b',"max_tokens":5', (), {"max_tokens": 5}),
    rename_case(
        "omit-and-rename",
        b',"max_tokens":5,"top_k":3,"user":"u"',
        MINIMAX,
        {"max_completion_tokens": 5, "user": "u"},
        omit=("top_k",),
    ),
    # omit runs first (as the Python fix-up this replaces ran on the omitted body): an omitted
    # `to` does not block the rename; an omitted `from` is gone and renames nothing.
    rename_case(
        "omitted-to-does-not-block",
        b',"max_tokens":5,"max_completion_tokens":7',
        MINIMAX,
        {"max_completion_tokens": 5},
        (b'"max_completion_tokens":5}',),
        omit=("max_completion_tokens",),
    ),
    rename_case(
        "omitted-from-not-renamed",
        b',"max_tokens":5',
        MINIMAX,
        {},
        omit=("max_tokens",),
    ),
    # Pairs apply in order to the names left by the pairs before: never a name twice.
    rename_case(
        "two-pairs-one-target",
        b',"top_k":3,"seed":4',
        (("top_k", "x"), ("seed", "x")),
        {"x": 3, "seed": 4},
    ),
    rename_case("chained", b',"top_k":3', (("top_k", "x"), ("x", "y")), {"y": 3}),
    rename_case("to-itself", b',"top_k":3', (("top_k", "top_k"),), {"top_k": 3}),
    rename_case(
        "to-needs-escaping",
        b',"top_k":3',
        (("top_k", 'a"b\\'),),
        {'a"b\\': 3},
        (b'"a\\"b\\\\":3}',),
    ),
    # model is present in every request, so nothing is ever renamed onto it.
    rename_case("onto-model", b',"top_k":3', (("top_k", "model"),), {"top_k": 3}),
]


@pytest.mark.parametrize(("extra", "omit", "rename", "want", "verbatim"), RENAME_CASES)
def test_upstream_body_rename(
    extra: bytes,
    omit: tuple[str, ...],
    rename: tuple[tuple[str, str], ...],
    want: dict[str, Any],
    verbatim: tuple[bytes, ...],
) -> None:
    req = parse_chat_request(chat_raw(extra=extra))
    out = req.upstream_body("up-model", omit, rename=rename)
    assert json.loads(out) == {"model": "up-model", "messages": [USER], **want}
    assert list(json.loads(out)) == list(dict.fromkeys(json.loads(out)))  # no name twice
    assert out.startswith(b'{"model":"up-model",')  # model replaced, in its place
    for piece in verbatim:
        assert piece in out
    assert_compact(out)


def test_upstream_body_rename_takes_any_sequence_of_pairs() -> None:
    req = parse_chat_request(chat_raw(extra=b',"max_tokens":5'))
    want = {"model": "x", "messages": [USER], "max_completion_tokens": 5}
    for rename in (list(MINIMAX), MINIMAX):
        assert json.loads(req.upstream_body("x", rename=rename)) == want
    assert json.loads(req.upstream_body("x", ("user",), rename=MINIMAX)) == want
    with pytest.raises(TypeError):
        req.upstream_body("x", (), MINIMAX)  # rename is keyword-only


# ---------------------------------------------------------------------------------------------
# the error type itself


def test_request_error_shape() -> None:
    assert issubclass(RequestError, ValueError)
    with pytest.raises(RequestError) as info:
        parse_chat_request(encode({**CHAT_BASE, "foo": 1}))
    err = info.value
    assert isinstance(err.args[0], str) and err.args[0]
    assert (err.status, err.type, err.code, err.param) == (400, ERROR_TYPE, UNS, "foo")


# ---------------------------------------------------------------------------------------------
# reach: which present fields a remote provider or a local worker cannot honour

# One valid value for every field of each table, with what the field needs beside it. Each
# row says which list the field lands in: "remote" (remote_unsupported), "local"
# (local_unsupported), "" (neither) or None (not a field at all: accepted, never forwarded).
REACH_CHAT: list[tuple[str, Any, dict[str, Any], str | None]] = [
    ("model", "m", {}, ""),
    ("messages", [USER], {}, ""),
    ("max_completion_tokens", 5, {}, ""),
    ("max_tokens", 5, {}, ""),
    ("temperature", 0.5, {}, ""),
    ("top_p", 0.5, {}, ""),
    ("stop", ["x"], {}, ""),
    ("frequency_penalty", 0.5, {}, ""),
    ("presence_penalty", 0.5, {}, ""),
    ("top_k", 40, {}, "remote"),
    ("repetition_penalty", 1.1, {}, "remote"),
    ("min_tokens", 1, {}, "remote"),
    ("chat_template_kwargs", {"enable_thinking": False}, {}, "remote"),
    ("n", 2, {}, ""),
    ("best_of", 2, {}, "remote"),
    ("lora_adapter", "a", {}, "remote"),
    ("user", "u", {}, ""),
    ("safety_identifier", "s", {}, ""),
    ("seed", 1, {}, ""),
    ("logprobs", True, {}, ""),
    ("top_logprobs", 2, {"logprobs": True}, ""),
    ("logit_bias", {"5": 1}, {}, ""),
    ("prompt_cache_key", "k", {}, ""),
    ("routing_key", "k", {}, ""),
    ("stream", True, {}, ""),
    ("stream_options", {"include_usage": True}, {"stream": True}, ""),
    ("parallel_tool_calls", True, {"tools": [TOOL]}, ""),
    *[(name, value, {}, "local") for name, value in OPENAI_ONLY.items()],
    ("response_format", {"type": "json_object"}, {}, ""),
    ("tools", [TOOL], {}, ""),
    ("tool_choice", "auto", {"tools": [TOOL]}, ""),
]
REACH_COMPLETIONS: list[tuple[str, Any, dict[str, Any], str | None]] = [
    ("model", "m", {}, ""),
    ("prompt", "p", {}, ""),
    ("max_tokens", 5, {}, ""),
    ("temperature", 0.5, {}, ""),
    ("top_p", 0.5, {}, ""),
    ("stop", "x", {}, ""),
    ("frequency_penalty", 0.5, {}, ""),
    ("presence_penalty", 0.5, {}, ""),
    ("seed", 1, {}, ""),
    ("stream", True, {}, ""),
    ("n", 1, {}, ""),
    ("best_of", 2, {}, "local"),
    ("echo", True, {}, "local"),
    ("logprobs", 2, {}, "local"),
    ("suffix", "s", {}, "local"),
    ("logit_bias", {"1": 1}, {}, "local"),
    ("stream_options", {"include_usage": True}, {"stream": True}, "local"),
    ("user", "u", {}, "local"),
]
REACH_CASES = [
    pytest.param(parse, base, *row, id=f"{endpoint}:{row[0]}")
    for endpoint, parse, base, rows in (
        ("chat", parse_chat_request, CHAT_BASE, REACH_CHAT),
        ("completions", parse_completions_request, COMPLETIONS_BASE, REACH_COMPLETIONS),
    )
    for row in rows
]


@pytest.mark.parametrize(("parse", "base", "name", "value", "needs", "lands"), REACH_CASES)
def test_reach_of_each_field(
    parse: Callable[[bytes], Any],
    base: dict[str, Any],
    name: str,
    value: Any,
    needs: dict[str, Any],
    lands: str | None,
) -> None:
    req = parse(encode({**base, **needs, name: value}))
    assert (name in req.fields) is (lands is not None)
    assert (name in req.remote_unsupported) is (lands == "remote")
    assert (name in req.local_unsupported) is (lands == "local")
    # A null counts as absent: in no list.
    if name not in base:
        nulled = parse(encode({**base, **needs, name: None}))
        assert name not in nulled.remote_unsupported + nulled.local_unsupported


def test_reach_lists_are_sorted() -> None:
    """All fields at once: each list holds what its target refuses, sorted."""
    body = {**CHAT_BASE, "best_of": 1}
    for name, value, needs, _ in REACH_CHAT:
        if name != "best_of":
            body |= {**needs, name: value}
    body |= {"stream": False, "n": 1}  # best_of: no streaming, best_of >= n
    req = parse_chat_request(encode(body))
    assert req.remote_unsupported == (
        "best_of",
        "chat_template_kwargs",
        "lora_adapter",
        "min_tokens",
        "repetition_penalty",
        "top_k",
    )
    assert req.local_unsupported == tuple(sorted(OPENAI_ONLY))
