"""edgegw.translate's pure functions, without I/O: Messages and Responses requests as chat
requests (what maps where, what is refused), chat answers and chat streams back, and the
invariants of the translated streams (every block or item opened is closed, in order,
whatever the chat chunks were; events parse and are numbered)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgegw.errors import GatewayError
from edgegw.translate import messages, responses
from edgegw.translate.answer import TranslatedSend
from edgegw.translate.messages_answer import MessagesAnswers, MessagesStream, messages_answer
from edgegw.translate.responses_answer import ResponsesAnswers


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        name, data = block.split(b"\n", 1)
        assert name.startswith(b"event: ") and data.startswith(b"data: ")
        out.append((name[7:].decode(), orjson.loads(data[6:])))
    return out


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


# -- Messages requests ------------------------------------------------------------------


def test_a_user_turn_with_tool_results_text_and_an_image() -> None:
    chat = messages.chat_request(
        {
            "model": "m",
            "max_tokens": 10,
            "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "is_error": True,
                            "content": [{"type": "text", "text": "boom"}],
                        },
                    ],
                },
            ],
            "tool_choice": {"type": "none"},
            "thinking": {"type": "enabled", "budget_tokens": 8000},
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "a\n\nb"},
        # An earlier turn's thinking is left out, as Anthropic leaves it out of the context.
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
            ],
        },
        # Tool results first: chat wants them right after the calls.
        {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            ],
        },
    ]
    assert (chat["tool_choice"], chat["reasoning_effort"]) == ("none", "medium")
    assert "stream" not in chat


def test_a_stream_asks_for_usage() -> None:
    chat = messages.chat_request(
        {
            "model": "m",
            "max_tokens": 1,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("doc", "code", "param"),
    [
        ({"max_tokens": 0}, "invalid_request", "max_tokens"),
        ({"messages": []}, "invalid_request", "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "invalid_request", "messages[0].role"),
        ({"service_tier": "auto"}, "unsupported_field", "service_tier"),
        ({"mcp_servers": []}, "unsupported_field", "mcp_servers"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "unsupported_field",
            "messages[0].content[0].source.type",
        ),
        (
            {"tools": [{"type": "bash_20250124", "name": "bash"}]},
            "unsupported_field",
            "tools[0].type",
        ),
        (
            {"output_config": {"format": {"type": "xml"}}},
            "unsupported_field",
            "output_config.format",
        ),
    ],
)
def test_messages_refusals(doc: dict[str, Any], code: str, param: str) -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(GatewayError) as refused:
        messages.chat_request({**base, **doc})
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, code, param)


# -- Messages answers ---------------------------------------------------------------------


def test_a_whole_answer_with_reasoning_and_a_call() -> None:
    answer = messages_answer(
        {
            "id": "x",
            "choices": [
                {
                    "message": {
                        "content": "ok",
                        "reasoning_content": "think",
                        "tool_calls": [
                            {"id": "c", "function": {"name": "f", "arguments": '{"a":1}'}},
                            {"id": "m", "function": {"name": "mcp_add", "arguments": "{}"}},
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {
                "prompt_tokens": 7,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 2},
            },
        },
        "local-model",
        frozenset({"mcp_add"}),
    )
    assert answer["content"] == [
        {"type": "thinking", "thinking": "think", "signature": ""},
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "c", "name": "f", "input": {"a": 1}},
    ]
    assert answer["stop_reason"] == "tool_use" and answer["model"] == "local-model"
    assert answer["usage"] == {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 2}


def test_a_stream_with_reasoning_text_and_two_calls() -> None:
    s = MessagesStream("m")
    raw = s.chunk(chunk({"role": "assistant", "reasoning_content": "hm"}))
    raw += s.chunk(chunk({"content": "Hi"}))
    call = {"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":'}}
    raw += s.chunk(chunk({"tool_calls": [call]}))
    raw += s.chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}))
    raw += s.chunk(chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}))
    raw += s.chunk(chunk({}, "tool_calls"))
    raw += s.chunk(
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 9}}
    )
    raw += s.done()
    got = events(raw)
    names = [n for n, _ in got]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    starts = [d["content_block"] for n, d in got if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use", "tool_use"]
    assert (starts[2]["id"], starts[3]["name"]) == ("a", "g")
    assert [d["index"] for n, d in got if n == "content_block_start"] == [0, 1, 2, 3]
    end = dict(got)["message_delta"]
    assert end["delta"]["stop_reason"] == "tool_use"
    assert end["usage"] == {"input_tokens": 4, "output_tokens": 9}


def test_hidden_calls_are_left_out_of_a_stream() -> None:
    s = MessagesStream("m", frozenset({"mcp_add"}))
    raw = s.chunk(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "mcp_add"}}]}))
    raw += s.chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}))
    raw += s.chunk(chunk({}, "tool_calls"))
    raw += s.chunk(chunk({"content": "5"}, "stop"))
    got = events(raw + s.done())
    assert [d["content_block"]["type"] for n, d in got if n == "content_block_start"] == ["text"]
    assert dict(got)["message_delta"]["delta"]["stop_reason"] == "end_turn"


DELTAS = st.one_of(
    st.builds(lambda t: {"content": t}, st.text(max_size=3)),
    st.builds(lambda t: {"reasoning_content": t}, st.text(max_size=3)),
    st.builds(
        lambda i, name, args: {
            "tool_calls": [{"index": i, "function": {"name": name, "arguments": args}}]
        },
        st.integers(0, 2),
        st.sampled_from([None, "f", "g"]),
        st.sampled_from(["", "{", "}"]),
    ),
)


@given(st.lists(DELTAS, max_size=12), st.booleans())
def test_any_chat_stream_makes_well_formed_messages_events(
    deltas: list[dict[str, Any]], failed: bool
) -> None:
    s = MessagesStream("m")
    raw = b"".join(s.chunk(chunk(d)) for d in deltas)
    raw += s.error(502, "upstream_error", "x") if failed else s.done()
    got = events(raw)
    # An error may come first (the Anthropic SDK raises on it wherever it stands).
    assert got[0][0] == "message_start" or got == [got[-1]] and failed
    open_block = None
    for n, d in got[1:]:
        if n == "content_block_start":
            assert open_block is None
            open_block = d["index"]
        elif n == "content_block_delta":
            assert d["index"] == open_block
        elif n == "content_block_stop":
            assert d["index"] == open_block
            open_block = None
    if failed:
        assert got[-1][0] == "error"
    else:
        assert open_block is None
        assert [n for n, _ in got[-2:]] == ["message_delta", "message_stop"]


# -- Responses ----------------------------------------------------------------------------


def test_responses_input_items() -> None:
    chat = responses.chat_request(
        {
            "model": "m",
            "instructions": "sys",
            "input": [
                {"role": "developer", "content": "dev"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                ]},
                {"type": "reasoning", "id": "r", "summary": []},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
                {"type": "function_call_output", "call_id": "b", "output": "2"},
            ],
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"},
            "tool_choice": {"type": "function", "name": "f"},
            "store": False,
        }
    )  # fmt: skip
    assert chat["messages"][:2] == [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "dev"},
    ]
    assert chat["messages"][2]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://x/y.png", "detail": "low"},
    }
    # Parallel calls are one assistant turn; the reasoning item is left out.
    assert [c["id"] for c in chat["messages"][3]["tool_calls"]] == ["a", "b"]
    assert [m["role"] for m in chat["messages"][4:]] == ["tool", "tool"]
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}},
    }
    assert chat["reasoning_effort"] == "low"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}


def test_a_responses_stream_is_numbered_and_closed() -> None:
    api = ResponsesAnswers({"model": "m"})
    s = api.stream()
    raw = s.chunk(chunk({"content": "a"}))
    raw += s.chunk(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}))
    raw += s.chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "length"))
    raw += s.done()
    got = events(raw)
    assert [d["sequence_number"] for _, d in got] == list(range(len(got)))
    assert all(n == d["type"] for n, d in got)
    final = got[-1][1]["response"]
    assert got[-1][0] == "response.incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == "{}"
    assert all(o["status"] == "completed" for o in final["output"])


def test_calls_all_numbered_0_are_told_apart_by_their_ids() -> None:
    first = {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}
    second = {"index": 0, "id": "b", "function": {"name": "g", "arguments": "{}"}}
    s = MessagesStream("m")
    raw = s.chunk(chunk({"tool_calls": [first]})) + s.chunk(chunk({"tool_calls": [second]}))
    got = events(raw + s.done())
    assert [d["content_block"]["id"] for n, d in got if n == "content_block_start"] == ["a", "b"]
    r = ResponsesAnswers({"model": "m"}).stream()
    raw = r.chunk(chunk({"tool_calls": [first]})) + r.chunk(chunk({"tool_calls": [second]}))
    final = events(raw + r.done())[-1][1]["response"]
    assert [(o["call_id"], o["name"]) for o in final["output"]] == [("a", "f"), ("b", "g")]


@pytest.mark.parametrize(
    "chat",
    [{}, {"choices": []}, {"choices": "x"}, {"choices": {"0": {}}}, {"choices": [7]}, [1], None],
)
def test_an_answer_without_a_choice_is_a_bad_upstream_response(chat: Any) -> None:
    for translate in (
        lambda: messages_answer(chat, "m"),
        lambda: ResponsesAnswers({"model": "m"}).answer(chat),
    ):
        with pytest.raises(GatewayError) as e:
            translate()
        assert e.value.code == "bad_upstream_response"


def test_stream_chunks_of_the_wrong_shape_are_passed_over() -> None:
    """What a provider should not send: choices, deltas, calls and functions of other types."""
    odd = [
        {"choices": 5},
        {"choices": ["x", {"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [3, {"index": 0, "function": "f"}]}}]},
    ]
    s, r = MessagesStream("m"), ResponsesAnswers({"model": "m"}).stream()
    raw = b"".join(s.chunk(doc) for doc in odd) + s.chunk(chunk({"content": "Hi"})) + s.done()
    got = events(raw)
    assert [d["delta"] for n, d in got if n == "content_block_delta"][-1] == {
        "type": "text_delta",
        "text": "Hi",
    }
    final = events(b"".join(r.chunk(doc) for doc in odd) + r.done())[-1][1]["response"]
    assert final["status"] == "completed"


# -- TranslatedSend: the ASGI messages a chat answer is written as, rewritten -------------


class Captured:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


SSE_HEAD = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream"), (b"x-sie-served-by", b"local")],
}


def body(data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def test_a_stream_cut_anywhere_translates_the_same() -> None:
    chat = (
        b"".join(
            b"data: " + orjson.dumps(c) + b"\n\n"
            for c in (
                chunk({"role": "assistant", "content": "Hel"}),
                chunk({"content": "lo"}, "stop"),
                {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
            )
        )
        + b"data: [DONE]\n\n"
    )
    outputs = set()
    for cut in range(1, len(chat)):
        out = Captured()
        send = TranslatedSend(out, MessagesAnswers("m", frozenset()))
        await send(dict(SSE_HEAD))
        await send(body(chat[:cut]))
        await send(body(chat[cut:], more=False))
        assert out.messages[0]["headers"] == SSE_HEAD["headers"]
        assert out.messages[-1]["more_body"] is False
        outputs.add(out.body)
    (translated,) = outputs  # message ids aside, every cut gives the same events
    got = events(translated)
    text = "".join(d["delta"]["text"] for n, d in got if n == "content_block_delta")
    assert text == "Hello" and got[-1][0] == "message_stop"
    assert dict(got)["message_delta"]["usage"] == {"input_tokens": 3, "output_tokens": 2}
    # A keep-alive comment between whole events (a local worker's silence) goes through.
    out = Captured()
    send = TranslatedSend(out, MessagesAnswers("m", frozenset()))
    await send(dict(SSE_HEAD))
    await send(body(chat[: chat.index(b"\n\n") + 2]))
    await send(body(b": keep-alive\n\n"))
    await send(body(chat[chat.index(b"\n\n") + 2 :], more=False))
    assert out.messages[2]["body"] == b": keep-alive\n\n"
    assert out.body.replace(b": keep-alive\n\n", b"") == translated


async def test_a_stream_that_ends_without_its_end_gets_an_error_event() -> None:
    out = Captured()
    send = TranslatedSend(out, MessagesAnswers("m", frozenset()))
    await send(dict(SSE_HEAD))
    await send(body(b"data: " + orjson.dumps(chunk({"content": "a"})) + b"\n\n", more=False))
    last = events(out.body)[-1]
    assert last[0] == "error" and last[1]["error"]["code"] == "upstream_stream_truncated"


async def test_an_error_answer_is_rewritten_in_the_apis_shape() -> None:
    out = Captured()
    send = TranslatedSend(out, MessagesAnswers("m", frozenset()))
    envelope = {
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limited",
        }
    }
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [(b"content-type", b"application/json"), (b"retry-after", b"7")],
        }
    )
    await send(body(orjson.dumps(envelope), more=False))
    head = out.messages[0]
    assert head["status"] == 429 and (b"retry-after", b"7") in head["headers"]
    doc = orjson.loads(out.body)
    assert doc == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down", "code": "rate_limited"},
    }
    assert (b"content-length", b"%d" % len(out.body)) in head["headers"]


@given(st.lists(DELTAS, max_size=12), st.sampled_from([None, "stop", "length", "error"]))
def test_any_chat_stream_makes_well_formed_responses_events(
    deltas: list[dict[str, Any]], end: str | None
) -> None:
    s = ResponsesAnswers({"model": "m"}).stream()
    raw = b"".join(s.chunk(chunk(d)) for d in deltas)
    if end == "error":
        raw += s.error(502, "upstream_error", "x")
    else:
        raw += s.chunk(chunk({}, end)) + s.done()
    got = events(raw)
    assert [d["sequence_number"] for _, d in got] == list(range(len(got)))
    assert [n for n, _ in got[:2]] == ["response.created", "response.in_progress"]
    open_index, done_items = None, []
    for n, d in got[2:]:
        if n == "response.output_item.added":
            assert open_index is None and d["output_index"] == len(done_items)
            open_index = d["output_index"]
        elif n == "response.output_item.done":
            assert d["output_index"] == open_index and d["item"]["status"] == "completed"
            done_items.append(d["item"])
            open_index = None
        elif "output_index" in d:
            assert d["output_index"] == open_index
    if end == "error":
        assert got[-1][0] == "error"
        return
    assert open_index is None
    name, last = got[-1]
    assert last["response"]["output"] == done_items
    assert name == ("response.incomplete" if end == "length" else "response.completed")
