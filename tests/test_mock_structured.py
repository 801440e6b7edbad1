"""The mock provider's tool calls and structured outputs (what `edgegw demo` shows a new user),
through a real gateway with the official SDK: a call and its round trip, streamed as OpenAI
streams it, `parse()` with a pydantic model, usage at the end of a stream; the mock's own
answers to the edge cases over raw HTTP; and the schema values checked by a JSON Schema
validator."""

from __future__ import annotations

import datetime
import enum
import json
import math
import re
import signal
import subprocess
import sys
from typing import Any, Literal

import jsonschema
import openai
import pytest
import trio
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from edgegw.mock import WORDS, MockConfig, MockUpstream
from edgegw.mock_structured import TOKEN_CHARS, value_for

from .conftest import Gateway, in_thread, openai_client
from .rawhttp import exchange

MODEL = "openai/gpt-4o-mini"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "hourly": {"type": "boolean"},
        "thresholds": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}},
        "where": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
        },
        "note": {"type": "string"},
    },
    "required": ["city", "unit", "days", "hourly", "thresholds", "where"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
ASK = [{"role": "user", "content": "What is the weather in Lyon?"}]
WHOLE_TEXT = " ".join(WORDS[i % len(WORDS)] for i in range(16))  # the mock's default answer


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Reading(BaseModel):
    at: datetime.datetime
    value: float = Field(gt=-100, lt=100)


class Forecast(BaseModel):
    city: str = Field(min_length=3)
    unit: Unit
    kind: Literal["daily", "hourly"]
    days: int = Field(ge=1, le=7)
    readings: list[Reading]
    warning: str | None


class Lookup(BaseModel):
    """Look up a city's forecast."""

    city: str
    days: int


async def test_a_tool_call_and_its_round_trip(gateway: Gateway, mock: MockUpstream) -> None:
    with openai_client(gateway.base) as client:
        messages: list[Any] = list(ASK)
        first = await in_thread(
            client.chat.completions.create, model=MODEL, messages=messages, tools=TOOLS
        )
        (choice,) = first.choices
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather" and call.id
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
        messages.append(choice.message)  # the SDK's object, as its documentation does
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
        second = await in_thread(
            client.chat.completions.create, model=MODEL, messages=messages, tools=TOOLS
        )
        (answer,) = second.choices
        assert answer.finish_reason == "stop" and answer.message.tool_calls is None
        assert answer.message.content == WHOLE_TEXT
        sent = json.loads(mock.requests[-1].body)["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
        assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"] == call.id
        # A forced call is made again, result or not.
        forced = await in_thread(
            client.chat.completions.create,
            model=MODEL,
            messages=messages,
            tools=TOOLS,
            tool_choice="required",
        )
        assert forced.choices[0].finish_reason == "tool_calls"


async def test_tool_choice_picks_the_tool_or_none(gateway: Gateway) -> None:
    with openai_client(gateway.base) as client:
        named = await in_thread(
            client.chat.completions.create,
            model=MODEL,
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
        (call,) = named.choices[0].message.tool_calls
        assert call.function.name == "get_time" and call.function.arguments == "{}"
        none = await in_thread(
            client.chat.completions.create,
            model=MODEL,
            messages=ASK,
            tools=TOOLS,
            tool_choice="none",
        )
        assert none.choices[0].finish_reason == "stop"
        assert none.choices[0].message.content == WHOLE_TEXT


async def test_a_streamed_tool_call_as_openai_streams_it(gateway: Gateway) -> None:
    def collect(client: openai.OpenAI) -> list[Any]:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
        return list(stream)

    with openai_client(gateway.base) as client:
        chunks = await in_thread(collect, client)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    head, *pieces = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert deltas[0].role == "assistant" and deltas[0].tool_calls is not None
    assert (head.index, head.type, head.function.name) == (0, "function", "get_weather")
    assert head.id and head.function.arguments == ""
    assert len(pieces) > 1 and all(p.index == 0 and p.id is None for p in pieces)
    arguments = "".join(p.function.arguments for p in pieces)
    jsonschema.validate(json.loads(arguments), WEATHER)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == math.ceil(len(arguments) / TOKEN_CHARS)


async def test_the_sdk_stream_helper_parses_a_streamed_call(gateway: Gateway) -> None:
    def run(client: openai.OpenAI) -> Any:
        with client.chat.completions.stream(
            model=MODEL, messages=ASK, tools=[openai.pydantic_function_tool(Lookup)]
        ) as stream:
            return stream.get_final_completion()

    with openai_client(gateway.base) as client:
        final = await in_thread(run, client)
    (call,) = final.choices[0].message.tool_calls
    assert call.function.name == "Lookup"
    assert isinstance(call.function.parsed_arguments, Lookup)


async def test_parse_gives_a_parsed_object(gateway: Gateway, mock: MockUpstream) -> None:
    def run_stream(client: openai.OpenAI) -> Any:
        with client.chat.completions.stream(
            model=MODEL, messages=ASK, response_format=Forecast
        ) as stream:
            return stream.get_final_completion()

    with openai_client(gateway.base) as client:
        whole = await in_thread(
            client.chat.completions.parse, model=MODEL, messages=ASK, response_format=Forecast
        )
        streamed = await in_thread(run_stream, client)
    parsed = whole.choices[0].message.parsed
    assert isinstance(parsed, Forecast) and parsed.readings
    assert whole.choices[0].finish_reason == "stop"
    assert streamed.choices[0].message.parsed == parsed
    sent = json.loads(mock.requests[-1].body)["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True


async def test_json_object_answers_an_object(gateway: Gateway) -> None:
    with openai_client(gateway.base) as client:
        resp = await in_thread(
            client.chat.completions.create,
            model=MODEL,
            messages=ASK,
            response_format={"type": "json_object"},
        )
    assert json.loads(resp.choices[0].message.content) == {"answer": WHOLE_TEXT}


async def test_a_streamed_answer_ends_with_usage_when_asked(gateway: Gateway) -> None:
    def collect(client: openai.OpenAI) -> list[Any]:
        stream = client.chat.completions.create(
            model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
        return list(stream)

    with openai_client(gateway.base) as client:
        chunks = await in_thread(collect, client)
    *body, last = chunks
    assert "".join(c.choices[0].delta.content or "" for c in body) == WHOLE_TEXT
    assert all(c.usage is None for c in body)
    assert last.choices == [] and last.usage is not None
    usage, words = last.usage, len(ASK[0]["content"].split())
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        words,
        16,
        words + 16,
    )


# The mock's own answers, over raw HTTP (no gateway in between).


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> MockUpstream:
    server = MockUpstream()
    await nursery.start(server.serve)
    return server


async def chat(upstream: MockUpstream, **fields: object) -> Any:
    body = {"model": "m", "messages": ASK, **fields}
    return await exchange(upstream.port, "POST", "/v1/chat/completions", body)


async def test_max_tokens_cuts_a_call_and_every_choice_calls(upstream: MockUpstream) -> None:
    whole = (await chat(upstream, tools=TOOLS, n=2)).json()
    ids = [c["message"]["tool_calls"][0]["id"] for c in whole["choices"]]
    assert len(set(ids)) == 2
    arguments = whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert whole["usage"]["completion_tokens"] == 2 * math.ceil(len(arguments) / TOKEN_CHARS)
    cut = (await chat(upstream, tools=TOOLS, max_tokens=2)).json()
    (choice,) = cut["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == arguments[:8]


async def test_allowed_tools_and_an_unknown_named_tool(upstream: MockUpstream) -> None:
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "name": "get_time"}]},
    }
    reply = (await chat(upstream, tools=TOOLS, tool_choice=allowed)).json()
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"
    unknown = {"type": "function", "function": {"name": "nowhere"}}
    refused = await chat(upstream, tools=TOOLS, tool_choice=unknown)
    assert refused.status == 400 and refused.json()["error"]["param"] == "tool_choice"


async def test_the_models_listed_are_configurable(upstream: MockUpstream) -> None:
    default = (await exchange(upstream.port, "GET", "/v1/models")).json()
    assert [m["id"] for m in default["data"]] == ["mock-small", "mock-large"]
    upstream.config = MockConfig(models=("gpt-4o-mini", "mock-small"))
    listed = (await exchange(upstream.port, "GET", "/v1/models")).json()
    assert [m["id"] for m in listed["data"]] == ["gpt-4o-mini", "mock-small"]


# The values the mock makes up, against a JSON Schema validator.

Node = dict[str, Any]
RECURSIVE: Node = {
    "type": "object",
    "properties": {
        "value": {"type": "integer", "exclusiveMinimum": 3, "multipleOf": 5},
        "children": {"type": "array", "items": {"$ref": "#"}},
        "parent": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
    },
    "required": ["value", "children", "parent"],
}


@pytest.mark.parametrize(
    "schema",
    [
        WEATHER,
        RECURSIVE,
        Forecast.model_json_schema(),
        to_strict_json_schema(Forecast),
        {"type": "string", "format": "date-time"},
        {"type": "string", "minLength": 10, "maxLength": 12},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        {"type": "integer", "maximum": -5},
        {"type": ["null", "integer"], "minimum": 9},
        {"type": "array", "minItems": 3, "items": {"const": "x"}},
        {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "string"}], "items": False},
        {
            "allOf": [
                {"properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"required": ["b"]},
            ]
        },
        {"oneOf": [{"type": "null"}, {"enum": [3, 4]}]},
        {},
    ],
)
def test_a_made_up_value_is_valid(schema: Node) -> None:
    jsonschema.Draft202012Validator(schema).validate(value_for(schema))


def test_a_schema_without_a_finite_value_still_ends() -> None:
    endless = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a", "b"]}
    endless["properties"]["b"] = {"$ref": "#"}
    value_for(endless)  # a value with nulls deep down; what matters is that it returns


# The demo, as a user runs it.


async def test_the_demo_lists_its_examples_model_and_calls_tools() -> None:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "demo", "--port", "0", "--token-rate", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = b""
        with trio.fail_after(30):
            while (m := re.search(rb"gateway on (http://127\.0\.0\.1:\d+)", seen)) is None:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, seen
                seen += chunk

        def talk(client: openai.OpenAI) -> tuple[list[str], Any]:
            ids = [m.id for m in client.models.list().data]
            called = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
            return ids, called

        with openai_client(m.group(1).decode(), api_key="unused") as client:
            ids, called = await in_thread(talk, client)
        assert MODEL in ids
        assert called.choices[0].message.tool_calls[0].function.name == "get_weather"
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(15):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()
