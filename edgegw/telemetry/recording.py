"""Telemetry: the gateway's own Prometheus metrics, the OTLP metrics push endpoint
(POST /v1/metrics) that adds to them, and the scrape server on TELEMETRY_METRICS_PORT.

The instruments are in edgegw/telemetry/instruments.py (names and buckets as in inference-gateway,
bounded label cardinality), the push rules in edgegw/telemetry/otlp.py.

The scrape server answers `GET /metrics` (and HEAD) with the exposition text (OpenMetrics
when the scraper asks for it), 404 for any other path. It binds `SERVER_HOST` (default
127.0.0.1), not every interface as inference-gateway does: metrics name providers, models
and teams, so exposing them is an explicit choice (`SERVER_HOST=0.0.0.0`).
"""

from __future__ import annotations

import gzip
import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

import h11
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from edgegw._core import (
    OTLP_MAX_DECODED_BYTES,
    decode_otlp_metrics,
    gunzip_capped,
)
from edgegw.settings import Settings
from edgegw.telemetry.instruments import (
    MAX_SERIES,
    Counter,
    Histogram,
    Snapshot,
    labels,
    open_instruments,
)
from edgegw.telemetry.otlp import Resource, decode_json

log = logging.getLogger("edgegw.telemetry")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# Bodies larger than this are gunzipped / decoded in a worker thread (the Rust side
# releases the GIL), so a 4 MiB push does not stall the event loop.
OFFLOAD_BYTES = 64 * 1024
# Worker threads decoding pushes or rendering scrapes at once: the machines have two cores.
WORKER_THREADS = 2

# Scrape server limits. A scrape request is a request line and a few headers.
MAX_SCRAPE_HEAD_BYTES = 16 * 1024
MAX_SCRAPE_BODY_BYTES = 64 * 1024
MAX_SCRAPE_CONNECTIONS = 64
# One request cycle (waiting for it on a kept-alive connection, reading it, writing the
# answer) must finish in this time, else the connection is closed: inference-gateway's
# metrics server uses 10 s read/write and 30 s idle timeouts.
SCRAPE_CYCLE_TIMEOUT_S = 30.0
RECEIVE_BYTES = 64 * 1024

T = TypeVar("T")


class Telemetry:
    """Process-wide metrics; created by serve() and passed to the app."""

    def __init__(self, settings: Settings, *, max_series: int = MAX_SERIES) -> None:
        self.settings = settings
        self.registry = CollectorRegistry(auto_describe=False)
        # OTel name -> instrument.
        self.instruments = open_instruments(self.registry, max_series)
        # The scrape server's port once it listens (useful with TELEMETRY_METRICS_PORT=0).
        self.metrics_port: int | None = None
        self._scrape_connections = 0
        self._worker_limiter = trio.CapacityLimiter(WORKER_THREADS)

    @property
    def push_enabled(self) -> bool:
        return self.settings.telemetry_enabled and self.settings.telemetry_metrics_push_enabled

    # --- the gateway's own traffic --------------------------------------------------

    def record_generation(
        self,
        *,
        provider: str,
        model: str,
        status: int,
        duration_s: float,
        ttft_s: float | None,
        usage: dict[str, Any] | None,
        tool_calls: list[str],
        operation: str = "chat",
    ) -> None:
        """One finished chat/completions request, as the gateway saw it (source="gateway",
        team="unknown"). `model` is recorded as gen_ai_request_model; `usage` is the
        provider's usage object (OpenAI's prompt/completion_tokens or Anthropic's
        input/output_tokens); `tool_calls` the names of the tools the model called."""
        if not self.settings.telemetry_enabled:
            return
        base = {
            "source": "gateway",
            "team": "unknown",
            "gen_ai_operation_name": operation,
            "gen_ai_provider_name": provider,
            "gen_ai_request_model": model,
        }
        failed = {**base, "error_type": str(status)} if status >= 400 else base
        self._histogram("gen_ai.server.request.duration").observe(labels(failed), duration_s)
        if ttft_s is not None and math.isfinite(ttft_s) and ttft_s >= 0:
            self._histogram("gen_ai.server.time_to_first_token").observe(labels(base), ttft_s)
        if usage is not None:
            tokens = self._histogram("gen_ai.client.token.usage")
            for token_type, keys in (
                ("input", ("prompt_tokens", "input_tokens")),
                ("output", ("completion_tokens", "output_tokens")),
            ):
                n = next((usage[k] for k in keys if k in usage), None)
                if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                    tokens.observe(labels({**base, "gen_ai_token_type": token_type}), n)
        calls = self.instruments["inference_gateway.tool_calls"]
        assert isinstance(calls, Counter)
        for name in tool_calls:
            key = labels(
                {**base, "gen_ai_tool_name": name, "gen_ai_tool_type": "standard_tool_use"}
            )
            calls.inc(key)

    def _histogram(self, otel_name: str) -> Histogram:
        family = self.instruments[otel_name]
        assert isinstance(family, Histogram)
        return family

    # --- pushes -----------------------------------------------------------------------

    async def decode_push(self, body: bytes, *, gzip: bool, as_json: bool) -> list[Resource]:
        """A pushed body (gunzipped under the 4 MiB cap) in the shape of edgegw/telemetry/otlp.py."""
        if gzip:
            if len(body) > OFFLOAD_BYTES:
                body = await self._offload(gunzip_capped, body, OTLP_MAX_DECODED_BYTES)
            else:
                body = gunzip_capped(body, OTLP_MAX_DECODED_BYTES)
        if as_json:
            return decode_json(body)  # orjson holds the GIL: a thread would not help
        if len(body) > OFFLOAD_BYTES:
            return await self._offload(decode_otlp_metrics, body)
        return decode_otlp_metrics(body)

    async def _offload(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._worker_limiter)

    # --- the scrape server ------------------------------------------------------------

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """(body, content type) of the metrics, in the format `accept` asks for."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    async def render_scrape(self, accept: str, gzip_ok: bool) -> tuple[bytes, str, bool]:
        """(body, content type, gzipped): a snapshot taken here, rendered (and gzipped
        when the scraper accepts it) in a worker thread, so the event loop keeps going."""
        encoder, content_type = choose_encoder(accept)
        snapshot = Snapshot(self.instruments.values())

        def render() -> bytes:
            body = encoder(snapshot)
            return gzip.compress(body, compresslevel=1) if gzip_ok else body

        body = await trio.to_thread.run_sync(render, limiter=self._worker_limiter)
        return body, content_type, gzip_ok

    async def serve_metrics(
        self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve Prometheus text at /metrics on TELEMETRY_METRICS_PORT (SERVER_HOST) until
        cancelled; task_status.started(port) once listening."""
        listeners = await trio.open_tcp_listeners(
            self.settings.telemetry_metrics_port, host=self.settings.host
        )
        self.metrics_port = listeners[0].socket.getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.settings.host, self.metrics_port)
        task_status.started(self.metrics_port)
        await trio.serve_listeners(self._serve_scrapes, listeners)

    async def _serve_scrapes(self, stream: trio.SocketStream) -> None:
        if self._scrape_connections >= MAX_SCRAPE_CONNECTIONS:
            await stream.aclose()
            return
        self._scrape_connections += 1
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_SCRAPE_HEAD_BYTES)
        try:
            while True:
                with trio.move_on_after(SCRAPE_CYCLE_TIMEOUT_S):
                    if await self._answer_scrape(stream, conn):
                        conn.start_next_cycle()
                        continue
                return
        except h11.RemoteProtocolError as exc:
            await _send_quietly(stream, conn, _plain(exc.error_status_hint, b"bad request\n"))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            log.exception("metrics server: unexpected error, closing the connection")
        finally:
            self._scrape_connections -= 1
            await stream.aclose()

    async def _answer_scrape(self, stream: trio.SocketStream, conn: h11.Connection) -> bool:
        """Read one request and answer it; whether the connection can serve another."""
        request = await _next_event(stream, conn)
        if not isinstance(request, h11.Request):
            return False
        size = 0
        while not isinstance(event := await _next_event(stream, conn), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_SCRAPE_BODY_BYTES:
                    await _send_quietly(stream, conn, _plain(413, b"request body too large\n"))
                    return False
        path = request.target.partition(b"?")[0]
        if path != b"/metrics":
            reply = _plain(404, b"not found\n")
        elif request.method not in (b"GET", b"HEAD"):
            reply = _plain(405, b"method not allowed\n", ((b"allow", b"GET, HEAD"),))
        else:
            accept = b", ".join(v for k, v in request.headers if k == b"accept")
            encodings = b", ".join(v for k, v in request.headers if k == b"accept-encoding")
            body, content_type, gzipped = await self.render_scrape(
                accept.decode("latin-1"), b"gzip" in encodings.lower()
            )
            headers = [(b"content-type", content_type.encode("latin-1"))]
            if gzipped:
                headers.append((b"content-encoding", b"gzip"))
            reply = (200, headers, body)
        status, headers, body = reply
        headers = [*headers, (b"content-length", b"%d" % len(body))]
        out = conn.send(h11.Response(status_code=status, headers=headers)) or b""
        if request.method != b"HEAD":
            out += conn.send(h11.Data(data=body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(out)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE


_Reply = tuple[int, list[tuple[bytes, bytes]], bytes]


def _plain(status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> _Reply:
    return status, [(b"content-type", b"text/plain; charset=utf-8"), *extra], body


async def _next_event(stream: trio.SocketStream, conn: h11.Connection) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(RECEIVE_BYTES))


async def _send_quietly(stream: trio.SocketStream, conn: h11.Connection, reply: _Reply) -> None:
    """Best-effort answer on a connection about to close."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    status, headers, body = reply
    headers = [*headers, (b"content-length", b"%d" % len(body)), (b"connection", b"close")]
    try:
        await stream.send_all(
            (conn.send(h11.Response(status_code=status, headers=headers)) or b"")
            + (conn.send(h11.Data(data=body)) or b"")
            + (conn.send(h11.EndOfMessage()) or b"")
        )
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        pass
