"""Anthropic Messages streams as a provider sends them, for the fake upstreams of the tests."""

from __future__ import annotations

from typing import Any

import orjson


def sse(event: str | None, doc: dict[str, Any] | str) -> bytes:
    data = doc if isinstance(doc, str) else orjson.dumps(doc).decode()
    return (f"event: {event}\n" if event else "").encode() + f"data: {data}\n\n".encode()


def message_start(input_tokens: int) -> bytes:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return sse("message_start", {"type": "message_start", "message": message})


TEXT_START = sse(
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)


def text_delta(text: str) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})


def message_end(output_tokens: int) -> list[bytes]:
    """The text block's stop, the message's delta (end_turn, the usage) and its stop."""
    delta = {"stop_reason": "end_turn", "stop_sequence": None}
    return [
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse(
            "message_delta",
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}},
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]


def messages_stream(
    pieces: list[str], *, input_tokens: int = 3, output_tokens: int = 5
) -> list[bytes]:
    """A whole text answer streamed in `pieces`."""
    return [
        message_start(input_tokens),
        TEXT_START,
        *(text_delta(p) for p in pieces),
        *message_end(output_tokens),
    ]
