"""`python -m bench.mcp`: what MCP injection adds to a chat request that calls no tool.

With MCP on, a non-streaming chat request goes through the agent (edgegw.mcp.agent) instead
of the plain relay: the request body is parsed and the tools added (`Agent.start`), the body
written again (`Agent.body`), and the model's answer parsed to look for tool calls
(`orjson.loads` + `Agent.split`). This measures that extra Python work, in process, for a
typical request (a 5-message chat, one client tool) and answer (~1 KB, usage, no tool call),
with 10 MCP tools in direct mode and in selector mode. Compare the result with a proxied
request's server CPU in bench/README.md (~680 µs on the 2-vCPU box). Medians of rounds.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from edgegw.mcp.state import Agent
from edgegw.mcp.tools import McpTool

ROUNDS = 7
CALLS = 5_000

REQUEST = orjson.dumps(
    {
        "model": "openai/gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. " * 8},
            {"role": "user", "content": "What is the weather in Paris today? " * 4},
            {"role": "assistant", "content": "Let me check that for you. " * 6},
            {"role": "user", "content": "And tomorrow? Please be brief. " * 3},
            {"role": "assistant", "content": "Tomorrow looks sunny. " * 5},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ],
        "temperature": 0.2,
    }
)
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "It will be sunny and mild. " * 30},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 180, "completion_tokens": 160, "total_tokens": 340},
    }
)
SCHEMA = MappingProxyType(
    {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    }
)


@dataclass(frozen=True)
class _Settings:
    tool_mode: str


@dataclass(frozen=True)
class _Catalogue:
    """What Agent.start reads of the MCP client: its tools and its tool mode."""

    tools: dict[str, McpTool]
    settings: _Settings


def catalogue(mode: str) -> Any:
    tools = {
        f"mcp_tool_{i}": McpTool(f"tool_{i}", f"Tool number {i}.", "http://127.0.0.1:1/mcp", SCHEMA)
        for i in range(10)
    }
    return _Catalogue(tools, _Settings(mode))


def one_request(mcp: Any) -> None:
    agent = Agent.start(mcp, REQUEST)
    agent.body()
    doc = orjson.loads(ANSWER)
    agent.count(doc.get("usage"))
    agent.split(doc["choices"][0]["message"])


def main() -> None:
    for mode in ("direct", "selector"):
        mcp = catalogue(mode)
        per_call = []
        for _ in range(ROUNDS):
            start = time.process_time()
            for _ in range(CALLS):
                one_request(mcp)
            per_call.append((time.process_time() - start) / CALLS * 1e6)
        print(
            f"{mode:8s}: {statistics.median(per_call):6.1f} µs CPU per request "
            f"(rounds {min(per_call):.1f}-{max(per_call):.1f})"
        )


if __name__ == "__main__":
    main()
