"""The request-head screen: RFC 9112 applied strictly to a whole head, before anything
(h11 included) acts on it.

`screen_head(head)` takes the bytes from the request line to the blank line that ends the
head (its final CRLF CRLF included; the caller has already stripped the empty lines a
client may send first and bounded the size) and returns None, or raises `HeadError` with
the status to answer. Every rejection closes the connection: a proxy that disagrees with
the server behind or in front of it about where a message ends is a smuggling bug, so
anything ambiguous is refused rather than repaired.

h11 0.16 alone accepts several of these (checked): Content-Length beside
Transfer-Encoding (TE wins), obs-fold (unfolded), bare LF line ends, a repeated or listed
Content-Length with equal values, Transfer-Encoding in HTTP/1.0, and `PRI * HTTP/2.0`.

The rules, in the order checked:
  1. no NUL, no CR that is not followed by LF, no LF that is not preceded by CR;
  2. request line: `token SP target SP HTTP/1.1|HTTP/1.0`, target visible ASCII in
     origin, absolute or asterisk form (so `PRI * HTTP/2.0`, the HTTP/2 preface, is 400);
  3. at most MAX_HEADER_COUNT fields (431); no line starting with SP/HTAB (obs-fold);
     every field `token ":" value`, no whitespace before the colon, value of visible
     bytes, SP and HTAB only;
  4. Host: exactly one in HTTP/1.1, at most one in HTTP/1.0;
  5. Content-Length: at most one field, digits only (no lists, not even of equal values);
  6. Transfer-Encoding: at most one field, and only in HTTP/1.1; exactly `chunked`
     (any other coding is 501); never beside Content-Length.

The Rust core will provide the same function as `edgegw._core.screen_request_head`; its
`RequestError` carries the same attributes as `HeadError` (status, type, code, param).
"""

from __future__ import annotations

import re

from edgegw.http1.limits import MAX_HEADER_COUNT
from edgegw.octets import NUL


class HeadError(ValueError):
    """A request head refused by the screen: answer `status` in the envelope, then close."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.type = "invalid_request_error" if status < 500 else "server_error"
        self.param: str | None = None


_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_REQUEST_LINE = re.compile(_TOKEN + rb" ([\x21-\x7e]+) HTTP/1\.([01])")
_FIELD = re.compile(_TOKEN + rb":[\t\x20-\x7e\x80-\xff]*")
# The fields the screen looks at by name, found in the header block (case-insensitive).
_FRAMING = re.compile(rb"^(content-length|transfer-encoding|host):([^\r\n]*)", re.I | re.M)
_OWS = b" \t"
_ABSOLUTE = (b"http://", b"https://")
_DIGITS = re.compile(rb"[0-9]{1,18}")
_CODINGS = re.compile(rb"[ \t]*" + _TOKEN + rb"[ \t]*(?:,[ \t]*" + _TOKEN + rb"[ \t]*)*")


def bad(message: str) -> HeadError:
    return HeadError(400, "invalid_request", message)


def screen_head(head: bytes) -> None:
    """Return if `head` (request line to CRLF CRLF) is a well-formed, unambiguous HTTP/1.x
    request head; raise HeadError otherwise."""
    if NUL in head:
        raise bad("NUL in the request head")
    crlf = head.count(b"\r\n")
    if head.count(b"\r") != crlf or head.count(b"\n") != crlf:
        raise bad("bare CR or LF in the request head")
    if not head.endswith(b"\r\n\r\n"):
        raise bad("the request head does not end with an empty line")
    lines = head[:-4].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        raise bad("malformed request line (expected: METHOD target HTTP/1.1)")
    target = line.group(1)
    if not (target.startswith(b"/") or target == b"*" or target.lower().startswith(_ABSOLUTE)):
        raise bad("request target must be a path, an absolute URL or *")
    http11 = line.group(2) == b"1"
    if len(lines) - 1 > MAX_HEADER_COUNT:
        raise HeadError(
            431, "request_header_fields_too_large", f"more than {MAX_HEADER_COUNT} header fields"
        )
    for field in lines[1:]:
        if field[:1] in (b" ", b"\t"):
            raise bad("obsolete line folding in a header field")
        if _FIELD.fullmatch(field) is None:
            raise bad("malformed header field (expected: token ':' value)")
    if len(lines) == 1:
        framing = []
    else:
        framing = _FRAMING.findall(head, len(lines[0]) + 2, len(head) - 4)
    hosts = content_length = transfer_encoding = 0
    chunked = False
    for name, value in framing:
        name = name.lower()
        value = value.strip(_OWS)
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            content_length += 1
            if _DIGITS.fullmatch(value) is None:
                raise bad("Content-Length must be one decimal number")
        else:
            transfer_encoding += 1
            chunked = value.lower() == b"chunked"
            if not chunked and _CODINGS.fullmatch(value) is None:
                raise bad("malformed Transfer-Encoding")
    if hosts != 1 and (http11 or hosts > 1):
        raise bad("exactly one Host header is required")
    if content_length > 1:
        raise bad("more than one Content-Length")
    if transfer_encoding:
        if content_length:
            raise bad("both Content-Length and Transfer-Encoding")
        if not http11:
            raise bad("Transfer-Encoding in an HTTP/1.0 request")
        if transfer_encoding > 1:
            raise bad("more than one Transfer-Encoding")
        if not chunked:
            raise HeadError(501, "not_implemented", "only Transfer-Encoding: chunked is supported")
