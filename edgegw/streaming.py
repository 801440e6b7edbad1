"""Relaying one request to an upstream and its answer back to the client.

Each exchange runs in its own nursery with a watcher blocked in `receive()`: Hypercorn
reports a client that went away only as `http.disconnect` there (its `send()` never
raises), so the watcher cancels the scope and the cancellation closes the upstream
connection. Timeouts are cancel scopes: the response head within `first_byte_timeout_s`,
then no silence longer than `idle_timeout_s`.

Streams are relayed as the upstream's bytes, unchanged, and only *tapped* through the
Rust `SseSplitter` (usage, `[DONE]`). After the SSE head is sent the status cannot
change: a failure then ends the stream with an SSE error event and no `[DONE]`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import trio

from edgegw._core import RequestError, SseSplitter
from edgegw.errors import GatewayError, envelope
from edgegw.settings import Settings
from edgegw.upstream import Headers, Origin, Response, UpstreamPool

log = logging.getLogger("edgegw.streaming")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

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
    done: bool = False
    events: int = 0
    error: str | None = None
    client_gone: bool = False


async def _watch_disconnect(receive: Receive, scope: trio.CancelScope, outcome: StreamOutcome) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            outcome.client_gone = True
            scope.cancel()
            return


async def forward(
    settings: Settings, pool: UpstreamPool, receive: Receive, send: Send, ex: Exchange
) -> StreamOutcome:
    """Non-streaming: the upstream's 2xx body as it was sent, or its error in the envelope."""
    outcome = StreamOutcome()
    failure: GatewayError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_disconnect, receive, nursery.cancel_scope, outcome)
        try:
            resp = await _open(settings, pool, ex)
            try:
                with trio.fail_after(settings.idle_timeout_s):
                    payload = await resp.read(settings.max_response_bytes)
            except trio.TooSlowError:
                raise GatewayError(504, "upstream_timeout", "the upstream stopped sending its response") from None
            finally:
                await resp.aclose()
        except GatewayError as e:  # raised out of the nursery it would come wrapped in a group
            failure = e
        nursery.cancel_scope.cancel()
    if outcome.client_gone:
        return outcome
    if failure is not None:
        raise failure
    if not 200 <= resp.status < 300:
        raise upstream_error(resp.status, resp.headers, payload)
    if b'"usage"' in payload:
        outcome.usage = _usage_of(payload)
    headers = [(b"content-type", resp.header(b"content-type") or b"application/json")]
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
    settings: Settings, pool: UpstreamPool, receive: Receive, send: Send, ex: Exchange
) -> StreamOutcome:
    """Streaming: relay the upstream's SSE bytes as they arrive, tapping them for usage."""
    outcome = StreamOutcome()
    failure: GatewayError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_disconnect, receive, nursery.cancel_scope, outcome)
        try:
            resp = await _open(settings, pool, ex)
            try:
                if not 200 <= resp.status < 300:
                    try:
                        with trio.fail_after(settings.idle_timeout_s):
                            payload = await resp.read(1 << 20)
                    except (trio.TooSlowError, GatewayError):
                        payload = b""
                    raise upstream_error(resp.status, resp.headers, payload)
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                await _pump(settings, resp, send, outcome)
            finally:
                await resp.aclose()
        except GatewayError as e:  # only ever before the SSE head: _pump reports its own
            failure = e
        nursery.cancel_scope.cancel()
    if failure is not None and not outcome.client_gone:
        raise failure
    return outcome


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
                elif b'"usage"' in event.data:
                    usage = _usage_of(event.data)
                    if usage is not None:
                        outcome.usage = usage
        except RequestError as e:
            await _end_with_error(send, outcome, e.code, str(e))
            return
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    if splitter.finish() and not outcome.done:
        await _end_with_error(send, outcome, "upstream_stream_truncated", "the upstream stream ended mid-event")
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _end_with_error(send: Send, outcome: StreamOutcome, code: str, message: str) -> None:
    """The final event of a failed stream: an error, then the end, and no [DONE]."""
    outcome.error = code
    event = b"data: " + envelope(message, "upstream_error", None, code) + b"\n\n"
    await send({"type": "http.response.body", "body": event, "more_body": False})


def _usage_of(payload: bytes) -> dict[str, Any] | None:
    try:
        usage = orjson.loads(payload).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None


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
