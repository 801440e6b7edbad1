"""Guardrails on every route that sends a client's content to a model: the same policy
blocks, redacts and warns on the same text whatever the URL (chat, completions, Responses,
Messages, Images JSON and multipart, /proxy to each provider's generation paths); whole
answers pass post_call on each; streamed answers are judged as they pass and a block ends
them with the route's own error event (the official SDKs where they apply). A recording
fake provider on loopback (tests/echo_upstream.py) serves every provider's base."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest
import trio

from .conftest import Gateway, in_thread, openai_client, start_gateway
from .echo_upstream import Answer, EchoUpstream, Seen
from .native_streams import messages_stream, sse
from .rawhttp import RawResponse, request
from .test_guardrails import CARD, POLICY, SECRET, policy_dir
from .test_passthrough import MULTIPART, multipart

SSE = [("content-type", "text/event-stream")]
EMAIL = "jane@example.com"
# An image whose bytes spell the blocked word: files are not text the policy reads.
PNG = b"\x89PNG\r\n\x1a\n" + b"forbidden" + bytes(range(256))


@pytest.fixture
async def echo(nursery: trio.Nursery) -> EchoUpstream:
    upstream = EchoUpstream()
    await nursery.start(upstream.serve)
    return upstream


async def guarded(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path, policy: str = POLICY
) -> Gateway:
    base = f"http://127.0.0.1:{echo.port}"
    env = {
        "OPENAI_API_URL": f"{base}/v1",
        "OPENAI_API_KEY": "sk-openai",
        "ANTHROPIC_API_URL": f"{base}/anthropic/v1",
        "ANTHROPIC_API_KEY": "sk-ant",
        "COHERE_API_URL": f"{base}/cohere",
        "COHERE_API_KEY": "co-key",
        "CLOUDFLARE_API_URL": f"{base}/cloudflare/ai",
        "CLOUDFLARE_API_KEY": "cf-key",
        "ENABLE_IMAGES": "true",
        "GUARDRAILS_ENABLED": "true",
        "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path, policy)),
    }
    return await start_gateway(nursery, env)


def edit_form(text: str, model: str = "openai/gpt-image-1") -> bytes:
    return multipart(
        [
            ("image", PNG, "cat.png"),
            ("prompt", text.encode(), None),
            ("model", model.encode(), None),
        ]
    )


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@dataclass(frozen=True)
class Route:
    path: str
    body: Callable[[str], bytes]
    shape: str = "openai"  # how its errors are written: "openai" or "anthropic"
    form: bool = False


ROUTES = {
    "chat": Route(
        "/v1/chat/completions",
        lambda t: orjson.dumps({"model": "openai/gpt-4o", "messages": user(t)}),
    ),
    "completions": Route(
        "/v1/completions", lambda t: orjson.dumps({"model": "openai/gpt-4o", "prompt": t})
    ),
    "responses": Route(
        "/v1/responses", lambda t: orjson.dumps({"model": "openai/gpt-4.1", "input": t})
    ),
    "messages": Route(
        "/v1/messages",
        lambda t: orjson.dumps(
            {"model": "anthropic/claude-sonnet-4-5", "max_tokens": 16, "messages": user(t)}
        ),
        "anthropic",
    ),
    "images-generations": Route(
        "/v1/images/generations",
        lambda t: orjson.dumps({"model": "openai/gpt-image-1", "prompt": t}),
    ),
    "images-edits": Route("/v1/images/edits", edit_form, form=True),
    "proxy-openai-chat": Route(
        "/proxy/openai/chat/completions",
        lambda t: orjson.dumps({"model": "gpt-4o", "messages": user(t)}),
    ),
    # Any spelling the provider decodes to the same path is the same API.
    "proxy-openai-chat-encoded": Route(
        "/proxy/openai/v1/Chat/%63ompletions",
        lambda t: orjson.dumps({"model": "gpt-4o", "messages": user(t)}),
    ),
    "proxy-openai-responses": Route(
        "/proxy/openai/responses", lambda t: orjson.dumps({"model": "gpt-4.1", "input": t})
    ),
    "proxy-anthropic-messages": Route(
        "/proxy/anthropic/messages",
        lambda t: orjson.dumps(
            {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": user(t)}
        ),
        "anthropic",
    ),
    "proxy-openai-images-edits": Route(
        "/proxy/openai/images/edits", lambda t: edit_form(t, "gpt-image-1"), form=True
    ),
    "proxy-cohere-chat": Route(
        "/proxy/cohere/v2/chat",
        lambda t: orjson.dumps({"model": "command-a", "messages": user(t)}),
    ),
    "proxy-workers-ai-run": Route(
        "/proxy/cloudflare/run/@cf/meta/llama-3.1-8b-instruct",
        lambda t: orjson.dumps({"messages": user(t)}),
    ),
}


async def send(gw: Gateway, route: Route, text: str) -> RawResponse:
    return await request(
        gw.port, "POST", route.path, route.body(text), MULTIPART if route.form else None
    )


def blocked_code(resp: RawResponse, shape: str) -> str:
    """The code of an error answer, checking it is in the route's shape."""
    doc = orjson.loads(resp.body)
    if shape == "anthropic":
        assert doc["type"] == "error" and doc["error"]["type"] == "permission_error"
    else:
        assert set(doc["error"]) == {"message", "type", "param", "code"}
        assert doc["error"]["type"] == "permission_error"
    return str(doc["error"]["code"])


# --- pre_call: the same text, every route ------------------------------------------------


@pytest.mark.parametrize("name", list(ROUTES))
async def test_pre_call_blocks_redacts_and_warns_on_every_route(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path, name: str
) -> None:
    route = ROUTES[name]
    gw = await guarded(nursery, echo, tmp_path)
    resp = await send(gw, route, "a forbidden word")
    assert resp.status == 403, resp.body
    assert blocked_code(resp, route.shape) == "guardrails_blocked"
    assert echo.seen == []
    # redact: the secret never reaches the provider; the rest (an image too) as sent.
    resp = await send(gw, route, f"my key is {SECRET}")
    assert resp.status == 200, resp.body
    sent = echo.seen[-1].body
    assert SECRET.encode() not in sent and b"my key is [REDACTED]" in sent
    if route.form:
        assert PNG in sent
    # warn: forwarded as sent, the answer says so.
    resp = await send(gw, route, f"write to {EMAIL}")
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-guardrails-warning"] == b"mentions an e-mail address"
    assert EMAIL.encode() in echo.seen[-1].body


async def test_proxy_paths_that_are_no_generation_are_not_judged(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    body = orjson.dumps({"model": "text-embedding-3-small", "input": "forbidden"})
    resp = await request(gw.port, "POST", "/proxy/openai/embeddings", body)
    assert resp.status == 200
    resp = await request(gw.port, "GET", "/proxy/openai/chat/completions?forbidden=1")
    assert resp.status == 200
    assert len(echo.seen) == 2


WHOAMI = """\
package guardrails

import rego.v1

main := {"action": "block", "message": sprintf("%s %s %s", [input.phase, input.path, input.api])} if {
    contains(input.request.body, "whoami")
} else := {"action": "block", "message": input.request.body} if {
    contains(input.request.body, "showme")
}
"""


async def test_the_input_documents_path_and_api(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path, WHOAMI)

    async def message(name: str, text: str) -> str:
        route = ROUTES[name]
        resp = await send(gw, route, text)
        assert resp.status == 403, resp.body
        return str(orjson.loads(resp.body)["error"]["message"])

    # `path` is the URL the client asked for; `api` the API it speaks, whatever the URL.
    assert await message("messages", "whoami") == "pre_call /v1/messages messages"
    assert (
        await message("proxy-anthropic-messages", "whoami")
        == "pre_call /proxy/anthropic/messages messages"
    )
    assert (
        await message("proxy-openai-chat", "whoami")
        == "pre_call /proxy/openai/chat/completions chat.completions"
    )
    assert (
        await message("proxy-cohere-chat", "whoami") == "pre_call /proxy/cohere/v2/chat cohere.chat"
    )
    assert (
        await message("proxy-workers-ai-run", "whoami")
        == "pre_call /proxy/cloudflare/run/@cf/meta/llama-3.1-8b-instruct workers_ai.run"
    )
    # A form is read as its text fields, its image left out.
    for name in ("images-edits", "proxy-openai-images-edits"):
        shown = orjson.loads(await message(name, "showme"))
        assert shown["prompt"] == "showme" and "image" not in shown
    assert echo.seen == []


# --- post_call on whole answers ----------------------------------------------------------


def anthropic_message(text: str) -> bytes:
    return orjson.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 4},
        }
    )


def response_doc(text: str) -> bytes:
    return orjson.dumps(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-4.1",
            "status": "completed",
            "output": [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )


def answer_for(text: str) -> Callable[[Seen], Answer]:
    """A whole answer saying `text`, in the shape of the API the request reached."""

    def answer(seen: Seen) -> Answer:
        headers = [("content-type", "application/json"), ("x-ratelimit-remaining", "41")]
        if seen.target.endswith("/messages"):
            return Answer(headers=headers, body=anthropic_message(text))
        if seen.target.endswith("/responses"):
            return Answer(headers=headers, body=response_doc(text))
        if "/images/" in seen.target:
            return Answer(headers=headers, body=orjson.dumps({"data": [{"revised_prompt": text}]}))
        doc = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        return Answer(headers=headers, body=orjson.dumps(doc))

    return answer


async def test_sdks_raise_on_a_blocked_whole_answer(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    echo.answer = answer_for("that is forbidden")
    claude = anthropic.Anthropic(base_url=gw.base, api_key="k", max_retries=0, timeout=10)
    try:
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            await in_thread(
                claude.messages.create,
                model="anthropic/claude-sonnet-4-5",
                max_tokens=16,
                messages=user("hi"),
            )
    finally:
        claude.close()
    body = denied.value.body
    assert isinstance(body, dict) and body["error"]["code"] == "guardrails_blocked"
    with openai_client(gw.base) as client:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await in_thread(client.responses.create, model="openai/gpt-4.1", input="hi")
    assert refused.value.code == "guardrails_blocked"
    assert len(echo.seen) == 2  # the provider answered; the client did not get it


@pytest.mark.parametrize(
    "name", ["images-generations", "images-edits", "proxy-openai-chat", "proxy-anthropic-messages"]
)
async def test_post_call_on_a_whole_answer(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path, name: str
) -> None:
    route = ROUTES[name]
    gw = await guarded(nursery, echo, tmp_path)
    echo.answer = answer_for("that is forbidden")
    resp = await send(gw, route, "hi")
    assert resp.status == 403
    assert blocked_code(resp, route.shape) == "guardrails_blocked"
    echo.answer = answer_for(f"your card: {CARD}")
    resp = await send(gw, route, "hi")
    assert resp.status == 200
    assert CARD.encode() not in resp.body and b"your card: [REDACTED]" in resp.body
    assert int(resp.headers[b"content-length"]) == len(resp.body)
    if name.startswith("proxy"):  # the provider's own headers, as /proxy relays them
        assert resp.headers[b"x-ratelimit-remaining"] == b"41"


# --- streams ---------------------------------------------------------------------------


def chat_stream(pieces: list[str]) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        doc = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return sse(None, doc)

    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": p}) for p in pieces),
        chunk({}, "stop"),
        sse(None, "[DONE]"),
    ]


def responses_stream(pieces: list[str]) -> list[bytes]:
    head = orjson.loads(response_doc(""))
    head.update(status="in_progress", output=[])
    events = [
        sse(
            "response.created", {"type": "response.created", "sequence_number": 0, "response": head}
        )
    ]
    for p in pieces:
        delta = {
            "type": "response.output_text.delta",
            "sequence_number": len(events),
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": p,
        }
        events.append(sse(delta["type"], delta))
    done = {"type": "response.output_text.done", "sequence_number": len(events)}
    events.append(
        sse(
            done["type"],
            {
                **done,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "text": "".join(pieces),
            },
        )
    )
    completed = {
        "type": "response.completed",
        "sequence_number": len(events),
        "response": orjson.loads(response_doc("".join(pieces))),
    }
    return [*events, sse(completed["type"], completed)]


def completions_stream(pieces: list[str]) -> list[bytes]:
    def chunk(text: str, finish: str | None = None) -> bytes:
        doc = {"id": "c1", "object": "text_completion", "created": 1, "model": "gpt-4o"}
        return sse(None, {**doc, "choices": [{"index": 0, "text": text, "finish_reason": finish}]})

    return [*(chunk(p) for p in pieces), chunk("", "stop"), sse(None, "[DONE]")]


def cohere_stream(pieces: list[str]) -> list[bytes]:
    def delta(text: str) -> bytes:
        content = {"message": {"content": {"text": text}}}
        return sse("content-delta", {"type": "content-delta", "index": 0, "delta": content})

    return [
        sse("message-start", {"type": "message-start", "id": "m1"}),
        *(delta(p) for p in pieces),
        sse("content-end", {"type": "content-end", "index": 0}),
        sse("message-end", {"type": "message-end", "delta": {"finish_reason": "COMPLETE"}}),
    ]


def workers_ai_stream(pieces: list[str]) -> list[bytes]:
    return [*(sse(None, {"response": p, "p": "abc"}) for p in pieces), sse(None, "[DONE]")]


def streaming(
    events: Callable[[list[str]], list[bytes]], pieces: list[str]
) -> Callable[[Seen], Answer]:
    return lambda seen: Answer(
        headers=[*SSE, ("x-ratelimit-remaining", "41")], chunks=events(pieces)
    )


# The blocked word arrives in two deltas: the stream's text is judged, not each event.
SPLIT = ["The answer is forbid", "den, and more."]


async def test_openai_sdk_raises_on_a_chat_stream_cut_by_a_block(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    echo.answer = streaming(chat_stream, SPLIT)

    def read(client: openai.OpenAI) -> str:
        stream = client.chat.completions.create(
            model="openai/gpt-4o", messages=user("hi"), stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with openai_client(gw.base) as client:
        with pytest.raises(openai.APIError) as raised:
            await in_thread(read, client)
    assert raised.value.code == "guardrails_blocked"


async def test_anthropic_sdk_raises_on_a_messages_stream_cut_by_a_block(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    echo.answer = streaming(messages_stream, SPLIT)

    def read(base: str) -> str:
        client = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0, timeout=10)
        try:
            with client.messages.stream(
                model="anthropic/claude-sonnet-4-5", max_tokens=16, messages=user("hi")
            ) as stream:
                return "".join(stream.text_stream)
        finally:
            client.close()

    # The native route, and the same API through the proxy.
    for base in (gw.base, f"{gw.base}/proxy/anthropic"):
        with pytest.raises(anthropic.APIStatusError) as raised:
            await in_thread(read, base)
        body = raised.value.body
        assert isinstance(body, dict) and body["type"] == "error"
        assert body["error"]["type"] == "permission_error"
        assert body["error"]["code"] == "guardrails_blocked"


async def test_a_responses_stream_cut_by_a_block_ends_with_its_error_event(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    echo.answer = streaming(responses_stream, SPLIT)

    def read(client: openai.OpenAI) -> list[Any]:
        with client.responses.create(model="openai/gpt-4.1", input="hi", stream=True) as stream:
            return list(stream)

    with openai_client(gw.base) as client:
        events = await in_thread(read, client)
    kinds = [e.type for e in events]
    assert kinds[-1] == "error" and "response.completed" not in kinds
    assert events[-1].code == "guardrails_blocked"
    assert events[-1].sequence_number == len(events) - 1


@pytest.mark.parametrize(
    ("path", "events", "error"),
    [
        ("/proxy/openai/chat/completions", chat_stream, b'data: {"error":'),
        ("/proxy/openai/responses", responses_stream, b"event: error\n"),
        ("/proxy/anthropic/v1/messages", messages_stream, b"event: error\n"),
        ("/proxy/cohere/v2/chat", cohere_stream, b'data: {"error":'),
        ("/proxy/cloudflare/run/@cf/meta/llama", workers_ai_stream, b'data: {"error":'),
        ("/v1/completions", completions_stream, b'data: {"error":'),
    ],
    ids=[
        "proxy-chat",
        "proxy-responses",
        "proxy-messages",
        "proxy-cohere",
        "proxy-workers-ai",
        "completions",
    ],
)
async def test_a_stream_cut_by_a_block_in_raw_http(
    nursery: trio.Nursery,
    echo: EchoUpstream,
    tmp_path: Path,
    path: str,
    events: Callable[[list[str]], list[bytes]],
    error: bytes,
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    echo.answer = streaming(events, SPLIT)
    resp = await request(gw.port, "POST", path, b'{"model":"openai/m","prompt":"hi","stream":true}')
    assert resp.status == 200
    last = resp.body.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(error) and b'"guardrails_blocked"' in last
    if last.startswith(b"data: {"):  # OpenAI's envelope: the catalogue's type
        assert orjson.loads(last[6:])["error"]["type"] == "permission_error"
    for end in (b"[DONE]", b"message_stop", b"response.completed", b"message-end"):
        assert end not in resp.body
    if path.startswith("/proxy/"):  # the provider's headers relayed; its answer uncompressed
        assert resp.headers[b"x-ratelimit-remaining"] == b"41"
        assert echo.seen[-1].headers["accept-encoding"] == "identity"


async def test_a_long_stream_is_cut_soon_after_the_blocked_text(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path
) -> None:
    gw = await guarded(nursery, echo, tmp_path)
    pieces = ["All is well so far. " * 2] * 200  # 8,000 characters
    pieces[25] = "Now something forbidden. "
    echo.answer = streaming(chat_stream, pieces)
    body = orjson.dumps({"model": "openai/gpt-4o", "messages": user("hi"), "stream": True})
    resp = await request(gw.port, "POST", "/v1/chat/completions", body)
    data = [orjson.loads(line[6:]) for line in resp.body.split(b"\n") if line.startswith(b"data: ")]
    assert data[-1]["error"]["code"] == "guardrails_blocked"
    relayed = "".join(d["choices"][0]["delta"].get("content", "") for d in data[:-1])
    # Judged at least once each time the text grew by a quarter (and 256 characters): the
    # cut comes well before the answer's end, however its pieces were read.
    assert "".join(pieces).startswith(relayed)
    assert len(relayed) < 2 * 1000 + 256 + 40


async def test_redact_ends_a_stream_and_warn_lets_it_finish(
    nursery: trio.Nursery, echo: EchoUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.guardrails")
    gw = await guarded(nursery, echo, tmp_path)
    body = orjson.dumps(
        {
            "model": "anthropic/claude-sonnet-4-5",
            "max_tokens": 9,
            "stream": True,
            "messages": user("hi"),
        }
    )
    # A secret streamed cannot be taken back: the rest is withheld.
    echo.answer = streaming(messages_stream, ["your card is ", CARD])
    resp = await request(gw.port, "POST", "/v1/messages", body)
    assert resp.status == 200
    assert resp.body.endswith(b"\n\n") and b"event: error\n" in resp.body
    assert b"message_stop" not in resp.body
    assert b"streamed text cannot be redacted" in resp.body
    # warn: logged, the stream goes on to its end.
    echo.answer = streaming(messages_stream, ["write to ", EMAIL])
    resp = await request(gw.port, "POST", "/v1/messages", body)
    assert resp.status == 200 and b"event: message_stop" in resp.body
    assert b"event: error" not in resp.body
    assert any("warn on post_call" in r.getMessage() for r in caplog.records)
