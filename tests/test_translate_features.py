"""Translated /v1/messages and /v1/responses go through the chat path's features: the
guardrails judge the chat request and answer they become (a block in the API's own shape,
whole or mid-stream), MCP tools run their loop inside (the client seeing only the final
answer, translated), a routing alias fails over, and the request is traced as chat
(tests/scripted_model.py, tests/mcp_server.py, the mock and an OTLP receiver as peers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest
import trio

from edgegw.mock import MockUpstream

from .conftest import in_thread, openai_client, start_gateway
from .echo_upstream import EchoUpstream
from .otlp_receiver import OtlpReceiver
from .rawhttp import request
from .scripted_model import ScriptedModel, last_tool_results, text, tool_calls
from .test_guardrails import SECRET, policy_dir
from .test_mcp import (  # noqa: F401  (pytestmark and the fixture: the SDK's garbage)
    _collect_sdk_garbage,
    mcp_env,
    pytestmark,
    wait_for_tool,
)
from .test_mcp_agent import add_then_answer
from .test_mcp_agent import setup_gateway as mcp_gateway
from .test_routing import alias, closed_port, providers, routed
from .test_tracing import TRACE_ID, TRACEPARENT, exported, server_span, tracing_env
from .test_tracing import answer as traced_answer

ON = {"ENABLE_API_TRANSLATION": "true"}


def messages_body(content: str, **extra: Any) -> bytes:
    return orjson.dumps(
        {
            "model": "openai/gpt-4o",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": content}],
            **extra,
        }
    )


async def guarded(nursery: trio.Nursery, tmp_path: Path, script: Any) -> tuple[ScriptedModel, int]:
    model = ScriptedModel(script)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            # The same model as groq: a provider without the Responses API.
            "GROQ_API_URL": model.env()["OPENAI_API_URL"],
            "GROQ_API_KEY": "sk-scripted",
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path)),
            **ON,
        },
    )
    return model, gw.port


async def test_guardrails_block_and_redact_translated_requests(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model, port = await guarded(
        nursery, tmp_path, lambda body: text(f"you said: {body['messages'][-1]['content']}")
    )
    resp = await request(port, "POST", "/v1/messages", messages_body("a forbidden word"))
    doc = orjson.loads(resp.body)
    assert resp.status == 403 and doc["type"] == "error"
    assert (doc["error"]["type"], doc["error"]["code"]) == (
        "permission_error",
        "guardrails_blocked",
    )
    resp = await request(
        port, "POST", "/v1/responses", b'{"model":"groq/gpt-4o","input":"forbidden"}'
    )
    assert resp.status == 403
    assert orjson.loads(resp.body)["error"]["code"] == "guardrails_blocked"
    assert model.bodies == []
    # Redacted before the model: the chat request it became carries no secret.
    resp = await request(port, "POST", "/v1/messages", messages_body(f"my key is {SECRET}"))
    assert resp.status == 200, resp.body
    assert model.bodies[-1]["messages"][-1]["content"] == "my key is [REDACTED]"
    assert orjson.loads(resp.body)["content"][0]["text"] == "you said: my key is [REDACTED]"


async def test_a_streamed_answer_blocked_mid_way_ends_with_the_apis_error(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    _, port = await guarded(nursery, tmp_path, lambda body: text("that is forbidden"))
    claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)

    def stream() -> None:
        with claude.messages.stream(
            model="openai/gpt-4o", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            for _ in s:
                pass

    with pytest.raises(anthropic.APIStatusError) as blocked:
        await in_thread(stream)
    claude.close()
    assert blocked.value.body["error"]["code"] == "guardrails_blocked"  # type: ignore[index]
    with openai_client(f"http://127.0.0.1:{port}") as client:

        def responses() -> list[Any]:
            with client.responses.stream(model="groq/gpt-4o", input="hi") as s:
                return list(s)

        events = await in_thread(responses)
    assert events[-1].type == "error" and events[-1].code == "guardrails_blocked"


@pytest.mark.parametrize("stream", [False, True])
async def test_mcp_tools_run_inside_a_translated_request(
    nursery: trio.Nursery, stream: bool
) -> None:
    tools, model, gw = await mcp_gateway(nursery, add_then_answer, **ON)
    claude = anthropic.Anthropic(base_url=gw.base, api_key="k", max_retries=0, timeout=10)

    def ask() -> Any:
        kw: dict[str, Any] = {
            "model": "openai/gpt-4o",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "add 2 and 3"}],
        }
        if not stream:
            return claude.messages.create(**kw)
        with claude.messages.stream(**kw) as s:
            return s.get_final_message()

    msg = await in_thread(ask)
    claude.close()
    assert tools.calls == ["add"]
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "the sum is 5"
    assert last_tool_results(model.bodies[-1])  # the second round carried the result
    assert "mcp_add" in {t["function"]["name"] for t in model.bodies[0]["tools"]}


async def test_mcp_bypass_leaves_the_tools_to_the_client(nursery: trio.Nursery) -> None:
    _, model, gw = await mcp_gateway(
        nursery, lambda body: tool_calls(("get_weather", {"city": "Paris"})), **ON
    )
    claude = anthropic.Anthropic(base_url=gw.base, api_key="k", max_retries=0, timeout=10)
    msg = await in_thread(
        claude.messages.create,
        model="openai/gpt-4o",
        max_tokens=50,
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        messages=[{"role": "user", "content": "weather?"}],
        extra_headers={"X-MCP-Bypass": "1"},
    )
    claude.close()
    assert msg.stop_reason == "tool_use" and msg.content[0].input == {"city": "Paris"}
    assert [t["function"]["name"] for t in model.bodies[0]["tools"]] == ["get_weather"]


async def test_a_routing_alias_fails_over_through_a_translated_request(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream
) -> None:
    # The first deployment's provider is down: the router moves on, the client sees one answer.
    env = providers(mock, openai=f"http://127.0.0.1:{closed_port()}/v1")
    config = {"models": {"fast": alias(("openai", "m1"), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, {**env, **ON})
    claude = anthropic.Anthropic(base_url=gw.base, api_key="k", max_retries=0, timeout=10)

    def create() -> tuple[Any, Any]:
        raw = claude.messages.with_raw_response.create(
            model="fast", max_tokens=3, messages=[{"role": "user", "content": "x"}]
        )
        return raw.headers, raw.parse()

    headers, msg = await in_thread(create)
    claude.close()
    assert (headers["x-selected-provider"], headers["x-selected-model"]) == ("groq", "m2")
    assert msg.model == "fast" and msg.content[0].text
    with openai_client(gw.base) as client:
        resp = await in_thread(client.responses.create, model="fast", input="x", stream=False)
    assert resp.output_text and resp.model == "fast"
    assert [orjson.loads(r.body)["model"] for r in mock.requests] == ["m2", "m2"]


async def test_a_translated_request_is_traced_as_chat(nursery: trio.Nursery) -> None:
    collector = OtlpReceiver()
    collector.port = await nursery.start(collector.serve)
    upstream = EchoUpstream()
    upstream.answer = traced_answer
    await nursery.start(upstream.serve)
    gw = await start_gateway(
        nursery,
        tracing_env(
            f"http://127.0.0.1:{collector.port}",
            OPENAI_API_URL=f"http://127.0.0.1:{upstream.port}/v1",
            OPENAI_API_KEY="sk-upstream-key",
            **ON,
        ),
    )
    body = orjson.dumps(
        {
            "model": "openai/gpt-4o-mini",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    resp = await request(gw.port, "POST", "/v1/messages", body, [("traceparent", TRACEPARENT)])
    assert resp.status == 200 and b"event: message_stop" in resp.body
    await exported(gw, lambda: server_span(collector, "/v1/messages") is not None)
    server = server_span(collector, "/v1/messages")
    assert server is not None and server.trace_id == TRACE_ID
    tree = collector.tree(TRACE_ID)["POST /v1/messages"]
    assert "POST /v1/chat/completions" in tree and "parse" in tree and "route" in tree
    attrs = server.attributes
    assert (attrs["gen_ai.provider.name"], attrs["gen_ai.request.model"]) == (
        "openai",
        "openai/gpt-4o-mini",
    )
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (7, 2)
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    # The provider got a chat request, in the same trace.
    assert upstream.seen[-1].target == "/v1/chat/completions"
    assert upstream.seen[-1].headers["traceparent"].startswith(f"00-{TRACE_ID}-")


def reasoning_answer(seen: Any) -> Any:
    """A reasoning model's answer (DeepSeek's and SGLang's `reasoning_content`), whole or
    streamed."""
    from .echo_upstream import Answer

    if not orjson.loads(seen.body).get("stream"):
        message = {"role": "assistant", "reasoning_content": "2+3 is 5", "content": "5"}
        doc = {
            "id": "c",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 6},
        }
        return Answer(body=orjson.dumps(doc))

    def piece(delta: dict[str, Any], finish: str | None = None) -> bytes:
        doc = {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 6}}
    return Answer(
        headers=[("content-type", "text/event-stream")],
        chunks=[
            piece({"role": "assistant", "reasoning_content": "2+3 "}),
            piece({"reasoning_content": "is 5"}),
            piece({"content": "5"}, "stop"),
            b"data: " + orjson.dumps(usage) + b"\n\n",
            b"data: [DONE]\n\n",
        ],
    )


async def test_reasoning_becomes_thinking_and_reasoning_items(nursery: trio.Nursery) -> None:
    upstream = EchoUpstream()
    upstream.answer = reasoning_answer
    await nursery.start(upstream.serve)
    base = f"http://127.0.0.1:{upstream.port}/v1"
    gw = await start_gateway(
        nursery, {"DEEPSEEK_API_URL": base, "DEEPSEEK_API_KEY": "sk-deepseek-test", **ON}
    )
    claude = anthropic.Anthropic(base_url=gw.base, api_key="k", max_retries=0, timeout=10)
    kw: dict[str, Any] = {
        "model": "deepseek/deepseek-reasoner",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "2+3?"}],
    }

    def streamed() -> Any:
        with claude.messages.stream(**kw) as s:
            return s.get_final_message()

    for msg in (await in_thread(claude.messages.create, **kw), await in_thread(streamed)):
        assert [
            (b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in msg.content
        ] == [
            ("thinking", "2+3 is 5"),
            ("text", "5"),
        ]
    claude.close()
    with openai_client(gw.base) as client:

        def responses_stream() -> Any:
            with client.responses.stream(model="deepseek/deepseek-reasoner", input="2+3?") as s:
                return s.get_final_response()

        whole = await in_thread(
            client.responses.create, model="deepseek/deepseek-reasoner", input="2+3?"
        )
        final = await in_thread(responses_stream)
    for name, resp in (("whole", whole), ("stream", final)):
        reasoning, message = resp.output
        assert reasoning.type == "reasoning" and reasoning.content[0].text == "2+3 is 5"
        assert resp.output_text == "5"
        assert resp.usage.output_tokens == 6, name
