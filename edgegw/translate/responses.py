"""OpenAI's Responses API request as a chat request: a pure function over documents.

`chat_request(doc)` turns a Responses request into the chat request edgegw serves;
edgegw.translate.responses_answer turns the answer back. Nothing is stored:
`previous_response_id`, `conversation` and stored prompts are refused (the client sends the
whole input each turn). What has no chat counterpart is refused with 400
`unsupported_field` naming it (README.md, "/v1/responses for any model").
"""

from __future__ import annotations

from typing import Any

from edgegw.translate.common import invalid, require_type, text_of, untranslatable

# Members that map onto chat's, or that change nothing of an answer served once.
_KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "text",
        "reasoning",
        "user",
        "safety_identifier",
        "metadata",
        "store",
        "truncation",
        "include",
        "prompt_cache_key",
    }
)


def chat_request(doc: Any) -> dict[str, Any]:
    """The chat request for a Responses request (400 for what cannot be translated)."""
    if not isinstance(doc, dict):
        raise invalid("the request body must be a JSON object", None)
    for name, value in doc.items():
        if name not in _KNOWN and value is not None:
            stateful = name in ("previous_response_id", "conversation")
            raise untranslatable(
                name,
                "this gateway keeps no responses: send the whole conversation as 'input'"
                if stateful
                else None,
            )
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("field 'model' is required", "model")
    if doc.get("store") is True:
        raise untranslatable("store", "this gateway keeps no responses ('store': false)")
    if doc.get("truncation") not in (None, "disabled"):
        raise untranslatable("truncation", "only 'disabled' is")
    if doc.get("include"):
        raise untranslatable("include")
    out: dict[str, Any] = {"model": model}
    messages: list[dict[str, Any]] = []
    instructions = doc.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid("'instructions' must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    messages += _input(doc.get("input"))
    out["messages"] = messages
    if (cap := doc.get("max_output_tokens")) is not None:
        # `max_tokens`, the cap every OpenAI-compatible API takes (some ignore the newer name).
        out["max_tokens"] = cap
    for name in ("temperature", "top_p", "parallel_tool_calls", "user", "safety_identifier"):
        if doc.get(name) is not None:
            out[name] = doc[name]
    if doc.get("prompt_cache_key") is not None:
        out["prompt_cache_key"] = doc["prompt_cache_key"]
    if (metadata := doc.get("metadata")) is not None and metadata != {}:
        out["metadata"] = metadata
    if (tools := doc.get("tools")) is not None:
        if tools:
            out["tools"] = _tools(tools)
    if (choice := doc.get("tool_choice")) is not None:
        out["tool_choice"] = _tool_choice(choice)
    if (text := doc.get("text")) is not None:
        _text(text, out)
    if (reasoning := doc.get("reasoning")) is not None:
        if not isinstance(reasoning, dict):
            raise invalid("'reasoning' must be an object", "reasoning")
        for key, value in reasoning.items():
            if key == "effort" and value is not None:
                out["reasoning_effort"] = value
            elif value is not None:
                raise untranslatable(f"reasoning.{key}")
    if doc.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _input(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise invalid("'input' must be a string or a non-empty array of items", "input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"'{at}' must be an object", at)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, at))
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            arguments = item.get("arguments", "")
            if not all(isinstance(v, str) for v in (call_id, name, arguments)):
                raise invalid(f"'{at}' needs string 'call_id', 'name' and 'arguments'", at)
            tool_call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(tool_call)  # parallel calls: one assistant turn
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise invalid(f"'{at}.call_id' must be a string", f"{at}.call_id")
            if isinstance(output, list):
                output = "".join(
                    text_of(p, f"{at}.output[{k}]")
                    for k, p in enumerate(output)
                    if require_type(p, ("input_text",), f"{at}.output[{k}]")
                )
            elif not isinstance(output, str):
                raise invalid(f"'{at}.output' must be a string", f"{at}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "reasoning":
            continue  # an earlier turn's reasoning: chat models take none back
        else:
            raise untranslatable(f"{at}.type", f"input items of type {kind!r}")
    return out


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise invalid(f"'{at}.role' must be user, assistant, system or developer", f"{at}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise invalid(f"'{at}.content' must be a string or an array", f"{at}.content")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{at}.content[{j}]"
        kind = require_type(part, ("input_text", "output_text", "input_image", "refusal"), where)
        if kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise untranslatable(f"{where}.file_id", "images go by URL")
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        else:
            parts.append({"type": "text", "text": text_of(part, where)})
    if all(p["type"] == "text" for p in parts):
        return {"role": role, "content": "".join(p["text"] for p in parts)}
    return {"role": role, "content": parts}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise invalid("'tools' must be an array", "tools")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(f"'{at}' must be an object", at)
        if tool.get("type") != "function":
            # Hosted tools (web search, file search, computer use, ...) run at OpenAI.
            raise untranslatable(f"{at}.type", f"the {tool.get('type')!r} tool runs at OpenAI")
        name = tool.get("name")
        if not isinstance(name, str):
            raise invalid(f"'{at}.name' must be a string", f"{at}.name")
        function: dict[str, Any] = {"name": name}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("name"), str)
    ):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise untranslatable("tool_choice", "it takes auto, none, required or a function")


def _text(text: Any, out: dict[str, Any]) -> None:
    if not isinstance(text, dict):
        raise invalid("'text' must be an object", "text")
    for key in text:
        if key != "format":
            raise untranslatable(f"text.{key}")
    fmt = text.get("format")
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return
    if kind == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif kind == "json_schema" and isinstance(fmt, dict):
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        raise untranslatable("text.format.type")
