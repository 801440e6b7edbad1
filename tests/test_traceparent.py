"""A client's trace context read as the OpenTelemetry SDK's W3C propagator reads it: edgegw's
own reader (`read_parent`, ten times cheaper) against the SDK's `extract` on the same
headers, valid and broken."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from edgegw.telemetry.otelsdk import Parent, read_parent

Headers = list[tuple[bytes, bytes]]
TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def sdk_parent(headers: Headers) -> Parent | None:
    """What the SDK's propagator makes of `headers` (a dict carrier: the last of each)."""
    carrier = {
        name.decode(): value.decode("latin-1")
        for name, value in headers
        if name in (b"traceparent", b"tracestate")
    }
    ctx = get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()
    if not ctx.is_valid:
        return None
    return Parent(ctx.trace_id, ctx.span_id, ctx.trace_flags.sampled, ctx.trace_state.to_header())


CASES = [
    f"00-{TRACE}-{SPAN}-01",
    f"00-{TRACE}-{SPAN}-00",
    f"00-{TRACE}-{SPAN}-03",  # flags past the sampled bit
    f"01-{TRACE}-{SPAN}-01-future",  # a later version may carry more
    f"00-{TRACE}-{SPAN}-01-future",  # version 00 may not
    f"ff-{TRACE}-{SPAN}-01",
    f"00-{'0' * 32}-{SPAN}-01",
    f"00-{TRACE}-{'0' * 16}-01",
    f"00-{TRACE.upper()}-{SPAN}-01",
    f"00-{TRACE[:-1]}-{SPAN}-01",
    f" \t00-{TRACE}-{SPAN}-01 \t",
    f"00-{TRACE}-{SPAN}-01\n",
    f"00-{TRACE}-{SPAN}-1",
    f"00-{TRACE}-{SPAN}",
    f"00-{TRACE}-{SPAN}-01{'x' * 600}",
    f"01-{TRACE}-{SPAN}-01-x\n",  # `$` before a final newline
    f"01-{TRACE}-{SPAN}-01-a\nb",  # `.` is no newline
    f"00-{TRACE}-{SPAN}-01 \t\n",
    f"00-{TRACE}-{SPAN}-01\n\n",
    f"00-{TRACE}-{SPAN}-01 x",
    f"01-{TRACE}-{SPAN}-01-\x80\xff",  # latin-1, as the carrier decodes it
    f"02-{TRACE}-{SPAN}-01-" + "y" * 456,  # 512 characters
    f"02-{TRACE}-{SPAN}-01-" + "y" * 457,
    "",
    "garbage",
]
STATES = [
    None,
    "vendor=1",
    "a=1,b=2",
    " a=1 , ,b=2 ",
    "a=1,a=2",  # a key twice: the whole state is dropped
    "Upper=1",
    "tenant@vendor=x",
    "a=" + "v" * 600,  # past 512 characters
    "=novalue",
]


def headers(traceparent: str | None, tracestate: str | None) -> Headers:
    out: Headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    if traceparent is not None:
        out.append((b"traceparent", traceparent.encode("latin-1")))
    if tracestate is not None:
        out.append((b"tracestate", tracestate.encode("latin-1")))
    return out


def test_every_case_reads_as_the_sdk_reads_it() -> None:
    for traceparent in [*CASES, None]:
        for tracestate in STATES:
            h = headers(traceparent, tracestate)
            assert read_parent(h) == sdk_parent(h), (traceparent, tracestate)
    assert read_parent(headers(CASES[0], "vendor=1")) == Parent(
        int(TRACE, 16), int(SPAN, 16), True, "vendor=1"
    )


def test_the_last_of_each_header_counts() -> None:
    h = headers("garbage", "a=1") + headers(CASES[1], "b=2")
    assert read_parent(h) == sdk_parent(h) == Parent(int(TRACE, 16), int(SPAN, 16), False, "b=2")


HEX = "0123456789abcdefABCDEF-xz "


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["00", "01", "ff", "0", "zz", "FF"]), min_size=1, max_size=1),
    st.one_of(st.text("0abf", min_size=32, max_size=32), st.text(HEX, min_size=30, max_size=34)),
    st.one_of(st.text("0abf", min_size=16, max_size=16), st.text(HEX, min_size=14, max_size=18)),
    st.one_of(st.text("0123f", min_size=2, max_size=2), st.text(HEX, min_size=1, max_size=3)),
    st.sampled_from(["", "-", "-x", " ", "\t"]),
    st.sampled_from(STATES),
)
def test_near_misses_read_as_the_sdk_reads_them(
    version: list[str], trace: str, span: str, flags: str, tail: str, state: str | None
) -> None:
    h = headers(f"{version[0]}-{trace}-{span}-{flags}{tail}", state)
    assert read_parent(h) == sdk_parent(h)


def test_the_core_reads_the_pattern_the_sdk_reads() -> None:
    """read_traceparent (rust/src/trace_binding.rs) implements this pattern and limit by
    hand: a later SDK with other rules fails here, not only in the comparisons above."""
    assert TraceContextTextMapPropagator._TRACEPARENT_HEADER_FORMAT == (
        "^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$"
    )
    assert TraceContextTextMapPropagator._TRACEPARENT_MAXIMUM_LENGTH == 512
