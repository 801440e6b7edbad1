"""TraceRecord (the Rust core's record of one request's spans) writes the bytes
encode_otlp_trace writes for the same spans, with a dict's semantics for attributes; its
SpanQueue hands them out a batch of whole traces at a time, bounded."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from edgegw._core import SpanQueue, TraceRecord, encode_otlp_batch, encode_otlp_trace

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


def _request(queue: SpanQueue, i: int) -> bool:
    """A traced request of two spans into `queue`: whether a whole batch then waits."""
    record = TraceRecord(TRACE + i, "", i + 1, queue)
    record.open_server("GET", "/v1/models", f"req-{i}", None)
    with record.span("parse", n=i):
        pass
    return record.finish(200)


def test_a_queue_takes_whole_traces_a_batch_at_a_time_and_counts_its_drops() -> None:
    queue = SpanQueue(limit=5, batch=4)
    assert not _request(queue, 0)  # 2 of 4 spans wait
    assert _request(queue, 1)  # a whole batch
    assert _request(queue, 2)  # no room for 2 more: dropped
    assert queue.pending == 4 and queue.dropped == {"queue_full": 2, "export_failed": 0}
    taken = queue.take({"service.name": "edgegw"}, "edgegw", "1.2.3")
    assert taken is not None and taken[1] == 4 and queue.pending == 0
    assert queue.take({}, "edgegw", "1.2.3") is None
    request = ExportTraceServiceRequest.FromString(taken[0])
    (rs,) = request.resource_spans
    assert [(a.key, a.value.string_value) for a in rs.resource.attributes] == [
        ("service.name", "edgegw")
    ]
    (ss,) = rs.scope_spans
    assert (ss.scope.name, ss.scope.version) == ("edgegw", "1.2.3")
    got = [(int.from_bytes(s.trace_id, "big") - TRACE, s.name) for s in ss.spans]
    assert got == [(0, "GET /v1/models"), (0, "parse"), (1, "GET /v1/models"), (1, "parse")]
    parse = ss.spans[1]
    assert parse.parent_span_id == ss.spans[0].span_id
    assert [(a.key, a.value.int_value) for a in parse.attributes] == [("n", 0)]
    queue.done(4, True)
    queue.done(2, False)
    assert queue.exported == 4 and queue.dropped["export_failed"] == 2


def test_a_span_scope_left_by_an_exception_is_failed_with_its_code() -> None:
    record = TraceRecord(TRACE, "")
    record.open_server("POST", "/v1/chat/completions", "req", None)

    class Refused(Exception):
        code = "upstream_refused"

    try:
        with record.span("route") as span:
            raise Refused
    except Refused:
        pass
    record.fail(record.server, ValueError("no code"))
    assert record.finish(502, "upstream_refused") is False  # no queue: kept for take_ended
    entries, n = record.take_ended()
    assert n == 2 and span.span_id != 0
    request = ExportTraceServiceRequest.FromString(encode_otlp_batch({}, "s", "v", [entries]))
    server, route = request.resource_spans[0].scope_spans[0].spans
    error = {a.key: a.value.string_value for a in route.attributes}["error.type"]
    assert (route.name, error, route.status.code) == ("route", "upstream_refused", 2)
    attrs = {a.key: a.value for a in server.attributes}
    assert attrs["error.type"].string_value == "upstream_refused"  # finish's code, set last
    assert attrs["http.response.status_code"].int_value == 502
