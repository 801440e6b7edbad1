"""The upstream HTTP/1.1 client: a small keep-alive pool of h11 connections on Trio.

Chosen over httpcore's Trio pool by measurement (bench/README.md, "upstream client"):
per request it does one `send_all` and as many `receive_some` as the response needs,
with no locks on the hot path. TLS is `trio.SSLStream`. A connection goes back to the
pool only after a whole response was read; a cancelled or failed exchange closes it,
so a disconnecting client also closes the upstream request.

Transport failures become `GatewayError`s in one table (`_transport_error`):
connect errors and broken responses are 502, timeouts 504.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11
import trio

from edgegw.errors import GatewayError

USER_AGENT = b"edgegw/0.1"
READ_SIZE = 65536
# h11's own limit on a response head; provider heads are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024

Headers = Sequence[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def from_url(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> bytes:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port == default else f"{host}:{self.port}").encode()


class _Connection:
    __slots__ = ("stream", "h11", "sock")

    def __init__(self, stream: trio.abc.Stream, sock: object) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.sock = sock

    def looks_alive(self) -> bool:
        """An idle keep-alive connection must have nothing to read: readable means the
        peer closed it (EOF) or sent garbage; either way it cannot be reused."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    async def aclose(self) -> None:
        with trio.move_on_after(1, shield=True):
            try:
                await self.stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass


@dataclass
class UpstreamPool:
    connect_timeout_s: float = 10.0
    idle_per_host: int = 64
    ssl_context: ssl.SSLContext | None = None
    _idle: dict[tuple[str, str, int], list[_Connection]] = field(default_factory=dict)
    open_connections: int = 0

    def _ssl(self) -> ssl.SSLContext:
        if self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        return self.ssl_context

    async def _connect(self, origin: Origin) -> _Connection:
        try:
            with trio.fail_after(self.connect_timeout_s):
                tcp = await trio.open_tcp_stream(origin.host, origin.port)
                stream: trio.abc.Stream = tcp
                if origin.scheme == "https":
                    tls = trio.SSLStream(
                        tcp, self._ssl(), server_hostname=origin.host, https_compatible=True
                    )
                    await tls.do_handshake()
                    stream = tls
        except trio.TooSlowError:
            raise GatewayError(
                504, "upstream_timeout", "timed out connecting to the upstream"
            ) from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as e:
            raise GatewayError(
                502, "upstream_unreachable", "could not connect to the upstream"
            ) from e
        self.open_connections += 1
        return _Connection(stream, tcp.socket)

    def _checkout(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get((origin.scheme, origin.host, origin.port))
        while idle:
            conn = idle.pop()
            if conn.looks_alive():
                return conn
            self.open_connections -= 1
            conn.sock.close()  # sync close of the raw socket; nothing to flush on a dead peer
        return None

    def _checkin(self, origin: Origin, conn: _Connection) -> bool:
        idle = self._idle.setdefault((origin.scheme, origin.host, origin.port), [])
        if len(idle) >= self.idle_per_host:
            return False
        conn.h11.start_next_cycle()
        idle.append(conn)
        return True

    def idle_count(self) -> int:
        return sum(len(v) for v in self._idle.values())

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                await conn.aclose()
            idle.clear()
        self.open_connections = 0

    async def send(
        self, origin: Origin, method: bytes, target: bytes, headers: Headers, body: bytes = b""
    ) -> Response:
        """Send a request and wait for the response head (timeouts are the caller's scopes).

        A reused keep-alive connection that turns out closed before any response byte is
        retried once on a fresh connection (the peer never saw the request)."""
        all_headers = [(b"host", origin.host_header), (b"user-agent", USER_AGENT), *headers]
        if body or method in (b"POST", b"PUT", b"PATCH"):
            all_headers.append((b"content-length", str(len(body)).encode()))
        for attempt in (0, 1):
            conn = self._checkout(origin) if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin)
            try:
                data = conn.h11.send(h11.Request(method=method, target=target, headers=all_headers))
                if body:
                    data += conn.h11.send(h11.Data(data=body))
                data += conn.h11.send(h11.EndOfMessage())
                await conn.stream.send_all(data)
                head = await _read_head(conn)
            except _StaleConnection:
                await self._discard(conn)
                if reused:
                    continue
                raise GatewayError(
                    502, "upstream_closed", "the upstream closed the connection"
                ) from None
            except BaseException as e:
                await self._discard(conn)
                if isinstance(e, Exception):
                    raise _transport_error(e) from e
                raise
            return Response(self, origin, conn, head)
        raise AssertionError("unreachable")

    async def _discard(self, conn: _Connection) -> None:
        self.open_connections -= 1
        await conn.aclose()


class _StaleConnection(Exception):
    """The connection was closed before the response began."""


async def _read_head(conn: _Connection) -> h11.Response:
    got_bytes = False
    while True:
        event = conn.h11.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await conn.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, OSError):
                if not got_bytes:
                    raise _StaleConnection() from None
                raise
            if not data and not got_bytes:
                raise _StaleConnection()
            got_bytes = True
            conn.h11.receive_data(data)
            continue
        if isinstance(event, h11.Response):
            return event
        if isinstance(event, h11.InformationalResponse):
            continue
        raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")


def _transport_error(e: Exception) -> GatewayError:
    """The one table from transport failures to what the client is told."""
    if isinstance(e, GatewayError):
        return e
    if isinstance(e, trio.TooSlowError):
        return GatewayError(504, "upstream_timeout", "the upstream did not answer in time")
    if isinstance(e, h11.ProtocolError):
        return GatewayError(
            502, "bad_upstream_response", "the upstream sent a malformed HTTP response"
        )
    if isinstance(e, (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError)):
        return GatewayError(
            502, "upstream_connection_lost", "the connection to the upstream was lost"
        )
    return GatewayError(502, "upstream_error", "the upstream request failed")


class Response:
    """A response whose head has arrived. Read the body with `receive_chunk()` (b"" at
    the end) or `read()`, then `aclose()` (which pools the connection when the body was
    read whole, and closes it otherwise)."""

    __slots__ = ("_pool", "_origin", "_conn", "status", "headers", "_done", "_closed")

    def __init__(
        self, pool: UpstreamPool, origin: Origin, conn: _Connection, head: h11.Response
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn = conn
        self.status: int = head.status_code
        self.headers: list[tuple[bytes, bytes]] = head.headers.raw_items()
        self._done = False
        self._closed = False

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    async def receive_chunk(self) -> bytes:
        conn = self._conn
        eof = False
        while not self._done:
            try:
                event = conn.h11.next_event()
                if event is h11.NEED_DATA:
                    data = await conn.stream.receive_some(READ_SIZE)
                    eof = not data
                    conn.h11.receive_data(data)
                    continue
            except h11.RemoteProtocolError as e:
                if eof:  # closed in the middle of the body
                    raise _transport_error(trio.BrokenResourceError()) from e
                raise _transport_error(e) from e
            except Exception as e:
                raise _transport_error(e) from e
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
                continue
            if isinstance(event, h11.EndOfMessage):
                self._done = True
                break
            if isinstance(event, h11.ConnectionClosed):
                raise _transport_error(h11.RemoteProtocolError("connection closed"))
        return b""

    async def read(self, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while chunk := await self.receive_chunk():
            size += len(chunk)
            if size > limit:
                raise GatewayError(
                    502, "upstream_response_too_large", "the upstream response is too large"
                )
            parts.append(chunk)
        return b"".join(parts)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if (
            self._done
            and conn.h11.our_state is h11.DONE
            and conn.h11.their_state is h11.DONE
            and self._pool._checkin(self._origin, conn)
        ):
            return
        await self._pool._discard(conn)
