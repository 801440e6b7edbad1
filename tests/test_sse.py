"""SseSplitter through the Python binding: splitting is independent of chunk boundaries,
and its bound on one event's size holds."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgegw._core import RequestError, SseSplitter, UpstreamProtocolError

line_end = st.sampled_from([b"\n", b"\r\n", b"\r"])
field_line = st.one_of(
    st.builds(
        lambda v: b"data: " + v,
        st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    ),
    st.builds(lambda v: b"data:" + v.encode(), st.text(alphabet='ab {}":,', max_size=20)),
    st.just(b": comment"),
    st.just(b"event: delta"),
    st.just(b"id: 42"),
    st.just(b"retry: 1000"),
    st.just(b"data"),
    st.just(b""),  # a blank line dispatches
)


@st.composite
def streams(draw) -> bytes:
    lines = draw(st.lists(st.tuples(field_line, line_end), max_size=30))
    return b"".join(text + end for text, end in lines) + b"\n\n"


def split(stream: bytes, cuts: list[int]) -> list[tuple]:
    splitter = SseSplitter()
    out = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        for ev in splitter.feed(stream[prev:cut]):
            out.append((ev.event, ev.data, ev.id, ev.retry, ev.is_done))
        prev = cut
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.data())
def test_events_do_not_depend_on_chunk_boundaries(stream: bytes, data: st.DataObject) -> None:
    whole = split(stream, [])
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert split(stream, cuts) == whole
    assert split(stream, list(range(len(stream)))) == whole


def test_openai_stream_events_and_done() -> None:
    stream = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[],"usage":{"total_tokens":3}}\n\ndata: [DONE]\n\n'
    events = SseSplitter().feed(stream)
    assert [e.is_done for e in events] == [False, False, True]
    assert b'"usage"' in events[1].data


def test_event_size_bound_is_an_upstream_error() -> None:
    splitter = SseSplitter(max_event_bytes=1024)
    with pytest.raises(UpstreamProtocolError) as info:
        splitter.feed(b"data: " + b"x" * 2048)
    assert info.value.code == "upstream_event_too_large"
    assert isinstance(info.value.args[0], str) and info.value.args[0]
    # An upstream's fault, never reported as a bad client request.
    assert not isinstance(info.value, RequestError)
    assert not issubclass(UpstreamProtocolError, ValueError)


def test_finish_reports_a_truncated_event() -> None:
    splitter = SseSplitter()
    splitter.feed(b"data: half")
    assert splitter.finish() is True
