"""Running the gateway: `App` served by edgegw's own HTTP/1.1 connection layer
(edgegw.http1, the default, plain and over TLS) or by Hypercorn's Trio worker
(EDGEGW_SERVER=hypercorn, for comparison, and HTTPS with SERVER_HTTP2_ENABLED: HTTP/2,
which edgegw.http1 does not do), with the process-lifetime resources (the upstream pool)
owned here and passed in."""

from __future__ import annotations

import gc
import logging
import ssl
from typing import TYPE_CHECKING, Any

import trio

from edgegw.app import App
from edgegw.gateway import build_gateway
from edgegw.handoff import Handoff
from edgegw.http1.limits import LISTEN_BACKLOG, SETTABLE, ConnectionLimits
from edgegw.http1.server import open_listener, raise_nofile, serve_http1
from edgegw.http1.tls import server_context
from edgegw.settings import TLS_VERSIONS, Settings
from edgegw.telemetry.recording import Telemetry
from edgegw.upstream import UpstreamPool
from edgegw.watch import DisconnectWatch

if TYPE_CHECKING:
    from hypercorn.config import Config

# Hypercorn's own handler deadline comes this long after the drain time, so that streams
# cut at the drain deadline still have time to send their final error event.
DRAIN_MARGIN_S = 5.0
# At shutdown, how long the spans still queued may take to reach the collector.
TRACING_SHUTDOWN_S = 2.0


def hypercorn_config(settings: Settings, bind: str | None = None) -> Config:
    from hypercorn.config import Config

    config = Config()
    config.bind = [bind or f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Hypercorn's read_timeout also fires while a response streams: leave it unset and
    # bound request bodies in the app. Its default graceful timeout (3 s) would cut
    # streams at shutdown; edgegw drains for settings.graceful_timeout_s itself.
    config.read_timeout = None
    config.graceful_timeout = settings.graceful_timeout_s + DRAIN_MARGIN_S
    config.keep_alive_timeout = settings.keepalive_timeout_s
    config.h11_max_incomplete_size = settings.max_head_bytes
    config.backlog = LISTEN_BACKLOG
    if settings.tls_cert_path and settings.tls_key_path:
        # Hypercorn's context: TLS 1.2 or newer, no compression, ALPN h2 then http/1.1.
        config.certfile = settings.tls_cert_path
        config.keyfile = settings.tls_key_path
    return config


def limits_of(settings: Settings) -> ConnectionLimits:
    """The connection layer's limits, from the settings fields of the same names."""
    return ConnectionLimits(**{row.name: getattr(settings, row.name) for row in SETTABLE})


async def serve(
    settings: Settings,
    *,
    shutdown_trigger: Any = None,
    pool: UpstreamPool | None = None,
    telemetry: Telemetry | None = None,
    handoff: Handoff | None = None,
    bind: str | None = None,
    metrics_socket: str | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, or until `shutdown_trigger` returns and the drain is over;
    started(binds) once listening. `bind` overrides host:port (e.g. `fd://3` for a
    listening socket inherited from the supervisor of several workers).

    Shutdown: stop accepting; idle connections are closed; requests arriving on open
    connections get 503 with `Connection: close`; running exchanges may finish for
    settings.graceful_timeout_s, then streams still running end with an SSE error event
    (`shutting_down`)."""
    if pool is None:
        pool = UpstreamPool(
            connect_timeout_s=settings.connect_timeout_s,
            idle_per_host=settings.pool_idle_per_host,
            max_per_host=settings.pool_max_per_host,
            tls_minimum=TLS_VERSIONS[settings.client_tls_min_version],
        )
    watch = DisconnectWatch()
    if telemetry is None:
        telemetry = Telemetry(settings)
    # The core's relay thread serves the streams of edgegw.http1's plain listener.
    if handoff is None and settings.stream_relay == "core" and settings.server == "edgegw":
        handoff = Handoff()
    gw = build_gateway(settings, pool, watch, telemetry, handoff)
    app = App(gw)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(watch.run)
            if handoff is not None:
                await nursery.start(handoff.run)
            await nursery.start(gw.client_keys.run)
            # The tenants' usage file (budgets survive a restart); unusable, the start stops.
            await nursery.start(gw.tenancy.usage.run)
            if gw.tenancy.shared is not None:  # settlements sent to Redis off the request path
                await nursery.start(gw.tenancy.shared.run)
            if settings.key_file.has_tenants:
                # Prices for the tenants' costs, loaded (in a thread) before the freeze below:
                # loaded later, its objects would be walked by every full collection.
                await gw.catalog.community.ready()
            if gw.verifier is not None:  # OIDC discovery and keys; an unusable issuer stops here
                await nursery.start(gw.verifier.run)
            if settings.local_models:
                await nursery.start(gw.fleet.run)
            if gw.mcp is not None:  # a server down here is retried in the background
                await nursery.start(gw.mcp.run)
            if settings.telemetry_enabled:
                await nursery.start(telemetry.serve_metrics, metrics_socket)
            if telemetry.tracing is not None:
                await nursery.start(telemetry.tracing.run)
            # What start-up made lives as long as the process: out of the collector's sight,
            # so that a full collection walks only what requests made since.
            gc.freeze()

            async def drain_trigger() -> None:
                if shutdown_trigger is None:
                    await trio.sleep_forever()
                await shutdown_trigger()
                gw.load.leaving = True
                if settings.shutdown_delay_s > 0:
                    logging.getLogger("edgegw.server").info(
                        "shutting down: serving %gs more while /ready says draining",
                        settings.shutdown_delay_s,
                    )
                    await trio.sleep(settings.shutdown_delay_s)
                gw.load.draining = True
                nursery.start_soon(_end_streams_after, watch, settings.graceful_timeout_s)

            # edgegw.http1 serves HTTP/1.1, plain and over TLS; Hypercorn serves when asked
            # (EDGEGW_SERVER=hypercorn), and HTTPS with HTTP/2 (SERVER_HTTP2_ENABLED).
            if settings.server == "hypercorn" or (
                settings.tls_cert_path and settings.http2_enabled
            ):
                # Imported only here: a tenth of a second of every start otherwise.
                from hypercorn.trio import serve as hypercorn_serve

                raise_nofile()
                await hypercorn_serve(
                    app,  # type: ignore[arg-type]
                    hypercorn_config(settings, bind),
                    shutdown_trigger=drain_trigger,
                    task_status=task_status,
                )
            else:
                await serve_http1(
                    app,
                    open_listener(bind or _host_port(settings)),
                    limits_of(settings),
                    shutdown_trigger=drain_trigger,
                    grace_s=settings.graceful_timeout_s + DRAIN_MARGIN_S,
                    tls=_tls_context(settings),
                    task_status=task_status,
                )
            nursery.cancel_scope.cancel()
    finally:
        if handoff is not None:  # every request task is over: no stream is in its table
            handoff.core.close()
        with trio.CancelScope(shield=True):
            await pool.aclose()
            if telemetry.tracing is not None:
                # Export what is queued; a collector that does not answer is given up on.
                with trio.move_on_after(TRACING_SHUTDOWN_S):
                    await telemetry.tracing.aclose()


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not (settings.tls_cert_path and settings.tls_key_path):
        return None
    return server_context(settings.tls_cert_path, settings.tls_key_path, ["http/1.1"])


def _host_port(settings: Settings) -> str:
    return (
        f"[{settings.host}]:{settings.port}"
        if ":" in settings.host
        else f"{settings.host}:{settings.port}"
    )


async def _end_streams_after(watch: DisconnectWatch, drain_s: float) -> None:
    await trio.sleep(drain_s)
    ended = watch.drain_all()
    if ended:
        logging.getLogger("edgegw.server").warning(
            "drain time over: ended %d running exchange(s)", ended
        )
