"""TraceRecord (the Rust core's record of one request's spans) writes the bytes
encode_otlp_trace writes for the same spans, with a dict's semantics for attributes."""

from __future__ import annotations

from edgegw._core import TraceRecord, encode_otlp_trace

TRACE, STATE = 0x0AF7651916CD43DD8448EB211C80319C, "vendor=1"


def test_entries_are_those_of_encode_otlp_trace() -> None:
    record = TraceRecord(TRACE, STATE)
    server = record.start("POST /v1/chat/completions", 11, 7, True, 2, 1_000, {"a": "x"})
    parse = record.start("parse", 12, 11, False, 1, 1_100)
    record.set(parse, "n", 3)
    record.set(parse, "b", True)
    record.set(parse, "n", 4)  # set again: keeps its place
    record.update(server, {"f": 1.5, "list": ["stop", "length"], "dropped": object()})
    assert record.event(server, "fallback", {"reason": "busy"}, 1_150, 1)
    assert not record.event(server, "second", {}, 1_160, 1)  # past the limit
    assert not record.end(parse, 1_200, False)  # the server span is still open
    assert record.end(server, 1_300, True)
    entries, n = record.take_ended()
    assert n == 2
    tuples = [
        ("parse", 12, 11, False, 1, {"n": 4, "b": True}, None, 1_100, 1_200, False),
        (
            "POST /v1/chat/completions", 11, 7, True, 2,
            {"a": "x", "f": 1.5, "list": ["stop", "length"]},
            [("fallback", {"reason": "busy"}, 1_150)], 1_000, 1_300, True,
        ),
    ]  # fmt: skip
    # Spans leave in the order they started, whatever the order they ended in.
    assert entries == encode_otlp_trace(TRACE, STATE, [tuples[1], tuples[0]])
    assert record.take_ended() == (b"", 0)  # taken once


def test_a_span_ended_after_the_server_span_leaves_alone() -> None:
    record = TraceRecord(TRACE, "")
    server = record.start("GET /health", 1, None, True, 2, 10)
    late = record.start("late", 2, 1, False, 1, 11)
    assert record.end(server, 20, False)
    first, n = record.take_ended()
    assert n == 1
    assert record.end(late, 30, False)
    entries, n = record.take_ended()
    assert n == 1
    assert entries == encode_otlp_trace(
        TRACE, "", [("late", 2, 1, False, 1, {}, None, 11, 30, False)]
    )
    assert first == encode_otlp_trace(
        TRACE, "", [("GET /health", 1, None, True, 2, {}, None, 10, 20, False)]
    )
