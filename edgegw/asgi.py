"""The HTTP layer between Hypercorn and the routes: one `Call` per request (its scope,
`receive` and `send`, with the header, query and body helpers every route needs) and the
JSON answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from edgegw.errors import Headers, invalid_content_length, payload_too_large

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ClientGone(Exception):
    """The client disconnected before its request was read; there is nobody to answer."""


class Call:
    """One HTTP request as the server handed it over."""

    __slots__ = ("scope", "receive", "send", "_body_done", "identity")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self._body_done = False
        # The verified OIDC claims of the caller (set by the app's authentication step);
        # None without OIDC or when a client key admitted the request.
        self.identity: dict[str, Any] | None = None

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    @property
    def query(self) -> bytes:
        return bytes(self.scope.get("query_string", b""))

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return list(self.scope["headers"])

    def header(self, name: bytes) -> bytes | None:
        """The first value of header `name` (lower case), or None."""
        for k, v in self.scope["headers"]:
            if k == name:
                return bytes(v)
        return None

    def header_values(self, name: bytes) -> list[bytes]:
        return [bytes(v) for k, v in self.scope["headers"] if k == name]

    def query_values(self, name: str) -> list[str]:
        if name.encode() + b"=" not in self.query:
            return []
        return parse_qs(self.query.decode("latin-1"), keep_blank_values=True).get(name, [])

    def provider_param(self) -> str | None:
        """`?provider=`, trimmed and lower-cased; None when absent or empty."""
        values = self.query_values("provider")
        pid = values[0].strip().lower() if values else ""
        return pid or None

    def content_length(self, limit: int) -> int | None:
        """The declared body length (None without one); 400 if malformed, 413 past `limit`."""
        value = self.header(b"content-length")
        if value is None:
            return None
        try:
            declared = int(value)
        except ValueError:
            raise invalid_content_length() from None
        if declared < 0:
            raise invalid_content_length()
        if declared > limit:
            raise payload_too_large(limit)
        return declared

    async def read_body(self, limit: int) -> bytes:
        """The whole request body, at most `limit` bytes (413 beyond)."""
        self.content_length(limit)
        chunks: list[bytes] = []
        size = 0
        while chunk := await self.next_body_chunk():
            size += len(chunk)
            if size > limit:
                raise payload_too_large(limit)
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def next_body_chunk(self) -> bytes:
        """The next non-empty piece of the request body, or b"" at its end."""
        while not self._body_done:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            if not message.get("more_body", False):
                self._body_done = True
            chunk = message.get("body", b"")
            if chunk:
                return bytes(chunk)
        return b""

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def respond_json(self, status: int, body: bytes, extra: Headers = ()) -> None:
        # A known length spares Hypercorn the chunked framing (one socket send fewer).
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            *extra,
        ]
        await self.respond(status, headers, body)
