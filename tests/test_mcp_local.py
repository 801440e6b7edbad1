"""MCP tools with a local model: the loop serves every round on the model's SGLang workers
(tests/fake_sglang.py, scripted to call a tool) and the tool runs on a real MCP server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import trio

from .conftest import Gateway
from .fake_sglang import FakeSGLang, Script
from .mcp_server import ToolServer
from .rawhttp import request, sse_data
from .test_local import generations, local_gateway, profile_yaml
from .test_mcp import (  # noqa: F401  (pytestmark and the fixture: the SDK's garbage)
    _collect_sdk_garbage,
    mcp_env,
    pytestmark,
    wait_for_tool,
)


def add_once(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
    """Call mcp_add when it is offered, until a tool result is in the conversation; else
    answer text."""
    if "tools" not in body or body["messages"][-1]["role"] == "tool":
        return None
    return [("mcp_add", {"a": 2, "b": 3})]


async def setup(
    nursery: trio.Nursery, tmp_path: Path, **profile: str
) -> tuple[ToolServer, FakeSGLang, Gateway]:
    tools = ToolServer()
    url = await nursery.start(tools.serve)
    worker = FakeSGLang(Script(tokens=4, tool_reply=add_once))
    await nursery.start(worker.serve)
    env = mcp_env(url, MCP_TOOL_MODE="direct", MCP_POLLING_ENABLED="false")
    gw = await local_gateway(
        nursery, tmp_path, profile_yaml([(worker.port, "default", None)], **profile), env
    )
    await wait_for_tool(gw.port, "mcp_add")
    return tools, worker, gw


CHAT = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "add 2 and 3"}]}


async def test_a_local_model_calls_an_mcp_tool(nursery: trio.Nursery, tmp_path: Path) -> None:
    tools, worker, gw = await setup(nursery, tmp_path)
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"local"
    ids = [v for k, v in resp.header_lines if k.lower() == b"x-request-id"]
    assert len(ids) == 1  # the request's own, not one per round
    doc = orjson.loads(resp.body)
    assert doc["choices"][0]["finish_reason"] == "stop"
    assert doc["choices"][0]["message"]["content"]
    assert doc["system_fingerprint"].startswith("fp_")  # the SIE shape, every round
    assert tools.calls == ["add"]
    first, second = generations(worker)
    assert "mcp_add" in {t["function"]["name"] for t in first["tools"]}
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    assert orjson.loads(second["messages"][2]["content"])["structuredContent"] == {"result": 5}
    usage = doc["usage"]
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert usage["prompt_tokens"] > 10  # both rounds'
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_a_local_stream_relays_every_round(nursery: trio.Nursery, tmp_path: Path) -> None:
    tools, worker, gw = await setup(nursery, tmp_path)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(body))
    assert resp.status == 200, resp.body
    assert resp.headers[b"content-type"] == b"text/event-stream"
    assert resp.headers[b"x-sie-served-by"] == b"local"
    assert len([v for k, v in resp.header_lines if k.lower() == b"x-request-id"]) == 1
    data = sse_data(resp.body)
    assert data[-1] == b"[DONE]" and data.count(b"[DONE]") == 1
    chunks = [orjson.loads(d) for d in data[:-1]]
    calls = [
        tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls") or ()
    ]
    assert [tc["function"]["name"] for tc in calls] == ["mcp_add"]
    finish = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finish == ["tool_calls", "stop"]
    assert "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    usages = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usages) == 1 and usages[0]["prompt_tokens"] > 10  # one chunk, both rounds
    assert tools.calls == ["add"]
    assert len(generations(worker)) == 2


async def test_a_profile_without_tools_gets_no_mcp_tools(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    tools, worker, gw = await setup(nursery, tmp_path, capabilities="{tools: false}")
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200, resp.body
    assert orjson.loads(resp.body)["choices"][0]["finish_reason"] == "stop"
    (only,) = generations(worker)
    assert "tools" not in only
    assert tools.calls == []
