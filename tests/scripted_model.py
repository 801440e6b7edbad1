"""A fake OpenAI-compatible model whose answers a test scripts: each chat request's body
is recorded, and `script(body)` returns the assistant message to answer with (content, or
tool calls). Streaming requests get the message as SSE chunks: content in two pieces,
each tool call's name and arguments in separate deltas, then usage and [DONE]."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import trio

from .echo_upstream import Answer, EchoUpstream, Seen

Message = dict[str, Any]


def text(content: str) -> Message:
    return {"role": "assistant", "content": content}


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> Message:
    """An assistant turn calling `calls` (name, arguments), ids call_0, call_1, ..."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(args).decode()},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }


def last_tool_results(body: dict[str, Any]) -> dict[str, str]:
    """tool_call_id -> content of the tool messages after the last assistant turn."""
    out = {}
    for m in reversed(body["messages"]):
        if m["role"] != "tool":
            break
        out[m["tool_call_id"]] = m["content"]
    return out


class ScriptedModel:
    def __init__(self, script: Callable[[dict[str, Any]], Message]) -> None:
        self.script = script
        self.bodies: list[dict[str, Any]] = []
        self.upstream = EchoUpstream()
        self.upstream.answer = self._answer

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        await self.upstream.serve(task_status=task_status)

    def env(self) -> dict[str, str]:
        return {
            "OPENAI_API_URL": f"http://127.0.0.1:{self.upstream.port}/v1",
            "OPENAI_API_KEY": "sk-scripted",
        }

    def _answer(self, seen: Seen) -> Answer:
        body = orjson.loads(seen.body)
        self.bodies.append(body)
        message = self.script(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        n = len(self.bodies)
        if not body.get("stream"):
            doc = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
            return Answer(body=orjson.dumps(doc))
        return Answer(
            headers=[("content-type", "text/event-stream")],
            chunks=[_event(n, body["model"], d, None) for d in _deltas(message)]
            + [
                _event(n, body["model"], {}, finish),
                b"data: "
                + orjson.dumps({"id": f"chatcmpl-{n}", "choices": [], "usage": usage})
                + b"\n\n",
                b"data: [DONE]\n\n",
            ],
        )


def _deltas(message: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    content = message.get("content") or ""
    if content:
        half = len(content) // 2
        out += [{"content": content[:half]}, {"content": content[half:]}]
    for i, tc in enumerate(message.get("tool_calls") or ()):
        fn = tc["function"]
        out.append(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": tc["id"],
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": ""},
                    }
                ]
            }
        )
        out.append({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
    return out


def _event(n: int, model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    doc = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(doc) + b"\n\n"
