"""The metrics scrape endpoint: `GET /metrics` (and HEAD) answers the exposition text
(OpenMetrics when the scraper asks for it, gzipped when it accepts gzip), any other path 404,
on an edgegw/plainhttp.py server.

One process (`edgegw serve --workers 1`, or serve() in the tests): its Telemetry serves the
endpoint on TELEMETRY_METRICS_PORT. The port binds `SERVER_HOST` (default 127.0.0.1), not
every interface as inference-gateway does: metrics name providers, models and teams, so
exposing them is an explicit choice (`SERVER_HOST=0.0.0.0`).

Several workers (`edgegw serve --workers N`): one port cannot be bound N times, and each
worker's registry only counts its own traffic. So the supervisor binds the port
(`serve_merged_metrics`); each worker serves its own exposition on a private unix socket the
supervisor named (`serve --metrics-socket PATH`, in a 0700 directory); a scrape of the
supervisor asks every live worker at once, leaves out (and logs) one that does not answer
within WORKER_SCRAPE_TIMEOUT_S, and answers the sum: samples with the same name and labels
added up (counter totals, histogram buckets, `_sum` and `_count`), rendered as negotiated.
An OpenMetrics scrape asks the workers for OpenMetrics, the one format with exemplars, and
each bucket keeps the most recent exemplar of any worker (the trace id a single process would
show); a text scrape asks for text, which parses in two thirds of the CPU time (34,000 lines:
3.3 s against 5.0 s on a busy machine).
prometheus_client's multiprocess mode does not fit: it only aggregates its own metric
classes, and edgegw's instruments are custom collectors (instruments.py). A worker left out,
or replaced after a crash, makes the sums drop, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Protocol

import h11
import trio
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Exemplar

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

# The supervisor's wait for each worker's exposition. A worker renders its 2,000-series
# worst case in about a second; Prometheus' default scrape_timeout is 10 s.
WORKER_SCRAPE_TIMEOUT_S = 3.0
# One worker's exposition at worst: 6 histograms x 2,000 series x 17 lines of up to ~500
# bytes (256-character label values) is ~100 MiB. Above that, the worker is left out.
MAX_WORKER_EXPOSITION_BYTES = 128 * 1024 * 1024

_PLAIN = (b"content-type", b"text/plain; charset=utf-8")
_OPENMETRICS = "application/openmetrics-text"


class Collector(Protocol):
    """What prometheus_client's encoders render: a registry, or a snapshot of one."""

    def collect(self) -> Iterable[Metric]: ...


# Takes the metrics to render, on the Trio thread, told whether the scraper negotiated
# OpenMetrics; collect() then runs in a worker thread.
TakeSnapshot = Callable[[bool], Awaitable[Collector]]


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
            snapshot = await take_snapshot(content_type.startswith(_OPENMETRICS))

            def render() -> bytes:
                body: bytes = encoder(snapshot)
                return gzip.compress(body, compresslevel=1) if gzipped else body

            body = await trio.to_thread.run_sync(render, limiter=limiter)
            headers = [(b"content-type", content_type.encode("latin-1"))]
            if gzipped:
                headers.append((b"content-encoding", b"gzip"))
            await out.send(200, headers, body)

    return plainhttp.Server("metrics server", answer, limits=SCRAPE_LIMITS)


# --- the supervisor of several workers --------------------------------------------------


async def serve_merged_metrics(
    host: str,
    port: int,
    workers: Callable[[], Mapping[int, str]],
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the sum of the workers' metrics on host:port until cancelled;
    task_status.started(port) once listening. `workers()` gives pid -> metrics socket of
    every worker alive at the time of a scrape."""

    async def take_snapshot(openmetrics: bool) -> Collector:
        return Merged(await _scrape_workers(workers(), openmetrics), openmetrics)

    # Parsing and summing run in the render thread; two, as the machines have two cores.
    server = metrics_server(take_snapshot, trio.CapacityLimiter(2))
    await server.serve_tcp(host, port, task_status=task_status)


class Merged:
    """Expositions (Prometheus text format, or OpenMetrics with `openmetrics`) summed into
    one family per metric name, one sample per sample name and label set, with the most
    recent of their exemplars; parsed when collected."""

    def __init__(self, texts: list[str], openmetrics: bool = False) -> None:
        self._texts = texts
        self._parse = openmetrics_families if openmetrics else text_string_to_metric_families

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        # family name -> (sample name, labels sorted) -> sum; the encoders sort labels anyway
        sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        # (family name, sample name, labels sorted) -> the latest exemplar
        exemplars: dict[tuple[str, str, tuple[tuple[str, str], ...]], Exemplar] = {}
        for text in self._texts:
            for family in self._parse(text):
                if family.name not in families:
                    families[family.name] = Metric(family.name, family.documentation, family.type)
                    sums[family.name] = {}
                series = sums[family.name]
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    series[key] = series.get(key, 0.0) + sample.value
                    if sample.exemplar is not None:
                        at = (family.name, *key)
                        kept = exemplars.get(at)
                        if kept is None or _later(sample.exemplar, kept):
                            exemplars[at] = sample.exemplar
        for name, metric in families.items():
            for (sample_name, labels), total in sums[name].items():
                exemplar = exemplars.get((name, sample_name, labels)) if exemplars else None
                metric.add_sample(sample_name, dict(labels), total, exemplar=exemplar)
            yield metric


def _later(a: Exemplar, b: Exemplar) -> bool:
    """`a` was recorded after `b` (one without a time counts as the oldest)."""
    if a.timestamp is None:
        return False
    return b.timestamp is None or float(a.timestamp) > float(b.timestamp)


async def _scrape_workers(workers: Mapping[int, str], openmetrics: bool) -> list[str]:
    """The expositions of the workers that answer in time, at once."""
    texts: dict[int, str] = {}

    async def scrape_one(pid: int, path: str) -> None:
        with trio.move_on_after(WORKER_SCRAPE_TIMEOUT_S):
            try:
                status, body = await _get_metrics(path, openmetrics)
            except (OSError, trio.BrokenResourceError, h11.ProtocolError) as exc:
                reason = type(exc).__name__
            else:
                if status == 200:
                    texts[pid] = body.decode("utf-8")
                    return
                reason = f"status {status}"
            log.warning("metrics: worker %d left out of this scrape (%s)", pid, reason)
            return
        log.warning(
            "metrics: worker %d left out of this scrape (no answer in %.0f s)",
            pid,
            WORKER_SCRAPE_TIMEOUT_S,
        )

    async with trio.open_nursery() as nursery:
        for pid, path in workers.items():
            nursery.start_soon(scrape_one, pid, path)
    return [texts[pid] for pid in workers if pid in texts]


async def _get_metrics(path: str, openmetrics: bool) -> tuple[int, bytes]:
    """GET /metrics (Prometheus text format or OpenMetrics, not compressed) from a worker's
    unix socket."""
    stream = await trio.open_unix_socket(path)
    async with stream:
        conn = h11.Connection(h11.CLIENT)
        headers = [("host", "localhost")]
        if openmetrics:
            headers.append(("accept", f"{_OPENMETRICS}; version=1.0.0"))
        request = h11.Request(method="GET", target="/metrics", headers=headers)
        await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
        status, parts, size = 0, [], 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(plainhttp.RECEIVE_BYTES))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_WORKER_EXPOSITION_BYTES:
                    raise h11.RemoteProtocolError("exposition too large")
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return status, b"".join(parts)
            elif isinstance(event, h11.ConnectionClosed):  # h11 raises if inside a body
                raise h11.RemoteProtocolError("closed before answering")
