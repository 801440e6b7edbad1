"""/v1/messages for any model (ENABLE_API_TRANSLATION=true): the official Anthropic SDK's
`messages.create` and `messages.stream` against an OpenAI-shaped provider (the mock) and a
local model (the fake SGLang), through translation: text, a tool-use round trip, errors
before and during a stream, the refusals of what has no translation, and count_tokens."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest
import trio

from edgegw.mock import WORDS, MockUpstream

from .bad_upstream import BadUpstream, Script, chunk, response
from .conftest import Gateway, in_thread, sample, scrape, start_gateway, upstream_env
from .echo_upstream import Answer, EchoUpstream
from .fake_sglang import FakeSGLang
from .fake_sglang import Script as WorkerScript
from .rawhttp import request
from .test_local import local_gateway, profile_yaml
from .test_passthrough import ANTHROPIC_KEY, provider_env

ON = {"ENABLE_API_TRANSLATION": "true"}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
async def gw(nursery: trio.Nursery, mock: MockUpstream) -> Gateway:
    return await start_gateway(nursery, upstream_env(mock, TELEMETRY_ENABLED="true", **ON))


def claude(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base, api_key="k", max_retries=0, timeout=10)


def chat_bodies(mock: MockUpstream) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in mock.requests if r.path == "/v1/chat/completions"]


async def test_create_text_through_a_chat_provider(gw: Gateway, mock: MockUpstream) -> None:
    client = claude(gw)
    msg = await in_thread(
        client.messages.create,
        model="openai/mock-small",
        max_tokens=5,
        system="Be brief.",
        messages=[{"role": "user", "content": "hello"}],
        stop_sequences=["\n\n"],
        metadata={"user_id": "u-1"},
        # Sampling fields this SDK no longer types; older clients (and the API) take them.
        extra_body={"temperature": 0.5},
    )
    client.close()
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.model == "openai/mock-small"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == " ".join(WORDS[:5])
    assert msg.stop_reason == "max_tokens"  # the mock's cap: chat's "length"
    assert msg.usage.output_tokens == 5 and msg.usage.input_tokens > 0
    sent = chat_bodies(mock)[-1]
    assert sent["model"] == "mock-small"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert (sent["max_tokens"], sent["stop"], sent["temperature"], sent["user"]) == (
        5,
        ["\n\n"],
        0.5,
        "u-1",
    )
    # Recorded as chat requests are: provider, model, status, usage.
    text = await scrape(gw.metrics_port)
    assert sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") == 5


async def test_stream_text_with_the_sdk_helpers(gw: Gateway) -> None:
    client = claude(gw)

    def run() -> tuple[list[str], Any, list[str]]:
        with client.messages.stream(
            model="openai/mock-small",
            max_tokens=6,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        ) as stream:
            kinds: list[str] = []
            texts = []
            for event in stream:
                kinds.append(event.type)
                if event.type == "text":
                    texts.append(event.text)
            return texts, stream.get_final_message(), kinds

    texts, final, kinds = await in_thread(run)
    client.close()
    assert "".join(texts) == " ".join(WORDS[:6])
    assert final.content[0].text == " ".join(WORDS[:6])
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 6 and final.usage.input_tokens > 0
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_use_round_trip(gw: Gateway, mock: MockUpstream, stream: bool) -> None:
    client = claude(gw)
    first_turn: list[dict[str, Any]] = [{"role": "user", "content": "weather in Paris?"}]

    def ask(messages: list[dict[str, Any]]) -> Any:
        kw: dict[str, Any] = {
            "model": "openai/mock-small",
            "max_tokens": 200,
            "tools": [WEATHER],
            "messages": messages,
        }
        if not stream:
            return client.messages.create(**kw)
        with client.messages.stream(**kw) as s:
            return s.get_final_message()

    msg = await in_thread(ask, first_turn)
    assert msg.stop_reason == "tool_use"
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "get_weather" and isinstance(use.input["city"], str)
    sent = chat_bodies(mock)[-1]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    second_turn = [
        *first_turn,
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"},
            ],
        },
    ]
    answer = await in_thread(ask, second_turn)
    client.close()
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert answer.content[0].type == "text"
    sent = chat_bodies(mock)[-1]["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["tool_calls"][0]["id"] == use.id
    assert orjson.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == use.input
    assert sent[2:] == [{"role": "tool", "tool_call_id": use.id, "content": "sunny"}]


async def test_tool_choice_and_parallel_calls_map(gw: Gateway, mock: MockUpstream) -> None:
    client = claude(gw)
    await in_thread(
        client.messages.create,
        model="openai/mock-small",
        max_tokens=50,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "x"}],
    )
    sent = chat_bodies(mock)[-1]
    assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("required", False)
    await in_thread(
        client.messages.create,
        model="openai/mock-small",
        max_tokens=50,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "x"}],
    )
    client.close()
    assert chat_bodies(mock)[-1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


async def test_upstream_errors_in_anthropics_shape(gw: Gateway) -> None:
    client = claude(gw)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await in_thread(
            client.messages.create,
            model="openai/mock-error-429",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
        )
    assert caught.value.status_code == 429
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    # Cut mid-stream: the SDK raises on the `event: error` that ends it.

    def cut() -> None:
        with client.messages.stream(
            model="openai/mock-break-after-2",
            max_tokens=50,
            messages=[{"role": "user", "content": "x"}],
        ) as stream:
            for _ in stream:
                pass

    with pytest.raises(anthropic.APIStatusError) as failed:
        await in_thread(cut)
    client.close()
    assert failed.value.body["error"]["code"] in (  # type: ignore[index]
        "upstream_stream_truncated",
        "upstream_connection_lost",
    )


async def test_an_error_event_mid_stream_becomes_anthropics(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "He"}}]}
    error = b'{"error":{"message":"overloaded","type":"server_error","code":"upstream_error"}}'
    pieces = [
        response(200, [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]),
        chunk(b"data: " + orjson.dumps(role) + b"\n\n"),
        chunk(b"data: " + error + b"\n\n"),
        b"0\r\n\r\n",
    ]
    bad = BadUpstream(Script([(0, p) for p in pieces]))
    await nursery.start(bad.serve)
    port = bad.port
    gw = await start_gateway(
        nursery, {"OPENAI_API_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "k", **ON}
    )
    resp = await request(
        gw.port,
        "POST",
        "/v1/messages",
        orjson.dumps(
            {
                "model": "openai/x",
                "max_tokens": 5,
                "stream": True,
                "messages": [{"role": "user", "content": "x"}],
            }
        ),
    )
    events = [e for e in resp.body.split(b"\n\n") if e]
    assert events[0].startswith(b"event: message_start")
    assert b"event: content_block_delta" in resp.body
    last = events[-1]
    assert last.startswith(b"event: error\ndata: ")
    doc = orjson.loads(last.split(b"data: ", 1)[1])
    assert doc["type"] == "error" and doc["error"]["message"] == "overloaded"
    assert b"message_stop" not in resp.body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        ({"container": "c-1"}, "container"),
        ({"metadata": {"user_id": "u", "tier": "gold"}}, "metadata.tier"),
        ({"thinking": {"type": "between_tools"}}, "thinking"),
        ({"output_config": {"effort": "max"}}, "output_config.effort"),
        # A local-only sampling field refused for a remote target, as on chat.
        ({"top_k": 5}, "top_k"),
    ],
)
async def test_untranslatable_input_is_refused(
    gw: Gateway, mock: MockUpstream, body: dict[str, Any], param: str
) -> None:
    doc = {
        "model": "openai/mock-small",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        **body,
    }
    before = len(mock.requests)
    resp = await request(gw.port, "POST", "/v1/messages", orjson.dumps(doc))
    assert resp.status == 400
    err = orjson.loads(resp.body)
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["code"] == "unsupported_field"
    assert err["error"]["message"].startswith(f"'{param}' ")
    assert len(mock.requests) == before


async def test_anthropic_targets_still_pass_through(gw: Gateway) -> None:
    # Translation on: an anthropic/ model still goes to Anthropic's own API (not configured
    # here: the native route's refusal, not a translation).
    resp = await request(
        gw.port,
        "POST",
        "/v1/messages",
        b'{"model":"anthropic/claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}',
    )
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"]) == (400, "provider_not_configured")


# -- a local model ----------------------------------------------------------------------


@pytest.fixture
async def worker(nursery: trio.Nursery) -> FakeSGLang:
    def tools(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
        last = payload["messages"][-1]
        return (
            [("get_weather", {"city": "Paris"})]
            if payload.get("tools") and last["role"] == "user"
            else None
        )

    fake = FakeSGLang(WorkerScript(tokens=6, tool_reply=tools))
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def local(nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang) -> Gateway:
    text = profile_yaml([(worker.port, "default", None)], capabilities="{tools: true}")
    return await local_gateway(nursery, tmp_path, text, ON)


async def test_local_model_create_and_stream(local: Gateway, worker: FakeSGLang) -> None:
    client = claude(local)
    msg = await in_thread(
        client.messages.create,
        model="qwen3-8b",
        max_tokens=50,
        messages=[{"role": "user", "content": "hello"}],
    )
    assert msg.model == "qwen3-8b" and msg.stop_reason == "end_turn"
    assert msg.content[0].type == "text" and len(msg.content[0].text.split()) == 6
    assert msg.usage.output_tokens > 0

    def streamed() -> tuple[str, Any]:
        with client.messages.stream(
            model="qwen3-8b", max_tokens=50, messages=[{"role": "user", "content": "hello"}]
        ) as stream:
            return "".join(stream.text_stream), stream.get_final_message()

    text, final = await in_thread(streamed)
    client.close()
    assert text == final.content[0].text == msg.content[0].text
    assert final.usage.output_tokens == msg.usage.output_tokens
    sent = [r.body for r in worker.requests if r.path.startswith("/v1/chat/completions")]
    assert sent[-1]["stream"] is True
    assert sent[-1]["messages"] == [{"role": "user", "content": "hello"}]


async def test_local_model_tool_round_trip_streamed(local: Gateway) -> None:
    client = claude(local)

    def ask(messages: list[dict[str, Any]]) -> Any:
        with client.messages.stream(
            model="qwen3-8b", max_tokens=50, tools=[WEATHER], messages=messages
        ) as stream:
            return stream.get_final_message()

    turn = [{"role": "user", "content": "weather?"}]
    msg = await in_thread(ask, turn)
    (use,) = msg.content
    assert (use.type, use.name, use.input, msg.stop_reason) == (
        "tool_use",
        "get_weather",
        {"city": "Paris"},
        "tool_use",
    )
    turn += [
        {"role": "assistant", "content": [use.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
        },
    ]
    answer = await in_thread(ask, turn)
    client.close()
    assert answer.content[0].type == "text" and answer.stop_reason == "end_turn"


async def test_local_refusal_and_worker_failure(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang, caplog: pytest.LogCaptureFixture
) -> None:
    text = profile_yaml([(worker.port, "default", None)], capabilities="{tools: false}")
    gw = await local_gateway(nursery, tmp_path, text, ON)
    client = claude(gw)
    # The profile takes no tools: the SIE contract's refusal, in Anthropic's shape.
    with pytest.raises(anthropic.BadRequestError) as refused:
        await in_thread(
            client.messages.create,
            model="qwen3-8b",
            max_tokens=5,
            tools=[WEATHER],
            messages=[{"role": "user", "content": "x"}],
        )
    assert refused.value.body["error"]["code"] == "unsupported_field"  # type: ignore[index]
    # A worker that dies mid-stream: SIE's final chunk becomes `event: error`.
    worker.script.crash_after_tokens = 2
    caplog.set_level(logging.WARNING)

    def cut() -> str:
        out = ""
        with client.messages.stream(
            model="qwen3-8b", max_tokens=50, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            for text in stream.text_stream:
                out += text
        return out

    with pytest.raises(anthropic.APIStatusError) as failed:
        await in_thread(cut)
    client.close()
    assert failed.value.body["type"] == "error"  # type: ignore[index]


async def test_count_tokens_from_a_local_tokenizer(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang, mock: MockUpstream
) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["hello there general kenobi"], trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    text = profile_yaml([(worker.port, "default", None)], tokenizer="tokenizer.json")
    gw = await local_gateway(nursery, tmp_path, text, {**upstream_env(mock), **ON})
    client = claude(gw)
    counted = await in_thread(
        client.messages.count_tokens,
        model="qwen3-8b",
        system="general kenobi",
        messages=[{"role": "user", "content": "hello there"}],
    )
    more = await in_thread(
        client.messages.count_tokens,
        model="qwen3-8b",
        system="general kenobi",
        messages=[{"role": "user", "content": "hello there hello there"}],
    )
    assert more.input_tokens - counted.input_tokens == 2
    # A remote model has no tokenizer here: a clear 400, not a guess.
    with pytest.raises(anthropic.BadRequestError) as refused:
        await in_thread(
            client.messages.count_tokens,
            model="openai/mock-small",
            messages=[{"role": "user", "content": "x"}],
        )
    client.close()
    assert refused.value.body["error"]["code"] == "unsupported_provider"  # type: ignore[index]


@pytest.mark.parametrize("translation", ["false", "true"])
async def test_count_tokens_of_anthropic_models_is_anthropics(
    nursery: trio.Nursery, translation: str
) -> None:
    echo = EchoUpstream()
    await nursery.start(echo.serve)
    echo.answer = lambda seen: Answer(
        headers=[("content-type", "application/json")], body=b'{"input_tokens":12}'
    )
    gw = await start_gateway(nursery, provider_env(echo, ENABLE_API_TRANSLATION=translation))
    client = claude(gw)
    counted = await in_thread(
        client.messages.count_tokens,
        model="anthropic/claude-sonnet-4-5",
        messages=[{"role": "user", "content": "hello"}],
    )
    client.close()
    assert counted.input_tokens == 12
    seen = echo.seen[-1]
    assert seen.target == "/anthropic/v1/messages/count_tokens"
    assert orjson.loads(seen.body)["model"] == "claude-sonnet-4-5"
    assert seen.headers["x-api-key"] == ANTHROPIC_KEY


async def test_a_claude_code_shaped_request(gw: Gateway, mock: MockUpstream) -> None:
    """What coding agents send beyond the basics: `?beta=true`, beta headers, cache_control
    on blocks and tools, a system message among the turns, context editing (accepted, no
    edit applied, and the answer says so)."""
    doc = {
        "model": "openai/mock-small",
        "max_tokens": 32,
        "temperature": 1,
        "system": [
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral"}}
                ],
            },
            {"role": "system", "content": "The user switched branches."},
            {"role": "user", "content": "go on"},
        ],
        "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "session-1"},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    }
    headers = [
        ("anthropic-beta", "context-management-2025-06-27"),
        ("anthropic-version", "2023-06-01"),
    ]
    whole = await request(gw.port, "POST", "/v1/messages?beta=true", orjson.dumps(doc), headers)
    assert whole.status == 200, whole.body
    answer = orjson.loads(whole.body)
    assert answer["context_management"] == {"applied_edits": []}
    sent = chat_bodies(mock)[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "You are a coding agent.\n\nBe careful."},
        {"role": "user", "content": "fix it"},
        {"role": "system", "content": "The user switched branches."},
        {"role": "user", "content": "go on"},
    ]
    assert "context_management" not in sent and "cache_control" not in orjson.dumps(sent).decode()
    streamed = await request(
        gw.port, "POST", "/v1/messages?beta=true", orjson.dumps({**doc, "stream": True}), headers
    )
    delta = next(
        orjson.loads(block.split(b"data: ", 1)[1])
        for block in streamed.body.split(b"\n\n")
        if block.startswith(b"event: message_delta")
    )
    assert delta["context_management"] == {"applied_edits": []}


async def test_a_tenants_scope_and_limits_hold_on_translated_requests(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    sha = hashlib.sha256(b"sk-team").hexdigest()
    keys.write_text(f"tenant team models=openai/mock-small rpm=1\nkey k tenant=team sha256={sha}\n")
    env = upstream_env(mock, EDGEGW_API_KEYS_FILE=str(keys), **ON)
    gw = await start_gateway(nursery, {**env, "TENANTS_STORE_PATH": str(tmp_path / "u.sqlite3")})
    client = anthropic.Anthropic(base_url=gw.base, api_key="sk-team", max_retries=0, timeout=10)
    ask: dict[str, Any] = {"max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.PermissionDeniedError):
        await in_thread(client.messages.create, model="openai/mock-large", **ask)
    msg = await in_thread(client.messages.create, model="openai/mock-small", **ask)
    assert msg.usage.output_tokens == 3
    with pytest.raises(anthropic.RateLimitError) as refused:
        await in_thread(client.messages.create, model="openai/mock-small", **ask)
    client.close()
    assert refused.value.response.headers["retry-after"] == "60"
    assert len(chat_bodies(mock)) == 1
