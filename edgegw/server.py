"""Running the gateway: Hypercorn's Trio worker serving `App`, with the process-lifetime
resources (the upstream pool) owned here and passed in."""

from __future__ import annotations

import logging
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from edgegw.app import App
from edgegw.settings import Settings
from edgegw.streaming import DisconnectWatch
from edgegw.telemetry import Telemetry
from edgegw.upstream import UpstreamPool


def hypercorn_config(settings: Settings) -> Config:
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Hypercorn's read_timeout also fires while a response streams: leave it unset and
    # bound request bodies in the app. Its default graceful timeout (3 s) would cut
    # streams at shutdown; drain for the configured time instead.
    config.read_timeout = None
    config.graceful_timeout = settings.graceful_timeout_s
    config.keep_alive_timeout = 75
    config.h11_max_incomplete_size = 64 * 1024
    return config


async def serve(
    settings: Settings,
    *,
    shutdown_trigger: Any = None,
    pool: UpstreamPool | None = None,
    telemetry: Telemetry | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or `shutdown_trigger` returns); started(binds) once listening."""
    if pool is None:
        pool = UpstreamPool(
            connect_timeout_s=settings.connect_timeout_s,
            idle_per_host=settings.pool_idle_per_host,
        )
    watch = DisconnectWatch()
    if telemetry is None:
        telemetry = Telemetry(settings)
    app = App(settings, pool, watch, telemetry)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(watch.run)
            if settings.local_models:
                await nursery.start(app.fleet.run)
            if settings.telemetry_enabled:
                await nursery.start(telemetry.serve_metrics)
            kwargs: dict[str, Any] = {"task_status": task_status}
            if shutdown_trigger is not None:
                kwargs["shutdown_trigger"] = shutdown_trigger
            await hypercorn_serve(app, hypercorn_config(settings), **kwargs)  # type: ignore[arg-type]
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await pool.aclose()
