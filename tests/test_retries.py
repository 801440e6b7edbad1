"""Retries before the first byte (edgegw.retry): an upstream that fails a few times and then
answers is invisible to the client; one that keeps failing gives the client its last error
within the bound; nothing is sent twice once the client has a byte; Images and /proxy
retry only a refused connection, /proxy nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anthropic
import openai
import orjson
import pytest
import trio

from edgegw.mock import MockUpstream
from edgegw.settings import Settings, SettingsError

from .bad_upstream import RESET, BadUpstream, Script
from .conftest import Gateway, in_thread, openai_client, start_gateway, upstream_env
from .echo_upstream import Answer, EchoUpstream, Seen
from .rawhttp import request
from .test_routing import alias, closed_port, models_seen, providers, routed, selected

# Short waits: the policy's shape is the same at any scale.
FAST = {"UPSTREAM_RETRY_BACKOFF": "10ms", "UPSTREAM_RETRY_MAX_BACKOFF": "20ms"}
MESSAGES = [{"role": "user", "content": "Hi"}]
CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def failing(
    times: int, status: int, body: object, headers: dict[str, str] | None = None
) -> Callable[[Seen], Answer]:
    """An answer function: `status` for the first `times` requests, then 200 with `body`."""
    answered = 0
    error = orjson.dumps({"error": {"message": "busy", "type": "server_error", "code": None}})

    def answer(seen: Seen) -> Answer:
        nonlocal answered
        answered += 1
        if answered <= times:
            head = [("content-type", "application/json"), *(headers or {}).items()]
            return Answer(status, head, error)
        return Answer(200, body=orjson.dumps(body))

    return answer


@pytest.fixture
async def echo(nursery: trio.Nursery) -> EchoUpstream:
    upstream = EchoUpstream()
    await nursery.start(upstream.serve)
    return upstream


async def gateway_to(nursery: trio.Nursery, echo: EchoUpstream, **env: str) -> Gateway:
    base = f"http://127.0.0.1:{echo.port}"
    return await start_gateway(
        nursery,
        {
            "OPENAI_API_URL": f"{base}/v1",
            "OPENAI_API_KEY": "sk-openai",
            "ANTHROPIC_API_URL": f"{base}/anthropic/v1",
            "ANTHROPIC_API_KEY": "sk-ant",
            "ENABLE_IMAGES": "true",
            **FAST,
            **env,
        },
    )


def chat_create(client: openai.OpenAI) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(model="openai/gpt-4o-mini", messages=MESSAGES)


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_a_few_failures_then_an_answer_is_one_200(
    nursery: trio.Nursery, echo: EchoUpstream, status: int
) -> None:
    echo.answer = failing(2, status, CHAT)
    gw = await gateway_to(nursery, echo)
    with openai_client(gw.base) as client:
        completion = await in_thread(chat_create, client)
    assert completion.choices[0].message.content == "Hello"
    assert len(echo.seen) == 3
    # Each attempt carries the same request.
    assert len({s.body for s in echo.seen}) == 1


async def test_an_upstream_that_keeps_failing_gives_its_last_error(
    nursery: trio.Nursery, echo: EchoUpstream
) -> None:
    echo.answer = failing(100, 503, CHAT)
    gw = await gateway_to(nursery, echo, UPSTREAM_RETRY_ATTEMPTS="4")
    with openai_client(gw.base) as client, pytest.raises(openai.InternalServerError) as raised:
        await in_thread(chat_create, client)
    assert raised.value.status_code == 503
    assert raised.value.body["message"] == "busy"  # type: ignore[index]
    assert len(echo.seen) == 4


async def test_the_deadline_stops_retrying_before_the_attempts_run_out(
    nursery: trio.Nursery, echo: EchoUpstream
) -> None:
    """Ten attempts allowed, but waits of 40..80 ms fit a 100 ms deadline at most twice."""
    echo.answer = failing(100, 503, CHAT)
    gw = await gateway_to(
        nursery,
        echo,
        UPSTREAM_RETRY_ATTEMPTS="10",
        UPSTREAM_RETRY_BACKOFF="80ms",
        UPSTREAM_RETRY_MAX_BACKOFF="80ms",
        UPSTREAM_RETRY_DEADLINE="100ms",
    )
    resp = await request(
        gw.port, "POST", "/v1/chat/completions",
        body=orjson.dumps({"model": "openai/gpt-4o-mini", "messages": MESSAGES}),
    )  # fmt: skip
    assert resp.status == 503
    assert 2 <= len(echo.seen) <= 3


async def test_one_attempt_means_no_retry(nursery: trio.Nursery, echo: EchoUpstream) -> None:
    echo.answer = failing(1, 503, CHAT)
    gw = await gateway_to(nursery, echo, UPSTREAM_RETRY_ATTEMPTS="1")
    with openai_client(gw.base) as client, pytest.raises(openai.InternalServerError):
        await in_thread(chat_create, client)
    assert len(echo.seen) == 1


@pytest.mark.parametrize(("told", "retried"), [("0", True), ("1", True), ("7", False)])
async def test_a_429_is_retried_only_when_its_retry_after_is_short(
    nursery: trio.Nursery, echo: EchoUpstream, told: str, retried: bool
) -> None:
    echo.answer = failing(1, 429, CHAT, {"retry-after": told})
    gw = await gateway_to(nursery, echo, UPSTREAM_RETRY_MAX_RETRY_AFTER="1s")
    with openai_client(gw.base) as client:
        if retried:
            completion = await in_thread(chat_create, client)
            assert completion.choices[0].message.content == "Hello"
        else:
            with pytest.raises(openai.RateLimitError) as raised:
                await in_thread(chat_create, client)
            assert raised.value.response.headers["retry-after"] == told
    assert len(echo.seen) == (2 if retried else 1)


async def test_a_429_without_retry_after_goes_to_the_client(
    nursery: trio.Nursery, echo: EchoUpstream
) -> None:
    echo.answer = failing(1, 429, CHAT)
    gw = await gateway_to(nursery, echo)
    with openai_client(gw.base) as client, pytest.raises(openai.RateLimitError):
        await in_thread(chat_create, client)
    assert len(echo.seen) == 1


@pytest.mark.parametrize("status", [400, 401, 404, 500])
async def test_other_errors_are_not_retried(
    nursery: trio.Nursery, echo: EchoUpstream, status: int
) -> None:
    echo.answer = failing(1, status, CHAT)
    gw = await gateway_to(nursery, echo)
    with openai_client(gw.base) as client, pytest.raises(openai.APIStatusError) as raised:
        await in_thread(chat_create, client)
    assert raised.value.status_code == status
    assert len(echo.seen) == 1


async def test_a_reset_connection_is_retried(nursery: trio.Nursery) -> None:
    bad = BadUpstream(Script(end=RESET))
    await nursery.start(bad.serve)
    gw = await start_gateway(
        nursery,
        {"OPENAI_API_URL": f"http://127.0.0.1:{bad.port}/v1", "OPENAI_API_KEY": "sk", **FAST},
    )
    with openai_client(gw.base) as client, pytest.raises(openai.InternalServerError) as raised:
        await in_thread(chat_create, client)
    assert raised.value.status_code == 502
    assert raised.value.code == "upstream_connection_lost"
    assert bad.connections == 3


async def test_a_refused_connection_is_retried_and_logged(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.streaming")
    port = closed_port()
    gw = await start_gateway(
        nursery, {"OPENAI_API_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "sk", **FAST}
    )
    with openai_client(gw.base) as client, pytest.raises(openai.InternalServerError) as raised:
        await in_thread(chat_create, client)
    assert raised.value.status_code == 502
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying")]
    assert retries == ["retrying 127.0.0.1 /v1/chat/completions after upstream_unreachable"] * 2


async def test_nothing_is_retried_after_the_first_byte(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    """A stream that breaks after its head and a chunk ends with an error event; the
    upstream is asked once."""
    gw = await start_gateway(nursery, upstream_env(mock, **FAST))

    def run(client: openai.OpenAI) -> list[str]:
        stream = client.chat.completions.create(
            model="openai/mock-break-after-1", messages=MESSAGES, stream=True
        )
        got = []
        with pytest.raises(openai.APIError):
            for chunk in stream:
                got.extend(c.delta.content or "" for c in chunk.choices)
        return got

    with openai_client(gw.base) as client:
        got = await in_thread(run, client)
    assert got and "".join(got)
    assert len(mock.requests) == 1


async def test_messages_are_retried_like_chat(nursery: trio.Nursery, echo: EchoUpstream) -> None:
    echo.answer = failing(2, 503, MESSAGE)
    gw = await gateway_to(nursery, echo)
    client = anthropic.Anthropic(base_url=gw.base, api_key="client-key", max_retries=0)
    with client:
        message = await in_thread(
            client.messages.create,
            model="anthropic/claude-sonnet-4-5",
            max_tokens=16,
            messages=MESSAGES,
        )
    assert message.content[0].text == "Hello"  # type: ignore[union-attr]
    assert len(echo.seen) == 3


@pytest.mark.parametrize("path", ["/v1/images/generations", "/proxy/openai/chat/completions"])
async def test_images_and_proxy_do_not_resend_what_reached_the_upstream(
    nursery: trio.Nursery, echo: EchoUpstream, path: str
) -> None:
    """A 503 may follow work done (an image made, a call billed): it goes to the client."""
    echo.answer = failing(1, 503, {"data": []})
    gw = await gateway_to(nursery, echo)
    body = {"model": "openai/gpt-image-1", "prompt": "a cat"}
    if path.startswith("/proxy"):
        body = {"model": "gpt-4o-mini", "messages": MESSAGES}
    resp = await request(gw.port, "POST", path, body=orjson.dumps(body))
    assert resp.status == 503
    assert len(echo.seen) == 1


async def test_images_retry_a_refused_connection(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.streaming")
    port = closed_port()
    gw = await start_gateway(
        nursery,
        {
            "OPENAI_API_URL": f"http://127.0.0.1:{port}/v1",
            "OPENAI_API_KEY": "sk",
            "ENABLE_IMAGES": "true",
            **FAST,
        },
    )
    body = orjson.dumps({"model": "openai/gpt-image-1", "prompt": "a cat"})
    resp = await request(gw.port, "POST", "/v1/images/generations", body=body)
    assert resp.status == 502
    assert sum(r.getMessage().startswith("retrying") for r in caplog.records) == 2


async def test_an_alias_fails_over_without_retrying_the_same_deployment(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """Within an alias a 503 moves the request to the next deployment, once each."""
    config = {"models": {"fast": alias(("openai", "mock-error-503"), ("groq", "m2"))}}
    env = {**providers(mock), "UPSTREAM_RETRY_BACKOFF": "10ms"}
    gw = await routed(nursery, tmp_path, config, env)
    resp = await request(
        gw.port, "POST", "/v1/chat/completions",
        body=orjson.dumps({"model": "fast", "messages": MESSAGES}),
    )  # fmt: skip
    assert resp.status == 200
    assert selected(resp) == (b"groq", b"m2")
    assert models_seen(mock) == ["mock-error-503", "m2"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("UPSTREAM_RETRY_ATTEMPTS", "0"),
        ("UPSTREAM_RETRY_ATTEMPTS", "11"),
        ("UPSTREAM_RETRY_BACKOFF", "-1s"),
        ("UPSTREAM_RETRY_DEADLINE", "0"),
        ("UPSTREAM_RETRY_MAX_RETRY_AFTER", "soon"),
    ],
)
def test_retry_settings_out_of_range_stop_the_start(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.load(environ={name: value})


def test_retry_settings_are_read() -> None:
    s = Settings.load(
        environ={
            "UPSTREAM_RETRY_ATTEMPTS": "5",
            "UPSTREAM_RETRY_BACKOFF": "0",
            "UPSTREAM_RETRY_MAX_BACKOFF": "1s",
            "UPSTREAM_RETRY_MAX_RETRY_AFTER": "500ms",
            "UPSTREAM_RETRY_DEADLINE": "1m",
        }
    )
    assert s.retry_attempts == 5
    assert (s.retry_backoff_s, s.retry_max_backoff_s) == (0.0, 1.0)
    assert (s.retry_max_retry_after_s, s.retry_deadline_s) == (0.5, 60.0)
