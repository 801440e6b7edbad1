"""Plain HTTP/1.1 servers on Trio + h11: the loop behind the mock upstream
(edgegw/mock.py), the metrics scrape endpoint (edgegw/telemetry/scrape.py) and the
tests' fake peers. Not the gateway's own front end: Hypercorn serves that.

A `Server` runs one task per connection and one ``h11.Connection`` per socket, reused with
``start_next_cycle()`` while both sides end their message cleanly (keep-alive). Each cycle
reads a request head and its whole body, then awaits the handler with a `Request` and a
`Responder`, which answers whole (`send`) or streamed (`start`, `send_data`, `end`).
`Responder.watch_client` runs a slow or streamed answer while it reads the socket, so that a
client going away cancels the answer. A handler that returns without finishing its answer
(a stream cut on purpose, a client gone) leaves the connection to be closed.

What the loop does by itself:

- "Expect: 100-continue" is answered once the body is wanted.
- A body over `Limits.max_body_bytes` (by its Content-Length, or as it arrives) is left
  unread: the handler gets ``body=None``, the answer carries ``Connection: close`` and the
  connection closes after it.
- A request h11 cannot parse is answered with h11's status hint; an exception escaping the
  handler is logged and answered 500. Both only if no answer has started (best effort), the
  body from `render_error`, then the connection closes.
- `Limits` bounds the head, the body, the connections open at once (one more is closed at
  once) and one cycle (waiting for the next request on a kept-alive connection, reading it,
  answering it).
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TypeVar

import h11
import trio

from edgegw.errors import Headers as Headers  # also plainhttp's name for them

log = logging.getLogger(__name__)

# One read per receive_some: a typical request (< 2 KiB) arrives whole, a large one in few reads.
RECEIVE_BYTES = 64 * 1024
# Listen backlog of a unix socket (trio.open_tcp_listeners picks the system's maximum for TCP).
UNIX_BACKLOG = 128

T = TypeVar("T")

_REASONS = {status.value: status.phrase.encode("ascii") for status in HTTPStatus}


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client can make a server hold. The defaults suit a fake peer or the mock:
    h11's own head limit, bodies as large as OpenAI takes, no bound on connections or time."""

    max_head_bytes: int = 16 * 1024  # h11's default max_incomplete_event_size
    # Also how much of a pipelined next request watch_client reads ahead.
    max_body_bytes: int = 16 * 1024 * 1024
    max_connections: int | None = None
    cycle_timeout_s: float = math.inf


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str  # path and query string
    headers: dict[str, str]  # lower-cased names, the last value of each (latin-1)
    body: bytes | None  # None: over max_body_bytes, left unread
    raw_headers: Sequence[tuple[bytes, bytes]]  # h11's: lower-cased names, every value, in order

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    def header(self, name: str) -> str:
        """Every value of the (lower-case) header `name`, joined with ", "; "" when absent."""
        key = name.encode("latin-1")
        return b", ".join(v for k, v in self.raw_headers if k == key).decode("latin-1")


class Responder:
    """Answers one request: whole with `send`, or streamed with `start`, `send_data` and
    `end` (chunked, unless the head carries a Content-Length). Nothing goes to a HEAD
    request but the head."""

    __slots__ = ("_close", "_conn", "_head_only", "_read_ahead", "_stream")

    def __init__(
        self,
        stream: trio.abc.Stream,
        conn: h11.Connection,
        *,
        head_only: bool,
        close: bool,
        read_ahead: int,
    ) -> None:
        self._stream = stream
        self._conn = conn
        self._head_only = head_only
        self._close = close  # the request body was left unread: say Connection: close
        self._read_ahead = read_ahead

    async def send(self, status: int, headers: Headers = (), body: bytes = b"") -> None:
        """A whole response; Content-Length is added."""
        out = self._conn.send(self._head(status, headers, len(body))) or b""
        if body and not self._head_only:
            out += self._conn.send(h11.Data(data=body)) or b""
        await self._stream.send_all(out + (self._conn.send(h11.EndOfMessage()) or b""))

    async def start(self, status: int, headers: Headers = ()) -> None:
        await self._stream.send_all(self._conn.send(self._head(status, headers, None)) or b"")

    async def send_data(self, data: bytes) -> None:
        if data and not self._head_only:
            await self._stream.send_all(self._conn.send(h11.Data(data=data)) or b"")

    async def end(self) -> None:
        await self._stream.send_all(self._conn.send(h11.EndOfMessage()) or b"")

    async def watch_client(self, work: Callable[[], Awaitable[T]]) -> T | None:
        """What `work()` returns, run while a watcher reads the socket; None when the client
        went away first: its end of file (a half-close counts) cancels `work`, and so does a
        send to a closed socket. Bytes that arrive meanwhile (a pipelined next request) go to
        h11 for later, up to max_body_bytes; then the watcher stops reading, which
        back-pressures the client."""
        result: T | None = None
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                read = 0
                while read <= self._read_ahead:
                    try:
                        data = await self._stream.receive_some(RECEIVE_BYTES)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        data = b""
                    if not data:
                        nursery.cancel_scope.cancel()
                        return
                    self._conn.receive_data(bytes(data))  # no copy: a SocketStream gives bytes
                    read += len(data)

            nursery.start_soon(watch)
            try:
                result = await work()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()
        return result

    def _head(self, status: int, headers: Headers, length: int | None) -> h11.Response:
        fields = list(headers)
        if length is not None:
            fields.append((b"content-length", b"%d" % length))
        if self._close:
            fields.append((b"connection", b"close"))
        return h11.Response(status_code=status, headers=fields, reason=_REASONS.get(status, b""))


Handler = Callable[[Request, Responder], Awaitable[None]]
# status -> (headers, body) of the answer to a malformed request (h11's status hint) or to a
# handler's unexpected exception (500).
RenderError = Callable[[int], tuple[Headers, bytes]]


def render_plain_error(status: int) -> tuple[Headers, bytes]:
    """The reason phrase, lower-cased, as text/plain ("bad request\\n")."""
    return [(b"content-type", b"text/plain; charset=utf-8")], (
        _REASONS.get(status, b"error").lower() + b"\n"
    )


class Server:
    """One handler served over HTTP/1.1 under `limits`. `port` is the port serve_tcp
    listens on (0 until then); `open_connections` counts the connections held now."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        *,
        limits: Limits = Limits(),  # noqa: B008 (frozen)
        render_error: RenderError = render_plain_error,
    ) -> None:
        self.name = name  # for the log
        self.handler = handler
        self.limits = limits
        self.render_error = render_error
        self.port = 0
        self.open_connections = 0

    async def serve_tcp(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on host:port and serve until cancelled; task_status.started(port) once
        listening. Give an IP address: with port 0, a name resolving to several addresses
        would get one port per address, and only the first is reported."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self.serve_connection, listeners)

    async def serve_unix(
        self, path: str, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on the unix socket `path` (which must not exist yet) and serve until
        cancelled; task_status.started(path) once listening."""
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await sock.bind(path)
            sock.listen(UNIX_BACKLOG)
        except BaseException:
            sock.close()
            raise
        task_status.started(path)
        await trio.serve_listeners(self.serve_connection, [trio.SocketListener(sock)])

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted connection (TCP, TLS or unix) until it ends; then close it."""
        limits = self.limits
        if limits.max_connections is not None and self.open_connections >= limits.max_connections:
            await stream.aclose()
            return
        self.open_connections += 1
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        try:
            while True:
                if limits.cycle_timeout_s == math.inf:  # no scope to pay for when unbounded
                    served = await self._serve_cycle(stream, conn)
                else:
                    served = False
                    with trio.move_on_after(limits.cycle_timeout_s):
                        served = await self._serve_cycle(stream, conn)
                if not served:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            await self._send_quietly(stream, conn, exc.error_status_hint)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            log.exception("%s: unexpected error, closing the connection", self.name)
            await self._send_quietly(stream, conn, 500)
        finally:
            self.open_connections -= 1
            await stream.aclose()

    async def _serve_cycle(self, stream: trio.abc.Stream, conn: h11.Connection) -> bool:
        """Read one request and answer it; whether the connection can serve another."""
        head = await _next_event(stream, conn)
        if not isinstance(head, h11.Request):
            return False  # the client closed between requests
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers}
        body = await _read_body(stream, conn, headers.get("content-length"), self.limits)
        request = Request(
            head.method.decode("ascii"), head.target.decode("latin-1"), headers, body, head.headers
        )
        responder = Responder(
            stream,
            conn,
            head_only=head.method == b"HEAD",
            close=body is None,
            read_ahead=self.limits.max_body_bytes,
        )
        await self.handler(request, responder)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _send_quietly(
        self, stream: trio.abc.Stream, conn: h11.Connection, status: int
    ) -> None:
        """Best-effort error answer on a connection about to close."""
        # IDLE too: h11 lets a server answer a request line it could not parse.
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers, body = self.render_error(status)
        responder = Responder(stream, conn, head_only=False, close=True, read_ahead=0)
        try:
            await responder.send(status, headers, body)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
            pass


async def _next_event(stream: trio.abc.Stream, conn: h11.Connection) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.they_are_waiting_for_100_continue:
            continue_ = h11.InformationalResponse(status_code=100, headers=[])
            await stream.send_all(conn.send(continue_) or b"")
        conn.receive_data(bytes(await stream.receive_some(RECEIVE_BYTES)))


async def _read_body(
    stream: trio.abc.Stream, conn: h11.Connection, content_length: str | None, limits: Limits
) -> bytes | None:
    """The request body, or None when it is over the limit (the rest is left unread)."""
    limit = limits.max_body_bytes
    if content_length is not None and int(content_length) > limit:
        return None  # h11 has checked that there is one and that it is all digits
    parts: list[bytes] = []
    size = 0
    while True:
        event = await _next_event(stream, conn)
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > limit:
                return None
            parts.append(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(parts)
        else:  # ConnectionClosed mid-body makes h11 raise; nothing else can come here
            raise h11.RemoteProtocolError("request body ended early")
