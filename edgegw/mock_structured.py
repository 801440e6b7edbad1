"""The mock's chat answers beyond words: the tool a request makes it call or the JSON content it
asks for, the message and stream deltas of such an answer, and JSON values that a JSON schema
accepts, made up deterministically (`value_for`).

A request offering function ``tools`` (``tool_choice`` not "none") gets a call: to the function
``tool_choice`` names, else the first offered (the first allowed, for ``allowed_tools``); but
not when its last message is a tool result and the call is not forced ("required", a named
function), as a model answers once it has the result. Otherwise ``response_format``
``json_schema`` gets JSON the schema accepts, ``json_object`` the object ``{"answer": words}``.

Schema keywords covered: ``type`` (one or a list), ``enum``, ``const``, ``required`` (only
required properties are written), ``$ref`` within the document (``#/$defs/...``), ``anyOf`` /
``oneOf`` (the first alternative that is not null), ``allOf`` (merged), ``minimum`` /
``maximum`` and their exclusive forms, ``multipleOf`` on integers, ``minLength`` /
``maxLength``, ``minItems`` / ``maxItems``, ``prefixItems`` and the common string ``format``s.
Not covered: ``pattern``, ``not``, ``if``/``then``, ``uniqueItems`` with ``minItems`` over 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

# Characters per token of a structured answer (JSON content, tool arguments): OpenAI's rule of
# thumb for English text.
TOKEN_CHARS = 4
# From this depth down a value is as small as its schema allows (no array item beyond
# minItems, null where it is an alternative), so that a recursive schema ends.
SMALL_BELOW = 8
# A schema still nested (or recursing through $ref) this deep gets null, and so does every
# value past the first MAX_NODES: bounds for a schema with no finite value, or a huge one.
MAX_DEPTH = 64
MAX_NODES = 10_000
# The made-up string, as recognisable in an answer as the mock's other words.
STRING = "mock"
# One valid value per common `format`, so that a client's validator (pydantic's datetime,
# EmailStr, UUID, ...) accepts it.
FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "mock@example.com",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_HINTS = (
    ("object", ("properties", "required", "additionalProperties")),
    ("array", ("items", "prefixItems", "minItems", "maxItems")),
    ("string", ("minLength", "maxLength", "format", "pattern")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")),
)


@dataclass(frozen=True, slots=True)
class Structured:
    """A chat answer other than the mock's words: JSON content, or a call to a tool."""

    text: str  # the content, or the call's arguments
    tool: str | None = None  # the called function
    call_id: str = ""  # choice j's call is f"{call_id}_{j}"

    @property
    def tokens(self) -> int:
        return -(-len(self.text) // TOKEN_CHARS)

    def piece(self, start: int, stop: int) -> str:
        """Tokens start..stop of the text."""
        return self.text[start * TOKEN_CHARS : stop * TOKEN_CHARS]

    def message(self, tokens: int, choice: int) -> dict[str, Any]:
        """The assistant message of a whole answer cut to `tokens`."""
        text = self.piece(0, tokens)
        if self.tool is None:
            return {"role": "assistant", "content": text, "refusal": None}
        call = {"name": self.tool, "arguments": text}
        return {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {"id": f"{self.call_id}_{choice}", "type": "function", "function": call}
            ],
        }

    def first_delta(self, choice: int) -> dict[str, Any]:
        """A streamed choice's first delta: the role, and a call's index, id, type and name."""
        if self.tool is None:
            return {"role": "assistant", "content": ""}
        call = {
            "index": 0,
            "id": f"{self.call_id}_{choice}",
            "type": "function",
            "function": {"name": self.tool, "arguments": ""},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def delta(self, text: str) -> dict[str, Any]:
        """A streamed choice's next piece: content, or a piece of the call's arguments."""
        if self.tool is None:
            return {"content": text}
        return {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}


class BadField(ValueError):
    """A request field the mock cannot answer (a 400 naming `param`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def requested(payload: dict[str, Any], words: Callable[[], str]) -> Structured | None:
    """What a chat request asks for besides words, if anything; `words` is the words answer."""
    call = _called_tool(payload)
    if call is not None:
        name, parameters = call
        return Structured(_json(value_for(parameters)), name)
    spec = payload.get("response_format")
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == "json_schema":
        return Structured(_json(value_for(_schema(spec.get("json_schema"), "schema"))))
    if spec.get("type") == "json_object":
        return Structured(_json({"answer": words()}))
    return None


def _called_tool(payload: dict[str, Any]) -> tuple[str, object] | None:
    """(name, parameters schema) of the function to call, or None to answer instead."""
    tools = payload.get("tools")
    offered = {
        tool["function"]["name"]: _schema(tool["function"], "parameters")
        for tool in (tools if isinstance(tools, list) else ())
        if isinstance(tool, dict)
        and tool.get("type") == "function"
        and isinstance(tool.get("function"), dict)
        and isinstance(tool["function"].get("name"), str)
    }
    choice = payload.get("tool_choice")
    if not offered or choice == "none":
        return None
    forced, names = choice == "required", list(offered)
    if isinstance(choice, dict) and choice.get("type") == "function":
        named = choice.get("function")
        forced, names = True, [named.get("name") if isinstance(named, dict) else None]
    elif isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = choice.get("allowed_tools")
        allowed = allowed if isinstance(allowed, dict) else {}
        forced = allowed.get("mode") == "required"
        listed = allowed.get("tools")
        names = [_function_name(t) for t in (listed if isinstance(listed, list) else ())]
    if not forced and _has_tool_result(payload):
        return None
    name = next((n for n in names if n in offered), None)
    if name is None:
        raise BadField("tool_choice", "tool_choice names no function offered in tools")
    return name, offered[name]


def _function_name(tool: object) -> str | None:
    """The function an allowed_tools entry names ({"type", "function": {"name"}} or {"name"})."""
    if not isinstance(tool, dict):
        return None
    named = tool.get("function", tool)
    name = named.get("name") if isinstance(named, dict) else None
    return name if isinstance(name, str) else None


def _has_tool_result(payload: dict[str, Any]) -> bool:
    """Whether the last message is a tool's result (the model has what it called for)."""
    messages = payload.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    return isinstance(last, dict) and last.get("role") in ("tool", "function")


def _schema(spec: object, key: str) -> object:
    """The JSON schema under `key` (an object with no properties when absent)."""
    schema = spec.get(key) if isinstance(spec, dict) else None
    return {"type": "object"} if schema is None else schema


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def value_for(schema: object) -> Any:
    """A JSON value (dicts, lists, str, int, float, bool, None) that `schema` accepts."""
    return _Maker(schema).value(schema, 0)


class _Maker:
    """One document's values: its root (for `$ref`) and what is left of the node budget."""

    def __init__(self, root: object) -> None:
        self.root = root
        self.budget = MAX_NODES

    def value(self, schema: object, depth: int) -> Any:
        self.budget -= 1
        if not isinstance(schema, dict) or depth >= MAX_DEPTH or self.budget < 0:
            return None  # the schema `true` takes anything; past a bound, null is the answer
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.value(_resolve(self.root, ref), depth + 1)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.value(_merge([rest, *(self.follow(p) for p in parts)]), depth + 1)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self.value(self.pick(options, depth), depth + 1)
        kind = _kind(schema.get("type"), depth)
        if kind is None:
            kind = next((k for k, keys in _HINTS if any(key in schema for key in keys)), None)
        if kind == "object":
            return self.make_object(schema, depth)
        if kind == "array":
            return self.make_array(schema, depth)
        if kind == "string":
            return _string(schema)
        if kind == "integer":
            return _integer(schema)
        if kind == "number":
            return _number(schema)
        return True if kind == "boolean" else None

    def pick(self, options: list[Any], depth: int) -> object:
        """The first alternative that is not null; null itself once values should be small."""
        resolved = [self.follow(o) for o in options]
        null = [o for o in resolved if _is_null(o)]
        if null and depth >= SMALL_BELOW:
            return null[0]
        return next((o for o in resolved if not _is_null(o)), resolved[0])

    def make_object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
        extra = schema.get("additionalProperties", {})
        return {n: self.value(properties.get(n, extra), depth + 1) for n in dict.fromkeys(names)}

    def make_array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        count = _count(schema.get("minItems")) or 0
        if depth < SMALL_BELOW:
            count = max(count, 1)
        high = _count(schema.get("maxItems"))
        if high is not None:
            count = min(count, high)
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items", {})
        if items is False:
            count = min(count, len(prefix))
        return [
            self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(count)
        ]

    def follow(self, schema: object) -> object:
        """`schema` with a top-level `$ref` followed (a few hops: refs to refs are rare)."""
        for _ in range(8):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                break
            schema = _resolve(self.root, schema["$ref"])
        return schema


def _kind(kind: object, depth: int) -> str | None:
    if isinstance(kind, list):
        kinds = [k for k in kind if isinstance(k, str)]
        if "null" in kinds and depth >= SMALL_BELOW:
            return "null"
        return next((k for k in kinds if k != "null"), "null" if kinds else None)
    return kind if isinstance(kind, str) else None


def _is_null(schema: object) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null"


def _string(schema: dict[str, Any]) -> str:
    fmt = schema.get("format")
    text = FORMATS.get(fmt, STRING) if isinstance(fmt, str) else STRING
    low, high = _count(schema.get("minLength")), _count(schema.get("maxLength"))
    if low is not None and len(text) < low:
        text = (text * (low // len(text) + 1))[:low]
    return text if high is None else text[:high]


def _integer(schema: dict[str, Any]) -> int:
    """1, moved inside the bounds, then up to a multiple of `multipleOf`."""
    low = max(
        (math.floor(b) + 1 if open_ else math.ceil(b) for b, open_ in _lower(schema)),
        default=None,
    )
    high = min(
        (math.ceil(b) - 1 if open_ else math.floor(b) for b, open_ in _upper(schema)),
        default=None,
    )
    value = 1 if low is None else max(1, low)
    if high is not None:
        value = min(value, high)
    step = _finite(schema.get("multipleOf"))
    if step is not None and step >= 1 and step.is_integer():
        value = math.ceil(value / step) * int(step)
        if high is not None and value > high:
            value -= int(step)
    return value


def _number(schema: dict[str, Any]) -> float:
    """1.5, moved inside the bounds (midway between them when both are near)."""
    low = max(_lower(schema), default=None)  # on a tie the exclusive bound (True) is stricter
    high = min(_upper(schema), default=None, key=lambda b: (b[0], not b[1]))
    value = 1.5
    if low is not None and (value < low[0] or (low[1] and value == low[0])):
        value = low[0] + 1
    if high is not None and (value > high[0] or (high[1] and value == high[0])):
        value = (low[0] + high[0]) / 2 if low is not None else high[0] - 1
    return value


def _lower(schema: dict[str, Any]) -> list[tuple[float, bool]]:
    """The lower bounds, each with whether it is exclusive."""
    return _bounds(schema, "minimum", "exclusiveMinimum")


def _upper(schema: dict[str, Any]) -> list[tuple[float, bool]]:
    return _bounds(schema, "maximum", "exclusiveMaximum")


def _bounds(schema: dict[str, Any], closed: str, exclusive: str) -> list[tuple[float, bool]]:
    found = ((_finite(schema.get(key)), key == exclusive) for key in (closed, exclusive))
    return [(b, open_) for b, open_ in found if b is not None]


def _finite(value: object) -> float | None:
    """A JSON number as a float; None for anything else (a huge integer included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > 2**53:
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _resolve(root: object, ref: str) -> object:
    """A `#/...` JSON pointer into the schema document; `{}` for any other reference."""
    if not ref.startswith("#"):
        return {}
    node = root
    for token in ref[1:].split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return {}
    return node


def _merge(parts: list[object]) -> dict[str, Any]:
    """allOf as one schema: properties and required joined, other keywords the last's."""
    merged: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    required: list[Any] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        merged.update(part)
        if isinstance(part.get("properties"), dict):
            properties.update(part["properties"])
        if isinstance(part.get("required"), list):
            required.extend(part["required"])
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = required
    return merged
