"""Telemetry: the gateway's own Prometheus metrics and the OTLP metrics push endpoint
(POST /v1/metrics) that adds to them.

The instruments are in edgegw/telemetry/instruments.py (names and buckets as in inference-gateway,
bounded label cardinality), the push rules in edgegw/telemetry/otlp.py, the scrape endpoint (TELEMETRY_METRICS_PORT, or a
worker's unix socket) in edgegw/telemetry/scrape.py.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from edgegw._core import (
    OTLP_MAX_DECODED_BYTES,
    decode_otlp_metrics,
    gunzip_capped,
)
from edgegw.answer import GAP_BUCKETS, GapCounts
from edgegw.settings import Settings
from edgegw.telemetry.instruments import (
    BREAKER_STATES,
    MAX_SERIES,
    Counter,
    Histogram,
    Labels,
    Snapshot,
    labels,
    open_instruments,
    open_routing_instruments,
)
from edgegw.telemetry.otlp import Resource, decode_json

if TYPE_CHECKING:
    from edgegw.telemetry.tracing import Tracing

log = logging.getLogger("edgegw.telemetry")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# Bodies larger than this are gunzipped / decoded in a worker thread (the Rust side
# releases the GIL), so a 4 MiB push does not stall the event loop.
OFFLOAD_BYTES = 64 * 1024
# Worker threads decoding pushes or rendering scrapes at once: the machines have two cores.
WORKER_THREADS = 2

T = TypeVar("T")
# The usage members giving the input and output token counts (OpenAI's, then Anthropic's).
_TOKEN_MEMBERS = (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens"))
# A value inside each inter-token gap bucket (its upper bound; +Inf's: past the last).
GAP_BOUNDS = (*GAP_BUCKETS, GAP_BUCKETS[-1] * 2)


class Telemetry:
    """Process-wide metrics; created by serve() and passed to the app."""

    def __init__(self, settings: Settings, *, max_series: int = MAX_SERIES) -> None:
        self.settings = settings
        # OTel name -> instrument.
        self.instruments = open_instruments(max_series)
        self.routing = open_routing_instruments(max_series)
        # The scrape server's port once it listens (useful with TELEMETRY_METRICS_PORT=0).
        self.metrics_port: int | None = None
        self._worker_limiter = trio.CapacityLimiter(WORKER_THREADS)
        # Spans when TELEMETRY_TRACING_ENABLED (the SDK is imported only then), with the
        # count of spans dropped on the way to the collector.
        self.tracing: Tracing | None = None
        self._dropped: Counter | None = None
        if settings.tracing_enabled:
            from edgegw.telemetry.tracing import Tracing

            self.tracing = Tracing(settings)
            self._dropped = Counter(
                "edgegw_tracing_spans_dropped",
                "Spans not exported: the export queue was full, or the collector refused them.",
            )
        # The tenants' requests, tokens and cost by model (edgegw.tenants): the gateway's
        # own, not pushable.
        self.tenant_requests = Counter(
            "edgegw_tenant_requests", "Requests admitted, by tenant and model.", max_series
        )
        self.tenant_tokens = Counter(
            "edgegw_tenant_tokens",
            "Tokens charged (prompt and completion), by tenant and model.",
            max_series,
        )
        self.tenant_cost = Counter(
            "edgegw_tenant_cost_usd", "What requests cost in USD, by tenant and model.", max_series
        )
        self._tenant_keys: dict[tuple[str, str], Labels] = {}  # label sets in use
        self._guardrail_keys: dict[tuple[str, str, str, str], Labels] = {}
        self._generation_keys: dict[
            tuple[str, str, str, int], tuple[Labels, Labels, tuple[Labels, Labels]]
        ] = {}

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
        gaps: GapCounts | None = None,
        trace_id: str | None = None,
    ) -> None:
        """One finished chat/completions request, as the gateway saw it (source="gateway",
        team="unknown"). `model` is recorded as gen_ai_request_model; `usage` is the
        provider's usage object (OpenAI's prompt/completion_tokens or Anthropic's
        input/output_tokens); `tool_calls` the names of the tools the model called; `gaps`
        a stream's inter-token gaps; `trace_id` the request's trace (exemplars)."""
        if not self.settings.telemetry_enabled:
            return
        failed, base, by_token_type = self._generation_labels(operation, provider, model, status)
        self._histogram("gen_ai.server.request.duration").observe(
            failed, duration_s, trace_id=trace_id
        )
        if ttft_s is not None and math.isfinite(ttft_s) and ttft_s >= 0:
            self._histogram("gen_ai.server.time_to_first_token").observe(
                base, ttft_s, trace_id=trace_id
            )
        if gaps is not None:
            self._histogram("inference_gateway.inter_token_gap").observe_weighted(
                base, tuple(zip(GAP_BOUNDS, gaps.counts, strict=True)), gaps.total
            )
        if usage is not None:
            tokens = self._histogram("gen_ai.client.token.usage")
            for key, members in zip(by_token_type, _TOKEN_MEMBERS, strict=True):
                n = next((usage[k] for k in members if k in usage), None)
                if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                    tokens.observe(key, n)
        if not tool_calls:
            return
        calls = self.instruments["inference_gateway.tool_calls"]
        assert isinstance(calls, Counter)
        labelled = dict(base)
        for name in tool_calls:
            key = labels(
                {
                    **labelled,
                    "gen_ai_tool_name": name,
                    # The reference's types: a tool the gateway ran for an MCP server, or one
                    # the client's own code runs.
                    "gen_ai_tool_type": "mcp" if name.startswith("mcp_") else "standard_tool_use",
                }
            )
            calls.inc(key)

    def record_tenant(self, tenant: str, model: str, tokens: int, nano_usd: int | None) -> None:
        """One admitted request of `tenant` on `model`, its tokens and cost charged."""
        if not self.settings.telemetry_enabled:
            return
        key = self._tenant_keys.get((tenant, model))
        if key is None:
            if len(self._tenant_keys) >= MAX_SERIES:
                self._tenant_keys.clear()
            key = labels({"tenant": tenant, "gen_ai_request_model": model})
            self._tenant_keys[(tenant, model)] = key
        self.tenant_requests.inc(key)
        if tokens:
            self.tenant_tokens.inc(key, tokens)
        if nano_usd:
            self.tenant_cost.inc(key, nano_usd / 1e9)

    def _generation_labels(
        self, operation: str, provider: str, model: str, status: int
    ) -> tuple[Labels, Labels, tuple[Labels, Labels]]:
        """A request's label sets (with its error type; without; by token type, input and
        output). Sorting them was most of what recording a request cost (bench/README.md):
        the few in use are kept, the cache cleared whenever it fills, as for the
        guardrails' label sets."""
        seen = (operation, provider, model, status if status >= 400 else 0)
        found = self._generation_keys.get(seen)
        if found is not None:
            return found
        if len(self._generation_keys) >= MAX_SERIES:
            self._generation_keys.clear()
        base = {
            "source": "gateway",
            "team": "unknown",
            "gen_ai_operation_name": operation,
            "gen_ai_provider_name": provider,
            "gen_ai_request_model": model,
        }
        failed = {**base, "error_type": str(status)} if status >= 400 else base
        found = self._generation_keys[seen] = (
            labels(failed),
            labels(base),
            (
                labels({**base, "gen_ai_token_type": "input"}),
                labels({**base, "gen_ai_token_type": "output"}),
            ),
        )
        return found

    # --- model routing (edgegw.routing.router.RoutingMetrics) ----------------------------

    def record_routing_attempt(self, alias: str, deployment: str, outcome: str) -> None:
        if self.settings.telemetry_enabled:
            key = {"routing_alias": alias, "routing_deployment": deployment, "outcome": outcome}
            self.routing.attempts.inc(labels(key))

    def record_routing_failover(self, alias: str, deployment: str, reason: str) -> None:
        if self.settings.telemetry_enabled:
            key = {"routing_alias": alias, "routing_deployment": deployment, "reason": reason}
            self.routing.failovers.inc(labels(key))

    def record_breaker_state(self, deployment: str, state: str) -> None:
        if self.settings.telemetry_enabled:
            for name in BREAKER_STATES:
                key = labels({"routing_deployment": deployment, "state": name})
                self.routing.breaker_state.set(key, 1.0 if name == state else 0.0)

    def record_guardrail(self, *, phase: str, action: str, path: str, model: str) -> None:
        """One guardrails decision (the reference's RecordGuardrail): `path` is the request
        path, or the tool's name for the MCP phases."""
        if not self.settings.telemetry_enabled:
            return
        counter = self.instruments["inference_gateway.guardrails"]
        assert isinstance(counter, Counter)
        # Sorting the label set was a third of a decision's cost (bench/README.md, history): the
        # few label sets in use are kept, the cache cleared whenever it fills.
        seen = (phase, action, path, model)
        key = self._guardrail_keys.get(seen)
        if key is None:
            if len(self._guardrail_keys) >= MAX_SERIES:
                self._guardrail_keys.clear()
            key = self._guardrail_keys[seen] = labels(
                {
                    "source": "gateway",
                    "guardrail_phase": phase,
                    "guardrail_action": action,
                    "guardrail_path": path,
                    "gen_ai_request_model": model,
                }
            )
        counter.inc(key)

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

    # --- the scrape endpoint ------------------------------------------------------------

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """(body, content type) of the metrics, in the format `accept` asks for."""
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        self._count_drops()
        registry = CollectorRegistry(auto_describe=False)
        for family in self._families():
            registry.register(family)
        return encoder(registry), content_type

    def _count_drops(self) -> None:
        if self.tracing is not None and self._dropped is not None:
            for reason, n in self.tracing.queue.dropped.items():
                self._dropped.set_total((("reason", reason),), n)

    async def serve_metrics(
        self,
        socket_path: str | None = None,
        *,
        task_status: trio.TaskStatus[int | str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve /metrics (edgegw/telemetry/scrape.py) until cancelled: on
        TELEMETRY_METRICS_PORT (SERVER_HOST), or, in a worker of `serve --workers N`, on the
        unix socket `socket_path` that the supervisor scrapes. task_status.started(the port,
        or the socket path) once listening."""
        from edgegw.telemetry.scrape import metrics_server  # prometheus_client: only now

        server = metrics_server(self._snapshot, self._worker_limiter)
        if socket_path is not None:
            await server.serve_unix(socket_path, task_status=task_status)
            return
        host, port = self.settings.host, self.settings.telemetry_metrics_port
        async with trio.open_nursery() as nursery:
            self.metrics_port = await nursery.start(server.serve_tcp, host, port)
            log.info("metrics on http://%s:%d/metrics", host, self.metrics_port)
            task_status.started(self.metrics_port)

    async def _snapshot(self, openmetrics: bool = False) -> Snapshot:
        """The instruments as they are now, to render in a worker thread (in either format:
        `openmetrics` changes nothing one process collects)."""
        self._count_drops()
        return Snapshot(self._families())

    def _families(self) -> list[Any]:
        families: list[Any] = [*self.instruments.values(), *self.routing.families()]
        families += [self.tenant_requests, self.tenant_tokens, self.tenant_cost]
        if self._dropped is not None:
            families.append(self._dropped)
        return families
