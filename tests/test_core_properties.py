"""Property tests for the request parser in ``edgegw._core``.

1. Parsing any input either returns a request or raises ``RequestError``, never anything else.
2. An accepted body round-trips: ``upstream_body(original model)`` is the same JSON value as the
   body (nulls included), and ``omit`` removes exactly the named top-level keys.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgegw._core import RequestError, parse_chat_request, parse_completions_request

from .test_core_rules import expected_fields, forwarded

# Generation can be slow on a loaded 2-core CI box; that is not a failure of the code.
SETTINGS = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

PARSERS = st.sampled_from([parse_chat_request, parse_completions_request])

CHAT_KEYS = [
    "model", "messages", "max_completion_tokens", "max_tokens", "temperature", "top_p", "stop",
    "frequency_penalty", "presence_penalty", "top_k", "repetition_penalty", "min_tokens",
    "chat_template_kwargs", "n", "best_of", "lora_adapter", "user", "safety_identifier", "seed",
    "logprobs", "top_logprobs", "logit_bias", "prompt_cache_key", "routing_key", "response_format",
    "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
    "reasoning_format",
]  # fmt: skip
COMPLETIONS_KEYS = [
    "model", "prompt", "max_tokens", "temperature", "top_p", "stop", "frequency_penalty",
    "presence_penalty", "seed", "stream", "n", "echo", "suffix", "logprobs", "best_of",
]  # fmt: skip
MESSAGE_KEYS = ["role", "content", "name", "tool_calls", "tool_call_id", "refusal"]
# Accepted but neither a field nor forwarded: safety_identifier always (spec: "never
# forwarded"), the routing hints when their value is not a string.


def parse_or_reject(parse: Any, body: bytes) -> Any:
    """Return the parsed request, or None after checking the rejection is well formed."""
    try:
        return parse(body)
    except RequestError as err:
        assert err.status == 400
        assert err.type == "invalid_request_error"
        assert err.code in ("invalid_request", "unsupported_field")
        assert err.param is None or isinstance(err.param, str)
        assert isinstance(err.args[0], str)
        return None


def dump(value: Any, ensure_ascii: bool = False, indent: int | None = None) -> bytes:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent).encode(
        "utf-8", "surrogatepass"
    )


# ---------------------------------------------------------------------------------------------
# (1) any input: returns or raises RequestError

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities serialise as the (invalid JSON) tokens NaN / Infinity
    | st.text(st.characters(codec=None), max_size=12)  # may hold lone surrogates
    | st.sampled_from(["\ud800", "a\udfffb"])
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def request_shaped(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects using the endpoint's own keys (plus a few unknown ones) with arbitrary values."""
    message = st.dictionaries(st.sampled_from(MESSAGE_KEYS + ["foo"]), json_values, max_size=5)
    value_for_key = {
        "messages": st.lists(message, max_size=3) | json_values,
        "model": st.text(max_size=8) | json_values,
    }
    return st.dictionaries(
        st.sampled_from(keys + ["foo", "store"]), json_values, max_size=8
    ).flatmap(
        lambda d: st.fixed_dictionaries({k: value_for_key.get(k, st.just(v)) for k, v in d.items()})
    )


@SETTINGS
@given(parse=PARSERS, body=st.binary(max_size=256))
def test_any_bytes_parse_or_reject(parse: Any, body: bytes) -> None:
    parse_or_reject(parse, body)


@SETTINGS
@given(
    parse=PARSERS,
    value=json_values,
    ensure_ascii=st.booleans(),
)
def test_any_json_value_parses_or_rejects(parse: Any, value: Any, ensure_ascii: bool) -> None:
    parse_or_reject(parse, dump(value, ensure_ascii))


@SETTINGS
@given(body=request_shaped(CHAT_KEYS), ensure_ascii=st.booleans())
def test_chat_shaped_objects_parse_or_reject(body: dict[str, Any], ensure_ascii: bool) -> None:
    parse_or_reject(parse_chat_request, dump(body, ensure_ascii))


@SETTINGS
@given(body=request_shaped(COMPLETIONS_KEYS), ensure_ascii=st.booleans())
def test_completions_shaped_objects_parse_or_reject(
    body: dict[str, Any], ensure_ascii: bool
) -> None:
    parse_or_reject(parse_completions_request, dump(body, ensure_ascii))


# ---------------------------------------------------------------------------------------------
# valid requests (every optional field may also be an explicit null)

text = st.text(max_size=16)
name = st.text(min_size=1, max_size=12)
IMAGE = "data:image/png;base64,iVBORw0KGgo="


def finite(min_value: float, max_value: float | None = None, **kw: Any) -> Any:
    return st.floats(min_value, max_value, allow_nan=False, allow_infinity=False, **kw).filter(
        lambda x: math.copysign(1.0, x) > 0 or x != 0  # no -0.0 at a lower bound of 0
    )


def maybe_null(strategy: Any) -> Any:
    return st.none() | strategy


image_object = st.fixed_dictionaries(
    {"url": st.just(IMAGE)}, optional={"detail": st.sampled_from(["auto", "low", "high"])}
)
text_part = st.fixed_dictionaries({"type": st.sampled_from(["text", "input_text"]), "text": text})
image_part = st.fixed_dictionaries({"type": st.just("image_url"), "image_url": image_object})
input_image_part = st.fixed_dictionaries(
    {"type": st.just("input_image"), "image_url": st.just(IMAGE) | image_object}
)
text_content = text | st.lists(text_part, min_size=1, max_size=3)
user_content = text | st.lists(text_part | image_part | input_image_part, min_size=1, max_size=3)
tool_call = st.fixed_dictionaries(
    {
        "id": name,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": name, "arguments": st.just("{}") | text}),
    }
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": user_content}, optional={"name": maybe_null(text)}
    ),
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer"]), "content": text_content},
        optional={"name": maybe_null(text)},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": text_content},
        optional={"refusal": maybe_null(text), "name": maybe_null(text)},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "tool_calls": st.lists(tool_call, min_size=1, max_size=2)},
        optional={"content": maybe_null(text_content)},
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": name, "content": text_content}),
)

plain_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | finite(-1e300, 1e300) | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)
json_object = st.dictionaries(text, plain_json, max_size=3)

response_format = st.one_of(
    st.just({"type": "text"}),
    st.just({"type": "json_object"}),
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries(
                {"schema": json_object}, optional={"name": name, "strict": st.booleans()}
            ),
        }
    ),
    st.fixed_dictionaries({"type": st.just("regex"), "regex": text}),
    st.fixed_dictionaries(
        {"type": st.just("grammar"), "grammar": text},
        optional={"syntax": st.sampled_from(["ebnf", "lark"])},
    ),
)
tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": name},
            optional={"description": text, "parameters": json_object, "strict": st.booleans()},
        ),
    }
)
u32 = st.integers(1, 2**32 - 1)

CHAT_OPTIONAL = {
    "max_completion_tokens": u32,
    "max_tokens": u32,
    "temperature": finite(0.0, 1e6),
    "top_p": finite(0.0, 1.0, exclude_min=True),
    "stop": text | st.lists(text, max_size=4),
    "frequency_penalty": finite(-2.0, 2.0),
    "presence_penalty": finite(-2.0, 2.0),
    "top_k": u32,
    "repetition_penalty": finite(0.0, 2.0, exclude_min=True),
    "min_tokens": st.integers(0, 2**31),
    "chat_template_kwargs": json_object,
    "n": st.integers(1, 128),
    "best_of": st.integers(1, 128),
    "lora_adapter": name,
    "user": text,
    "safety_identifier": text,
    "seed": st.integers(-(2**63), 2**63 - 1),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(0, 20),
    "logit_bias": st.dictionaries(
        st.integers(0, 300_000).map(str), finite(-100.0, 100.0) | st.integers(-100, 100), max_size=5
    ),
    "prompt_cache_key": text | st.integers() | json_object,
    "routing_key": text | st.integers() | st.booleans(),
    "response_format": response_format,
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "tools": st.lists(tool, min_size=1, max_size=3),
    "tool_choice": st.sampled_from(["auto", "none", "required"]),
    "parallel_tool_calls": st.booleans(),
    "reasoning_effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh"]),
    "reasoning_format": st.sampled_from(["raw", "parsed", "hidden"]),
}

FORCING_INCOMPATIBLE = {"json_object", "json_schema", "regex", "grammar"}


def make_consistent(body: dict[str, Any], name_choice: bool) -> dict[str, Any]:
    """Apply the cross-field rules so that the body is valid."""
    n = body.get("n") or 1
    if body.get("best_of") is not None:
        if body.get("stream") is True:
            body["best_of"] = None
        else:
            body["best_of"] = max(body["best_of"], n)
    if (body.get("top_logprobs") or 0) > 0:
        body["logprobs"] = True
    tools = body.get("tools")
    if body.get("tool_choice") is not None:
        if not tools:
            del body["tool_choice"]
        else:
            if name_choice:
                body["tool_choice"] = {
                    "type": "function",
                    "function": {"name": tools[0]["function"]["name"]},
                }
            rf = body.get("response_format")
            forcing = body["tool_choice"] != "auto" and body["tool_choice"] != "none"
            if forcing and rf is not None and rf["type"] in FORCING_INCOMPATIBLE:
                body["tool_choice"] = "auto"
    return body


valid_chat = st.builds(
    make_consistent,
    st.fixed_dictionaries(
        {"model": name, "messages": st.lists(message, min_size=1, max_size=4)},
        optional={k: maybe_null(v) for k, v in CHAT_OPTIONAL.items()},
    ),
    st.booleans(),
)

valid_completions = st.fixed_dictionaries(
    {"model": name, "prompt": text | st.lists(text, min_size=1, max_size=1)},
    optional={
        k: maybe_null(v)
        for k, v in {
            "max_tokens": st.integers(1, 2**31),
            "temperature": CHAT_OPTIONAL["temperature"],
            "top_p": CHAT_OPTIONAL["top_p"],
            "stop": CHAT_OPTIONAL["stop"],
            "frequency_penalty": CHAT_OPTIONAL["frequency_penalty"],
            "presence_penalty": CHAT_OPTIONAL["presence_penalty"],
            "seed": CHAT_OPTIONAL["seed"],
            "stream": st.booleans(),
            "n": st.just(1),
        }.items()
    },
)

ENDPOINT_BODIES = st.one_of(
    st.tuples(st.just(parse_chat_request), valid_chat),
    st.tuples(st.just(parse_completions_request), valid_completions),
)


# ---------------------------------------------------------------------------------------------
# (2) accepted bodies round-trip


@SETTINGS
@given(
    endpoint_body=ENDPOINT_BODIES,
    ensure_ascii=st.booleans(),
    indent=st.none() | st.just(2),
)
def test_valid_body_is_accepted_and_round_trips(
    endpoint_body: tuple[Any, dict[str, Any]], ensure_ascii: bool, indent: int | None
) -> None:
    parse, body = endpoint_body
    raw = dump(body, ensure_ascii, indent)
    req = parse(raw)  # a valid body must not be rejected
    assert req.model == body["model"]
    assert req.stream is bool(body.get("stream"))
    assert req.fields == expected_fields(body)
    if parse is parse_chat_request:
        assert req.n == (body.get("n") or 1)
        assert req.include_usage is bool((body.get("stream_options") or {}).get("include_usage"))
    # the original members, unchanged (nulls kept), minus the ignored ones
    assert json.loads(req.upstream_body(req.model)) == forwarded(json.loads(raw), req.model)


@SETTINGS
@given(endpoint_body=ENDPOINT_BODIES, new_model=name, data=st.data())
def test_upstream_body_replaces_model_and_omits(
    endpoint_body: tuple[Any, dict[str, Any]], new_model: str, data: st.DataObject
) -> None:
    parse, body = endpoint_body
    req = parse(dump(body))
    candidates = sorted(k for k in body if k != "model") + ["absent_key"]
    omit = tuple(data.draw(st.lists(st.sampled_from(candidates), max_size=4), label="omit"))
    assert json.loads(req.upstream_body(new_model, omit)) == forwarded(body, new_model, omit)


@SETTINGS
@given(endpoint_body=ENDPOINT_BODIES, data=st.data())
def test_mutated_valid_body_parses_or_rejects(
    endpoint_body: tuple[Any, dict[str, Any]], data: st.DataObject
) -> None:
    """Byte-level damage to a valid body (insert, delete or replace one byte) never crashes."""
    parse, body = endpoint_body
    raw = bytearray(dump(body))
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        pos = data.draw(st.integers(0, len(raw)), label="pos")
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]), label="op")
        byte = data.draw(st.sampled_from(b'{}[]",:\\0-.eE\x00\xff\xc3 ') | st.integers(0, 255))
        if op == "insert":
            raw.insert(pos, byte)
        elif pos < len(raw):
            if op == "delete":
                del raw[pos]
            else:
                raw[pos] = byte
    parse_or_reject(parse, bytes(raw))
