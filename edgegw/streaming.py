"""Relaying one request to an upstream and its answer back to the client.

Each exchange runs in a cancel scope registered with the `DisconnectWatch`: Hypercorn
reports a client that went away only as `http.disconnect` from `receive()` (its `send()`
never raises), so a watcher task blocked in `receive()` cancels the scope, and the
cancellation closes the upstream connection. Most requests finish in milliseconds, so
watchers are not spawned per request: a sweeper started by `serve()` gives one to every
exchange still running after `WATCH_DELAY_S`. A disconnect is therefore acted on within
2 x WATCH_DELAY_S, and a fast request pays a dict insert instead of a nursery and a task
(about 35 µs of CPU on the reference machine; bench/README.md).
Timeouts are cancel scopes: the response head within `first_byte_timeout_s`, then no
silence longer than `idle_timeout_s`.

Streams are relayed as the upstream's bytes, unchanged, and only *tapped* through the
Rust `SseSplitter` (usage, `[DONE]`). After the SSE head is sent the status cannot
change: a failure then ends the stream with an SSE error event and no `[DONE]`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from edgegw._core import RequestError, SseSplitter
from edgegw.asgi import Receive, Send
from edgegw.errors import GatewayError, envelope
from edgegw.settings import Settings
from edgegw.upstream import Headers, Origin, Response, UpstreamPool

log = logging.getLogger("edgegw.streaming")


SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
# Upstream error messages are relayed, but never at any length.
MAX_UPSTREAM_MESSAGE = 2000


@dataclass(slots=True)
class Exchange:
    """One upstream call, as the handlers describe it."""

    origin: Origin
    target: bytes
    headers: Headers
    body: bytes
    method: bytes = b"POST"


@dataclass(slots=True)
class StreamOutcome:
    """What the tap saw: for metrics and logs."""

    usage: dict[str, Any] | None = None
    # trio.current_time() when the first body bytes went to the client (time to first token).
    first_chunk_at: float | None = None
    tool_calls: list[str] = field(default_factory=list)
    head_sent: bool = False
    ended: bool = False
    done: bool = False
    events: int = 0
    error: str | None = None
    client_gone: bool = False


WATCH_DELAY_S = 0.25


class Watched:
    """One exchange under watch: its cancel scope, and whether the client went away."""

    __slots__ = ("receive", "scope", "started", "watcher", "client_gone", "drained")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.scope = trio.CancelScope()
        self.started = trio.current_time()
        self.watcher: trio.CancelScope | None = None
        self.client_gone = False
        # Cut short because the drain time of a shutdown ran out.
        self.drained = False


class DisconnectWatch:
    """Turns a client's `http.disconnect` into cancelling its exchange (see module doc)."""

    def __init__(self, delay_s: float = WATCH_DELAY_S) -> None:
        self.delay_s = delay_s
        self._active: dict[int, Watched] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(self.delay_s)
                horizon = trio.current_time() - self.delay_s
                for w in list(self._active.values()):
                    if w.watcher is None and w.started <= horizon:
                        w.watcher = trio.CancelScope()
                        nursery.start_soon(self._watch, w)

    @staticmethod
    async def _watch(w: Watched) -> None:
        assert w.watcher is not None
        with w.watcher:
            while True:
                message = await w.receive()
                if message["type"] == "http.disconnect":
                    w.client_gone = True
                    w.scope.cancel()
                    return

    def register(self, receive: Receive) -> Watched:
        w = Watched(receive)
        if self._nursery is None:
            raise RuntimeError("DisconnectWatch.run() is not running")
        self._active[id(w)] = w
        return w

    def drain_all(self) -> int:
        """End every exchange still running (the shutdown's drain time is over)."""
        active = list(self._active.values())
        for w in active:
            w.drained = True
            w.scope.cancel()
        return len(active)

    def release(self, w: Watched) -> None:
        del self._active[id(w)]
        if w.watcher is not None:
            w.watcher.cancel()


async def forward(
    settings: Settings,
    watch: DisconnectWatch,
    pool: UpstreamPool,
    receive: Receive,
    send: Send,
    ex: Exchange,
    *,
    raw_errors: bool = False,
    response_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> StreamOutcome:
    """Non-streaming: the upstream's 2xx body as it was sent, or its error in the envelope
    (as the upstream sent it, with `raw_errors`)."""
    outcome = StreamOutcome()
    w = watch.register(receive)
    # One scope carries both the disconnect and the time limits (head, then body): a
    # cancellation without a disconnect is a timeout.
    w.scope.deadline = trio.current_time() + settings.first_byte_timeout_s
    try:
        with w.scope:
            resp = await pool.send(ex.origin, ex.method, ex.target, ex.headers, ex.body)
            try:
                w.scope.deadline = trio.current_time() + settings.idle_timeout_s
                payload = await resp.read(settings.max_response_bytes)
            finally:
                await resp.aclose()
    finally:
        watch.release(w)
    if w.drained:
        raise GatewayError(
            503,
            "shutting_down",
            "The gateway is shutting down.",
            type="server_error",
            headers=((b"connection", b"close"),),
        )
    if w.scope.cancelled_caught and not w.client_gone:
        raise GatewayError(504, "upstream_timeout", "the upstream did not answer in time")
    if w.client_gone:
        outcome.client_gone = True
        return outcome
    if not 200 <= resp.status < 300 and not raw_errors:
        raise upstream_error(resp.status, resp.headers, payload)
    if b'"usage"' in payload or b'"tool_calls"' in payload:
        _tap(payload, outcome, "message")
    headers = [
        (b"content-type", resp.header(b"content-type") or b"application/json"),
        (b"content-length", b"%d" % len(payload)),
    ]
    if raw_errors and resp.status in (429, 503) and (retry := resp.header(b"retry-after")):
        headers.append((b"retry-after", retry))
    headers += response_headers
    await send({"type": "http.response.start", "status": resp.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
    return outcome


async def _open(settings: Settings, pool: UpstreamPool, ex: Exchange) -> Response:
    try:
        with trio.fail_after(settings.first_byte_timeout_s):
            return await pool.send(ex.origin, ex.method, ex.target, ex.headers, ex.body)
    except trio.TooSlowError:
        raise GatewayError(504, "upstream_timeout", "the upstream did not answer in time") from None


async def relay_sse(
    settings: Settings,
    watch: DisconnectWatch,
    pool: UpstreamPool,
    receive: Receive,
    send: Send,
    ex: Exchange,
    *,
    raw_errors: bool = False,
    response_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> StreamOutcome:
    """Streaming: relay the upstream's SSE bytes as they arrive, tapping them for usage.
    An upstream error before the stream is answered in the envelope (as the upstream sent
    it, with `raw_errors`)."""
    outcome = StreamOutcome()
    w = watch.register(receive)
    try:
        with w.scope:
            resp = await _open(settings, pool, ex)
            try:
                if not 200 <= resp.status < 300:
                    try:
                        with trio.fail_after(settings.idle_timeout_s):
                            payload = await resp.read(1 << 20)
                    except (trio.TooSlowError, GatewayError):
                        payload = b""
                    if not raw_errors:
                        raise upstream_error(resp.status, resp.headers, payload)
                    await _send_raw(send, resp.status, resp.headers, payload)
                    return outcome
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [*SSE_HEADERS, *response_headers]
                        if response_headers
                        else SSE_HEADERS,
                    }
                )
                outcome.head_sent = True
                try:
                    await _pump(settings, resp, send, outcome)
                except Exception:
                    # The head is out: the only honest end left is an error event.
                    log.exception("stream relay failed")
                    await _end_with_error(send, outcome, "internal_error", "internal error")
            finally:
                await resp.aclose()
    finally:
        watch.release(w)
    outcome.client_gone = w.client_gone
    if w.drained and not w.client_gone:
        if outcome.head_sent and not outcome.ended:
            await _end_with_error(send, outcome, "shutting_down", "the gateway is shutting down")
        elif not outcome.head_sent:
            raise GatewayError(
                503,
                "shutting_down",
                "The gateway is shutting down.",
                type="server_error",
                headers=((b"connection", b"close"),),
            )
    return outcome


async def _send_raw(send: Send, status: int, headers: Headers, payload: bytes) -> None:
    keep = [(k, v) for k, v in headers if k in (b"content-type", b"retry-after")]
    keep.append((b"content-length", b"%d" % len(payload)))
    await send({"type": "http.response.start", "status": status, "headers": keep})
    await send({"type": "http.response.body", "body": payload})


async def _pump(settings: Settings, resp: Response, send: Send, outcome: StreamOutcome) -> None:
    splitter = SseSplitter()
    idle = settings.idle_timeout_s
    while True:
        try:
            with trio.fail_after(idle):
                chunk = await resp.receive_chunk()
        except trio.TooSlowError:
            await _end_with_error(send, outcome, "upstream_timeout", "the upstream stream stalled")
            return
        except GatewayError as e:
            await _end_with_error(send, outcome, e.code, e.message)
            return
        if not chunk:
            break
        try:
            for event in splitter.feed(chunk):
                outcome.events += 1
                if event.is_done:
                    outcome.done = True
                elif _has_usage(event.data) or b'"tool_calls"' in event.data:
                    _tap(event.data, outcome, "delta")
        except RequestError as e:
            await _end_with_error(send, outcome, e.code, str(e))
            return
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if outcome.first_chunk_at is None:
            outcome.first_chunk_at = trio.current_time()
    if splitter.finish() and not outcome.done:
        await _end_with_error(
            send, outcome, "upstream_stream_truncated", "the upstream stream ended mid-event"
        )
        return
    outcome.ended = True
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _end_with_error(send: Send, outcome: StreamOutcome, code: str, message: str) -> None:
    """The final event of a failed stream: an error, then the end, and no [DONE]."""
    outcome.error = code
    outcome.ended = True
    event = b"data: " + envelope(message, "upstream_error", None, code) + b"\n\n"
    await send({"type": "http.response.body", "body": event, "more_body": False})


def _has_usage(data: bytes) -> bool:
    # Many providers send `"usage":null` on every chunk; only a real object is worth parsing.
    return b'"usage":' in data and b'"usage":null' not in data


def _tap(data: bytes, outcome: StreamOutcome, part: str) -> None:
    """Usage and tool-call names from a stream chunk (`part` "delta") or a whole
    non-streaming answer (`part` "message")."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    if not isinstance(doc, dict):
        return
    usage = doc.get("usage")
    if isinstance(usage, dict):
        outcome.usage = usage
    for choice in doc.get("choices") or ():
        _collect_tool_calls(choice.get(part) if isinstance(choice, dict) else None, outcome)


def _collect_tool_calls(message: object, outcome: StreamOutcome) -> None:
    if not isinstance(message, dict):
        return
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name:  # streamed calls name the function once
            outcome.tool_calls.append(name)


def upstream_error(status: int, headers: Headers, payload: bytes) -> GatewayError:
    """An upstream's error answer in the envelope, keeping its status (and Retry-After)."""
    message, type_, param, code = f"the upstream answered with status {status}", None, None, None
    try:
        doc = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, str):
            message = err
        elif isinstance(err, dict):
            if isinstance(err.get("message"), str):
                message = err["message"]
            if isinstance(err.get("type"), str):
                type_ = err["type"]
            if isinstance(err.get("param"), str):
                param = err["param"]
            if isinstance(err.get("code"), str):
                code = err["code"]
    extra: tuple[tuple[bytes, bytes], ...] = ()
    if status in (429, 503):
        extra = tuple((b"retry-after", v) for k, v in headers if k.lower() == b"retry-after")[:1]
    if not 400 <= status <= 599:
        status = 502
    return GatewayError(
        status,
        code or "upstream_error",
        message[:MAX_UPSTREAM_MESSAGE],
        type=type_,
        param=param,
        headers=extra,
    )
