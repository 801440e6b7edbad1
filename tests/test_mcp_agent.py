"""Chat with MCP tools: the real gateway, a real MCP server (tests/mcp_server.py) and a
scripted model (tests/scripted_model.py) that calls tools."""

from __future__ import annotations

import logging
import re
from typing import Any

import openai
import orjson
import pytest
import trio

from .conftest import Gateway, sample, scrape, start_gateway
from .mcp_server import ToolServer
from .otlp_receiver import OtlpReceiver, ReceivedSpan
from .rawhttp import request
from .scripted_model import ScriptedModel, last_tool_results, text, tool_calls
from .test_mcp import (  # noqa: F401  (pytestmark and the fixture: the SDK's garbage)
    _collect_sdk_garbage,
    mcp_env,
    pytestmark,
    wait_for_tool,
)
from .test_tracing import exported

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def chat(**extra: Any) -> bytes:
    return orjson.dumps(
        {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}], **extra}
    )


async def setup(
    nursery: trio.Nursery, script: Any, **env: str
) -> tuple[ToolServer, ScriptedModel, int]:
    tools, model, gw = await setup_gateway(nursery, script, **env)
    return tools, model, gw.port


async def setup_gateway(
    nursery: trio.Nursery, script: Any, **env: str
) -> tuple[ToolServer, ScriptedModel, Gateway]:
    tools = ToolServer()
    url = await nursery.start(tools.serve)
    model = ScriptedModel(script)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            **mcp_env(url, MCP_TOOL_MODE="direct", MCP_POLLING_ENABLED="false"),
            **env,
        },
    )
    await wait_for_tool(gw.port, "mcp_add")  # a short MCP_REQUEST_TIMEOUT may end the start first
    return tools, model, gw


def add_then_answer(body: dict[str, Any]) -> dict[str, Any]:
    results = last_tool_results(body)
    if not results:
        return tool_calls(("mcp_add", {"a": 2, "b": 3}))
    return text(f"the sum is {orjson.loads(results['call_0'])['structuredContent']['result']}")


async def test_a_tool_call_is_executed_and_the_final_answer_returned(
    nursery: trio.Nursery,
) -> None:
    tools, model, port = await setup(nursery, add_then_answer)
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    doc = orjson.loads(resp.body)
    assert doc["choices"][0]["message"]["content"] == "the sum is 5"
    assert tools.calls == ["add"]
    assert len(model.bodies) == 2
    first, second = model.bodies
    assert "mcp_add" in {t["function"]["name"] for t in first["tools"]}
    # The second call carries the assistant's turn and the tool's result.
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    assert second["messages"][1]["tool_calls"][0]["function"]["name"] == "mcp_add"
    assert second["messages"][2]["tool_call_id"] == "call_0"


async def test_each_tool_execution_is_logged_without_its_arguments(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.mcp")
    _, _, port = await setup(nursery, add_then_answer)
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mcp tool ")]
    assert len(lines) == 1 and re.fullmatch(r"mcp tool mcp_add: ok in [0-9.]+ ms", lines[0])


async def test_tool_calls_are_counted(nursery: trio.Nursery) -> None:
    _, _, gw = await setup_gateway(nursery, add_then_answer, TELEMETRY_ENABLED="true")
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    text_ = await scrape(gw.metrics_port)
    calls = "inference_gateway_tool_calls_total"
    assert sample(text_, calls, gen_ai_tool_name="mcp_add", gen_ai_tool_type="mcp") == 1
    tokens = sample(
        text_, "gen_ai_client_token_usage_sum", gen_ai_token_type="input"
    )  # both rounds' usage
    assert tokens == 20


async def test_client_tools_are_kept_beside_mcp_tools(nursery: trio.Nursery) -> None:
    _, model, port = await setup(nursery, lambda body: text("ok"))
    resp = await request(port, "POST", "/v1/chat/completions", chat(tools=[WEATHER]))
    assert resp.status == 200, resp.body
    names = [t["function"]["name"] for t in model.bodies[0]["tools"]]
    assert names[0] == "get_weather"
    assert set(names) == {"get_weather", "mcp_add", "mcp_slow", "mcp_broken", "mcp_grow"}


async def test_a_client_tool_named_like_an_mcp_tool_is_refused(nursery: trio.Nursery) -> None:
    _, model, port = await setup(nursery, lambda body: text("ok"))
    shadow = {**WEATHER, "function": {**WEATHER["function"], "name": "mcp_add"}}
    resp = await request(port, "POST", "/v1/chat/completions", chat(tools=[shadow]))
    assert resp.status == 400
    error = orjson.loads(resp.body)["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "tools")
    assert model.bodies == []  # refused before the model was asked


async def test_a_client_tool_call_is_returned_to_the_client(nursery: trio.Nursery) -> None:
    tools, model, port = await setup(
        nursery, lambda body: tool_calls(("get_weather", {}), ("mcp_add", {"a": 1, "b": 1}))
    )
    resp = await request(port, "POST", "/v1/chat/completions", chat(tools=[WEATHER]))
    assert resp.status == 200, resp.body
    message = orjson.loads(resp.body)["choices"][0]["message"]
    # The client sees only its own call; nothing ran on the MCP server.
    assert [tc["function"]["name"] for tc in message["tool_calls"]] == ["get_weather"]
    assert tools.calls == []
    assert len(model.bodies) == 1


async def test_tool_calls_of_one_turn_run_concurrently(nursery: trio.Nursery) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if not last_tool_results(body):
            return tool_calls(*[("mcp_add", {"a": i, "b": 1}) for i in range(4)])
        return text(",".join(sorted(last_tool_results(body).values())))

    tools, model, port = await setup(nursery, script)
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    assert tools.calls == ["add"] * 4
    assert tools.most_running == 4
    results = last_tool_results(model.bodies[1])
    assert sorted(results) == ["call_0", "call_1", "call_2", "call_3"]
    assert [
        orjson.loads(results[f"call_{i}"])["structuredContent"]["result"] for i in range(4)
    ] == [1, 2, 3, 4]


async def test_a_tool_timeout_is_an_error_result_for_the_model(nursery: trio.Nursery) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if not last_tool_results(body):
            return tool_calls(("mcp_slow", {"seconds": 30}))
        return text("gave up: " + last_tool_results(body)["call_0"])

    # The same bound holds the connection's initialize: short enough to keep the test
    # quick, long enough for a loaded machine's handshake.
    _, model, port = await setup(nursery, script, MCP_REQUEST_TIMEOUT="1s")
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    content = orjson.loads(resp.body)["choices"][0]["message"]["content"]
    assert content.startswith("gave up: Error:") and "timed out" in content


async def test_a_failing_tool_is_an_error_result_for_the_model(nursery: trio.Nursery) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if not last_tool_results(body):
            return tool_calls(("mcp_broken", {"reason": "test"}), ("mcp_add", {"a": 1, "b": 2}))
        return text(orjson.dumps(last_tool_results(body)).decode())

    tools, _, port = await setup(nursery, script)
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body  # a failing tool is never an HTTP error
    results = orjson.loads(orjson.loads(resp.body)["choices"][0]["message"]["content"])
    broken = orjson.loads(results["call_0"])  # what the model read: the server's error result
    assert broken["isError"] is True and "broken" in broken["content"][0]["text"]
    assert orjson.loads(results["call_1"])["structuredContent"] == {"result": 3}
    assert sorted(tools.calls) == ["add", "broken"]


async def test_list_changed_refreshes_the_catalogue(nursery: trio.Nursery) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if not last_tool_results(body):
            return tool_calls(("mcp_grow", {}))
        return text("grown")

    _, model, port = await setup(nursery, script)
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    # Polling is off: only the notification can have told the gateway.
    await wait_for_tool(port, "mcp_extra")


async def test_rounds_are_bounded(nursery: trio.Nursery) -> None:
    _, model, port = await setup(nursery, lambda body: tool_calls(("mcp_add", {"a": 1, "b": 1})))
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "mcp_rounds_exhausted"
    assert len(model.bodies) == 10


async def test_selector_mode(nursery: trio.Nursery) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        results = last_tool_results(body)
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turns == 0:
            return tool_calls(("mcp_tools_get", {"query": "INTEGERS"}))
        if turns == 1:
            listed = orjson.loads(results["call_0"])["tools"]
            assert [t["name"] for t in listed] == ["mcp_add"]
            return tool_calls(("mcp_tools_execute", {"name": "add", "arguments": {"a": 4, "b": 4}}))
        return text(results["call_0"])

    tools, model, port = await setup(nursery, script, MCP_TOOL_MODE="selector")
    resp = await request(port, "POST", "/v1/chat/completions", chat(tools=[WEATHER]))
    assert resp.status == 200, resp.body
    assert {t["function"]["name"] for t in model.bodies[0]["tools"]} == {
        "get_weather",
        "mcp_tools_get",
        "mcp_tools_execute",
    }
    content = orjson.loads(resp.body)["choices"][0]["message"]["content"]
    assert orjson.loads(content)["structuredContent"] == {"result": 8}
    assert tools.calls == ["add"]


@pytest.mark.parametrize("header", [True, False])
async def test_bypass_header(nursery: trio.Nursery, header: bool) -> None:
    _, model, port = await setup(nursery, lambda body: text("ok"))
    headers = [("x-mcp-bypass", "1")] if header else None
    resp = await request(port, "POST", "/v1/chat/completions", chat(), headers)
    assert resp.status == 200
    assert ("tools" in model.bodies[0]) is not header


def sse_data(body: bytes) -> list[bytes]:
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]


def stream_calls(data: list[bytes]) -> list[dict[str, Any]]:
    return [
        tc
        for d in data
        if d != b"[DONE]"
        for c in orjson.loads(d)["choices"]
        for tc in c["delta"].get("tool_calls") or ()
    ]


async def test_streaming_relays_every_round(nursery: trio.Nursery) -> None:
    tools, model, port = await setup(nursery, add_then_answer)
    resp = await request(port, "POST", "/v1/chat/completions", chat(stream=True))
    assert resp.status == 200, resp.body
    assert resp.headers[b"content-type"] == b"text/event-stream"
    data = sse_data(resp.body)
    assert data[-1] == b"[DONE]" and data.count(b"[DONE]") == 1
    chunks = [orjson.loads(d) for d in data[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "the sum is 5"
    # The tool round is shown as it streamed: its call and its finish reason.
    assert [tc["function"].get("name") for tc in stream_calls(data) if "id" in tc] == ["mcp_add"]
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert [f for f in finish if f] == ["tool_calls", "stop"]
    # One usage chunk, the sum over both rounds.
    usages = [c["usage"] for c in chunks if c.get("usage")]
    assert usages == [{"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}]
    assert tools.calls == ["add"]
    assert [b["stream"] for b in model.bodies] == [True, True]
    assert model.bodies[1]["messages"][1]["tool_calls"][0]["function"] == {
        "name": "mcp_add",
        "arguments": '{"a":2,"b":3}',
    }


async def test_streaming_with_the_openai_sdk(nursery: trio.Nursery) -> None:
    tools, _, port = await setup(nursery, add_then_answer)
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    text_, names, usage = "", [], None
    async with client:
        stream = await client.chat.completions.create(
            model="openai/gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage.total_tokens
            for choice in chunk.choices:
                text_ += choice.delta.content or ""
                names += [tc.function.name for tc in choice.delta.tool_calls or () if tc.function]
    assert text_ == "the sum is 5"
    assert [n for n in names if n] == ["mcp_add"]
    assert usage == 30
    assert tools.calls == ["add"]


async def test_whole_answer_usage_is_the_sum_over_rounds(nursery: trio.Nursery) -> None:
    _, _, port = await setup(nursery, add_then_answer)
    resp = await request(port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    usage = orjson.loads(resp.body)["usage"]
    assert usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}


async def test_streaming_round_with_a_client_call_ends_the_loop(nursery: trio.Nursery) -> None:
    """The client saw every call of the round as it streamed; it answers its own (the
    `mcp_` one is the gateway's, not run: the loop ends with the client's call)."""
    tools, model, port = await setup(
        nursery, lambda body: tool_calls(("mcp_add", {"a": 1, "b": 1}), ("get_weather", {}))
    )
    resp = await request(port, "POST", "/v1/chat/completions", chat(stream=True, tools=[WEATHER]))
    assert resp.status == 200, resp.body
    data = sse_data(resp.body)
    assert data[-1] == b"[DONE]" and data.count(b"[DONE]") == 1
    named = [tc["function"].get("name") for tc in stream_calls(data) if "id" in tc]
    assert named == ["mcp_add", "get_weather"]
    finish = [c["finish_reason"] for d in data[:-1] for c in orjson.loads(d)["choices"]]
    assert "tool_calls" in finish
    assert tools.calls == []
    assert len(model.bodies) == 1


async def test_streaming_rounds_are_bounded(nursery: trio.Nursery) -> None:
    _, model, port = await setup(nursery, lambda body: tool_calls(("mcp_add", {"a": 1, "b": 1})))
    resp = await request(port, "POST", "/v1/chat/completions", chat(stream=True))
    assert resp.status == 200
    last = orjson.loads(sse_data(resp.body)[-1])
    assert last["error"]["code"] == "mcp_rounds_exhausted"
    assert len(model.bodies) == 10


async def test_concurrent_mcp_requests_keep_their_own_state(nursery: trio.Nursery) -> None:
    """Two requests for different models at once, each through a tool round: each gets the
    sum of its own arguments (one agent state per request, never shared)."""

    def script(body: dict[str, Any]) -> dict[str, Any]:
        a = 10 if body["model"] == "gpt-4o" else 20
        results = last_tool_results(body)
        if not results:
            return tool_calls(("mcp_add", {"a": a, "b": 1}))
        total = orjson.loads(results["call_0"])["structuredContent"]["result"]
        return text(f"{body['model']}: {total}")

    _, model, port = await setup(nursery, script)
    answers: dict[str, str] = {}

    async def ask(name: str) -> None:
        body = orjson.dumps(
            {"model": f"openai/{name}", "messages": [{"role": "user", "content": "hi"}]}
        )
        resp = await request(port, "POST", "/v1/chat/completions", body)
        assert resp.status == 200, resp.body
        answers[name] = orjson.loads(resp.body)["choices"][0]["message"]["content"]

    async with trio.open_nursery() as clients:
        for name in ("gpt-4o", "gpt-4o-mini"):
            clients.start_soon(ask, name)
    assert answers == {"gpt-4o": "gpt-4o: 11", "gpt-4o-mini": "gpt-4o-mini: 21"}
    assert len(model.bodies) == 4


async def test_a_client_that_hangs_up_cancels_the_running_tool(nursery: trio.Nursery) -> None:
    tools, _, port = await setup(nursery, lambda body: tool_calls(("mcp_slow", {"seconds": 30})))
    body = chat()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    )
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(head + body)
    with trio.fail_after(10):
        while tools.running == 0:  # noqa: ASYNC110 (the MCP server's state)
            await trio.sleep(0.02)
    await stream.aclose()  # the client goes away while the tool runs
    with trio.fail_after(10):  # far below the tool's 30 s: it was cancelled
        while tools.running:  # noqa: ASYNC110 (the MCP server's state)
            await trio.sleep(0.05)


async def traced_setup(nursery: trio.Nursery) -> tuple[OtlpReceiver, ScriptedModel, Gateway]:
    """`setup_gateway` for `add_then_answer`, tracing to a real OTLP receiver."""
    collector = OtlpReceiver()
    collector.port = await nursery.start(collector.serve)
    _, model, gw = await setup_gateway(
        nursery,
        add_then_answer,
        TELEMETRY_ENABLED="true",
        TELEMETRY_TRACING_ENABLED="true",
        TELEMETRY_TRACING_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.port}",
    )
    return collector, model, gw


async def test_each_tool_execution_is_a_span(nursery: trio.Nursery) -> None:
    collector, _, gw = await traced_setup(nursery)
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat())
    assert resp.status == 200, resp.body
    await exported(
        gw,
        lambda: any(s.name == "POST /v1/chat/completions" and s.kind == 2 for s in collector.spans),
    )
    server = next(
        s for s in collector.spans if s.kind == 2 and s.name == "POST /v1/chat/completions"
    )
    tree = collector.tree(server.trace_id)
    # Two model calls and the tool run between them, all children of the request.
    assert tree["POST /v1/chat/completions"].count("POST /v1/chat/completions") == 2
    assert "execute_tool mcp_add" in tree["POST /v1/chat/completions"]
    tool = next(s for s in collector.spans if s.name == "execute_tool mcp_add")
    assert tool.attributes["gen_ai.tool.name"] == "mcp_add"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.status_code != 2  # not an error


async def test_each_streamed_round_is_an_attempt_carrying_the_requests_id_and_trace(
    nursery: trio.Nursery,
) -> None:
    """A streamed MCP request's model calls go out as any upstream attempt: a CLIENT span
    each, its `traceparent` and the request's `x-request-id` sent with it."""
    collector, model, gw = await traced_setup(nursery)
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", chat(stream=True),
        headers=[("x-request-id", "mcp-stream-1")],
    )  # fmt: skip
    assert resp.status == 200 and resp.body.endswith(b"data: [DONE]\n\n"), resp.body
    assert len(model.bodies) == 2  # the tool call's round and the answer's

    def server() -> ReceivedSpan | None:
        return next((s for s in collector.spans if s.kind == 2 and s.name.startswith("POST")), None)

    await exported(gw, lambda: server() is not None)
    root = server()
    assert root is not None
    attempts = [s for s in collector.spans if s.kind == 3 and s.trace_id == root.trace_id]
    assert len(attempts) == 2 and all(a.parent_id == root.span_id for a in attempts)
    seen = model.upstream.seen
    assert [s.headers["x-request-id"] for s in seen] == ["mcp-stream-1"] * 2
    assert sorted(s.headers["traceparent"] for s in seen) == sorted(
        f"00-{root.trace_id}-{a.span_id}-01" for a in attempts
    )
