"""The request surface per target: OpenAI's fields reach a remote provider as sent and are
still refused for a local model; reasoning members of messages; `stream_options` on a
request that does not stream; usage asked for on every stream and withheld from a client
that did not ask; the zai provider. What arrived is asserted at the fake upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from edgegw.settings import Settings

from .conftest import Gateway, sample, scrape, start_gateway
from .echo_upstream import Answer, EchoUpstream, Seen
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request, sse_data
from .test_local import profile_yaml

USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "f"}}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "sql"}}
AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}

# One valid value per OpenAI chat field outside the SIE contract.
OPENAI_FIELDS: dict[str, Any] = {
    "store": True,
    "metadata": {"team": "a"},
    "service_tier": "flex",
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "draft"},
    "web_search_options": {"search_context_size": "low"},
    "verbosity": "high",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"ttl": "1h"},
    "moderation": {"model": "omni-moderation-latest"},
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "reasoning_effort": "minimal",
    "reasoning_format": "parsed",
}
# Values OpenAI's schema takes and the SIE contract refuses: (overrides, code, param).
OPENAI_VALUES: dict[str, tuple[dict[str, Any], str, str]] = {
    "128-tools": (
        {"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(128)]},
        "invalid_request",
        "tools",
    ),
    "custom-tool": ({"tools": [CUSTOM_TOOL]}, "invalid_request", "tools[0].type"),
    "forcing-choice-with-schema": (
        {
            "tools": [TOOL],
            "tool_choice": "required",
            "response_format": {"type": "json_schema", "json_schema": {"schema": {}}},
        },
        "invalid_request",
        "tool_choice",
    ),
    "include_obfuscation": (
        {"stream": True, "stream_options": {"include_usage": True, "include_obfuscation": False}},
        "unsupported_field",
        "stream_options.include_obfuscation",
    ),
    "audio-part": (
        {"messages": [{"role": "user", "content": [AUDIO_PART]}]},
        "unsupported_field",
        "messages[0].content[0].type",
    ),
    "assistant-audio": (
        {"messages": [USER, {"role": "assistant", "content": "x", "audio": {"id": "a1"}}, USER]},
        "unsupported_field",
        "messages[1].audio",
    ),
}


@pytest.fixture
async def echo(nursery: trio.Nursery) -> EchoUpstream:
    upstream = EchoUpstream()
    await nursery.start(upstream.serve)
    return upstream


def remote_env(echo: EchoUpstream, **extra: str) -> dict[str, str]:
    base = f"http://127.0.0.1:{echo.port}"
    return {
        "OPENAI_API_URL": f"{base}/v1",
        "OPENAI_API_KEY": "sk-up",
        "COHERE_API_URL": f"{base}/cohere",
        "COHERE_API_KEY": "co",
        "DEEPSEEK_API_URL": f"{base}/deepseek",
        "DEEPSEEK_API_KEY": "ds",
        "TELEMETRY_ENABLED": "true",
        **extra,
    }


@pytest.fixture
async def gw(nursery: trio.Nursery, echo: EchoUpstream) -> Gateway:
    return await start_gateway(nursery, remote_env(echo))


@pytest.fixture
async def worker(nursery: trio.Nursery) -> FakeSGLang:
    fake = FakeSGLang(Script(tokens=3))
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def local_gw(nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang) -> Gateway:
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(profile_yaml([(worker.port, "default", None)]))
    return await start_gateway(nursery, {}, config_file=cfg)


async def post(gw: Gateway, body: dict[str, Any], path: str = "/v1/chat/completions"):
    return await request(gw.port, "POST", path, orjson.dumps(body))


def arrived(echo: EchoUpstream) -> dict[str, Any]:
    doc = orjson.loads(echo.seen[-1].body)
    assert isinstance(doc, dict)
    return doc


def error_of(body: bytes) -> tuple[str, str | None]:
    err = orjson.loads(body)["error"]
    return err["code"], err["param"]


# --- OpenAI's fields: forwarded remotely, refused locally ----------------------------------


@pytest.mark.parametrize(("name", "value"), OPENAI_FIELDS.items())
async def test_openai_field_reaches_a_remote_provider_as_sent(
    gw: Gateway, echo: EchoUpstream, name: str, value: Any
) -> None:
    body = {"model": "openai/gpt-5", "messages": [USER], name: value}
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    assert arrived(echo) == {**body, "model": "gpt-5"}


@pytest.mark.parametrize(("name", "value"), OPENAI_FIELDS.items())
async def test_openai_field_is_refused_for_a_local_model(
    local_gw: Gateway, worker: FakeSGLang, name: str, value: Any
) -> None:
    resp = await post(local_gw, {"model": "qwen3-8b", "messages": [USER], name: value})
    assert resp.status == 400
    assert error_of(resp.body) == ("unsupported_field", name)
    assert not [r for r in worker.requests if r.path.startswith("/v1/chat")]


@pytest.mark.parametrize("case", OPENAI_VALUES)
async def test_openai_value_reaches_a_remote_provider(
    gw: Gateway, echo: EchoUpstream, case: str
) -> None:
    body = {"model": "openai/gpt-5", "messages": [USER], **OPENAI_VALUES[case][0]}
    echo.answer = lambda seen: sse_answer(USAGE_LAST) if body.get("stream") else Answer()
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    assert arrived(echo) == {**body, "model": "gpt-5"}


@pytest.mark.parametrize("case", OPENAI_VALUES)
async def test_openai_value_is_refused_for_a_local_model(
    local_gw: Gateway, worker: FakeSGLang, case: str
) -> None:
    overrides, code, param = OPENAI_VALUES[case]
    resp = await post(local_gw, {"model": "qwen3-8b", "messages": [USER], **overrides})
    assert resp.status == 400
    assert error_of(resp.body) == (code, param)
    assert not [r for r in worker.requests if r.path.startswith("/v1/chat")]


async def test_openai_completions_fields_reach_a_remote_provider(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = {
        "model": "openai/gpt-3.5-turbo-instruct",
        "prompt": [[1, 2], [3]],
        "n": 3,
        "best_of": 4,
        "echo": True,
        "suffix": "!",
        "logprobs": 2,
        "logit_bias": {"50256": -100},
        "user": "u",
    }
    resp = await post(gw, body, "/v1/completions")
    assert resp.status == 200, resp.body
    assert echo.seen[-1].target == "/v1/completions"
    assert arrived(echo) == {**body, "model": "gpt-3.5-turbo-instruct"}


@pytest.mark.parametrize(
    ("overrides", "code", "param"),
    [
        ({"echo": True}, "unsupported_field", "echo"),
        ({"prompt": ["a", "b"]}, "unsupported_field", "prompt"),
        ({"n": 2}, "unsupported_field", "n"),
    ],
)
async def test_openai_completions_fields_are_refused_for_a_local_model(
    local_gw: Gateway, overrides: dict[str, Any], code: str, param: str
) -> None:
    body = {"model": "qwen3-8b", "prompt": "hi", **overrides}
    resp = await post(local_gw, body, "/v1/completions")
    assert resp.status == 400
    assert error_of(resp.body) == (code, param)


async def test_unknown_fields_are_refused_for_every_target(
    gw: Gateway, local_gw: Gateway, echo: EchoUpstream
) -> None:
    for target, model in ((gw, "openai/gpt-5"), (local_gw, "qwen3-8b")):
        resp = await post(target, {"model": model, "messages": [USER], "store": True, "zz": 1})
        assert resp.status == 400
        assert error_of(resp.body) == ("unsupported_field", "zz")
    assert echo.seen == []


async def test_more_than_128_tools_are_refused_for_a_remote_provider(
    gw: Gateway, echo: EchoUpstream
) -> None:
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]
    resp = await post(gw, {"model": "openai/gpt-5", "messages": [USER], "tools": tools})
    assert resp.status == 400
    assert error_of(resp.body) == ("invalid_request", "tools")
    assert echo.seen == []


async def test_safety_identifier_and_message_name_reach_a_remote_provider(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = {
        "model": "openai/gpt-5",
        "messages": [{"role": "user", "content": "hi", "name": "ada"}],
        "safety_identifier": "hash-1",
        "prompt_cache_key": "k",
        "parallel_tool_calls": False,
        "tools": [TOOL],
    }
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    assert arrived(echo) == {**body, "model": "gpt-5"}


# --- reasoning members of messages ----------------------------------------------------------

CONVERSATION = [
    USER,
    {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4"},
    {"role": "user", "content": "and 3+3?"},
    {"role": "assistant", "content": "6", "reasoning": "3+3 is 6"},
    USER,
]


def without(members: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k not in members} for m in CONVERSATION]


async def test_reasoning_members_reach_a_provider_that_takes_them(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = {"model": "deepseek/deepseek-reasoner", "messages": CONVERSATION, "seed": 7}
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    # DeepSeek takes reasoning_content back; the `reasoning` alias is not its own.
    assert arrived(echo) == {
        **body,
        "model": "deepseek-reasoner",
        "messages": without(("reasoning",)),
    }


async def test_reasoning_members_are_removed_for_a_provider_that_does_not(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = {"model": "openai/gpt-5", "messages": CONVERSATION, "temperature": 0.25}
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    assert arrived(echo) == {
        **body,
        "model": "gpt-5",
        "messages": without(("reasoning", "reasoning_content")),
    }


async def test_a_body_without_reasoning_is_relayed_as_written(
    gw: Gateway, echo: EchoUpstream
) -> None:
    raw = b'{"model":"openai/gpt-5","messages":[{"role":"user","content":"hi"}],"temperature":1e-1}'
    resp = await request(gw.port, "POST", "/v1/chat/completions", raw)
    assert resp.status == 200, resp.body
    assert echo.seen[-1].body == raw.replace(b"openai/gpt-5", b"gpt-5")


async def test_reasoning_members_are_accepted_for_a_local_model(
    local_gw: Gateway, worker: FakeSGLang
) -> None:
    resp = await post(local_gw, {"model": "qwen3-8b", "messages": CONVERSATION})
    assert resp.status == 200, resp.body
    sent = [r.body for r in worker.requests if r.path.startswith("/v1/chat")]
    assert sent[-1]["messages"] == CONVERSATION


# --- stream_options -----------------------------------------------------------------------


async def test_stream_options_dropped_from_a_request_that_does_not_stream(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = {
        "model": "openai/gpt-5",
        "messages": [USER],
        "stream": False,
        "stream_options": {"include_usage": True},
    }
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    assert arrived(echo) == {"model": "gpt-5", "messages": [USER], "stream": False}


# --- usage on every stream ------------------------------------------------------------------

USAGE = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}


def chunk(content: str | None, usage: dict[str, int] | None = None, choices: bool = True) -> bytes:
    doc: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-5"}
    doc["choices"] = (
        [{"index": 0, "delta": {"content": content}, "finish_reason": None}] if choices else []
    )
    if usage is not None:
        doc["usage"] = usage
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def sse_answer(pieces: list[bytes]) -> Answer:
    return Answer(headers=[("content-type", "text/event-stream")], chunks=pieces)


USAGE_LAST = [chunk("Hel"), chunk("lo"), chunk(None, USAGE, choices=False), b"data: [DONE]\n\n"]
# One piece carrying two events, the second only usage.
USAGE_SHARED = [chunk("Hel"), chunk("lo") + chunk(None, USAGE, choices=False) + b"data: [DONE]\n\n"]
# Usage on the last content chunk (some providers do that).
USAGE_ON_CONTENT = [chunk("Hel"), chunk("lo", USAGE), b"data: [DONE]\n\n"]


async def stream(gw: Gateway, **extra: Any) -> list[bytes]:
    body = {"model": "openai/gpt-5", "messages": [USER], "stream": True, **extra}
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    return sse_data(resp.body)


@pytest.mark.parametrize("pieces", [USAGE_LAST, USAGE_SHARED, USAGE_ON_CONTENT])
async def test_usage_is_asked_for_and_withheld_from_a_client_that_did_not_ask(
    gw: Gateway, echo: EchoUpstream, pieces: list[bytes]
) -> None:
    echo.answer = lambda seen: sse_answer(pieces)
    data = await stream(gw)
    assert arrived(echo)["stream_options"] == {"include_usage": True}
    # No extra chunk, no usage: the content chunks and [DONE], as a client that did not ask
    # would get them from OpenAI.
    assert data[-1] == b"[DONE]"
    docs = [orjson.loads(d) for d in data[:-1]]
    assert [d["choices"][0]["delta"]["content"] for d in docs] == ["Hel", "lo"]
    assert all("usage" not in d for d in docs)
    # The gateway read it.
    text = await scrape(gw.metrics_port)
    assert sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input") == 7
    assert sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") == 2


async def test_a_client_that_asked_gets_the_usage_chunk_as_sent(
    gw: Gateway, echo: EchoUpstream
) -> None:
    echo.answer = lambda seen: sse_answer(USAGE_LAST)
    data = await stream(gw, stream_options={"include_usage": True})
    assert arrived(echo)["stream_options"] == {"include_usage": True}
    assert data == [piece[6:-2] for piece in USAGE_LAST]


async def test_asking_for_usage_keeps_include_obfuscation(gw: Gateway, echo: EchoUpstream) -> None:
    echo.answer = lambda seen: sse_answer(USAGE_LAST)
    await stream(gw, stream_options={"include_obfuscation": False})
    assert arrived(echo)["stream_options"] == {
        "include_usage": True,
        "include_obfuscation": False,
    }


async def test_a_provider_without_stream_options_is_not_asked(
    gw: Gateway, echo: EchoUpstream
) -> None:
    echo.answer = lambda seen: sse_answer([chunk("Hi"), b"data: [DONE]\n\n"])
    data = await stream(gw, model="cohere/command-a", stream_options={"include_usage": True})
    assert echo.seen[-1].target == "/cohere/compatibility/v1/chat/completions"
    assert "stream_options" not in arrived(echo)
    assert data[-1] == b"[DONE]"


# --- zai ----------------------------------------------------------------------------------


def test_zai_defaults_to_its_url_with_a_bearer_key() -> None:
    s = Settings.load(environ={"ZAI_API_KEY": "zk"})
    assert s.providers["zai"].url == "https://api.z.ai/api/paas/v4"
    assert s.providers["zai"].provider.auth == "bearer"


async def test_zai_chat_reaches_its_endpoint(nursery: trio.Nursery, echo: EchoUpstream) -> None:
    env = {"ZAI_API_URL": f"http://127.0.0.1:{echo.port}/api/paas/v4", "ZAI_API_KEY": "zk"}
    gw = await start_gateway(nursery, env)
    echo.answer = lambda seen: sse_answer(USAGE_LAST)
    body = {"model": "zai/glm-4.6", "messages": [USER], "stream": True}
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    seen: Seen = echo.seen[-1]
    assert seen.target == "/api/paas/v4/chat/completions"
    assert seen.headers["authorization"] == "Bearer zk"
    assert arrived(echo) == {**body, "model": "glm-4.6", "stream_options": {"include_usage": True}}
