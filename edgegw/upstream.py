"""The upstream HTTP/1.1 client: a small keep-alive pool on Trio.

Requests are written as bytes in one `send_all`, the head checked and built with the body by
the Rust core (`upstream_request`; a body past JOINED_BODY_BYTES in a second send: copying it
after the head cost more than the second system call); responses are framed by
the Rust core's `ResponseParser` (httparse underneath), which replaced h11 here, and the pool
was chosen over httpcore's Trio pool, both by measurement (bench/README.md,
history).

TLS is `trio.SSLStream`. A connection goes back to the pool only after a whole response
was read and the response allows reuse (not framed both by chunks and by length); a
cancelled or failed exchange closes it, so a client that disconnects also closes its
upstream request.

Connections to one host are capped (`max_per_host`, UPSTREAM_POOL_MAX_PER_HOST; Envoy's
circuit breaker `max_connections` defaults to the same 1,024): past the cap a request
queues, first come first served, for a connection coming back (handed over directly, never
parked idle while someone waits) or for a slot freed by one that closed. The wait is inside
the caller's first-byte deadline, so a request that waits too long gets the caller's 504;
the queue itself is bounded by the requests a process handles at once (EDGEGW_MAX_IN_FLIGHT).
HTTP/1.1 carries one exchange per connection, so the cap is also the most streams in flight
to one host: without it 2,000 concurrent streams to one provider open 2,000 sockets
(bench/README.md, history).

Transport failures become `GatewayError`s in one table (`_transport_error`):
connect errors and broken responses are 502, timeouts 504.

Longer than the guide because the pool (slots, queue, idle list), the request writer and the
response reader share one invariant, that every connection is counted once and pooled only
whole, which is checked best when read in one file.
"""

from __future__ import annotations

import os
import select
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import trio

from edgegw._core import ResponseHead, ResponseParser, UpstreamProtocolError, upstream_request
from edgegw.errors import GatewayError, Headers, fail

USER_AGENT = b"edgegw/0.1"
READ_SIZE = 65536
# A request body larger than this is sent after its head, not copied onto its end (an
# exported batch of spans is ~130 KiB: the copy was a fresh allocation whose pages fault in).
JOINED_BODY_BYTES = 16 * 1024
# Open connections (idle or in use) to one host; past it requests queue (module doc).
MAX_PER_HOST = 1024

# Told of each connection the pool opens for a request, once its TCP connect and TLS
# handshake are over: when the connect began (time.time_ns) and the error it failed with
# (None: it is open). Without one a connect costs two `is None` checks more, and a request
# on a kept-alive connection nothing.
OnConnect = Callable[[int, BaseException | None], None]


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    base_path: str
    # The Host header every request to it sends, made once.
    host_header: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        value = host if self.port == default else f"{host}:{self.port}"
        object.__setattr__(self, "host_header", value.encode())

    @classmethod
    def from_url(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


# A longer Retry-After is cut to this: an upstream cannot take itself out for a day.
MAX_RETRY_AFTER_S = 300.0


class Resumes:
    """How many times a task resumed from a wait for an upstream's bytes. Between two
    reads of it by one task, a count that moved means the task let the others run: one
    that waited moved it, or another ran. The connection layer skips its fairness
    checkpoint before a next request then (edgegw.http1.connection)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


RESUMES = Resumes()


class Interrupted(Exception):
    """The exchange was ended (its deadline, its client gone, the drain) by its `Watch`
    while its task waited for the connection or for something else."""


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


class Watch(Protocol):
    """An exchange with no cancel scope of its own (edgegw.watch.WholeExchange): it
    ends a wait on its connection by waking it (`_Connection.interrupt`), and gives a
    scope for a wait off it (`scoped`; when the scope was cancelled the caller raises
    `Interrupted`)."""

    def attach(self, conn: Interruptible) -> None: ...

    def scoped(self) -> trio.CancelScope: ...


class _Waiter:
    """A request queued for a connection to its host: handed one (`conn`), or a slot to
    open one (`conn` None), when `ready` is set."""

    __slots__ = ("ready", "conn")

    def __init__(self) -> None:
        self.ready = trio.Event()
        self.conn: _Connection | None = None


class _Host:
    """One host's connections: the idle ones, how many are open, who waits for one."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[_Connection] = []
        self.open = 0  # idle, in use, or being opened
        self.waiters: deque[_Waiter] = deque()


class _Connection:
    __slots__ = ("stream", "sock", "host", "plain", "interrupted")

    def __init__(self, stream: trio.abc.Stream, sock: trio.socket.SocketType, host: _Host) -> None:
        self.stream = stream
        self.sock = sock
        self.host = host
        self.plain = isinstance(stream, trio.SocketStream)  # not TLS: the socket is read as is
        self.interrupted = False  # by its exchange's Watch: never waited on again, nor pooled

    def interrupt(self) -> None:
        """End the exchange's wait on this connection, now or at its next (`Watch`)."""
        self.interrupted = True
        trio.lowlevel.notify_closing(self.sock)

    async def receive(self, most: int, fair: bool = True, early: bool = True) -> bytes | bytearray:
        """The next bytes the upstream sent (b"" at its end). A plain connection's socket is
        read directly, as the server's own connections are (edgegw.http1.wire): at once, and
        once readable when nothing was there. trio's `receive_some` does the same through a
        conflict detector, an async context manager and its exception, a sixth of a paced
        stream's relayed event (bench/README.md). Bytes that were waiting are returned after
        a checkpoint, so a loop of reads lets the others run; not with `fair=False`, for the
        reads of an answer's head, which end a step (bounded by the head's size; the body's
        reads that may follow keep their checkpoint). With `early=False` a plain socket is
        read only once readable: the first read of an answer, just after its request was
        sent, would find nothing and cost a failed recv(2) and its exception."""
        if self.interrupted:
            raise Interrupted()
        if not self.plain:
            try:
                return await self.stream.receive_some(most)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                if self.interrupted:
                    raise Interrupted() from None
                raise
        if early:
            try:
                data = os.read(self.sock.fileno(), most)  # recv(2), for a socket
            except BlockingIOError:
                pass
            else:
                if fair:
                    await trio.lowlevel.checkpoint()  # data was waiting: let the others run
                return data
        while True:
            try:
                await trio.lowlevel.wait_readable(self.sock)  # the checkpoint
            except trio.ClosedResourceError:
                if self.interrupted:
                    raise Interrupted() from None
                raise
            RESUMES.count += 1
            try:
                return os.read(self.sock.fileno(), most)
            except BlockingIOError:  # a spurious wake-up
                continue

    async def send_all(self, data: bytes) -> None:
        """Write all of `data`. A plain connection's socket is written directly, as the
        server's own connections are: at once, and once writable when the kernel's buffer is
        full (trio's `send_all` goes through a conflict detector and a memoryview loop). No
        checkpoint when it all went at once: the read of the answer that follows is one."""
        if self.interrupted:
            raise Interrupted()
        if not self.plain:
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                if self.interrupted:
                    raise Interrupted() from None
                raise
            return
        view: bytes | memoryview = data  # a view only once a write was partial
        while view:
            try:
                sent = os.write(self.sock.fileno(), view)  # send(2), for a socket
            except BlockingIOError:
                try:
                    await trio.lowlevel.wait_writable(self.sock)
                except trio.ClosedResourceError:
                    if self.interrupted:
                        raise Interrupted() from None
                    raise
                continue
            if sent < len(view):
                view = memoryview(view)[sent:]
            else:
                break

    def looks_alive(self) -> bool:
        """An idle keep-alive connection must have nothing to read: readable means the
        peer closed it (EOF) or sent garbage; either way it cannot be reused. poll, not
        select: select cannot watch a descriptor numbered past FD_SETSIZE (1,024)."""
        poller = select.poll()
        try:
            poller.register(self.sock.fileno(), select.POLLIN)
            return not poller.poll(0)  # POLLIN, or POLLHUP / POLLERR / POLLNVAL
        except (OSError, ValueError):
            return False

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
    # Oldest TLS version accepted from an upstream (CLIENT_TLS_MIN_VERSION).
    tls_minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    # Open connections per host (UPSTREAM_POOL_MAX_PER_HOST); past it requests queue.
    max_per_host: int = MAX_PER_HOST
    _hosts: dict[tuple[str, str, int], _Host] = field(default_factory=dict)
    open_connections: int = 0
    # Since start: connections opened, requests sent on a kept-alive one, requests that
    # queued at the cap (bench/ reads them; they are cheap enough to keep always).
    connections_opened: int = 0
    reused: int = 0
    queued: int = 0

    def _ssl(self) -> ssl.SSLContext:
        if self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        if self.ssl_context.minimum_version < self.tls_minimum:
            self.ssl_context.minimum_version = self.tls_minimum
        return self.ssl_context

    def _host(self, origin: Origin) -> _Host:
        key = (origin.scheme, origin.host, origin.port)
        host = self._hosts.get(key)
        if host is None:
            host = self._hosts[key] = _Host()
        return host

    async def _connect(
        self, origin: Origin, host: _Host, on_connect: OnConnect | None
    ) -> _Connection:
        """A new connection, in a slot of `host` the caller holds (given back on failure);
        `on_connect` is told when it began and how it ended."""
        started = 0 if on_connect is None else time.time_ns()
        try:
            with trio.fail_after(self.connect_timeout_s):
                tcp = await trio.open_tcp_stream(origin.host, origin.port)
                stream: trio.abc.Stream = tcp
                if origin.scheme == "https":
                    tls = trio.SSLStream(
                        tcp, self._ssl(), server_hostname=origin.host, https_compatible=True
                    )
                    try:
                        await tls.do_handshake()
                    except BaseException:
                        tcp.socket.close()  # a failed or cancelled handshake must not leak it
                        raise
                    stream = tls
        except BaseException as e:
            self._free_slot(host)
            error: BaseException = e
            if isinstance(e, trio.TooSlowError):
                error = fail("upstream_timeout", "timed out connecting to the upstream")
            elif isinstance(e, (OSError, trio.BrokenResourceError, ssl.SSLError)):
                error = fail("upstream_unreachable", "could not connect to the upstream")
            if on_connect is not None:
                on_connect(started, error)
            if error is e:
                raise
            raise error from (None if isinstance(e, trio.TooSlowError) else e)
        if on_connect is not None:
            on_connect(started, None)
        self.open_connections += 1
        self.connections_opened += 1
        return _Connection(stream, tcp.socket, host)

    async def _acquire(
        self, origin: Origin, on_connect: OnConnect | None = None, watch: Watch | None = None
    ) -> tuple[_Connection, bool]:
        """A connection for one exchange: (it, whether it was kept alive from an earlier
        one). At the cap, wait in line (module doc)."""
        host = self._host(origin)
        idle = host.idle
        while idle:
            conn = idle.pop()
            if conn.looks_alive():
                self.reused += 1
                return conn, True
            self.open_connections -= 1
            host.open -= 1
            conn.sock.close()  # sync close of the raw socket; nothing to flush on a dead peer
        return await self._opened(origin, host, on_connect, watch)

    async def _opened(
        self, origin: Origin, host: _Host, on_connect: OnConnect | None, watch: Watch | None
    ) -> tuple[_Connection, bool]:
        """`_open`, under the scope `watch` gives for a wait off a connection."""
        if watch is None:
            return await self._open(origin, host, on_connect)
        with watch.scoped():
            return await self._open(origin, host, on_connect)
        raise Interrupted()  # reached only when the scope was cancelled

    async def _open(
        self, origin: Origin, host: _Host, on_connect: OnConnect | None = None
    ) -> tuple[_Connection, bool]:
        """A new connection, once a slot is free; or one handed over while waiting."""
        if host.open < self.max_per_host:
            host.open += 1
        else:
            handed = await self._wait(host)
            if handed is not None:
                if handed.looks_alive():
                    self.reused += 1
                    return handed, True
                self.open_connections -= 1  # closed by the peer meanwhile: its slot is ours
                handed.sock.close()
        return await self._connect(origin, host, on_connect), False

    async def _wait(self, host: _Host) -> _Connection | None:
        """Queue for `host`: a connection handed over, or None for a slot to open one in."""
        waiter = _Waiter()
        host.waiters.append(waiter)
        self.queued += 1
        try:
            await waiter.ready.wait()
        except BaseException:
            if not waiter.ready.is_set():
                host.waiters.remove(waiter)
            elif waiter.conn is not None:  # handed one as the wait was cancelled: pass it on
                if not self._checkin(waiter.conn):
                    self._drop(waiter.conn)
                    waiter.conn.sock.close()
            else:
                self._free_slot(host)
            raise
        return waiter.conn

    def _free_slot(self, host: _Host) -> None:
        """A connection of `host` closed (or was never opened): its slot to the next in line."""
        if host.waiters:
            host.waiters.popleft().ready.set()  # the slot passes on: host.open is unchanged
        else:
            host.open -= 1

    def _checkin(self, conn: _Connection) -> bool:
        """A connection fit for reuse: to the next in line, or idle; False: close it."""
        host = conn.host
        if host.waiters:
            waiter = host.waiters.popleft()
            waiter.conn = conn
            waiter.ready.set()
            return True
        if len(host.idle) >= self.idle_per_host:
            return False
        host.idle.append(conn)
        return True

    def idle_count(self) -> int:
        return sum(len(h.idle) for h in self._hosts.values())

    async def aclose(self) -> None:
        for host in self._hosts.values():
            for conn in host.idle:
                await conn.aclose()
            host.open -= len(host.idle)
            host.idle.clear()
        self.open_connections = 0

    async def send(
        self,
        origin: Origin,
        method: bytes,
        target: bytes,
        headers: Headers,
        body: bytes = b"",
        on_connect: OnConnect | None = None,
        watch: Watch | None = None,
    ) -> Response:
        """Send a request and wait for the response head (timeouts are the caller's scopes,
        or `watch`'s).

        A reused keep-alive connection that turns out closed before any response byte is
        retried once on a fresh connection (the peer never saw the request). `on_connect`
        hears of each connection opened for it (`OnConnect`; the tracer's `connect` span)."""
        framing = (
            b"content-length: %d\r\n" % len(body)
            if body or method in (b"POST", b"PUT", b"PATCH")
            else b""
        )
        joined = len(body) <= JOINED_BODY_BYTES
        request = _request(origin, method, target, headers, framing, body if joined else b"")
        for attempt in (0, 1):
            if attempt == 0:
                conn, reused = await self._acquire(origin, on_connect, watch)
            else:  # not an idle one again: it could be stale too
                conn, reused = await self._opened(origin, self._host(origin), on_connect, watch)
            if watch is not None:
                watch.attach(conn)
            parser = ResponseParser(method == b"HEAD")
            try:
                await conn.send_all(request)
                if not joined:
                    await conn.send_all(body)
                return await _read_head(self, origin, conn, parser)
            except _StaleConnection:
                await self._discard(conn)
                if reused and attempt == 0:
                    continue
                raise fail(
                    "upstream_connection_lost", "the upstream closed the connection"
                ) from None
            except BaseException as e:
                await self._discard(conn)
                if isinstance(e, Exception) and not isinstance(e, Interrupted):
                    raise _transport_error(e) from e
                raise
        raise AssertionError("unreachable")

    async def send_streaming(
        self,
        origin: Origin,
        method: bytes,
        target: bytes,
        headers: Headers,
        next_chunk: Callable[[], Awaitable[bytes]],
        content_length: int | None,
        on_connect: OnConnect | None = None,
    ) -> Response:
        """Send a request whose body arrives piece by piece (`next_chunk()` returns b""
        at the end); with no known length it goes chunked. Not retried: the body cannot be
        replayed, so only a connection that looks alive is reused. `on_connect`: as for
        `send`."""
        framing = (
            b"transfer-encoding: chunked\r\n"
            if content_length is None
            else b"content-length: %d\r\n" % content_length
        )
        head = _request(origin, method, target, headers, framing, b"")
        conn, _ = await self._acquire(origin, on_connect)
        parser = ResponseParser(method == b"HEAD")
        try:
            await conn.send_all(head)
            sent = 0
            while chunk := await next_chunk():
                sent += len(chunk)
                if content_length is None:
                    await conn.send_all(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                else:
                    await conn.send_all(chunk)
            if content_length is None:
                await conn.send_all(b"0\r\n\r\n")
            elif sent != content_length:
                raise fail("invalid_request", "request body shorter than its Content-Length")
            return await _read_head(self, origin, conn, parser)
        except _StaleConnection:
            await self._discard(conn)
            raise fail("upstream_connection_lost", "the upstream closed the connection") from None
        except BaseException as e:
            await self._discard(conn)
            if isinstance(e, Exception):
                raise _transport_error(e) from e
            raise

    async def _discard(self, conn: _Connection) -> None:
        self._drop(conn)
        await conn.aclose()

    def _drop(self, conn: _Connection) -> None:
        """Count `conn` closed and free its slot (the caller closes the socket)."""
        self.open_connections -= 1
        self._free_slot(conn.host)


def _request(
    origin: Origin, method: bytes, target: bytes, headers: Headers, framing: bytes, body: bytes
) -> bytes:
    """The request line, header block (framing header included) and `body`, in one buffer;
    400 for a byte that could split the request (the last guard against header injection)."""
    try:
        return upstream_request(
            method, target, origin.host_header, headers, framing, USER_AGENT, body
        )
    except ValueError as e:
        raise fail("invalid_request", str(e)) from None


class _StaleConnection(Exception):
    """The connection was closed before the response began."""


async def _read_head(
    pool: UpstreamPool, origin: Origin, conn: _Connection, parser: ResponseParser
) -> Response:
    got_bytes = False
    while True:
        try:
            data = await conn.receive(READ_SIZE, fair=False, early=got_bytes)
        except (trio.BrokenResourceError, OSError):
            if not got_bytes:
                raise _StaleConnection() from None
            raise
        if not data:
            if not got_bytes:
                raise _StaleConnection()
            parser.feed_eof()  # raises: the head never completed
            raise fail("upstream_connection_lost", "the upstream closed the connection")
        got_bytes = True
        fed = parser.feed(data)
        if fed.head is not None:
            return Response(pool, origin, conn, parser, fed.head, fed.body, fed.done)


def _transport_error(e: Exception) -> GatewayError:
    """The one table from transport failures to what the client is told."""
    if isinstance(e, GatewayError):
        return e
    if isinstance(e, trio.TooSlowError):
        return fail("upstream_timeout", "the upstream did not answer in time")
    if isinstance(e, UpstreamProtocolError):  # from ResponseParser: malformed or truncated
        return fail(e.code, str(e), type="upstream_error")
    if isinstance(e, (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError)):
        return fail("upstream_connection_lost", "the connection to the upstream was lost")
    return fail("upstream_error", "the upstream request failed")


class Response:
    """A response whose head has arrived. Read the body with `receive_chunk()` (b"" at
    the end) or `read()`, then `aclose()` (which pools the connection when the body was
    read whole and the response allows reuse, and closes it otherwise)."""

    __slots__ = (
        "_pool",
        "_origin",
        "_conn",
        "_parser",
        "status",
        "headers",
        "_pending",
        "_done",
        "_closed",
    )

    def __init__(
        self,
        pool: UpstreamPool,
        origin: Origin,
        conn: _Connection,
        parser: ResponseParser,
        head: ResponseHead,
        body: bytes,
        done: bool,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn = conn
        self._parser = parser
        self.status: int = head.status
        self.headers: list[tuple[bytes, bytes]] = head.headers  # names lower-cased
        self._pending = body
        self._done = done
        self._closed = False

    @property
    def complete(self) -> bool:
        """The whole body has been read (the next `receive_chunk()` is b"")."""
        return self._done and not self._pending

    @property
    def arrived(self) -> bool:
        """The whole body came with the head: reading it waits on nothing."""
        return self._done

    def take_arrived(self) -> bytes:
        """The whole body, when it came with the head (`arrived`); the response is then read."""
        body, self._pending = self._pending, b""
        return body

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    async def receive_chunk(self, most: int = READ_SIZE) -> bytes:
        """The next piece of the body (b"" at the end), read `most` bytes at a time (a
        caller that knows how much is left need not make room for more)."""
        if self._pending:
            chunk, self._pending = self._pending, b""
            return chunk
        while not self._done:
            try:
                data = await self._conn.receive(most)
                fed = self._parser.feed(data) if data else self._parser.feed_eof()
            except Interrupted:
                raise
            except Exception as e:
                raise _transport_error(e) from e
            self._done = fed.done
            if fed.body:
                return fed.body
        return b""

    @property
    def handable(self) -> bool:
        """Whether `hand_over` gives the body to the core: not when its bytes need Python
        (TLS, a content coding)."""
        if not self._conn.plain or self._closed:
            return False
        return (self.header(b"content-encoding") or b"").strip().lower() in (b"", b"identity")

    def hand_over(self) -> tuple[int, ResponseParser, bytes, bool] | None:
        """For the core's relay to read the rest of the body itself: (the connection's
        descriptor, the body's framing, the body bytes read with the head, whether the body
        ended with them). None when it is not `handable`."""
        if not self.handable:
            return None
        first, self._pending = self._pending, b""
        return self._conn.sock.fileno(), self._parser, first, self._done

    def taken_back(self) -> None:
        """The relay gave the body back: `_parser` says where it stopped."""
        self._done = self._parser.done

    async def read(self, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while chunk := await self.receive_chunk():
            size += len(chunk)
            if size > limit:
                raise fail("upstream_response_too_large", "the upstream response is too large")
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if (
            self._done
            # Not after Transfer-Encoding beside Content-Length (the core's rule): read by its
            # chunks, but the upstream may have meant the length, leaving bytes behind.
            and self._parser.reusable
            and not self._conn.interrupted
            and self._pool._checkin(self._conn)
        ):
            return
        await self._pool._discard(self._conn)


def retry_after_s(value: bytes | None) -> float | None:
    """A Retry-After header's wait (delay-seconds or an HTTP date), at most
    MAX_RETRY_AFTER_S; None when absent or unreadable."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_S)
    import email.utils  # a date here is rare; the email package is 0.3 MiB of every start

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return min(max(0.0, when.timestamp() - time.time()), MAX_RETRY_AFTER_S)
