"""The export pipeline: a request's spans, recorded and encoded in the Rust core
(`TraceRecord`, rust/src/otlp_trace.rs) into its `SpanQueue`, taken a batch at a time by a
Trio task on the event loop (`SpanQueue.take` puts a batch's head before its entries) and
POSTed to the collector with edgegw's own upstream client (edgegw.upstream). Imported only when tracing is
on (edgegw.telemetry.tracing); the SDK's parts are built by class (no entry points: the
frozen binary has none).

The SDK still gives the rules for reading a client's `traceparent` (its W3C propagator's
pattern and limits; `read_parent`) and its `tracestate` (`TraceState`), detects the resource
(OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and parses OTEL_EXPORTER_OTLP_(TRACES_)HEADERS
(`parse_env_headers`). The rest of what its OTLP/HTTP exporter did is done here, with the
exporter's rules (`Destination`): OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _COMPRESSION (gzip,
deflate, none), _CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE, the traces variable before
the general one; retries of 429, 502, 503, 504 and lost connections with backoff 2^n s
(jitter 0.8-1.2) or the collector's Retry-After, at most MAX_RETRIES tries within the
export timeout.

Why not the SDK's exporter: its `ReadableSpan` and Python protobuf encoder cost many times the
core's encoder for the same bytes, and its blocking HTTP client needed a thread of its own,
whose hand-offs of the GIL with the event loop made every socket call of the loop dearer:
tracing every request more than doubled the gateway's CPU per request. The same spans posted
from the event loop, as here, cost a small share of it (bench/README.md, history).

OTEL_BSP_SCHEDULE_DELAY (default 5000 ms) is honoured as the SDK's processor did: a batch
leaves when a full batch (512 spans, edgegw.telemetry.tracing) waits or the delay has passed.

A request's spans are encoded when it ends, not a batch at once: a batch encoded at once
stalled the event loop, and so every stream it relays, for milliseconds; one call a request
rather than one a span, since a call a span cost more than the encoding (bench/README.md).
"""

from __future__ import annotations

import gzip
import logging
import os
import random
import ssl
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.trace import TraceState
from opentelemetry.util.re import parse_env_headers

from edgegw._core import SpanQueue, read_traceparent
from edgegw.errors import GatewayError
from edgegw.settings import SettingsError
from edgegw.upstream import Origin, UpstreamPool, retry_after_s

log = logging.getLogger("edgegw.tracing")

# Dropped spans are logged at most this often, with the counts since the last line.
DROP_LOG_INTERVAL_S = 60.0

# The SDK's batch processor's default wait between exports (OTEL_BSP_SCHEDULE_DELAY, ms).
DEFAULT_SCHEDULE_DELAY_MS = 5000
# Tries of one batch (the SDK exporter's _MAX_RETRIES), all within the export timeout.
MAX_RETRIES = 6
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
BACKOFF_JITTER = 0.2
# What is read of a collector's answer (an ExportTraceServiceResponse: a few bytes).
MAX_ANSWER_BYTES = 64 * 1024
COMPRESSIONS = ("none", "gzip", "deflate")
USER_AGENT = b"edgegw-otlp-exporter"


def schedule_delay_s(environ: Mapping[str, str] = os.environ) -> float:
    """OTEL_BSP_SCHEDULE_DELAY in seconds; the default when unset or not a positive int."""
    raw = environ.get("OTEL_BSP_SCHEDULE_DELAY", "")
    try:
        ms = int(raw) if raw else DEFAULT_SCHEDULE_DELAY_MS
    except ValueError:
        log.warning("OTEL_BSP_SCHEDULE_DELAY=%r is not an integer: using 5000 ms", raw)
        ms = DEFAULT_SCHEDULE_DELAY_MS
    return (ms if ms > 0 else DEFAULT_SCHEDULE_DELAY_MS) / 1000


def _otlp_env(environ: Mapping[str, str], name: str) -> tuple[str, str]:
    """(variable, value) of OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>
    (the exporter's order); ("", "") when neither is set."""
    for var in (f"OTEL_EXPORTER_OTLP_TRACES_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        if value := environ.get(var, "").strip():
            return var, value
    return "", ""


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a batch goes and how: the collector's URL with the exporter's variables."""

    origin: Origin
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    compression: str
    ssl_context: ssl.SSLContext | None

    @classmethod
    def of(cls, endpoint: str, environ: Mapping[str, str] = os.environ) -> Destination:
        """The destination of TELEMETRY_TRACING_OTLP_ENDPOINT; SettingsError for a header,
        certificate or key that cannot be used (never a tracer that silently sends
        nowhere, or sends in the clear what was to be verified)."""
        try:
            origin = Origin.from_url(endpoint)
        except ValueError:
            raise SettingsError(
                f"TELEMETRY_TRACING_OTLP_ENDPOINT={endpoint!r} is not an http(s) URL"
            ) from None
        query = endpoint.partition("?")[2]
        target = (origin.base_path or "/") + (f"?{query}" if query else "")

        headers: list[tuple[bytes, bytes]] = [
            (b"content-type", b"application/x-protobuf"),
            (b"user-agent", USER_AGENT),
        ]
        var, raw = _otlp_env(environ, "HEADERS")
        for name, value in parse_env_headers(raw, liberal=True).items():
            if any(c in value for c in "\r\n\0") or not value.isprintable():
                raise SettingsError(f"{var}: the value of header {name!r} is not printable")
            if name in ("content-type", "content-length", "content-encoding", "host"):
                raise SettingsError(f"{var}: edgegw sets the {name} header itself")
            headers = [(k, v) for k, v in headers if k != name.encode()]
            headers.append((name.encode(), value.encode()))

        var, compression = _otlp_env(environ, "COMPRESSION")
        compression = compression.lower() or "none"
        if compression not in COMPRESSIONS:
            log.warning("%s=%r is not gzip, deflate or none: spans are sent uncompressed",
                        var, compression)  # fmt: skip
            compression = "none"
        if compression != "none":
            headers.append((b"content-encoding", compression.encode()))

        ssl_context = None
        ca_var, ca = _otlp_env(environ, "CERTIFICATE")
        key_var, key = _otlp_env(environ, "CLIENT_KEY")
        cert_var, cert = _otlp_env(environ, "CLIENT_CERTIFICATE")
        if origin.scheme == "https":
            ssl_context = _ssl_context((ca_var, ca), (cert_var, cert), (key_var, key))
        elif ca or key or cert:
            log.warning(
                "%s: the collector's endpoint is http://, so no TLS setting applies",
                ", ".join(v for v in (ca_var, cert_var, key_var) if v),
            )
        return cls(origin, target.encode(), tuple(headers), compression, ssl_context)

    def body(self, data: bytes) -> bytes:
        if self.compression == "gzip":
            return gzip.compress(data, compresslevel=6, mtime=0)
        if self.compression == "deflate":
            return zlib.compress(data)
        return data


def _ssl_context(
    ca: tuple[str, str], cert: tuple[str, str], key: tuple[str, str]
) -> ssl.SSLContext:
    """The collector's TLS: verified against the system's CAs, or _CERTIFICATE's; a client
    certificate when _CLIENT_CERTIFICATE (and its _CLIENT_KEY) is set."""
    try:
        context = ssl.create_default_context(cafile=ca[1] or None)
    except (OSError, ssl.SSLError) as e:
        raise SettingsError(f"{ca[0]}: cannot load {ca[1]!r}: {e}") from None
    if key[1] and not cert[1]:
        raise SettingsError(f"{key[0]} is set without OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
    if cert[1]:
        try:
            context.load_cert_chain(cert[1], key[1] or None)
        except (OSError, ssl.SSLError) as e:
            raise SettingsError(f"{cert[0]}: cannot load {cert[1]!r}: {e}") from None
    return context


@dataclass(frozen=True, slots=True)
class Parent:
    """A client's trace context, as its `traceparent` and `tracestate` said."""

    trace_id: int
    span_id: int
    sampled: bool
    state: str


# The W3C propagator's limit on a `tracestate` it reads (TraceContextTextMapPropagator).
_TRACESTATE_MAX = 512


def read_parent(headers: Sequence[tuple[bytes, bytes]]) -> Parent | None:
    """A client's `traceparent` and `tracestate` (the last of each, as the SDK's dict
    carrier kept them) read by the rules of the SDK's W3C propagator, which is what
    tests/test_traceparent.py checks this against: its `extract` made a context, a span and a
    `SpanContext` to carry four fields (its cost: bench/README.md). The `traceparent` is read by the core (`read_traceparent`, the
    propagator's pattern and rules in Rust: one call, no regex), `tracestate` by the SDK's
    `TraceState` (`trace_state`)."""
    got = read_traceparent(headers)
    if got is None:
        return None
    trace_id, span_id, sampled, tracestate = got
    return Parent(trace_id, span_id, sampled, trace_state(tracestate))


def trace_state(tracestate: bytes | None) -> str:
    """A client's `tracestate` as the SDK's propagator keeps it (its list-members checked,
    at most 32; "" for none, one over 512 bytes or one with a key twice)."""
    if tracestate is None or len(tracestate) > _TRACESTATE_MAX:
        return ""
    return TraceState.from_header([tracestate.decode("latin-1")]).to_header()


class Pipeline:
    """Ended spans, bounded by the queue, batched by one Trio task (`run`), encoded in Rust
    and posted to the collector (module doc)."""

    def __init__(self, endpoint: str, version: str, queue: SpanQueue, timeout_s: float) -> None:
        self.queue = queue
        self.version = version
        self.timeout_s = timeout_s
        resource = Resource(
            {
                "service.name": "edgegw",
                "service.version": version,
                "telemetry.sdk.language": "python",
            }
        ).merge(OTELResourceDetector().detect())  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        self.resource: dict[str, Any] = dict(resource.attributes)
        self.destination = Destination.of(endpoint)
        # Its own pool: one connection to the collector, kept alive between batches.
        self.pool = UpstreamPool(
            connect_timeout_s=timeout_s,
            idle_per_host=1,
            max_per_host=1,
            ssl_context=self.destination.ssl_context,
        )
        self._wake = trio.Event()
        self._sending = trio.Lock()  # one batch on the wire at a time, in order
        self._delay_s = schedule_delay_s()
        # The drops logged so far (`_log_drops`), and when.
        self._logged = dict(queue.dropped)
        self._logged_at = -DROP_LOG_INTERVAL_S

    def wake(self) -> None:
        """A whole batch waits: export it now, not at the schedule."""
        self._wake.set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Export a batch whenever one is full or the schedule delay has passed; until
        cancelled (`aclose` exports what is left)."""
        task_status.started()
        while True:
            with trio.move_on_after(self._delay_s):
                await self._wake.wait()
            self._wake = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Export what waits now, a batch at a time."""
        async with self._sending:
            queue = self.queue
            while (batch := queue.take(self.resource, "edgegw", self.version)) is not None:
                data, n = batch
                queue.done(n, await self._post(self.destination.body(data)))
        self._log_drops()

    def _log_drops(self) -> None:
        """Spans dropped since the last line, at most a line a minute."""
        dropped = self.queue.dropped
        if dropped == self._logged:
            return
        now = time.monotonic()
        if now - self._logged_at < DROP_LOG_INTERVAL_S:
            return
        counts = ", ".join(f"{n - self._logged[k]} {k}" for k, n in dropped.items())
        self._logged, self._logged_at = dropped, now
        log.warning("tracing: span(s) dropped (%s); is the collector reachable?", counts)

    async def _post(self, body: bytes) -> bool:
        """POST one batch, retrying what the exporter retries; whether the collector took it."""
        dest = self.destination
        deadline = trio.current_time() + self.timeout_s
        for attempt in range(MAX_RETRIES):
            backoff = 2.0**attempt * random.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER)
            try:
                with trio.fail_after(max(0.0, deadline - trio.current_time())):
                    resp = await self.pool.send(
                        dest.origin, b"POST", dest.target, dest.headers, body
                    )
                    try:
                        await resp.read(MAX_ANSWER_BYTES)
                    except GatewayError:
                        pass  # what it said does not matter past the status
                    finally:
                        await resp.aclose()
            except trio.TooSlowError:
                log.debug("tracing: export timed out after %.1f s", self.timeout_s)
                return False
            except GatewayError as e:  # refused, lost or unreadable: the exporter retries it
                why = e.code
            else:
                status, why = resp.status, f"status {resp.status}"
                if 200 <= status < 400:
                    return True
                if status not in RETRYABLE_STATUS:
                    log.debug("tracing: the collector answered %d", status)
                    return False
                wait = retry_after_s(resp.header(b"retry-after"))
                if wait is not None:
                    backoff = wait
            if attempt + 1 == MAX_RETRIES or backoff > deadline - trio.current_time():
                log.debug("tracing: export failed (%s); not retried", why)
                return False
            log.debug("tracing: export failed (%s); retrying in %.2f s", why, backoff)
            await trio.sleep(backoff)
        return False

    async def aclose(self) -> None:
        """Export what is queued and close the collector's connection."""
        await self.flush()
        await self.pool.aclose()
