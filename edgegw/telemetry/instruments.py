"""The gateway's Prometheus instruments: histograms and counters with bounded label
cardinality, rendered by prometheus_client (never its global registry).

They are our own collectors rather than prometheus_client's `Histogram`/`Counter` for two
reasons: a pushed OTLP histogram is replayed as *weighted* observations (one call per
bucket, not one per observation), and each series may carry its own set of labels (a
pushed point has only the attributes it was sent with), as OpenTelemetry's Prometheus
exporter does. prometheus_client still renders the exposition text, imported only then (it
is 2 MiB and a tenth of the imports of a start with telemetry off).

Label cardinality: each metric keeps at most `MAX_SERIES` distinct label sets. The label
set that would be one more is folded into an overflow series whose values are all
"other" (`source="gateway"` kept, so the gateway's own traffic stays apart from pushes);
`_count`/`_sum` totals stay right, only the breakdown is lost. Label values are cut to
`MAX_LABEL_VALUE_CHARS`. Everything here runs on the Trio thread: no locks.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgegw.answer import GAP_BUCKETS

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("edgegw.metrics")

# Distinct label sets per metric. OpenTelemetry SDKs use the same default cardinality
# limit; with 14 buckets a full histogram is ~34,000 exposition lines.
MAX_SERIES = 2000
OVERFLOW_VALUE = "other"
# Longer values (a model string sent by a client, a pushed attribute) are cut.
MAX_LABEL_VALUE_CHARS = 256

# gen_ai.client.token.usage: powers of 4 from 1 to 67,108,864 tokens (the semantic
# conventions' advice, as in inference-gateway).
TOKEN_BUCKETS = tuple(float(4**k) for k in range(14))
# Durations: 0.01 s doubling to 81.92 s.
DURATION_BUCKETS = tuple(0.01 * 2**k for k in range(14))

# Labels in the order they are written; `labels()` sorts into it, so a label set is
# one key whatever order it was built in.
LABEL_ORDER = (
    "source",
    "team",
    "tenant",
    "gen_ai_operation_name",
    "gen_ai_provider_name",
    "gen_ai_system",
    "gen_ai_request_model",
    "gen_ai_response_model",
    "gen_ai_token_type",
    "gen_ai_tool_name",
    "gen_ai_tool_type",
    "routing_alias",
    "routing_deployment",
    "outcome",
    "reason",
    "state",
    "guardrail_phase",
    "guardrail_action",
    "guardrail_path",
    "error_type",
)
_RANK = {name: i for i, name in enumerate(LABEL_ORDER)}

Labels = tuple[tuple[str, str], ...]


def labels(values: dict[str, str]) -> Labels:
    """A series key from label name -> value (names from LABEL_ORDER; values clipped)."""
    return tuple(
        (name, value[:MAX_LABEL_VALUE_CHARS])
        for name, value in sorted(values.items(), key=lambda kv: _RANK[kv[0]])
    )


def _overflow(key: Labels) -> Labels:
    return tuple(
        (name, value if name == "source" and value == "gateway" else OVERFLOW_VALUE)
        for name, value in key
    )


class _Family:
    """Series by label set, at most `max_series` of them before folding."""

    kind = ""

    def __init__(self, name: str, documentation: str, max_series: int) -> None:
        self.name = name
        self.documentation = documentation
        self.max_series = max_series
        self._folded = False

    def _fold(self, key: Labels, series: Mapping[Labels, object]) -> Labels:
        if key in series or len(series) < self.max_series:
            return key
        if not self._folded:
            self._folded = True
            log.warning(
                "metric %s reached %d label sets; further ones are counted as %r",
                self.name,
                self.max_series,
                OVERFLOW_VALUE,
            )
        return _overflow(key)

    def describe(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric

        yield Metric(self.name, self.documentation, self.kind)

    def collect(self) -> Iterator[Metric]:
        raise NotImplementedError

    def snapshot(self) -> _Family:
        """A copy that later updates do not touch, to render in another thread."""
        raise NotImplementedError


class _HistogramSeries:
    __slots__ = ("counts", "sum", "exemplars")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * (buckets + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0
        # The latest traced observation per bucket, (trace id, value, unix time), shown as
        # OpenMetrics exemplars; None until the first one.
        self.exemplars: list[tuple[str, float, float] | None] | None = None


class Histogram(_Family):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        max_series: int = MAX_SERIES,
    ) -> None:
        super().__init__(name, documentation, max_series)
        self.buckets = tuple(buckets)
        self._series: dict[Labels, _HistogramSeries] = {}

    def observe(
        self, key: Labels, value: float, count: int = 1, trace_id: str | None = None
    ) -> None:
        """`count` observations of `value`; `trace_id`: the request's trace, as the
        bucket's exemplar."""
        series = self._series_of(key)
        bucket = bisect.bisect_left(self.buckets, value)
        series.counts[bucket] += count
        series.sum += value * count
        if trace_id is not None:
            if series.exemplars is None:
                series.exemplars = [None] * len(series.counts)
            series.exemplars[bucket] = (trace_id, value, time.time())

    def observe_weighted(
        self, key: Labels, observations: Sequence[tuple[float, int]], total: float
    ) -> None:
        """(value, how many times) pairs, adding `total` to the sum."""
        series = self._series_of(key)
        for value, n in observations:
            series.counts[bisect.bisect_left(self.buckets, value)] += n
        series.sum += total

    def _series_of(self, key: Labels) -> _HistogramSeries:
        key = self._fold(key, self._series)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _HistogramSeries(len(self.buckets))
        return series

    def snapshot(self) -> Histogram:
        copy = Histogram(self.name, self.documentation, self.buckets, self.max_series)
        for key, series in self._series.items():
            frozen = copy._series[key] = _HistogramSeries(0)
            frozen.counts, frozen.sum = list(series.counts), series.sum
            if series.exemplars is not None:
                frozen.exemplars = list(series.exemplars)
        return copy

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric
        from prometheus_client.samples import Exemplar
        from prometheus_client.utils import floatToGoString

        metric = Metric(self.name, self.documentation, "histogram")
        bounds = [floatToGoString(b) for b in self.buckets] + ["+Inf"]  # type: ignore[no-untyped-call]
        for key, series in self._series.items():
            base = dict(key)
            cumulative = 0
            exemplars = series.exemplars or [None] * len(bounds)
            for le, n, ex in zip(bounds, series.counts, exemplars, strict=True):
                cumulative += n
                metric.add_sample(
                    self.name + "_bucket",
                    {**base, "le": le},
                    cumulative,
                    exemplar=None if ex is None else Exemplar({"trace_id": ex[0]}, ex[1], ex[2]),
                )
            metric.add_sample(self.name + "_count", base, cumulative)
            metric.add_sample(self.name + "_sum", base, series.sum)
        yield metric


class Counter(_Family):
    kind = "counter"

    def __init__(self, name: str, documentation: str, max_series: int = MAX_SERIES) -> None:
        super().__init__(name, documentation, max_series)
        self._series: dict[Labels, float] = {}

    def inc(self, key: Labels, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._fold(key, self._series)
        self._series[key] = self._series.get(key, 0) + amount

    def set_total(self, key: Labels, total: float) -> None:
        """A series whose total is counted elsewhere (only ever rising)."""
        self._series[key] = total

    def snapshot(self) -> Counter:
        copy = Counter(self.name, self.documentation, self.max_series)
        copy._series = dict(self._series)
        return copy

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric

        metric = Metric(self.name, self.documentation, "counter")
        for key, value in self._series.items():
            metric.add_sample(self.name + "_total", dict(key), value)
        yield metric


class Gauge(_Family):
    """A value per label set that goes up and down (a breaker's state)."""

    kind = "gauge"

    def __init__(self, name: str, documentation: str, max_series: int = MAX_SERIES) -> None:
        super().__init__(name, documentation, max_series)
        self._series: dict[Labels, float] = {}

    def set(self, key: Labels, value: float) -> None:
        self._series[self._fold(key, self._series)] = value

    def snapshot(self) -> Gauge:
        copy = Gauge(self.name, self.documentation, self.max_series)
        copy._series = dict(self._series)
        return copy

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric

        metric = Metric(self.name, self.documentation, "gauge")
        for key, value in self._series.items():
            metric.add_sample(self.name, dict(key), value)
        yield metric


class Snapshot:
    """The instruments' values at one moment: a collector to render off the Trio thread
    (rendering 2,000 series per metric takes about a second)."""

    def __init__(self, families: Iterable[_Family]) -> None:
        self._families = [f.snapshot() for f in families]

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield from family.collect()


@dataclass(frozen=True, slots=True)
class Instrument:
    otel_name: str
    prometheus_name: str
    documentation: str
    buckets: tuple[float, ...] | None  # None: a counter


# inference-gateway's names (notes 13.1); the OTLP push rules refer to the OTel names.
INSTRUMENTS = (
    Instrument(
        "gen_ai.client.token.usage",
        "gen_ai_client_token_usage",
        "Number of input and output tokens used.",
        TOKEN_BUCKETS,
    ),
    Instrument(
        "gen_ai.server.request.duration",
        "gen_ai_server_request_duration_seconds",
        "Generative AI server request duration, in seconds.",
        DURATION_BUCKETS,
    ),
    Instrument(
        "gen_ai.server.time_to_first_token",
        "gen_ai_server_time_to_first_token_seconds",
        "Time to generate the first token, in seconds.",
        DURATION_BUCKETS,
    ),
    Instrument(
        "gen_ai.client.operation.duration",
        "gen_ai_client_operation_duration_seconds",
        "GenAI operation duration as seen by the client, in seconds.",
        DURATION_BUCKETS,
    ),
    Instrument(
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai_client_operation_time_to_first_chunk_seconds",
        "Time to receive the first chunk of a streamed response, in seconds.",
        DURATION_BUCKETS,
    ),
    Instrument(
        "gen_ai.execute_tool.duration",
        "gen_ai_execute_tool_duration_seconds",
        "Tool execution duration, in seconds.",
        DURATION_BUCKETS,
    ),
    Instrument(
        "inference_gateway.inter_token_gap",
        "inference_gateway_inter_token_gap_seconds",
        "Time between two pieces of a streamed answer sent to the client, in seconds.",
        GAP_BUCKETS,
    ),
    Instrument(
        "inference_gateway.tool_calls",
        "inference_gateway_tool_calls",
        "Tool calls requested by models.",
        None,
    ),
    Instrument(
        "inference_gateway.guardrails",
        "inference_gateway_guardrails",
        "Guardrails decisions, by phase and action.",
        None,
    ),
)


@dataclass(frozen=True, slots=True)
class RoutingInstruments:
    """Model routing's own metrics (edgegw.routing): not pushable, the gateway's alone."""

    attempts: Counter
    failovers: Counter
    breaker_state: Gauge

    def families(self) -> tuple[Counter | Gauge, ...]:
        return (self.attempts, self.failovers, self.breaker_state)


# A breaker's states: one series each, 1 for the current one, so that the sum over the
# workers of `serve --workers N` counts the workers seeing each state.
BREAKER_STATES = ("closed", "half_open", "open")


def open_routing_instruments(max_series: int = MAX_SERIES) -> RoutingInstruments:
    return RoutingInstruments(
        attempts=Counter(
            "inference_gateway_routing_attempts",
            "Deployments tried for requests naming a routing alias, by outcome "
            "(ok, failover, error, client_gone).",
            max_series,
        ),
        failovers=Counter(
            "inference_gateway_routing_failovers",
            "Requests moved from a deployment to the next before their first byte, by reason "
            "(the upstream's status, connect, no_worker, remote_forbidden).",
            max_series,
        ),
        breaker_state=Gauge(
            "inference_gateway_routing_breaker_state",
            "Circuit breaker state per deployment: 1 for the state it is in (closed, "
            "half_open, open), 0 for the others.",
            max_series,
        ),
    )


def open_instruments(max_series: int = MAX_SERIES) -> dict[str, Histogram | Counter]:
    """Every instrument of INSTRUMENTS, by OTel name."""
    out: dict[str, Histogram | Counter] = {}
    for spec in INSTRUMENTS:
        family: Histogram | Counter
        if spec.buckets is None:
            family = Counter(spec.prometheus_name, spec.documentation, max_series)
        else:
            family = Histogram(spec.prometheus_name, spec.documentation, spec.buckets, max_series)
        out[spec.otel_name] = family
    return out
