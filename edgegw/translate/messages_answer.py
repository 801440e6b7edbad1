"""A chat answer as a Messages answer: pure functions over documents.

`messages_answer(chat, model)` turns a whole chat completion into a Messages answer;
`MessagesStream` turns a chat stream's chunks into Messages events (message_start, ping,
content_block_start/delta/stop for thinking, text and tool_use with input_json_delta,
message_delta with the stop reason and usage, message_stop), and an error into Anthropic's
`event: error`; `MessagesAnswers` is both, for edgegw.translate.answer.
"""

from __future__ import annotations

from typing import Any

import orjson

from edgegw.errors import ANTHROPIC_SHAPE, fail
from edgegw.ids import random_bits
from edgegw.translate.common import (
    CallDelta,
    HiddenCalls,
    answer_message,
    chat_usage,
    first_deltas,
    sse_event,
)

# What an answer reports beside the translation (context editing's applied edits).
Report = dict[str, Any] | None
# The request asked for context editing: none was applied, as the answer says.
NO_EDITS: dict[str, Any] = {"context_management": {"applied_edits": []}}

# Chat finish reasons -> Messages stop reasons.
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def message_id(chat_id: Any) -> str:
    return (
        f"msg_{chat_id}" if isinstance(chat_id, str) and chat_id else f"msg_{random_bits(96):024x}"
    )


def _usage(usage: Any) -> dict[str, Any]:
    prompt, completion, cached = chat_usage(usage)
    out: dict[str, Any] = {"input_tokens": prompt, "output_tokens": completion}
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def messages_answer(
    chat: Any, model: str, hidden: frozenset[str] = frozenset(), reported: Report = None
) -> dict[str, Any]:
    """A chat completion as a Messages answer (`model`: as the client named it; calls of
    the `hidden` tools left out: edgegw.translate.common.HiddenCalls; `reported` added)."""
    choice, message = answer_message(chat)
    content: list[dict[str, Any]] = []
    if isinstance(reasoning := message.get("reasoning_content"), str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if isinstance(text := message.get("content"), str) and text:
        content.append({"type": "text", "text": text})
    for tc in message.get("tool_calls") or ():
        function = tc.get("function") or {}
        if function.get("name") in hidden:
            continue
        content.append(
            {
                "type": "tool_use",
                "id": tc.get("id") or f"toolu_{random_bits(96):024x}",
                "name": function.get("name", ""),
                "input": _arguments(function.get("arguments")),
            }
        )
    answer = {
        "id": message_id(chat.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": _usage(chat.get("usage")),
    }
    return {**answer, **reported} if reported else answer


def _arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str) or not arguments:
        return {}
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        raise fail("bad_upstream_response", "the model's tool arguments are not JSON") from None


# -- streams ------------------------------------------------------------------------------


class MessagesStream:
    """A chat stream's chunks (parsed) as Messages events, in the order the Anthropic SDK
    accumulates them: one message_start, each content block started, deltaed and stopped
    in turn (one open at a time), then message_delta (stop reason, usage) and message_stop."""

    __slots__ = (
        "model",
        "hidden",
        "reported",
        "started",
        "block",
        "kind",
        "tool_index",
        "tool_id",
        "stop",
        "usage",
        "ended",
    )

    def __init__(
        self, model: str, hidden: frozenset[str] = frozenset(), reported: Report = None
    ) -> None:
        self.model = model
        self.hidden = HiddenCalls(hidden)
        self.reported = reported
        self.started = False
        self.block = -1  # the index of the open (or last) content block
        self.kind: str | None = None  # the open block's type
        self.tool_index: int | None = None  # the chat index of the open tool call
        self.tool_id: str | None = None  # and its id
        self.stop = "end_turn"
        self.usage: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0}
        self.ended = False

    def _start(self, chat_id: Any) -> bytes:
        self.started = True
        message: dict[str, Any] = {
            "id": message_id(chat_id),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return sse_event("message_start", {"type": "message_start", "message": message}) + (
            sse_event("ping", {"type": "ping"})
        )

    def _close(self) -> bytes:
        if self.kind is None:
            return b""
        self.kind, self.tool_index = None, None
        return sse_event("content_block_stop", {"type": "content_block_stop", "index": self.block})

    def _open(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.block += 1
        self.kind = block["type"]
        return out + sse_event(
            "content_block_start",
            {"type": "content_block_start", "index": self.block, "content_block": block},
        )

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.block, "delta": delta},
        )

    def chunk(self, doc: dict[str, Any]) -> bytes:
        out = b"" if self.started else self._start(doc.get("id"))
        if isinstance(doc.get("usage"), dict):
            self.usage = _usage(doc["usage"])
        for choice, delta in first_deltas(doc):
            if isinstance(reasoning := delta.get("reasoning_content"), str) and reasoning:
                if self.kind != "thinking":
                    out += self._open({"type": "thinking", "thinking": "", "signature": ""})
                out += self._delta({"type": "thinking_delta", "thinking": reasoning})
            if isinstance(text := delta.get("content"), str) and text:
                if self.kind != "text":
                    out += self._open({"type": "text", "text": ""})
                out += self._delta({"type": "text_delta", "text": text})
            for tc in delta.get("tool_calls") or ():
                out += self._tool_call(tc)
            if isinstance(reason := choice.get("finish_reason"), str):
                self.stop = STOP_REASONS.get(reason, "end_turn")
                self.hidden.round_ended()
        return out

    def _tool_call(self, tc: Any) -> bytes:
        if (call := CallDelta.read(tc, self.hidden)) is None:
            return b""
        out = b""
        if self.kind != "tool_use" or call.starts_another(self.tool_index, self.tool_id):
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.call_id or f"toolu_{random_bits(96):024x}",
                "name": call.name,
                "input": {},
            }
            out += self._open(block)
            self.tool_index, self.tool_id = call.index, block["id"]
        if call.arguments:
            out += self._delta({"type": "input_json_delta", "partial_json": call.arguments})
        return out

    def done(self) -> bytes:
        """The chat stream's `[DONE]`: the open block stopped, the message ended."""
        out = b"" if self.started else self._start(None)
        out += self._close()
        self.ended = True
        delta = {"stop_reason": self.stop, "stop_sequence": None}
        event = {"type": "message_delta", "delta": delta, "usage": self.usage}
        out += sse_event("message_delta", {**event, **self.reported} if self.reported else event)
        return out + sse_event("message_stop", {"type": "message_stop"})

    def error(self, status: int, code: str, message: str) -> bytes:
        """The stream's end by an error, as Anthropic writes one."""
        self.ended = True
        return ANTHROPIC_SHAPE.event(status, code, message, 0)


class MessagesAnswers:
    """The Messages side of a translated request's answer (edgegw.translate.answer)."""

    __slots__ = ("model", "hidden", "reported")
    shape = ANTHROPIC_SHAPE

    def __init__(
        self, model: str, hidden: frozenset[str] = frozenset(), reported: Report = None
    ) -> None:
        self.model = model
        self.hidden = hidden
        self.reported = reported

    def answer(self, chat: Any) -> dict[str, Any]:
        return messages_answer(chat, self.model, self.hidden, self.reported)

    def stream(self) -> MessagesStream:
        return MessagesStream(self.model, self.hidden, self.reported)

    @classmethod
    def of(cls, doc: Any, hidden: frozenset[str]) -> MessagesAnswers:
        """For the Messages request `doc` (checked by `chat_request`)."""
        reported = NO_EDITS if doc.get("context_management") is not None else None
        return cls(doc["model"], hidden, reported)
