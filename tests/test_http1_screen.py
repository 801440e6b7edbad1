"""The request-head screen (edgegw.http1.screen): a table of heads with the status and code
each gets, the heads h11 alone would accept, and the invariant that any bytes either pass
or raise HeadError, never anything else."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgegw.http1.limits import MAX_HEADER_COUNT
from edgegw.http1.screen import HeadError, screen_head


def head(*lines: bytes, request_line: bytes = b"POST /v1/chat/completions HTTP/1.1") -> bytes:
    return b"\r\n".join([request_line, *lines]) + b"\r\n\r\n"


HOST = b"Host: gw"

ACCEPTED = [
    head(HOST, b"Content-Length: 12"),
    head(HOST, b"Transfer-Encoding: chunked"),
    head(HOST, b"transfer-encoding:  Chunked \t"),
    head(HOST, b"content-length:12"),
    head(HOST, request_line=b"GET /health?x=1 HTTP/1.1"),
    head(request_line=b"GET / HTTP/1.0"),  # HTTP/1.0 may leave Host out
    head(HOST, request_line=b"GET http://gw/health HTTP/1.1"),
    head(HOST, request_line=b"OPTIONS * HTTP/1.1"),
    head(HOST, b"X-Empty:", b"X-Obs-Text: caf\xc3\xa9", b"X-Tab: a\tb"),
    head(HOST, *[b"X-%d: v" % i for i in range(MAX_HEADER_COUNT - 1)]),
    # An Upgrade is not the screen's business: the connection ignores it.
    head(HOST, b"Connection: Upgrade, HTTP2-Settings", b"Upgrade: h2c", b"HTTP2-Settings: AAM"),
]

REFUSED = [
    # (head, status, code)
    (head(HOST, b"Content-Length: 3", b"Transfer-Encoding: chunked"), 400, "invalid_request"),
    (head(HOST, b"Transfer-Encoding: chunked", b"Content-Length: 3"), 400, "invalid_request"),
    (head(HOST, b"Transfer-Encoding:", b" chunked"), 400, "invalid_request"),  # obs-fold
    (head(HOST, b"X-Folded: a", b"\tb"), 400, "invalid_request"),
    (head(HOST, b"Content-Length: 1", b"Content-Length: 1"), 400, "invalid_request"),
    (head(HOST, b"Content-Length: 1, 1"), 400, "invalid_request"),
    (head(HOST, b"Content-Length: +1"), 400, "invalid_request"),
    (head(HOST, b"Content-Length: 0x10"), 400, "invalid_request"),
    (head(HOST, b"Content-Length: 1234567890123456789"), 400, "invalid_request"),
    (
        head(HOST, b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
        400,
        "invalid_request",
    ),
    (head(HOST, b"Transfer-Encoding: chunked, chunked"), 501, "not_implemented"),
    (head(HOST, b"Transfer-Encoding: gzip, chunked"), 501, "not_implemented"),
    (head(HOST, b"Transfer-Encoding: gzip"), 501, "not_implemented"),
    (head(HOST, b"Transfer-Encoding: chunked;x=1"), 400, "invalid_request"),
    (
        head(b"Transfer-Encoding: chunked", request_line=b"POST / HTTP/1.0"),
        400,
        "invalid_request",
    ),
    (head(HOST, b"Host : gw"), 400, "invalid_request"),  # whitespace before the colon
    (head(HOST, b"Content-Length : 5"), 400, "invalid_request"),
    (head(HOST, b"X(bad): v"), 400, "invalid_request"),  # a name that is not a token
    (head(HOST, b": v"), 400, "invalid_request"),
    (head(HOST, b"X: a\x00b"), 400, "invalid_request"),
    (head(HOST, b"X: a\x7fb"), 400, "invalid_request"),
    (head(HOST, b"X: a\x01b"), 400, "invalid_request"),
    (head(HOST, b"X: a\rb"), 400, "invalid_request"),  # bare CR
    (head(HOST, b"X: a\nb"), 400, "invalid_request"),  # bare LF
    (b"GET / HTTP/1.1\nHost: gw\n\n", 400, "invalid_request"),  # LF line ends
    (head(), 400, "invalid_request"),  # HTTP/1.1 without Host
    (head(HOST, HOST), 400, "invalid_request"),
    (head(HOST, request_line=b"PRI * HTTP/2.0"), 400, "invalid_request"),
    (b"PRI * HTTP/2.0\r\n\r\n", 400, "invalid_request"),  # the HTTP/2 preface's first part
    (head(HOST, request_line=b"GET / HTTP/1.2"), 400, "invalid_request"),
    (head(HOST, request_line=b"GET / HTTP/2"), 400, "invalid_request"),
    (head(HOST, request_line=b"GET  / HTTP/1.1"), 400, "invalid_request"),
    (head(HOST, request_line=b"GET /a b HTTP/1.1"), 400, "invalid_request"),
    (head(HOST, request_line=b"G(T / HTTP/1.1"), 400, "invalid_request"),
    (head(HOST, request_line=b"GET x HTTP/1.1"), 400, "invalid_request"),
    (head(HOST, request_line=b"GET /caf\xc3\xa9 HTTP/1.1"), 400, "invalid_request"),
    (
        head(HOST, *[b"X-%d: v" % i for i in range(MAX_HEADER_COUNT)]),
        431,
        "request_header_fields_too_large",
    ),
    (b"GET / HTTP/1.1\r\nHost: gw\r\n", 400, "invalid_request"),  # no empty line
]


@pytest.mark.parametrize("data", ACCEPTED)
def test_accepted(data: bytes) -> None:
    assert screen_head(data) is None


@pytest.mark.parametrize(("data", "status", "code"), REFUSED)
def test_refused(data: bytes, status: int, code: str) -> None:
    with pytest.raises(HeadError) as info:
        screen_head(data)
    assert (info.value.status, info.value.code) == (status, code)
    assert info.value.type == ("invalid_request_error" if status < 500 else "server_error")


H11_TOLERATES = [
    head(HOST, b"Content-Length: 3", b"Transfer-Encoding: chunked"),
    head(HOST, b"Transfer-Encoding:", b" chunked"),
    b"GET / HTTP/1.1\nHost: gw\n\n",
    head(HOST, b"Content-Length: 1", b"Content-Length: 1"),
    head(HOST, b"Content-Length: 1, 1"),
    head(b"Transfer-Encoding: chunked", request_line=b"POST / HTTP/1.0"),
    b"PRI * HTTP/2.0\r\n\r\n",
]


@pytest.mark.parametrize("data", H11_TOLERATES)
def test_what_h11_alone_accepts_the_screen_refuses(data: bytes) -> None:
    """Why the screen exists: h11 0.16 parses each of these into a Request."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    assert isinstance(conn.next_event(), h11.Request)
    with pytest.raises(HeadError):
        screen_head(data)


HEAD_BYTES = st.sampled_from(
    [b"\r\n", b"\r", b"\n", b" ", b"\t", b":", b"\x00", b"\x7f", b"\xff", b",", b"chunked"]
    + [b"Host: gw", b"Content-Length: 1", b"Transfer-Encoding: chunked", b"GET / HTTP/1.1"]
    + [b"POST", b"/", b"HTTP/1.0", b"PRI * HTTP/2.0", b"x", b"0", b"Content-Length:"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(HEAD_BYTES, max_size=24).map(b"".join), st.binary(max_size=64))
def test_any_bytes_pass_or_raise_head_error(pieces: bytes, noise: bytes) -> None:
    for data in (pieces + b"\r\n\r\n", b"GET / HTTP/1.1\r\n" + pieces + b"\r\n\r\n", noise):
        try:
            screen_head(data)
        except HeadError as e:
            assert e.status in (400, 431, 501)


@settings(max_examples=200, deadline=None)
@given(st.lists(HEAD_BYTES, max_size=24).map(b"".join))
def test_what_the_screen_passes_h11_parses_the_same_way(pieces: bytes) -> None:
    """Screened heads mean one thing to both: h11 parses them, no second opinion on framing."""
    data = b"POST / HTTP/1.1\r\n" + pieces + b"\r\n\r\n"
    try:
        screen_head(data)
    except HeadError:
        return
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    event = conn.next_event()
    assert isinstance(event, h11.Request)
    lengths = [v for k, v in event.headers if k == b"content-length"]
    chunked = [v for k, v in event.headers if k == b"transfer-encoding"]
    assert len(lengths) + len(chunked) <= 1
