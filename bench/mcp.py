"""`python -m bench.mcp`: what MCP injection adds to a chat request that calls no tool.

With MCP on, a chat request's upstream body is written by the Rust core with the catalogue's
tools appended (`ParsedRequest.upstream_body(..., tools=offered.json)`; the JSON of the tools
is written once per catalogue, edgegw.mcp.tools.Offered), after a check of the client's tool
names (`refuse_prefixed`), and the model's answer is searched for `"tool_calls"` before it is
relayed as it came (read for usage as `forward` reads any answer). This measures, in process,
the request's parse, body writing and answer read with MCP (10 MCP tools in direct mode, and
selector mode) against the same without MCP, for a typical request (a 5-message chat, one
client tool) and answer (~1 KB, usage, no tool call). Compare the difference with a proxied
request's server CPU in bench/README.md (~650-730 µs on the 2-vCPU box). Medians of rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from types import MappingProxyType

import orjson

from edgegw._core import parse_chat_request
from edgegw.exchange import Outcome
from edgegw.mcp.state import refuse_prefixed
from edgegw.mcp.tools import McpTool, Offered
from edgegw.tap import tap

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


def offered(mode: str) -> Offered:
    tools = {
        f"mcp_tool_{i}": McpTool(f"tool_{i}", f"Tool number {i}.", "http://127.0.0.1:1/mcp", SCHEMA)
        for i in range(10)
    }
    return Offered.of(tools, mode == "selector")


def plain() -> None:
    req = parse_chat_request(REQUEST)
    req.upstream_body("gpt-4o-mini")
    tap(ANSWER, Outcome(), "message")


def with_mcp(offer: Offered) -> None:
    req = parse_chat_request(REQUEST)
    refuse_prefixed(req.tool_names)
    req.upstream_body("gpt-4o-mini", tools=offer.json)
    assert b'"tool_calls"' not in ANSWER
    tap(ANSWER, Outcome(), "message")


def per_call(fn: Callable[[], None]) -> float:
    start = time.process_time()
    for _ in range(CALLS):
        fn()
    return (time.process_time() - start) / CALLS * 1e6


def main() -> None:
    cases: dict[str, Callable[[], None]] = {
        "without MCP": plain,
        "direct, 10 tools": partial(with_mcp, offered("direct")),
        "selector": partial(with_mcp, offered("selector")),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, fn in cases.items():  # interleaved: every round measures each case
            times[name].append(per_call(fn))
    base = statistics.median(times["without MCP"])
    for name, runs in times.items():
        median = statistics.median(runs)
        print(
            f"{name:17s}: {median:6.1f} µs CPU per request (rounds {min(runs):.1f}-{max(runs):.1f})"
            + ("" if name == "without MCP" else f", adds {median - base:+.1f} µs")
        )


if __name__ == "__main__":
    main()
