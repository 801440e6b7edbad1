"""A chat answer as a Responses answer: pure functions over documents.

`ResponsesAnswers` turns a whole chat completion into a Response object, echoing the
request's settings as OpenAI does, and (`ResponsesStream`) a chat stream's chunks into the
Responses events: response.created, response.in_progress, an output item per message or
function call with its content-part / output_text / function_call_arguments events, then
response.completed (or response.incomplete at the output cap), each numbered by
`sequence_number` from 0, as the OpenAI SDK's stream helper checks them.
"""

from __future__ import annotations

import time
from typing import Any

from edgegw.errors import RESPONSES_SHAPE
from edgegw.ids import random_bits
from edgegw.translate.common import (
    CallDelta,
    HiddenCalls,
    answer_message,
    chat_usage,
    first_deltas,
    reasoning_tokens,
    sse_event,
)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{random_bits(96):024x}"


class ResponsesAnswers:
    """The Responses side of a translated request's answer (edgegw.translate.answer): the
    request's settings echoed in every Response object, as OpenAI does."""

    __slots__ = ("base", "id", "hidden")
    shape = RESPONSES_SHAPE

    def __init__(self, doc: dict[str, Any], hidden: frozenset[str] = frozenset()) -> None:
        """`hidden`: the tools whose calls are left out (edgegw.translate.common.HiddenCalls)."""
        self.id = _new_id("resp")
        self.hidden = hidden
        self.base: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": int(time.time()),
            "model": doc["model"],
            "instructions": doc.get("instructions"),
            "max_output_tokens": doc.get("max_output_tokens"),
            "metadata": doc.get("metadata") or {},
            "parallel_tool_calls": doc.get("parallel_tool_calls", True),
            "temperature": doc.get("temperature"),
            "top_p": doc.get("top_p"),
            "tool_choice": doc.get("tool_choice", "auto"),
            "tools": doc.get("tools") or [],
            "text": doc.get("text") or {"format": {"type": "text"}},
            "previous_response_id": None,
            "store": False,
            "error": None,
            "incomplete_details": None,
        }

    @classmethod
    def of(cls, doc: Any, hidden: frozenset[str]) -> ResponsesAnswers:
        return cls(doc, hidden)

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        finish: str | None,
    ) -> dict[str, Any]:
        doc = {**self.base, "status": status, "output": output, "usage": usage}
        if finish == "length":
            doc["status"] = "incomplete"
            doc["incomplete_details"] = {"reason": "max_output_tokens"}
        elif finish == "content_filter":
            doc["status"] = "incomplete"
            doc["incomplete_details"] = {"reason": "content_filter"}
        return doc

    def answer(self, chat: Any) -> dict[str, Any]:
        choice, message = answer_message(chat)
        output: list[dict[str, Any]] = []
        if isinstance(thought := message.get("reasoning_content"), str) and thought:
            output.append(_reasoning_item(_new_id("rs"), thought, "completed"))
        if isinstance(text := message.get("content"), str) and text:
            output.append(_message_item(_new_id("msg"), text, "completed"))
        for tc in message.get("tool_calls") or ():
            function = tc.get("function") or {}
            if function.get("name") in self.hidden:
                continue
            output.append(
                _call_item(
                    _new_id("fc"),
                    tc.get("id") or _new_id("call"),
                    function.get("name", ""),
                    function.get("arguments") or "",
                    "completed",
                )
            )
        return self.response(
            "completed", output, usage(chat.get("usage")), choice.get("finish_reason")
        )

    def stream(self) -> ResponsesStream:
        return ResponsesStream(self)


def usage(chat_usage_doc: Any) -> dict[str, Any]:
    prompt, completion, cached = chat_usage(chat_usage_doc)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens(chat_usage_doc)},
        "total_tokens": prompt + completion,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """The model's reasoning text (chat's `reasoning_content`), unsummarised."""
    content = [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


class ResponsesStream:
    """A chat stream's chunks (parsed) as Responses events, numbered from 0; one output
    item open at a time (a message's text, or one function call's arguments)."""

    __slots__ = (
        "api",
        "hidden",
        "seq",
        "started",
        "output",
        "open",
        "tool_index",
        "tool_id",
        "finish",
        "usage",
        "ended",
    )

    def __init__(self, api: ResponsesAnswers) -> None:
        self.api = api
        self.hidden = HiddenCalls(api.hidden)
        self.seq = 0
        self.started = False
        self.output: list[dict[str, Any]] = []  # the items, the open one last
        self.open = False
        self.tool_index: int | None = None
        self.tool_id: str | None = None
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.ended = False

    def _event(self, name: str, doc: dict[str, Any]) -> bytes:
        doc = {"type": name, **doc, "sequence_number": self.seq}
        self.seq += 1
        return sse_event(name, doc)

    def _start(self) -> bytes:
        self.started = True
        response = self.api.response("in_progress", [], None, None)
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response}
        )

    def _close(self) -> bytes:
        if not self.open:
            return b""
        self.open, self.tool_index = False, None
        index = len(self.output) - 1
        item = self.output[index]
        item["status"] = "completed"
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "message":
            part = item["content"][0]
            out = self._event(
                "response.output_text.done", {**ids, "text": part["text"], "logprobs": []}
            )
            out += self._event("response.content_part.done", {**ids, "part": part})
        elif item["type"] == "reasoning":
            text = item["content"][0]["text"]
            out = self._event("response.reasoning_text.done", {**ids, "text": text})
        else:
            out = self._event(
                "response.function_call_arguments.done",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "name": item["name"],
                    "arguments": item["arguments"],
                },
            )
        return out + self._event("response.output_item.done", {"output_index": index, "item": item})

    def _open(self, item: dict[str, Any]) -> bytes:
        out = self._close()
        self.output.append(item)
        self.open = True
        index = len(self.output) - 1
        added = {**item, "content": []} if item["type"] != "function_call" else item
        out += self._event("response.output_item.added", {"output_index": index, "item": added})
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self._event(
                "response.content_part.added",
                {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
            )
        return out

    def chunk(self, doc: dict[str, Any]) -> bytes:
        out = b"" if self.started else self._start()
        if isinstance(doc.get("usage"), dict):
            self.usage = usage(doc["usage"])
        for choice, delta in first_deltas(doc):
            if isinstance(thought := delta.get("reasoning_content"), str) and thought:
                if not (self.open and self.output[-1]["type"] == "reasoning"):
                    out += self._open(_reasoning_item(_new_id("rs"), "", "in_progress"))
                item = self.output[-1]
                item["content"][0]["text"] += thought
                out += self._event(
                    "response.reasoning_text.delta",
                    {
                        "item_id": item["id"],
                        "output_index": len(self.output) - 1,
                        "content_index": 0,
                        "delta": thought,
                    },
                )
            if isinstance(text := delta.get("content"), str) and text:
                if not (self.open and self.output[-1]["type"] == "message"):
                    out += self._open(_message_item(_new_id("msg"), "", "in_progress"))
                item = self.output[-1]
                item["content"][0]["text"] += text
                out += self._event(
                    "response.output_text.delta",
                    {
                        "item_id": item["id"],
                        "output_index": len(self.output) - 1,
                        "content_index": 0,
                        "delta": text,
                        "logprobs": [],
                    },
                )
            for tc in delta.get("tool_calls") or ():
                out += self._tool_call(tc)
            if isinstance(reason := choice.get("finish_reason"), str):
                self.finish = reason
                self.hidden.round_ended()
        return out

    def _tool_call(self, tc: Any) -> bytes:
        if (call := CallDelta.read(tc, self.hidden)) is None:
            return b""
        out = b""
        in_call = self.open and self.output[-1]["type"] == "function_call"
        if not in_call or call.starts_another(self.tool_index, self.tool_id):
            call_id = call.call_id or _new_id("call")
            out += self._open(_call_item(_new_id("fc"), call_id, call.name, "", "in_progress"))
            self.tool_index, self.tool_id = call.index, call_id
        if call.arguments:
            item = self.output[-1]
            item["arguments"] += call.arguments
            out += self._event(
                "response.function_call_arguments.delta",
                {
                    "item_id": item["id"],
                    "output_index": len(self.output) - 1,
                    "delta": call.arguments,
                },
            )
        return out

    def done(self) -> bytes:
        out = b"" if self.started else self._start()
        out += self._close()
        self.ended = True
        response = self.api.response("completed", self.output, self.usage, self.finish)
        name = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return out + self._event(name, {"response": response})

    def error(self, status: int, code: str, message: str) -> bytes:
        """The stream's end by an error: the Responses API's `error` event, after
        response.created (the SDK's stream helper wants that first, whatever follows)."""
        out = b"" if self.started else self._start()
        self.ended = True
        return out + RESPONSES_SHAPE.event(status, code, message, self.seq)
