"""Telemetry: the OTLP metrics push endpoint (POST /v1/metrics) and the gateway's own
Prometheus metrics, served on TELEMETRY_METRICS_PORT."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgegw.asgi import Receive, Send
from edgegw.errors import GatewayError
from edgegw.settings import Settings

if TYPE_CHECKING:
    from edgegw.app import App


class Telemetry:
    """Process-wide metrics; created by serve() and passed to the app."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def serve_metrics(self, *, task_status: Any = None) -> None:
        """Serve Prometheus text at /metrics on TELEMETRY_METRICS_PORT until cancelled."""
        raise NotImplementedError

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
    ) -> None:
        """One finished chat/completions request, as the gateway saw it."""

    @property
    def push_enabled(self) -> bool:
        return self.settings.telemetry_enabled and self.settings.telemetry_metrics_push_enabled


async def metrics_push(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if not app.telemetry.push_enabled:
        raise GatewayError(403, "metrics_push_disabled", "Metrics push is not enabled")
    raise GatewayError(501, "not_implemented", "OTLP metrics push is not implemented yet")
