"""ResponseParser through the Python binding: what feed() and feed_eof() hand back.

The framing itself (Content-Length, chunked, reuse, limits) is tested in rust/src/http1.rs;
these tests pin the Python shape: a ResponseFeed with .head (a ResponseHead, only on the feed
that completed the head), .body and .done, whatever the piece boundaries; and a broken or cut
response raises UpstreamProtocolError with a stable .code, never RequestError.
"""

from __future__ import annotations

import pytest

from edgegw._core import (
    RequestError,
    ResponseFeed,
    ResponseHead,
    ResponseParser,
    UpstreamProtocolError,
)

RESPONSE = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Mixed-Case: V\r\n\r\nhello"
HEADERS = [(b"content-length", b"5"), (b"x-mixed-case", b"V")]


def test_one_feed() -> None:
    fed = ResponseParser().feed(RESPONSE)
    assert isinstance(fed, ResponseFeed)
    assert isinstance(fed.head, ResponseHead)
    assert (fed.head.status, fed.head.headers) == (201, HEADERS)  # names lower-cased, in order
    assert (fed.body, fed.done) == (b"hello", True)


@pytest.mark.parametrize("size", [1, 2, 7, 64])
def test_head_once_whatever_the_pieces(size: int) -> None:
    parser = ResponseParser()
    heads, body, done = [], b"", []
    for i in range(0, len(RESPONSE), size):
        fed = parser.feed(RESPONSE[i : i + size])
        if fed.head is not None:
            heads.append((fed.head.status, fed.head.headers))
        body += fed.body
        done.append(fed.done)
    assert heads == [(201, HEADERS)]
    assert body == b"hello"
    assert done[-1] and not any(done[:-1])
    assert parser.done and parser.reusable


def test_feed_eof_ends_a_close_delimited_body() -> None:
    parser = ResponseParser()
    fed = parser.feed(b"HTTP/1.1 200 OK\r\n\r\npart")
    assert fed.head is not None and fed.head.status == 200
    assert (fed.body, fed.done) == (b"part", False)
    end = parser.feed_eof()
    assert (end.head, end.body, end.done) == (None, b"", True)
    assert not parser.reusable


def test_interim_head_is_not_reported() -> None:
    fed = ResponseParser().feed(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert (fed.head, fed.body, fed.done) == (None, b"", False)


def test_types_are_read_only_results() -> None:
    fed = ResponseParser().feed(RESPONSE)
    assert fed.head is not None
    for obj, name in ((fed, "head"), (fed, "body"), (fed, "done"), (fed.head, "status")):
        with pytest.raises(AttributeError):
            setattr(obj, name, None)
    for cls in (ResponseFeed, ResponseHead):
        with pytest.raises(TypeError):
            cls()
    assert "done=True" in repr(fed) and "status=201" in repr(fed)


MALFORMED = [
    pytest.param(b"garbage\r\n\r\n", id="not-http"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", id="conflicting-length"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", id="negative-length"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk-size"
    ),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX", id="chunk-without-crlf"
    ),
    pytest.param(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", id="protocol-switch"),
]


@pytest.mark.parametrize("data", MALFORMED)
def test_malformed_response_is_an_upstream_protocol_error(data: bytes) -> None:
    with pytest.raises(UpstreamProtocolError) as info:
        ResponseParser().feed(data)
    assert info.value.code == "bad_upstream_response"
    assert not isinstance(info.value, RequestError)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="nothing"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-", id="mid-head"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", id="mid-body"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab", id="mid-chunked"
        ),
    ],
)
def test_cut_response_is_connection_lost(data: bytes) -> None:
    parser = ResponseParser()
    parser.feed(data)
    with pytest.raises(UpstreamProtocolError) as info:
        parser.feed_eof()
    assert info.value.code == "upstream_connection_lost"
    assert isinstance(info.value.args[0], str) and info.value.args[0]


def test_any_bytes_parse_or_raise_upstream_protocol_error() -> None:
    # h11's invariant, on a deterministic sample: every prefix and every one-byte corruption of
    # a chunked response either parses or raises UpstreamProtocolError, never anything else.
    good = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    samples = [good[:i] for i in range(len(good))]
    samples += [
        good[:i] + bytes([b]) + good[i + 1 :] for i in range(len(good)) for b in b"\x00:\r\n 9z"
    ]
    for data in samples:
        parser = ResponseParser()
        try:
            parser.feed(data)
            parser.feed_eof()
        except UpstreamProtocolError as e:
            assert e.code in ("bad_upstream_response", "upstream_connection_lost")
