"""What a relay reads from the events it passes on: usage and tool-call names (`tap`), whether
an event carries usage (`has_usage`: for a client that did not ask for the usage the gateway
asked for, the core's `without_usage` writes the events again without it); and the text each
API's events carry (`text_*`), which the guardrails judge as a stream passes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from edgegw.answer import Outcome

# Finish reasons kept per answer (one per choice; `n` is bounded by the providers).
MAX_FINISH_REASONS = 128


def has_usage(data: bytes) -> bool:
    # Many providers send `"usage":null` on every chunk; only a real object is worth parsing.
    # `find`, not `in`: edgegw.octets says why.
    return data.find(b'"usage":') != -1 and data.find(b'"usage":null') == -1


# A whole answer larger than this is not parsed for its tap: orjson's objects for it take
# about 13 times its size (a 15 MiB answer, 195 MiB at once: more than the buffer budget
# holds for it), so only its usage object is found and parsed (`usage_of`).
TAP_WHOLE_MAX = 1 << 20
# The longest usage object looked for.
USAGE_MAX = 64 * 1024


def usage_of(data: bytes) -> bytes:
    """`{"usage": {...}}` with the last top-level-looking usage object of a large answer,
    found by scanning its bytes (b"" when there is none): what a tap reads of it."""
    at = data.rfind(b'"usage":')
    if at == -1:
        return b""
    start = data.find(b"{", at + 8, at + 8 + 64)
    if start == -1:
        return b""
    depth, in_string, escaped = 0, False, False
    for i in range(start, min(len(data), start + USAGE_MAX)):
        c = data[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 92:  # backslash
                escaped = True
            elif c == 34:  # quote
                in_string = False
        elif c == 34:
            in_string = True
        elif c == 123:  # {
            depth += 1
        elif c == 125:  # }
            depth -= 1
            if depth == 0:
                return b'{"usage":' + data[start : i + 1] + b"}"
    return b""


def tap(data: bytes, outcome: Outcome, part: str) -> None:
    """Usage and tool-call names from a stream chunk (`part` "delta") or a whole
    non-streaming answer (`part` "message")."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    if not isinstance(doc, dict):
        return
    usage = doc.get("usage")
    if isinstance(usage, dict):
        outcome.usage = usage
    model = doc.get("model")
    if isinstance(model, str):
        outcome.response_model = model
    for choice in doc.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        _collect_tool_calls(choice.get(part), outcome)
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and len(outcome.finish_reasons) < MAX_FINISH_REASONS:
            outcome.finish_reasons.append(reason)


def _collect_tool_calls(message: object, outcome: Outcome) -> None:
    if not isinstance(message, dict):
        return
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name:  # streamed calls name the function once
            outcome.tool_calls.append(name)


def tap_anthropic(data: bytes, outcome: Outcome, part: str) -> None:
    """The same from a Messages answer or stream event: the model and input usage of
    `message_start` (or a whole message), the output usage and stop reason of
    `message_delta`, the names of `tool_use` blocks."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    if not isinstance(doc, dict):
        return
    message = doc.get("message") if doc.get("type") == "message_start" else doc
    if not isinstance(message, dict):
        return
    usage = message.get("usage")
    if isinstance(usage, dict):
        # message_delta's usage is cumulative output; the input came with message_start.
        outcome.usage = {**(outcome.usage or {}), **usage}
    model = message.get("model")
    if isinstance(model, str):
        outcome.response_model = model
    delta = doc.get("delta")
    reason = (delta if isinstance(delta, dict) else message).get("stop_reason")
    if isinstance(reason, str) and len(outcome.finish_reasons) < MAX_FINISH_REASONS:
        outcome.finish_reasons.append(reason)
    blocks = message.get("content")
    block = doc.get("content_block")
    for b in [block] if isinstance(block, dict) else blocks if isinstance(blocks, list) else ():
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("name"), str):
            outcome.tool_calls.append(b["name"])


def tap_responses(data: bytes, outcome: Outcome, part: str) -> None:
    """The same from a Responses answer, or its stream's `response.completed` (or
    `response.incomplete`/`response.failed`) event, which carries the whole response."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    if not isinstance(doc, dict):
        return
    response = doc.get("response")
    if not isinstance(response, dict):
        response = doc
    usage = response.get("usage")
    if isinstance(usage, dict):
        outcome.usage = usage
    model = response.get("model")
    if isinstance(model, str):
        outcome.response_model = model
    status = response.get("status")
    if isinstance(status, str) and status != "in_progress" and usage is not None:
        outcome.finish_reasons.append(status)
    for item in response.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "function_call":
            name = item.get("name")
            if isinstance(name, str):
                outcome.tool_calls.append(name)


Tap = Callable[[bytes, Outcome, str], None]
# The tap of each API's answers, by its ErrorShape's name (the route's API).
TAPS: dict[str, Tap] = {"openai": tap, "anthropic": tap_anthropic, "responses": tap_responses}


# --- the text of a stream, for the guardrails (edgegw.guardrails.stream) -----------------

# (channel, text): a channel keeps one choice's, block's or item's text apart from the
# others streamed beside it, so that the text a policy reads is each one's, in order.
TextPiece = tuple[object, str]


def _doc(data: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def text_openai(data: bytes) -> list[TextPiece]:
    """A chat or completions chunk: each choice's content (completions: `text`), refusal,
    reasoning and tool-call arguments."""
    doc = _doc(data)
    out: list[TextPiece] = []
    for choice in (doc or {}).get("choices") or ():
        if not isinstance(choice, dict):
            continue
        i = choice.get("index")
        if isinstance(choice.get("text"), str):
            out.append(((i, "text"), choice["text"]))
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        for member in ("content", "refusal", "reasoning_content", "reasoning"):
            if isinstance(delta.get(member), str):
                out.append(((i, member), delta[member]))
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            function = call.get("function")
            args = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(args, str):
                out.append(((i, "tool", call.get("index")), args))
    return [p for p in out if p[1]]


# The members of Anthropic's content_block_delta deltas that carry the model's text.
_ANTHROPIC_DELTA_TEXT = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}


def text_anthropic(data: bytes) -> list[TextPiece]:
    """A Messages event: a content_block_delta's text, tool input or thinking (a block's
    opening text, when it has one)."""
    doc = _doc(data)
    if doc is None:
        return []
    i = doc.get("index")
    if doc.get("type") == "content_block_start":
        block = doc.get("content_block")
        text = block.get("text") if isinstance(block, dict) else None
        return [(i, text)] if isinstance(text, str) and text else []
    if doc.get("type") != "content_block_delta":
        return []
    delta = doc.get("delta")
    if not isinstance(delta, dict):
        return []
    member = _ANTHROPIC_DELTA_TEXT.get(str(delta.get("type")))
    text = delta.get(member) if member is not None else None
    return [(i, text)] if isinstance(text, str) and text else []


def text_responses(data: bytes) -> list[TextPiece]:
    """A Responses event: the `delta` of every `response.*.delta` event with text (output
    text, refusals, reasoning, call arguments; not audio), by item and part."""
    doc = _doc(data)
    if doc is None:
        return []
    kind = doc.get("type")
    delta = doc.get("delta")
    if not isinstance(kind, str) or not kind.endswith(".delta") or kind == "response.audio.delta":
        return []
    if not isinstance(delta, str) or not delta:
        return []
    part = doc.get("content_index", doc.get("summary_index"))
    return [((doc.get("item_id", doc.get("output_index")), part), delta)]


def text_cohere(data: bytes) -> list[TextPiece]:
    """A Cohere v2 chat event: content-delta's text, tool-plan-delta's plan,
    tool-call-delta's arguments."""
    doc = _doc(data)
    delta = (doc or {}).get("delta")
    message = delta.get("message") if isinstance(delta, dict) else None
    if doc is None or not isinstance(message, dict):
        return []
    i = doc.get("index")
    content, calls = message.get("content"), message.get("tool_calls")
    function = calls.get("function") if isinstance(calls, dict) else None
    for channel, text in (
        ((i, "text"), content.get("text") if isinstance(content, dict) else None),
        ("plan", message.get("tool_plan")),
        ((i, "tool"), function.get("arguments") if isinstance(function, dict) else None),
    ):
        if isinstance(text, str) and text:
            return [(channel, text)]
    return []


def text_workers_ai(data: bytes) -> list[TextPiece]:
    """A Workers AI (Cloudflare) `run` event: its `response`."""
    doc = _doc(data)
    text = (doc or {}).get("response")
    return [(0, text)] if isinstance(text, str) and text else []


TextTap = Callable[[bytes], list[TextPiece]]
