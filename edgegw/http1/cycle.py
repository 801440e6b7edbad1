"""One request on a connection, as the ASGI app sees it: its scope, `receive` and `send`,
run in the connection's own task (no task per request).

- `receive()` returns `http.request` messages (`more_body` as the body arrives, under the
  body idle and total deadlines; `100 Continue` goes out when the client waits for it).
  Once the body is delivered, it reads the socket only to notice the client going away,
  and returns `http.disconnect` then and only then (EOF or reset); bytes of a pipelined
  next request are kept for later. When the request is over, a `receive()` still blocked
  (the DisconnectWatch watcher, say) stops reading and waits until the connection ends.
  `whole_body()` hands over at once a body that came with its head (edgegw.asgi).
- `send()` frames the answer itself (Content-Length as the app gave it, else chunked for
  HTTP/1.1, else to the end of the connection for HTTP/1.0; none for HEAD, 204, 304); a
  whole answer (Content-Length known) leaves in one write with its head, and `respond()`
  takes one in a single step, without the two messages. The head is parsed
  once, by the Rust screen (`HeadInfo`), and the body framed by the core's `RequestBody`;
  neither side runs h11's state machine (bench/README.md has what it cost). Keep-alive
  follows h11's rule: HTTP/1.1, and no `Connection: close` from either side.
- A write that makes no progress for `write_stall_timeout_s` closes the connection and cancels
  the request's scope, so its upstream exchange is cancelled too. After the client went
  away `send()` does nothing, as Hypercorn's, and `receive()` reports the disconnect.
- A body deadline or a malformed body cancels the app's call the same way; the layer
  then answers 408 / 400 itself if the app had not started its response.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol
from urllib.parse import unquote

import trio

from edgegw._core import HeadInfo, RequestBody, RequestError, response_head
from edgegw.http1.limits import ConnectionLimits
from edgegw.http1.wire import REASONS, Wire

log = logging.getLogger("edgegw.http1")

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
ASGI = {"version": "3.0", "spec_version": "2.3"}
DISCONNECT = {"type": "http.disconnect"}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# The scope key of the status the layer answers with itself after cancelling the app.
ANSWERED_BY_SERVER = "edgegw.answered_by_server"
# The scope key of the cycle itself, for a relay that writes the answer's body to the socket
# directly (edgegw.asgi.Call.direct); removed when the request ends.
DIRECT = "edgegw.direct"


class Host(Protocol):
    """What a request needs of the server it arrived on."""

    app: App
    limits: ConnectionLimits
    local: Any
    scheme: str
    draining: bool


class ResponseState(enum.Enum):
    PENDING = "pending"  # no http.response.start yet
    HEAD_HELD = "head_held"  # head built, to leave with the first body bytes
    SENDING = "sending"  # head written, body under way
    COMPLETE = "complete"


class Framing(enum.Enum):
    """How the response body is delimited."""

    LENGTH = "content-length"
    CHUNKED = "chunked"
    CLOSE = "close"  # to an HTTP/1.0 client without a Content-Length
    NONE = "none"  # HEAD, 204, 304


# Members as globals: CPython 3.11 reads `Framing.NONE` via EnumType.__getattr__ (bench/README.md).
PENDING, HEAD_HELD = ResponseState.PENDING, ResponseState.HEAD_HELD
SENDING, COMPLETE = ResponseState.SENDING, ResponseState.COMPLETE
LENGTH, CHUNKED, CLOSE, NO_BODY = Framing.LENGTH, Framing.CHUNKED, Framing.CLOSE, Framing.NONE
_FRAMINGS = (LENGTH, CHUNKED, CLOSE, NO_BODY)  # the core's framing numbers (rust/src/respond.rs)
_UNDER_WAY = (SENDING, HEAD_HELD)
Pairs = Sequence[tuple[bytes, bytes]]


class Cycle:
    __slots__ = (
        "wire",
        "host",
        "framing_in",
        "scope",
        "is_head",
        "pending",
        "body_done",
        "delivered",
        "body_deadline",
        "response",
        "framing",
        "remaining",
        "keep_alive",
        "awaits_continue",
        "continue_sent",
        "held",
        "hold_head",
        "requests",
        "failure",
        "over",
        "reader_active",
        "read_scope",
        "reader_exit",
    )

    def __init__(
        self, wire: Wire, host: Host, client: Any, head: HeadInfo, requests: trio.CancelScope
    ) -> None:
        self.wire = wire
        self.host = host
        self.framing_in = RequestBody(head.content_length, head.chunked)
        target = head.target
        query = b""
        if target[:1] != b"/" and target != b"*":  # absolute form: keep the path only
            slash = target.find(b"/", target.find(b"//") + 2)
            target = target[slash:] if slash >= 0 else b"/"
        q = target.find(b"?")
        if q >= 0:
            target, query = target[:q], target[q + 1 :]
        headers = head.headers  # lower-cased names
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": ASGI,
            "http_version": head.http_version.decode(),
            "method": head.method.decode(),
            "scheme": host.scheme,
            "path": unquote(path) if "%" in (path := target.decode("ascii")) else path,
            "raw_path": target,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": client,
            "server": host.local,
        }
        self.is_head = head.method == b"HEAD"
        self.pending: list[bytes] = []
        self.body_done = self.framing_in.done  # the whole body is framed
        self.delivered = False  # ... and the app has received all of it
        self.body_deadline = math.inf  # set by `start` when the body is still to come
        self.response = PENDING
        self.framing = NO_BODY
        self.remaining = 0  # Content-Length bytes still to send
        # HTTP/1.1 without `Connection: close` (h11's rule: HTTP/1.0 always closes; the
        # screen's keep_alive is RFC 9112's, which keeps a 1.0 `keep-alive` one open).
        self.keep_alive = head.keep_alive and head.http_version == b"1.1"
        # RFC 9110 §10.1.1: the client waits for 100 Continue until it sends body bytes.
        self.awaits_continue = head.expect_continue and not self.body_done
        self.continue_sent = False
        self.held = b""
        self.hold_head = False  # a chunked head waits for the core's relay to write it
        self.requests = requests  # the connection's; only `_fail` and `_stalled` cancel it
        self.failure: tuple[int, str, str] | None = None
        self.over = False
        self.reader_active = False
        self.read_scope: trio.CancelScope | None = None
        self.reader_exit: trio.Event | None = None

    @classmethod
    def start(
        cls, wire: Wire, host: Host, client: Any, head: HeadInfo, requests: trio.CancelScope
    ) -> Cycle:
        """The cycle of a screened head, fed the body bytes that came with it;
        RequestError if they break the body's framing. `requests`: the scope the connection
        serves its requests in, which this request cancels when its body fails or a write
        stalls (no scope of its own: one fewer a request, bench/README.md)."""
        cycle = cls(wire, host, client, head, requests)
        if wire.buf:
            data = bytes(wire.buf)
            wire.buf.clear()
            cycle._frame(data)
        if not cycle.body_done:  # a body that came whole with its head needs no clock
            cycle.body_deadline = trio.current_time() + host.limits.body_timeout_s
        return cycle

    def _frame(self, data: bytes) -> None:
        """Frame body bytes into `pending`; past the body's end they are the next request's."""
        self.awaits_continue = False
        framing = self.framing_in
        feed = framing.feed(data)
        if feed.body:
            self.pending.append(feed.body)
        if framing.done:
            self.body_done = True
            extra = framing.take_trailing()
            if extra:
                self.wire.buf += extra

    # -- running the app ----------------------------------------------------------------

    async def run(self) -> bool:
        """Run the app for this request; True when the connection may serve another. When
        the request cancelled the connection's scope, the Cancelled leaves through here and
        the connection calls `settle` outside that scope."""
        app_failed = False
        if type(self.wire) is Wire:  # not TLS: the socket carries the body's bytes as they are
            self.scope[DIRECT] = self
        try:
            await self.host.app(self.scope, self.receive, self.send)
        except Exception:
            log.exception(
                "ASGI application error on %s %s", self.scope["method"], self.scope["path"]
            )
            app_failed = True
        if self.failure is not None or self.wire.stalled:  # an app swallowed its Cancelled
            await trio.lowlevel.checkpoint()
        return await self.settle(app_failed)

    async def settle(self, app_failed: bool = False) -> bool:
        """The request is over: its end, the layer's own answer if it failed; True when the
        connection may serve another."""
        wire = self.wire
        await self._end()
        if self.failure is not None:
            if self.response is PENDING:
                await wire.refuse(*self.failure)
            return False
        if wire.gone:
            return False
        if app_failed or self.response is not COMPLETE:
            if self.response is PENDING:
                await wire.refuse(500, "internal_error", "internal error")
            return False  # a response cut short: closing tells the client so
        wire.linger = True
        if not (self.keep_alive and self.body_done) or self.host.draining:
            return False
        wire.linger = False
        return True

    async def _end(self) -> None:
        """The request is over: a receive() still blocked elsewhere stops reading."""
        self.over = True
        self.scope.pop(DIRECT, None)  # the scope refers to the cycle no longer: no cycle
        if self.reader_active and self.read_scope is not None:
            self.reader_exit = trio.Event()
            self.read_scope.cancel()
            await self.reader_exit.wait()

    async def _fail(self, status: int, code: str, message: str) -> dict[str, Any]:
        """End the request with the layer's answer (408, 400): cancel the app's call, which
        logs and records that status (ANSWERED_BY_SERVER in the scope)."""
        self.failure = (status, code, message)
        self.scope[ANSWERED_BY_SERVER] = status
        self.requests.cancel()
        await trio.lowlevel.checkpoint()  # raises Cancelled in the app
        return DISCONNECT

    # -- ASGI receive -------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        if self.delivered:
            return await self._watch_disconnect()
        wire = self.wire
        limits = self.host.limits
        while not self.pending and not self.body_done:
            if wire.gone:
                return DISCONNECT
            if self.awaits_continue and not self.continue_sent and self.response is PENDING:
                self.continue_sent = True
                await wire.write(CONTINUE)
            data = wire.recv_now()
            if data is None:
                deadline = min(trio.current_time() + limits.body_idle_timeout_s, self.body_deadline)
                with trio.CancelScope(deadline=deadline) as scope:
                    data = await wire.recv()
                if scope.cancelled_caught:
                    return await self._fail(
                        408, "request_timeout", "the request body took too long"
                    )
            else:
                await trio.lowlevel.checkpoint()  # the body is flowing: let others run
            if not data:
                wire.lost()
                return DISCONNECT
            try:
                self._frame(data)
            except RequestError as e:
                return await self._fail(e.status, e.code, str(e))
        return {"type": "http.request", "body": self._take(), "more_body": not self.body_done}

    def whole_body(self) -> bytes | None:
        """The whole request body when it is all framed already (it came with the head, as
        nearly every JSON body does), taken as `receive` would deliver it; None otherwise."""
        return self._take() if self.body_done and not self.delivered else None

    def _take(self) -> bytes:
        """The body bytes framed so far, delivered."""
        pending = self.pending
        body = pending[0] if len(pending) == 1 else b"".join(pending)
        self.pending = []
        self.delivered = self.body_done
        return bytes(body)

    async def _watch_disconnect(self) -> dict[str, Any]:
        """After the body: read only to notice the client going away."""
        wire = self.wire
        if not (self.over or self.reader_active or wire.gone):
            cap = self.host.limits.max_head_bytes
            self.reader_active = True
            try:
                with trio.CancelScope() as scope:
                    self.read_scope = scope
                    while True:
                        if len(wire.buf) >= cap:
                            await trio.sleep_forever()  # enough read ahead: stop reading
                        data = await wire.recv()
                        if not data:
                            wire.lost()
                            return DISCONNECT
                        wire.buf += data  # a pipelined next request, for later
            finally:
                self.reader_active = False
                self.read_scope = None
                if self.reader_exit is not None:
                    self.reader_exit.set()
        await wire.ended.wait()
        return DISCONNECT

    # -- ASGI send ----------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            out = self._body(message.get("body", b""), message.get("more_body", False))
        elif kind == "http.response.start":
            out = self._start(message["status"], message.get("headers", ()))
        else:
            return
        if out:
            await self._write(out)

    async def respond(self, status: int, headers: Pairs, body: bytes) -> None:
        """A whole answer, its start and its one body message in one step and one write:
        `send`'s work without the two messages (edgegw.asgi.Call.respond)."""
        if out := self._start(status, headers) + self._body(body, False):
            await self._write(out)

    def _start(self, status: int, headers: Pairs) -> bytes:
        """http.response.start: the head, checked and framed; what to write now (b"" when
        the head is held for the body's first bytes)."""
        if self.response is not PENDING:
            raise RuntimeError("http.response.start sent twice")
        # Checked, scanned for the framing and written by the core (rust/src/respond.rs).
        head, framed, length, self.keep_alive = response_head(
            status,
            REASONS.get(status, b""),
            headers,
            self.scope["http_version"] == "1.1",
            self.is_head,
            self.keep_alive and self.body_done and not self.host.draining,
        )
        self.framing = _FRAMINGS[framed]
        if length is not None:
            self.remaining = length
        elif not (self.hold_head and self.framing is CHUNKED):
            self.response = SENDING
            return head
        self.held = head
        self.response = HEAD_HELD
        return b""

    def _body(self, body: bytes, more: bool) -> bytes:
        """http.response.body: its bytes framed, after a held head; what to write now."""
        state = self.response
        if state is COMPLETE:
            return b""
        if state is PENDING:
            raise RuntimeError("http.response.body before http.response.start")
        out = self.held
        self.held = b""
        framing = self.framing
        if body:
            if framing is CHUNKED:
                body = b"%x\r\n%b\r\n" % (len(body), body)
            elif framing is LENGTH:
                self.remaining -= len(body)
                if self.remaining < 0:
                    raise RuntimeError("response body longer than its Content-Length")
            elif framing is NO_BODY:
                body = b""
            out = out + body if out else body
        if more:
            self.response = SENDING
        else:
            self.response = COMPLETE
            if framing is CHUNKED:
                out += b"0\r\n\r\n"
            elif framing is LENGTH and self.remaining:
                self.keep_alive = False  # cut short: only closing can tell the client
        return out

    # -- the body written by the core's relay (edgegw.handoff) ------------------------------

    def direct_hold_head(self) -> None:
        """The answer's head, when chunked, is held for the relay (`direct_head`)."""
        self.hold_head = True

    def direct_fd(self) -> int | None:
        """The socket's descriptor while body bytes may go to it as the relay frames them
        (chunked, the head out or held, the client there); None otherwise."""
        if self.response not in _UNDER_WAY or self.framing is not CHUNKED or self.wire.gone:
            return None
        return self.wire.sock.fileno()

    @property
    def direct_head(self) -> bytes:
        """The held head (b"" when it is out), for the relay to write (`direct_head_taken`)."""
        return self.held

    def direct_head_taken(self) -> None:
        """The relay has the held head: it is out as far as this cycle is concerned."""
        self.held = b""
        if self.response is HEAD_HELD:
            self.response = SENDING

    def direct_ended(self) -> None:
        """The relay wrote the body's end (its terminator)."""
        self.response = COMPLETE

    @property
    def direct_stall_s(self) -> float:
        return self.wire.write_stall_timeout_s

    def direct_gone(self) -> None:
        """A direct write found the client gone."""
        self.wire.lost()

    async def direct_stalled(self) -> None:
        """A direct write made no progress for `direct_stall_s`: as `_write`'s stall."""
        self.wire.stalled = True
        self.wire.lost()
        await self._stalled()

    async def _write(self, data: bytes) -> None:
        wire = self.wire
        if not await wire.write(data) and wire.stalled:
            await self._stalled()

    async def _stalled(self) -> None:
        log.info("a write stalled for %ss: connection closed", self.wire.write_stall_timeout_s)
        self.requests.cancel()
        await trio.lowlevel.checkpoint()  # raises Cancelled in the app
