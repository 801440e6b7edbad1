"""The Rust request-head screen (`edgegw._core.screen_request_head`): a table of heads with
what each yields or the status and code it is refused with (every rule, the smuggling
classics among them), and the invariants: any bytes give a HeadInfo or a RequestError,
never anything else, and what the screen passes h11 reads the same way."""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgegw._core import MAX_HEADER_LINES, HeadInfo, RequestError, screen_request_head

MAX = 16 * 1024
HOST = b"Host: gw"
POST = b"POST /v1/chat/completions HTTP/1.1"


def head(*lines: bytes, request_line: bytes = POST) -> bytes:
    return b"\r\n".join([request_line, *lines]) + b"\r\n\r\n"


def fields(n: int) -> list[bytes]:
    return [b"X-%d: v" % i for i in range(n)]


def ok(data: bytes, **want: Any) -> Any:
    return pytest.param(data, want, id=data.decode("latin-1")[:60])


# (head, the HeadInfo attributes it must have)
ACCEPTED = [
    ok(
        head(HOST, b"Content-Length: 12"),
        method=b"POST",
        target=b"/v1/chat/completions",
        http_version=b"1.1",
        content_length=12,
        chunked=False,
        keep_alive=True,
        expect_continue=False,
        upgrade=False,
    ),
    ok(head(HOST, b"Content-Length: 0"), content_length=0),
    ok(head(HOST, b"Content-Length: 007"), content_length=7),  # 1*DIGIT, leading zeros too
    ok(head(HOST, b"Content-Length: 18446744073709551615"), content_length=2**64 - 1),
    ok(head(HOST, b"content-length:12 \t"), content_length=12),  # OWS either side
    ok(head(HOST, b"Transfer-Encoding: chunked"), chunked=True, content_length=None),
    ok(head(HOST, b"transfer-encoding:  Chunked \t"), chunked=True),
    ok(head(HOST), content_length=None, chunked=False),
    # Targets: origin, absolute, asterisk (OPTIONS only).
    ok(head(HOST, request_line=b"GET /health?x=1&y=%20 HTTP/1.1"), target=b"/health?x=1&y=%20"),
    ok(head(HOST, request_line=b"GET http://gw/health HTTP/1.1"), target=b"http://gw/health"),
    ok(head(HOST, request_line=b"GET HTTPS://gw/ HTTP/1.1"), target=b"HTTPS://gw/"),
    ok(head(HOST, request_line=b"OPTIONS * HTTP/1.1"), method=b"OPTIONS", target=b"*"),
    ok(head(HOST, request_line=b"M-SEARCH~! / HTTP/1.1"), method=b"M-SEARCH~!"),  # a token
    # HTTP/1.0: Host optional, persistent only when asked for.
    ok(head(request_line=b"GET / HTTP/1.0"), http_version=b"1.0", keep_alive=False),
    ok(head(HOST, request_line=b"GET / HTTP/1.0"), http_version=b"1.0"),
    ok(head(b"Connection: Keep-Alive", request_line=b"GET / HTTP/1.0"), keep_alive=True),
    ok(head(b"Connection: keep-alive, close", request_line=b"GET / HTTP/1.0"), keep_alive=False),
    # HTTP/1.1: persistent unless `close` is among the Connection tokens.
    ok(head(HOST, b"Connection: close"), keep_alive=False),
    ok(head(HOST, b"Connection: TE, CLOSE"), keep_alive=False),
    ok(head(HOST, b"Connection: te", b"Connection: close"), keep_alive=False),
    ok(head(HOST, b"Connection: closed"), keep_alive=True),  # a token, not a substring
    ok(head(HOST, b"Connection: keep-alive"), keep_alive=True),
    # Expect: 100-continue counts in HTTP/1.1 only (RFC 9110 §10.1.1).
    ok(head(HOST, b"Expect: 100-continue", b"Content-Length: 5"), expect_continue=True),
    ok(head(HOST, b"expect: 100-Continue"), expect_continue=True),
    ok(head(HOST, b"Expect: something-else"), expect_continue=False),
    ok(head(b"Expect: 100-continue", request_line=b"POST / HTTP/1.0"), expect_continue=False),
    ok(head(HOST, b"Connection: Upgrade", b"Upgrade: h2c"), upgrade=True),
    ok(head(HOST, b"Upgrade: websocket"), upgrade=True),
    # Values: empty, obs-text, inner HTAB and SP.
    ok(head(HOST, b"X-Empty:", b"X-Obs-Text: caf\xc3\xa9", b"X-Tab: a\tb c")),
    ok(head(b"Host:", request_line=b"GET / HTTP/1.1")),  # an empty Host is a Host (§3.2)
    ok(head(HOST, *fields(MAX_HEADER_LINES - 1))),  # 100 field lines
]

# (head, status, code)
REFUSED = [
    # The smuggling classics.
    (head(HOST, b"Content-Length: 3", b"Transfer-Encoding: chunked"), 400, "conflicting_framing"),
    (head(HOST, b"Transfer-Encoding: chunked", b"Content-Length: 3"), 400, "conflicting_framing"),
    (head(HOST, b"Transfer-Encoding: chunked", b"Content-Length: x"), 400, "conflicting_framing"),
    (head(HOST, b"Transfer-Encoding:", b" chunked"), 400, "obs_fold"),  # TE via obs-fold
    (head(HOST, b"X: a", b"\tTransfer-Encoding: chunked"), 400, "obs_fold"),
    (head(HOST, b"Transfer-Encoding: chunked, identity"), 400, "bad_transfer_encoding"),
    (head(HOST, b"Transfer-Encoding : chunked"), 400, "bad_header_name"),
    (head(HOST, b"Transfer-Encoding\t: chunked"), 400, "bad_header_name"),
    (head(HOST, b"Content-Length: 1, 2"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: +5"), 400, "bad_content_length"),
    (b"POST / HTTP/1.1\nHost: gw\nContent-Length: 3\n\n", 400, "incomplete_head"),  # LF only
    (b"POST / HTTP/1.1\nHost: gw\n\r\n\r\n", 400, "bad_line_ending"),  # LF only, CRLF end
    (head(HOST, b"X: a\x00b"), 400, "bad_header_value"),  # NUL in a value
    # Line endings.
    (head(HOST, b"X: a\rb"), 400, "bad_line_ending"),  # bare CR
    (head(HOST, b"X: a\nb"), 400, "bad_line_ending"),  # bare LF
    (b"GET / HTTP/1.1\r\nHost: gw\r\n\n\r\n\r\n", 400, "bad_line_ending"),
    (b"GET / HTTP/1.1\r\nHost: gw\r\n", 400, "incomplete_head"),
    (b"GET / HTTP/1.1\r\nHost: gw\r\n\r\nX", 400, "incomplete_head"),
    (b"", 400, "incomplete_head"),
    # Request line.
    (b"\r\n\r\n", 400, "bad_request_line"),
    (b"\r\nGET / HTTP/1.1\r\nHost: gw\r\n\r\n", 400, "bad_request_line"),  # caller strips
    (head(HOST, request_line=b"GET  / HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET / HTTP/1.1 "), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET /a b HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET\t/ HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"G(T / HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b" GET / HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET /caf\xc3\xa9 HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET /\x00 HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET /\x7f HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET x HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET * HTTP/1.1"), 400, "bad_request_line"),  # * is OPTIONS'
    (head(HOST, request_line=b"CONNECT gw:443 HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET ftp://gw/ HTTP/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET / HTTP/1.2"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET / HTTP/2"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET / http/1.1"), 400, "bad_request_line"),
    (head(HOST, request_line=b"GET /"), 400, "bad_request_line"),  # HTTP/0.9
    (b"PRI * HTTP/2.0\r\n\r\n", 400, "bad_request_line"),  # the HTTP/2 preface's first part
    # Field names.
    (head(HOST, b"X(bad): v"), 400, "bad_header_name"),
    (head(HOST, b": v"), 400, "bad_header_name"),
    (head(HOST, b"no colon"), 400, "bad_header_name"),
    (head(HOST, b"X\xff: v"), 400, "bad_header_name"),
    # Field values.
    (head(HOST, b"X: a\x01b"), 400, "bad_header_value"),
    (head(HOST, b"X: a\x7fb"), 400, "bad_header_value"),  # DEL
    (head(HOST, b"X: a\x1b"), 400, "bad_header_value"),
    (head(b"Host: g\x00w"), 400, "bad_header_value"),
    # Content-Length.
    (head(HOST, b"Content-Length: 1", b"Content-Length: 1"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: 1", b"content-length: 2"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: 1, 1"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: -1"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: 0x10"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: 1 2"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: 1.0"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length:"), 400, "bad_content_length"),
    (head(HOST, b"Content-Length: \xd9\xa1"), 400, "bad_content_length"),  # Arabic-Indic 1
    (head(HOST, b"Content-Length: 18446744073709551616"), 400, "bad_content_length"),
    # Transfer-Encoding.
    (
        head(HOST, b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
        400,
        "bad_transfer_encoding",
    ),
    (head(HOST, b"Transfer-Encoding: chunked, chunked"), 400, "bad_transfer_encoding"),
    (head(HOST, b"Transfer-Encoding: gzip, chunked"), 400, "bad_transfer_encoding"),
    (head(HOST, b"Transfer-Encoding: gzip"), 501, "not_implemented"),
    (head(HOST, b"Transfer-Encoding: identity"), 501, "not_implemented"),
    (head(HOST, b"Transfer-Encoding: chunked;x=1"), 400, "bad_transfer_encoding"),
    (head(HOST, b'Transfer-Encoding: "chunked"'), 400, "bad_transfer_encoding"),
    (head(HOST, b"Transfer-Encoding:"), 400, "bad_transfer_encoding"),
    (
        head(b"Transfer-Encoding: chunked", request_line=b"POST / HTTP/1.0"),
        400,
        "bad_transfer_encoding",
    ),
    # Host.
    (head(), 400, "missing_host"),
    (head(b"X-Host: gw"), 400, "missing_host"),
    (head(HOST, HOST), 400, "duplicate_host"),
    (head(HOST, b"hOsT: other"), 400, "duplicate_host"),
    (head(HOST, HOST, request_line=b"GET / HTTP/1.0"), 400, "duplicate_host"),
    # Limits.
    (head(HOST, *fields(MAX_HEADER_LINES)), 431, "too_many_headers"),
    (head(HOST, b"X: " + b"v" * MAX), 431, "head_too_large"),
]

# The order of the checks (head.rs docs): each pair has two faults, the first one named wins.
PRECEDENCE = [
    (head(HOST, b"X: " + b"\x00" * MAX), 431, "head_too_large"),  # size before anything
    (head(HOST, b"Content-Length: 1, 2", b"Content-Length: 3"), 400, "bad_content_length"),
    (
        head(b"Transfer-Encoding: gzip", request_line=b"GET / HTTP/1.1"),
        501,
        "not_implemented",
    ),
    (head(b"X: \x00", b"Y : 1"), 400, "bad_header_value"),  # byte order among lines
    (head(b"Y : 1", b"X: \x00"), 400, "bad_header_name"),
    (head(b"X:\rb", b"Y : 1"), 400, "bad_line_ending"),
]


@pytest.mark.parametrize(("data", "want"), ACCEPTED)
def test_accepted(data: bytes, want: dict[str, Any]) -> None:
    info = screen_request_head(data, MAX)
    assert isinstance(info, HeadInfo)
    assert {k: getattr(info, k) for k in want} == want


@pytest.mark.parametrize(("data", "status", "code"), REFUSED + PRECEDENCE)
def test_refused(data: bytes, status: int, code: str) -> None:
    with pytest.raises(RequestError) as info:
        screen_request_head(data, MAX)
    e = info.value
    assert (e.status, e.code, e.type, e.param) == (status, code, "invalid_request_error", None)
    assert isinstance(e.args[0], str) and e.args[0]


# What h11 0.16 alone parses into a Request, and the screen refuses: why the screen exists.
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
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    assert isinstance(conn.next_event(), h11.Request)
    with pytest.raises(RequestError):
        screen_request_head(data, MAX)


def test_max_bytes_is_inclusive() -> None:
    data = head(HOST)
    assert screen_request_head(data, len(data)).http_version == b"1.1"
    with pytest.raises(RequestError) as info:
        screen_request_head(data, len(data) - 1)
    assert (info.value.status, info.value.code) == (431, "head_too_large")


def test_takes_a_bytearray() -> None:
    assert screen_request_head(bytearray(head(HOST)), MAX).method == b"POST"


def test_no_message_echoes_the_client() -> None:
    secret = b"sk-\x01supersecret"
    for data in (head(HOST, b"Authorization: " + secret), head(HOST, b"Content-Length: " + secret)):
        with pytest.raises(RequestError) as info:
            screen_request_head(data, MAX)
        assert "supersecret" not in str(info.value)


HEAD_BYTES = st.sampled_from(
    [b"\r\n", b"\r", b"\n", b" ", b"\t", b":", b"\x00", b"\x7f", b"\xff", b",", b"chunked"]
    + [b"Host: gw", b"Content-Length: 1", b"Transfer-Encoding: chunked", b"GET / HTTP/1.1"]
    + [b"POST", b"/", b"HTTP/1.0", b"PRI * HTTP/2.0", b"x", b"0", b"Content-Length:"]
    + [b"Connection: close", b"Expect: 100-continue", b"Upgrade: h2c", b"\r\n "]
)
HEADER_LINES = st.lists(
    st.sampled_from(
        [b"Host: gw", b"Content-Length: 10", b"Transfer-Encoding: chunked", b"X: a\tb"]
        + [b"Connection: close", b"Connection: keep-alive", b"Expect: 100-continue"]
        + [b"Upgrade: h2c", b"transfer-encoding: CHUNKED", b"content-length: 007", b"Host:"]
    ),
    max_size=6,
)


def screen(data: bytes) -> HeadInfo | RequestError:
    try:
        return screen_request_head(data, 512)
    except RequestError as e:
        assert e.status in (400, 431, 501)
        return e


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(HEAD_BYTES, max_size=24).map(b"".join), st.binary(max_size=96))
def test_any_bytes_give_head_info_or_request_error(pieces: bytes, noise: bytes) -> None:
    for data in (
        pieces + b"\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + pieces + b"\r\n\r\n",
        noise,
        noise + b"\r\n\r\n",
    ):
        assert isinstance(screen(data), HeadInfo | RequestError)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([b"GET / HTTP/1.1", b"POST /v1/x?y=1 HTTP/1.1", b"OPTIONS * HTTP/1.0"]),
    HEADER_LINES,
)
def test_what_the_screen_passes_h11_reads_the_same_way(line: bytes, lines: list[bytes]) -> None:
    """No second opinion on framing: h11 parses a screened head to the same request."""
    data = head(*lines, request_line=line)
    info = screen(data)
    if isinstance(info, RequestError):
        return
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    event = conn.next_event()
    assert isinstance(event, h11.Request)
    assert (event.method, event.target, event.http_version) == (
        info.method,
        info.target,
        info.http_version,
    )
    lengths = [int(v) for k, v in event.headers if k == b"content-length"]
    encodings = [v for k, v in event.headers if k == b"transfer-encoding"]
    assert lengths == ([] if info.content_length is None else [info.content_length])
    assert encodings == ([b"chunked"] if info.chunked else [])


def test_the_screen_gives_the_parsed_head() -> None:
    """The head is parsed once: the screen's HeadInfo carries the fields as ASGI wants them
    (lower-cased names, values without surrounding whitespace, in order, repeats kept)."""
    info = screen_request_head(
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw\r\nX-Tag:  a b \t\r\n"
        b"Content-Length: 2\r\nx-tag: c\r\n\r\n",
        MAX,
    )
    assert info.method == b"POST"
    assert info.target == b"/v1/chat/completions?x=1"
    assert info.headers == [
        (b"host", b"gw"),
        (b"x-tag", b"a b"),
        (b"content-length", b"2"),
        (b"x-tag", b"c"),
    ]
