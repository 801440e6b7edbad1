"""What the Messages and Responses translations share: the checks of a request's parts,
usage read from a chat answer, and SSE events written with their names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from edgegw.errors import GatewayError, fail, unsupported_field

# Anthropic's thinking budget as an OpenAI reasoning effort, which names no token count: a
# small budget (under 4k tokens) is `low`, a large one (16k and more) `high`.
EFFORT_BUDGETS = ((16_384, "high"), (4_096, "medium"), (0, "low"))


def invalid(message: str, param: str | None) -> GatewayError:
    return fail("invalid_request", message, param=param)


def untranslatable(param: str, why: str | None = None) -> GatewayError:
    """400 `unsupported_field` for a part of a request that has no chat counterpart."""
    message = f"'{param}' has no translation for this target"
    return unsupported_field(param, f"{message}: {why}" if why else message)


def require_type(block: Any, kinds: tuple[str, ...], at: str) -> str:
    """A content block's `type`, one of `kinds` (another type: 400 naming it)."""
    if not isinstance(block, dict):
        raise invalid(f"'{at}' must be an object", at)
    kind = block.get("type")
    if not isinstance(kind, str):
        raise invalid(f"'{at}.type' must be a string", f"{at}.type")
    if kind not in kinds:
        raise untranslatable(f"{at}.type", f"{kind!r} is not among {', '.join(kinds)}")
    return kind


def text_of(block: dict[str, Any], at: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"'{at}.text' must be a string", f"{at}.text")
    return text


def data_url(media_type: str, data: str) -> str:
    return f"data:{media_type};base64,{data}"


def reasoning_effort(budget: int) -> str:
    return next(effort for floor, effort in EFFORT_BUDGETS if budget >= floor)


def chat_usage(usage: Any) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens of a chat answer's usage (0 when absent)."""
    if not isinstance(usage, dict):
        return 0, 0, 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        _count(usage.get("prompt_tokens")),
        _count(usage.get("completion_tokens")),
        _count(cached),
    )


def reasoning_tokens(usage: Any) -> int:
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    return _count(details.get("reasoning_tokens")) if isinstance(details, dict) else 0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def sse_event(name: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"


class HiddenCalls:
    """The calls of a stream's tools the gateway runs itself (MCP's, edgegw.mcp), left out
    of a translated stream: the chat stream shows each round's calls, but the API's client
    neither defined nor runs them. A call is known by its name in its first delta, then
    by its index until its round ends (its finish reason)."""

    __slots__ = ("names", "indices")

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.indices: set[int] = set()

    def hides(self, tc: dict[str, Any]) -> bool:
        index = tc.get("index", 0)
        function = tc.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name in self.names:
            self.indices.add(index)
        return index in self.indices

    def round_ended(self) -> None:
        self.indices.clear()


@dataclass(frozen=True, slots=True)
class CallDelta:
    """One tool-call delta of a chat stream, as both translations read it."""

    index: int
    call_id: str | None
    name: str
    arguments: str

    @staticmethod
    def read(tc: Any, hidden: HiddenCalls) -> CallDelta | None:
        """None for a delta that is no call, or a call the gateway runs itself."""
        if not isinstance(tc, dict) or hidden.hides(tc):
            return None
        function = tc.get("function")
        function = function if isinstance(function, dict) else {}
        call_id, name, arguments = tc.get("id"), function.get("name"), function.get("arguments")
        return CallDelta(
            tc.get("index", 0),
            call_id if isinstance(call_id, str) and call_id else None,
            name if isinstance(name, str) else "",
            arguments if isinstance(arguments, str) else "",
        )

    def starts_another(self, index: int | None, current_id: str | None) -> bool:
        """A new call: another index, or (from providers that number every call 0) an id."""
        return index != self.index or (self.call_id is not None and self.call_id != current_id)


def answer_message(chat: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the first choice, its message) of a whole chat answer; 502 `bad_upstream_response`
    when it has none (an upstream's answer is read, never trusted)."""
    choices = chat.get("choices") if isinstance(chat, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise fail("bad_upstream_response", "the model's answer has no choices")
    message = choices[0].get("message")
    return choices[0], message if isinstance(message, dict) else {}


def first_deltas(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(choice, delta) of a stream chunk's first choice (the translations answer n = 1);
    anything else in `choices` is passed over."""
    choices = doc.get("choices")
    return [
        (choice, delta)
        for choice in (choices if isinstance(choices, list) else ())
        if isinstance(choice, dict)
        and choice.get("index", 0) == 0
        and isinstance(delta := choice.get("delta") or {}, dict)
    ]
