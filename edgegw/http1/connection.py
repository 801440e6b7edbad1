"""One client connection, served by one task: read a request head (bounded in size and
time), screen and parse it once (the Rust core's head screen), run the ASGI app for it in this same task
(edgegw.http1.cycle), write its answer; again while the connection may be kept alive.

Every answer of this layer itself (400, 408, 431, 501; 500 when the app answered nothing)
is the JSON envelope with `Connection: close`. A connection that sent nothing of a next
request within its deadline (new: header_timeout_s from accept; kept alive:
keepalive_timeout_s) is closed without an answer, as nginx does, so that a client racing
the close never reads a stray 408 as the answer to its next request. The kept-alive waits
are timed by one task of the server (`ServerState.reap_idle`), not by a scope each.
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
from typing import Any

import trio

from edgegw._core import HeadInfo, RequestError, screen_request_head
from edgegw.http1.cycle import App, Cycle
from edgegw.http1.limits import IDLE_SHED_AT, MAX_HANDSHAKES, ConnectionLimits
from edgegw.http1.tls import TlsWire
from edgegw.http1.wire import Wire
from edgegw.upstream import RESUMES

log = logging.getLogger("edgegw.http1")

# The head screen: the Rust core's (rust/src/head.rs; bench/README.md has its cost). The
# head's size was bounded while it was read, so the screen's own bound is only a backstop.
SCREEN_MAX_BYTES = 1 << 24


def SCREEN(head: bytes) -> HeadInfo:  # noqa: N802 (the screen, as a swappable name)
    return screen_request_head(head, SCREEN_MAX_BYTES)


_LEADING_CRLF = re.compile(rb"(?:\r\n)+")
# A line end that is not CRLF: such a head never ends in CRLF CRLF, so it is refused as
# soon as it shows instead of at the head deadline. (A CR last in the buffer may yet be
# followed by its LF.)
_BARE_CR_OR_LF = re.compile(rb"(?<!\r)\n|\r(?=[^\n])")


class ServerState:
    """What every connection shares: the app, the limits, the drain flag, the idle set."""

    def __init__(
        self,
        app: App,
        limits: ConnectionLimits,
        local: Any,
        cap: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        # The run's clock, its own method: trio.current_time() is three Python calls.
        self.now = trio.lowlevel.current_clock().current_time
        self.local = local
        self.cap = cap
        # HTTPS: each connection's TLS (edgegw.http1.tls). Handshakes in progress, oldest
        # first: past MAX_HANDSHAKES a new one ends the oldest, so stalled handshakes can
        # neither pile up nor keep a new client waiting.
        self.tls = tls
        self.scheme = "http" if tls is None else "https"
        self.handshaking: dict[Connection, None] = {}
        self.shed_at = max(1, int(cap * IDLE_SHED_AT))
        self.draining = False
        self.connections: set[Connection] = set()
        # Kept-alive connections waiting for a request, longest-idle first.
        self.idle: dict[Connection, None] = {}
        self.slot_freed: trio.Event | None = None

    async def reap_idle(self) -> None:
        """End every kept-alive connection whose wait for a request passed
        keepalive_timeout_s, the longest-idle first: one task's timer for every connection's
        wait, where a cancel scope for each wait cost ~5 % of a request that began with one
        (bench/README.md)."""
        keepalive = self.limits.keepalive_timeout_s
        idle = self.idle
        while True:
            now = trio.current_time()
            wake = now + keepalive  # a wait that begins from here on ends no sooner
            while idle:
                conn = next(iter(idle))  # in the order they began to wait: the same timeout
                if (due := conn.idle_since + keepalive) > now:
                    wake = due
                    break
                del idle[conn]
                conn.close_if_idle()
            await trio.sleep_until(wake)

    def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.idle.pop(conn, None)
        if self.slot_freed is not None:
            self.slot_freed.set()

    def shed_idle(self) -> bool:
        """Close the longest-idle kept-alive connection; False if there is none."""
        while self.idle:
            conn = next(iter(self.idle))
            del self.idle[conn]
            if conn.close_if_idle():
                return True
        return False

    def begin_drain(self) -> None:
        """A shutdown began: close every connection waiting for a request; the others
        close after their current answer."""
        self.draining = True
        for conn in list(self.connections):
            conn.close_if_idle()


class Connection:
    __slots__ = (
        "server",
        "wire",
        "client",
        "accepted_at",
        "idle_scope",
        "kept_alive",
        "resumes",
        "idle_since",
        "waiting",
    )

    def __init__(self, server: ServerState, sock: socket.socket, client: Any) -> None:
        self.server = server
        stall_s = server.limits.write_stall_timeout_s
        tls = server.tls
        self.wire = Wire(sock, stall_s) if tls is None else TlsWire(sock, stall_s, tls)
        self.client = client
        self.accepted_at = trio.current_time()
        self.idle_scope: trio.CancelScope | None = None  # while nothing of a request came
        self.kept_alive = False  # has served a request
        self.idle_since = 0.0  # when its wait for a next request began
        self.waiting = False  # kept alive and waiting for a request (timed by reap_idle)
        self.resumes = RESUMES.count  # as the last head was read

    async def run(self) -> None:
        wire = self.wire
        server = self.server
        try:
            if isinstance(wire, TlsWire) and not await self._handshake(wire):
                return
            cycle: Cycle | None = None
            # One cancel scope for every request of the connection: a request whose body
            # fails or whose write stalls cancels it, and the connection ends with it.
            with trio.CancelScope() as requests:
                while True:
                    head = await self._read_head()
                    if head is None:
                        return
                    try:
                        info = SCREEN(head)
                    except RequestError as e:
                        await wire.refuse(e.status, e.code, str(e))
                        return
                    try:
                        cycle = Cycle.start(wire, server, self.client, info, requests)
                    except RequestError as e:
                        await wire.refuse(e.status, e.code, str(e))
                        return
                    if not await cycle.run():
                        return
                    # Waiting for the next request, the connection holds nothing of this one:
                    # the cycle (its framing, buffers) and the head went with these names.
                    cycle = None
                    del head, info
                    self.kept_alive = True
            if cycle is not None:  # it cancelled the scope: its end, and its answer, from here
                await cycle.settle()
        except Exception:
            log.exception("connection failed")  # a bug here ends this connection only
        finally:
            try:
                await wire.close()
            finally:
                server.forget(self)

    async def _handshake(self, wire: TlsWire) -> bool:
        """TLS first, within the head's deadline from accept (a handshake is a head's
        first part); closable as idle meanwhile."""
        handshaking = self.server.handshaking
        while len(handshaking) >= MAX_HANDSHAKES:
            oldest = next(iter(handshaking))
            del handshaking[oldest]
            oldest.close_if_idle()
        deadline = self.accepted_at + self.server.limits.header_timeout_s
        handshaking[self] = None
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                self.idle_scope = scope
                done = await wire.handshake()
        finally:
            self.idle_scope = None
            handshaking.pop(self, None)
        return done and not scope.cancelled_caught

    def close_if_idle(self) -> bool:
        """End the connection if it waits for a request with nothing of it received."""
        if self.waiting:  # its read ends as at EOF
            self.waiting = False
            trio.lowlevel.notify_closing(self.wire.sock)
            return True
        if self.idle_scope is None:
            return False
        self.idle_scope.cancel()
        self.idle_scope = None
        return True

    async def _read_head(self) -> bytes | None:
        """The next request head, up to and including its CRLF CRLF, leading empty lines
        dropped; None when the connection should close (idle, EOF, or refused)."""
        wire = self.wire
        limits = self.server.limits
        buf = wire.buf
        if not buf:
            data = wire.recv_now()
            if data is None:
                if self.server.draining:
                    return None
                if self.kept_alive:  # its timeout is reap_idle's
                    self.idle_since = self.server.now()
                    self.server.idle[self] = None
                    self.waiting = True
                    try:
                        data = await wire.recv_later()
                    finally:
                        self.waiting = False
                        self.server.idle.pop(self, None)
                else:
                    first = self.accepted_at + limits.header_timeout_s
                    with trio.CancelScope(deadline=first) as scope:
                        self.idle_scope = scope
                        data = await wire.recv_later()
                    self.idle_scope = None
                    if scope.cancelled_caught:
                        return None
            elif RESUMES.count == self.resumes:  # back-to-back requests, no wait between
                await trio.lowlevel.checkpoint()  # them: let the others run
            if not data:
                return None
            buf += data
        # A kept-alive connection's head has header_timeout_s from its first bytes: taken only
        # when the head is not all in yet, as a whole head (nearly every one) never waits.
        deadline: float | None = (
            None if self.kept_alive else self.accepted_at + limits.header_timeout_s
        )
        cap = limits.max_head_bytes
        scan = 0
        while True:
            if buf[:1] == b"\r" and (m := _LEADING_CRLF.match(buf)) is not None:
                del buf[: m.end()]
                scan = 0
            end = buf.find(b"\r\n\r\n", scan)
            if end >= 0:
                size = end + 4
                if size > cap:
                    break
                head = bytes(buf[:size])
                del buf[:size]
                self.resumes = RESUMES.count
                return head
            if len(buf) >= cap:
                break
            if _BARE_CR_OR_LF.search(buf, max(0, scan - 1)):
                await wire.refuse(400, "invalid_request", "bare CR or LF in the request head")
                return None
            scan = max(0, len(buf) - 3)
            if deadline is None:
                deadline = trio.current_time() + limits.header_timeout_s
            with trio.CancelScope(deadline=deadline) as scope:
                data = await wire.recv()
            if scope.cancelled_caught:
                if buf:
                    await wire.refuse(408, "request_timeout", "the request head took too long")
                return None
            if not data:
                return None
            buf += data
        await wire.refuse(
            431, "request_header_fields_too_large", f"the request head exceeds {cap} bytes"
        )
        return None
