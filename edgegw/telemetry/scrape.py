"""The metrics scrape endpoint: `GET /metrics` (and HEAD) answers the exposition text
(OpenMetrics when the scraper asks for it, gzipped when it accepts gzip), any other path 404,
on an edgegw/plainhttp.py server.

The process's Telemetry serves it on TELEMETRY_METRICS_PORT. The port binds `SERVER_HOST`
(default 127.0.0.1), not every interface as inference-gateway does: metrics name providers,
models and teams, so exposing them is an explicit choice (`SERVER_HOST=0.0.0.0`).
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

import trio
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from edgegw import plainhttp

log = logging.getLogger("edgegw.telemetry")

# A scrape request is a request line and a few headers; the connections are Prometheus and
# the odd curl. One request cycle (waiting for it on a kept-alive connection, reading it,
# writing the answer) must finish in 30 s, else the connection is closed: inference-gateway's
# metrics server uses 10 s read/write and 30 s idle timeouts.
SCRAPE_LIMITS = plainhttp.Limits(
    max_head_bytes=16 * 1024,
    max_body_bytes=64 * 1024,
    max_connections=64,
    cycle_timeout_s=30.0,
)

_PLAIN = (b"content-type", b"text/plain; charset=utf-8")


class Collector(Protocol):
    """What prometheus_client's encoders render: a registry, or a snapshot of one."""

    def collect(self) -> Iterable[Metric]: ...


# Takes the metrics to render, on the Trio thread; collect() then runs in a worker thread.
TakeSnapshot = Callable[[], Awaitable[Collector]]


def metrics_server(take_snapshot: TakeSnapshot, limiter: trio.CapacityLimiter) -> plainhttp.Server:
    """The scrape endpoint over `take_snapshot`, rendered in threads of `limiter`."""

    async def answer(request: plainhttp.Request, out: plainhttp.Responder) -> None:
        if request.body is None:
            await out.send(413, [_PLAIN], b"request body too large\n")
        elif request.path != "/metrics":
            await out.send(404, [_PLAIN], b"not found\n")
        elif request.method not in ("GET", "HEAD"):
            await out.send(405, [_PLAIN, (b"allow", b"GET, HEAD")], b"method not allowed\n")
        else:
            encoder, content_type = choose_encoder(request.header("accept"))
            gzipped = "gzip" in request.header("accept-encoding").lower()
            snapshot = await take_snapshot()

            def render() -> bytes:
                body: bytes = encoder(snapshot)
                return gzip.compress(body, compresslevel=1) if gzipped else body

            body = await trio.to_thread.run_sync(render, limiter=limiter)
            headers = [(b"content-type", content_type.encode("latin-1"))]
            if gzipped:
                headers.append((b"content-encoding", b"gzip"))
            await out.send(200, headers, body)

    return plainhttp.Server("metrics server", answer, limits=SCRAPE_LIMITS)
