"""The HTTP layer between Hypercorn and the routes: one `Call` per request (its scope,
`receive` and `send`, with the header, query and body helpers every route needs) and the
JSON answers.

Every request has an id (`Call.request_id`): the client's `X-Request-Id` when it is one
(at most MAX_REQUEST_ID_CHARS of REQUEST_ID_CHARS), else one made here (32 hex digits). It
goes back as `X-Request-Id` on every answer (error envelopes and streams included: `send`
adds it to each response head), upstream with the request, into the access log and spans.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from edgegw.errors import OPENAI_SHAPE, Headers, invalid_content_length, payload_too_large
from edgegw.ids import getrandbits

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

if TYPE_CHECKING:  # the tracing hooks; the SDK itself is loaded only when tracing is on
    from edgegw._core import TraceRecord
    from edgegw.keyfile import Caller
    from edgegw.telemetry.tracing import Completion

# A client's request id is kept when it is this short and made of these characters (UUIDs,
# ULIDs, nginx's $request_id, base64 ids); anything else is replaced, never echoed: it goes
# into logs and upstream headers.
MAX_REQUEST_ID_CHARS = 128
REQUEST_ID = re.compile(rb"[A-Za-z0-9._:+/=-]{1,%d}" % MAX_REQUEST_ID_CHARS)


def new_request_id() -> str:
    return getrandbits(128).to_bytes(16, "big").hex()  # 32 digits; half a format spec's cost


def request_id_of(headers: list[tuple[bytes, bytes]]) -> tuple[str, bool]:
    """(the request's id, whether the client chose it)."""
    for name, value in headers:
        if name == b"x-request-id":
            if REQUEST_ID.fullmatch(value):
                return value.decode("ascii"), True
            break
    return new_request_id(), False


class Direct(Protocol):
    """The connection's own writer of an answer's body (edgegw.http1's cycle, on the plain
    listener), for the core's relay to write to its socket (edgegw.handoff)."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def respond(self, status: int, headers: Headers, body: bytes) -> None: ...

    def whole_body(self) -> bytes | None: ...

    def direct_hold_head(self) -> None: ...

    def direct_fd(self) -> int | None: ...

    @property
    def direct_head(self) -> bytes: ...

    def direct_head_taken(self) -> None: ...

    def direct_ended(self) -> None: ...

    @property
    def direct_stall_s(self) -> float: ...

    def direct_gone(self) -> None: ...

    async def direct_stalled(self) -> None: ...


class ClientGone(Exception):
    """The client disconnected before its request was read; there is nobody to answer."""


@dataclass(slots=True)  # not frozen: edgegw.resolve.Remote says why
class Result:
    """A generation request's record, made once when it ended (edgegw.routes.record), for
    the access log and the server span to read: whom it went to, for which model, with
    the status telemetry recorded (499: the client went away) and, streamed, its TTFT."""

    provider: str
    model: str
    status: int
    ttft_s: float | None = None
    # What it cost (USD, edgegw.tenants.pricing), when its model has a price.
    cost_usd: str | None = None


class Call:
    """One HTTP request as the server handed it over."""

    __slots__ = (
        "scope",
        "method",
        "path",
        "query",
        "_first",
        "receive",
        "_send",
        "_with_id",
        "_body_done",
        "_held",
        "request_id",
        "client_request_id",
        "status",
        "trace",
        "trace_context",
        "trace_content",
        "result",
        "identity",
        "caller",
        "answer_headers",
        "priced",
        "errors",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        # Read from the scope once: every route and layer asks for them.
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query: bytes = scope.get("query_string", b"")
        self._first: dict[bytes, bytes] | None = None  # `header`'s, made at its first call
        self.receive = receive
        self._send = send
        # `send` adds the request id to the answer's head (not for `answered_into`). A flag,
        # not a bound method kept on the instance: that would be a reference cycle, and the
        # request's Call, cycle, h11 state and scope would wait for the cyclic collector
        # (bench/README.md).
        self._with_id = True
        self._body_done = False
        # The whole body, once edgegw.intake read it, until the route reads it.
        self._held: bytes | None = None
        self.request_id, self.client_request_id = request_id_of(scope["headers"])
        # The answer's status once its head is sent (None: nothing sent yet).
        self.status: int | None = None
        # The request's spans when tracing is on (edgegw.telemetry.tracing), else None:
        # every tracing hook is one `if call.trace is not None`.
        self.trace: TraceRecord | None = None
        # A request tracing did not sample: the client's `traceparent` / `tracestate`,
        # passed upstream as they came (none when it sent none, or tracing is off).
        self.trace_context: list[tuple[bytes, bytes]] = []
        # With TELEMETRY_TRACING_CONTENT, a traced request's answer text as the relays fed
        # it, handed to the trace when the request is recorded (edgegw.routes.record).
        self.trace_content: Completion | None = None
        self.result: Result | None = None
        # The verified OIDC claims of the caller (set by the app's authentication step);
        # None without OIDC or when a client key admitted the request.
        self.identity: dict[str, Any] | None = None
        # Who sent it (tenant and key; edgegw.auth.client_keys), set by authentication.
        self.caller: Caller | None = None
        # Headers every answer head gets (the tenant's rate-limit headers, edgegw.tenants).
        self.answer_headers: list[tuple[bytes, bytes]] = []
        # A whole answer's headers from its usage (its cost), added by the relay that
        # reads the usage before the head goes (edgegw.exchange.forward).
        self.priced: Callable[[dict[str, Any]], Headers] | None = None
        # How errors edgegw raises are written: the route's API's shape (app.py sets it).
        self.errors = OPENAI_SHAPE

    def answered_into(self, send: Send) -> Call:
        """This request, its answer sent into `send` (a capture whose content the request's
        own answer carries on): the same ids, trace, record and identity; its head gets no
        `x-request-id` (the request's own answer has it)."""
        other = Call.__new__(Call)
        other.scope, other.receive = self.scope, self.receive
        other.method, other.path, other.query = self.method, self.path, self.query
        other._first = self._first
        other._send = send
        other._with_id = False
        other._body_done = self._body_done
        other._held = self._held
        other.request_id, other.client_request_id = self.request_id, self.client_request_id
        other.status = None
        other.trace, other.result, other.identity = self.trace, self.result, self.identity
        other.caller, other.answer_headers, other.priced = self.caller, [], None
        other.trace_context, other.trace_content = self.trace_context, self.trace_content
        other.errors = self.errors
        return other

    def direct(self) -> Direct | None:
        """The connection's writer, when this call's answer goes to it unchanged (not a
        capture, not Hypercorn, not TLS)."""
        direct: Direct | None = self.scope.get("edgegw.direct")  # edgegw.http1.cycle.DIRECT
        return direct if direct is not None and direct.send == self._send else None

    @property
    def final_status(self) -> int | None:
        """The status the client got: the route's record, the head sent, or the one the
        connection layer answered with after a body deadline or bad framing ended the call."""
        recorded = None if self.result is None else self.result.status
        return recorded or self.status or self.scope.get("edgegw.answered_by_server")

    async def send(self, message: dict[str, Any]) -> None:
        if self._with_id and message["type"] == "http.response.start":
            message["headers"] = self._head(message["headers"])
            self.status = message["status"]
        await self._send(message)

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return list(self.scope["headers"])

    def header(self, name: bytes) -> bytes | None:
        """The first value of header `name` (lower case), or None."""
        first = self._first
        if first is None:  # one mapping in C, not a loop in Python for each name asked
            first = self._first = dict(reversed(self.scope["headers"]))
        return first.get(name)  # ASGI's header values are bytes

    def header_values(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.scope["headers"] if k == name]

    def query_values(self, name: str) -> list[str]:
        query = self.query
        if query.find(name.encode() + b"=") == -1:  # find: edgegw.octets
            return []
        return parse_qs(query.decode("latin-1"), keep_blank_values=True).get(name, [])

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
        held = self._held
        if held is not None and self._body_done:  # edgegw.intake read it, its length checked
            self._held = None
            if len(held) > limit:
                raise payload_too_large(limit)
            return held
        self.content_length(limit)
        chunks: list[bytes] = []
        size = 0
        while chunk := await self.next_body_chunk():
            size += len(chunk)
            if size > limit:
                raise payload_too_large(limit)
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def whole_body(self) -> bytes | None:
        """The whole body, taken at once, when the connection has all of it already (it
        came with the head); None when it must be read (`next_body_chunk`)."""
        if self._held is not None or self._body_done:
            return None
        direct = self.direct()
        return None if direct is None else direct.whole_body()

    def hold_body(self, body: bytes) -> None:
        """`body` is the whole request body, read: the route's reads return it."""
        self._held = body
        self._body_done = True

    def has_body(self) -> bool:
        """Whether a body may follow the head: a Content-Length other than 0, a
        Transfer-Encoding, or (HTTP/2 frames bodies itself) a method that carries one."""
        length = self.header(b"content-length")
        if length is not None:
            return length.strip() != b"0"
        return self.header(b"transfer-encoding") is not None or self.method not in (
            "GET",
            "HEAD",
            "DELETE",
            "OPTIONS",
        )

    async def next_body_chunk(self) -> bytes:
        """The next non-empty piece of the request body, or b"" at its end."""
        if self._held is not None:
            held, self._held = self._held, None
            if held:
                return held
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
        direct = self.direct()
        if direct is None:
            await self.send({"type": "http.response.start", "status": status, "headers": headers})
            await self.send({"type": "http.response.body", "body": body})
            return
        # The connection's writer takes the whole answer in one step, no messages between.
        self.status = status
        await direct.respond(status, self._head(headers), body)

    def _head(self, headers: Headers) -> list[tuple[bytes, bytes]]:
        """An answer head's headers with every answer's own and the request's id."""
        return [*headers, *self.answer_headers, (b"x-request-id", self.request_id.encode())]

    async def respond_json(self, status: int, body: bytes, extra: Headers = ()) -> None:
        # A known length spares Hypercorn the chunked framing (one socket send fewer).
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            *extra,
        ]
        await self.respond(status, headers, body)
