"""SseSplitter through the Python binding: splitting is independent of chunk boundaries,
its bound on one event's size holds, and `pending` lets a relay send only whole events."""

from __future__ import annotations

import re

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


# --- pending: what a relay holds back ------------------------------------------------------

BOM = b"\xef\xbb\xbf"


@st.composite
def open_streams(draw) -> bytes:
    """Streams as an upstream may cut them off: a BOM or not, any line endings, blank lines
    anywhere, and a partial tail (an unterminated line, a lone CR, nothing)."""
    lines = draw(st.lists(st.tuples(field_line, line_end), max_size=20))
    bom = draw(st.sampled_from([b"", BOM]))
    tail = draw(st.sampled_from([b"", b"data: par", b"\r", b"data: x\r", b":"]))
    return bom + b"".join(text + end for text, end in lines) + tail


LINE_END = re.compile(rb"\r\n|\r|\n")


def block_ends(stream: bytes) -> tuple[int, set[int]]:
    """Found apart from the splitter: the end of the last block in `stream` (the line ending
    of its last blank line; a BOM-only first line is blank), and where a relayed piece may
    end: after such a line ending, or between the CR and LF of a blank line's CRLF."""
    last, cuts, start = 0, {0}, 0
    for m in LINE_END.finditer(stream):
        line = stream[start : m.start()]
        if line == b"" or (start == 0 and line == BOM):
            last = m.end()
            cuts.update({m.start() + 1, m.end()})
        start = m.end()
    return last, cuts


def relay(stream: bytes, cuts: list[int]) -> list[bytes]:
    """The relay's loop: send all but the last `pending` bytes of what it holds."""
    splitter = SseSplitter()
    held, sent, prev = b"", [], 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        chunk = stream[prev:cut]
        prev = cut
        data = held + chunk
        splitter.feed(chunk)
        assert 0 <= splitter.pending <= len(data)
        keep = len(data) - splitter.pending
        sent.append(data[:keep])
        held = data[keep:]
    return sent


def events(data: bytes) -> list[tuple]:
    return [(e.event, e.data, e.id, e.retry) for e in SseSplitter().feed(data)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(open_streams(), st.binary(max_size=60)), st.data())
def test_relayed_prefixes_are_whole_blocks(stream: bytes, data: st.DataObject) -> None:
    last, allowed = block_ends(stream)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    for pieces in (relay(stream, cuts), relay(stream, list(range(len(stream))))):
        assert b"".join(pieces) == stream[:last]
        at = 0
        for piece in pieces:
            at += len(piece)
            assert at in allowed
        # What reached the client means the same events as the whole stream.
        assert events(b"".join(pieces)) == events(stream)


@pytest.mark.parametrize(
    ("pieces", "pending"),
    [
        ([b"data: a\n\ndata: b"], 7),
        ([b"data: a\n\n"], 0),
        ([b": ping\n\n"], 0),  # a comment-only block ends at its blank line
        ([b"event: x\n\n"], 0),  # so does an event without data
        ([b"data: a\r\n\r"], 0),  # the CR of a blank line ends the block at once
        ([b"data: a\r\n\r", b"\n"], 0),  # and the LF after it is part of that block
        ([b"data: a\r", b"\n"], 9),
        ([BOM + b"data: a"], 10),
        ([BOM[:2], BOM[2:] + b"\n"], 0),
    ],
)
def test_pending_values(pieces: list[bytes], pending: int) -> None:
    splitter = SseSplitter()
    for piece in pieces:
        splitter.feed(piece)
    assert splitter.pending == pending


def test_pending_is_bounded_with_the_event() -> None:
    """The relay holds `pending` bytes, so the event bound covers them, comments included."""
    splitter = SseSplitter(max_event_bytes=1024)
    with pytest.raises(UpstreamProtocolError) as info:
        for _ in range(200):
            splitter.feed(b": keep-alive\n")
    assert info.value.code == "upstream_event_too_large"
