"""A streamed MCP request's pieces: `Round`, one model answer as it streams (the assistant
message accumulated, tool-call deltas included), and `ClientStream`, the client's one SSE
stream across every round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from edgegw._core import SseEvent
from edgegw.answer import SSE_HEADERS, Ended, Outcome, SseWriter, StreamState
from edgegw.asgi import Send
from edgegw.errors import Headers

DONE = b"data: [DONE]\n\n"


@dataclass
class Round:
    """One streamed model answer: its text, its tool calls by index, its last usage, and
    its usage-only chunk (held: the client gets one, with the usage of every round)."""

    content: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    usage_chunk: dict[str, Any] | None = None
    done: bool = False

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def relay(self, events: Sequence[SseEvent], outcome: Outcome) -> bytes:
        """Fold `events` in; what of them goes to the client now: every event as its data
        bytes came, but `[DONE]` and a usage-only chunk."""
        out = []
        for event in events:
            outcome.events += 1
            if event.is_done:
                self.done = True
                continue
            try:
                doc = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict):
                usage = doc.get("usage")
                if isinstance(usage, dict):
                    self.usage = usage
                    if not doc.get("choices"):
                        self.usage_chunk = doc
                        continue
                self._take(doc)
            out.append(b"data: " + event.data + b"\n\n")
        return b"".join(out)

    def last(self, usage: dict[str, int] | None) -> bytes:
        """The stream's end after this, the final round: its usage chunk (with `usage`, the
        sum over rounds) and `[DONE]` when the model sent one."""
        out = b""
        if self.usage_chunk is not None:
            if usage:
                self.usage_chunk["usage"] = usage
            out = b"data: " + orjson.dumps(self.usage_chunk) + b"\n\n"
        return out + DONE if self.done else out

    def _take(self, doc: dict[str, Any]) -> None:
        for choice in doc.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.content += delta["content"]
            for tc in delta.get("tool_calls") or ():
                if not isinstance(tc, dict):
                    continue
                index = tc.get("index", 0)
                slot = self.calls.setdefault(
                    index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["function"]["arguments"] += fn["arguments"]


class ClientStream:
    """The client's SSE stream across rounds: one head (the first round's), every round's
    events, one end."""

    __slots__ = ("_send", "outcome", "_extra", "writer")

    def __init__(self, send: Send, outcome: Outcome, extra_headers: Headers) -> None:
        self._send = send
        self.outcome = outcome
        self._extra = extra_headers
        self.writer: SseWriter | None = None

    @property
    def started(self) -> bool:
        return self.writer is not None

    @property
    def state(self) -> StreamState:
        return StreamState.HEAD_PENDING if self.writer is None else self.writer.state

    async def start(self, headers: Headers, *, whole: bool = False) -> None:
        """Send the head: the SSE headers, `headers`, the route's. `whole`: `headers`
        already hold the SSE headers (a local answer's head)."""
        kept = tuple(h for h in headers if h not in SSE_HEADERS) if whole else tuple(headers)
        extra = (*kept, *self._extra)
        self.writer = SseWriter(self._send, self.outcome, extra)
        await self.writer.start()

    async def write(self, data: bytes) -> None:
        assert self.writer is not None
        await self.writer.write(data)

    async def close(self, data: bytes) -> None:
        assert self.writer is not None
        await self.writer.close(data)

    async def fail(self, code: str, message: str) -> None:
        """An error event ends a started stream; before the head the error is raised."""
        writer = self.writer or SseWriter(self._send, self.outcome, self._extra)
        await writer.fail(code, message)

    async def settle(self, ex: Ended) -> None:
        writer = self.writer or SseWriter(self._send, self.outcome, self._extra)
        await writer.settle(ex)
