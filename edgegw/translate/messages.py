"""Anthropic's Messages API request as a chat request: a pure function over documents.

`chat_request(doc)` turns a Messages request into the chat request edgegw serves (any
target: a remote provider, a local model, a routing alias); edgegw.translate.messages_answer
turns the answer back. What has no chat counterpart is refused with 400 `unsupported_field`
naming it, never dropped; what is left out is only what Anthropic itself leaves out of the
model's context (an earlier turn's thinking) (README.md, "/v1/messages for any model").
"""

from __future__ import annotations

from typing import Any

import orjson

from edgegw.translate.common import (
    data_url,
    invalid,
    reasoning_effort,
    require_type,
    text_of,
    untranslatable,
)

# Members of a Messages request that map onto chat's.
_KNOWN = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "stream",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        # Prompt caching's breakpoint: a cost hint that changes no answer.
        "cache_control",
        # Context editing: accepted and applied to nothing, which the answer reports as
        # Anthropic does (`context_management.applied_edits` empty).
        "context_management",
    }
)


def chat_request(doc: Any) -> dict[str, Any]:
    """The chat request for a Messages request (400 for what cannot be translated)."""
    if not isinstance(doc, dict):
        raise invalid("the request body must be a JSON object", None)
    for name in doc:
        if name not in _KNOWN:
            raise untranslatable(name)
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("field 'model' is required", "model")
    max_tokens = doc.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise invalid("'max_tokens' must be a positive integer", "max_tokens")
    out: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    messages: list[dict[str, Any]] = []
    system = doc.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _system_text(system, "system")})
    raw = doc.get("messages")
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty array", "messages")
    for i, message in enumerate(raw):
        messages += _message(message, f"messages[{i}]")
    out["messages"] = messages
    for name in ("temperature", "top_p", "top_k"):
        if name in doc:
            out[name] = doc[name]
    if (stops := doc.get("stop_sequences")) is not None:
        out["stop"] = stops
    if (edits := doc.get("context_management")) is not None and not isinstance(edits, dict):
        raise invalid("'context_management' must be an object", "context_management")
    if (metadata := doc.get("metadata")) is not None:
        if not isinstance(metadata, dict):
            raise invalid("'metadata' must be an object", "metadata")
        for key in metadata:
            if key != "user_id":
                raise untranslatable(f"metadata.{key}")
        if isinstance(metadata.get("user_id"), str):
            out["user"] = metadata["user_id"]
    if (tools := doc.get("tools")) is not None:
        out["tools"] = _tools(tools)
    if (choice := doc.get("tool_choice")) is not None:
        _tool_choice(choice, out)
    if (thinking := doc.get("thinking")) is not None:
        _thinking(thinking, out)
    if (config := doc.get("output_config")) is not None:
        _output_config(config, out)
    if doc.get("stream") is True:
        out["stream"] = True
        # The final message_delta carries the usage: asked for from every target.
        out["stream_options"] = {"include_usage": True}
    return out


def _system_text(system: Any, where: str) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        texts = []
        for j, block in enumerate(system):
            require_type(block, ("text",), f"{where}[{j}]")
            texts.append(text_of(block, f"{where}[{j}]"))
        return "\n\n".join(texts)
    raise invalid(f"'{where}' must be a string or an array of text blocks", where)


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    """One Messages message as chat messages: a user turn's tool results become `tool`
    messages (first, as chat wants them right after the assistant's calls)."""
    if not isinstance(message, dict):
        raise invalid(f"'{where}' must be an object", where)
    role = message.get("role")
    if role not in ("user", "assistant", "system"):
        raise invalid(f"'{where}.role' must be user, assistant or system", f"{where}.role")
    content = message.get("content")
    if role == "system":  # a system message among the turns, where the API takes one
        return [{"role": "system", "content": _system_text(content, f"{where}.content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise invalid(f"'{where}.content' must be a string or an array", f"{where}.content")
    if role == "assistant":
        return [_assistant(content, where)]
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = require_type(block, ("text", "image", "tool_result"), at)
        if kind == "text":
            parts.append({"type": "text", "text": text_of(block, at)})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, at)}})
        else:
            tools.append(_tool_result(block, at))
    out = tools
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        text = "\n\n".join(p["text"] for p in parts) if only_text else None
        out.append({"role": "user", "content": text if text is not None else parts})
    return out


def _assistant(content: list[Any], where: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = require_type(block, ("text", "tool_use", "thinking", "redacted_thinking"), at)
        if kind == "text":
            texts.append(text_of(block, at))
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise invalid(f"'{at}' needs a string 'id' and 'name'", at)
            arguments = orjson.dumps(block.get("input", {})).decode()
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        # Thinking of an earlier turn: Anthropic leaves it out of the model's context too.
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    elif not texts:
        out["content"] = ""
    return out


def _tool_result(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise invalid(f"'{at}.tool_use_id' must be a string", f"{at}.tool_use_id")
    content = block.get("content", "")
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content):
            require_type(part, ("text",), f"{at}.content[{k}]")
            texts.append(text_of(part, f"{at}.content[{k}]"))
        content = "\n\n".join(texts)
    elif not isinstance(content, str):
        raise invalid(f"'{at}.content' must be a string or an array", f"{at}.content")
    if block.get("is_error") is True:
        # Chat has no error flag on a tool result: the model is told in the text.
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _image_url(block: dict[str, Any], at: str) -> str:
    source = block.get("source")
    if not isinstance(source, dict):
        raise invalid(f"'{at}.source' must be an object", f"{at}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise invalid(f"'{at}.source' needs 'media_type' and 'data'", f"{at}.source")
        return data_url(media, data)
    if kind == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise untranslatable(f"{at}.source.type", "images go as base64 or a URL")


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise invalid("'tools' must be an array", "tools")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(f"'{at}' must be an object", at)
        if tool.get("type") not in (None, "custom"):
            # Server tools (web search, code execution, bash, ...) run at Anthropic.
            raise untranslatable(f"{at}.type", f"the {tool.get('type')!r} tool runs at Anthropic")
        name = tool.get("name")
        if not isinstance(name, str):
            raise invalid(f"'{at}.name' must be a string", f"{at}.name")
        function: dict[str, Any] = {"name": name}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if not isinstance(choice, dict):
        raise invalid("'tool_choice' must be an object", "tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise invalid(
            "'tool_choice.type' must be auto, any, tool (with a name) or none", "tool_choice"
        )
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False


def _thinking(thinking: Any, out: dict[str, Any]) -> None:
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise invalid("'thinking.budget_tokens' must be an integer", "thinking.budget_tokens")
        out["reasoning_effort"] = reasoning_effort(budget)
    elif kind not in ("disabled", "adaptive"):  # adaptive: the target's own default
        raise untranslatable(
            "thinking", "it takes enabled (with budget_tokens), adaptive or disabled"
        )


# Messages' output efforts that chat's reasoning_effort has.
_EFFORTS = frozenset({"low", "medium", "high"})


def _output_config(config: Any, out: dict[str, Any]) -> None:
    if not isinstance(config, dict):
        raise invalid("'output_config' must be an object", "output_config")
    for key, value in config.items():
        if value is None:
            continue
        if key == "effort" and value in _EFFORTS:
            out["reasoning_effort"] = value
        elif key == "format" and isinstance(value, dict) and value.get("type") == "json_schema":
            schema = {"name": "output", "schema": value.get("schema"), "strict": True}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        else:
            raise untranslatable(f"output_config.{key}")


def prompt_texts(chat: dict[str, Any]) -> list[str]:
    """The texts of a translated request that its prompt is made of (message contents, tool
    calls' arguments, the tools' definitions), for a tokenizer to count."""
    texts: list[str] = []
    for message in chat["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p["text"] for p in content if p.get("type") == "text"]
        for call in message.get("tool_calls") or ():
            texts += [call["function"]["name"], call["function"]["arguments"]]
    texts += [orjson.dumps(tool["function"]).decode() for tool in chat.get("tools") or ()]
    return texts
