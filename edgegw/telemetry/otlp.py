"""OTLP metrics push (`POST /v1/metrics`): the JSON (protojson) reader and the accept/reject
rules of inference-gateway (notes 13.3). Protobuf is decoded by the Rust core
(`_core.decode_otlp_metrics`) into the shape `decode_json` returns (`Resource`):

    [(service_name | None, [(name, kind, temporality, is_monotonic, points), ...]), ...]

kind is "gauge", "sum", "histogram", "exponential_histogram", "summary" or "" (no data);
points by kind: gauge and sum (attributes, value), histogram (attributes, count, sum,
bucket_counts, explicit_bounds), the others (attributes,); attributes are the string ones.
`record_push` applies the rules; a pushed series' labels come from `_series_key`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from edgegw._core import OTLP_MAX_ATTRIBUTES, OTLP_MAX_DATA_POINTS
from edgegw.errors import GatewayError, fail
from edgegw.telemetry.instruments import Counter, Histogram, Labels, labels

DELTA = 1
TEMPORALITY_NAMES = {
    "AGGREGATION_TEMPORALITY_UNSPECIFIED": 0,
    "AGGREGATION_TEMPORALITY_DELTA": 1,
    "AGGREGATION_TEMPORALITY_CUMULATIVE": 2,
}

TOKEN_USAGE = "gen_ai.client.token.usage"
TOOL_CALLS = "inference_gateway.tool_calls"
# Accepted metric name -> the kinds it may be pushed as.
ACCEPTED_KINDS: dict[str, tuple[str, ...]] = {
    TOKEN_USAGE: ("sum", "histogram"),
    TOOL_CALLS: ("sum",),
    "gen_ai.client.operation.duration": ("histogram",),
    "gen_ai.server.request.duration": ("histogram",),
    "gen_ai.client.operation.time_to_first_chunk": ("histogram",),
    "gen_ai.server.time_to_first_token": ("histogram",),
    "gen_ai.execute_tool.duration": ("histogram",),
}
# Pushed attribute -> Prometheus label.
ATTRIBUTE_LABELS = {
    "gen_ai.provider.name": "gen_ai_provider_name",
    "gen_ai.system": "gen_ai_system",  # legacy name of gen_ai.provider.name
    "gen_ai.request.model": "gen_ai_request_model",
    "gen_ai.response.model": "gen_ai_response_model",
    "gen_ai.operation.name": "gen_ai_operation_name",
    "gen_ai.token.type": "gen_ai_token_type",
    "gen_ai.tool.name": "gen_ai_tool_name",
    "gen_ai.tool.type": "gen_ai_tool_type",
    "error.type": "error_type",
}
GATEWAY_SOURCE = "gateway"
UNKNOWN = "unknown"

# inference-gateway's cap: bounds the work one pushed histogram point can cause there.
MAX_REPLAY_OBSERVATIONS = 10_000
# Distinct reasons in errorMessage, and how much of a pushed name one may echo.
MAX_REASONS = 16
MAX_NAME_IN_REASON = 128

Attributes = dict[str, str]
Metric = tuple[str, str, int, bool, list[Any]]
Resource = tuple[str | None, list[Metric]]


@dataclass
class PushResult:
    accepted: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def reject(self, points: int, reason: str) -> None:
        self.rejected += points
        if reason not in self.reasons and len(self.reasons) < MAX_REASONS:
            self.reasons.append(reason)

    @property
    def error_message(self) -> str:
        return "; ".join(self.reasons)

    def json_response(self) -> bytes:
        """ExportMetricsServiceResponse in protojson (int64 as a string)."""
        partial = {"rejectedDataPoints": str(self.rejected), "errorMessage": self.error_message}
        return orjson.dumps({"partialSuccess": partial})


def record_push(
    resources: list[Resource], instruments: dict[str, Histogram | Counter]
) -> PushResult:
    """Apply the rules to decoded resources, recording accepted points into `instruments`
    (keyed by OTel name). Per metric: gen_ai.client.token.usage is a delta Sum (each point
    one observation; a double truncated) or a delta Histogram; the durations and time to
    first token/chunk are delta Histograms; inference_gateway.tool_calls a delta, monotonic
    Sum; any other name is `unsupported metric "<name>"`, and every other rejection names
    its metric (`metric "<name>": <reason>`), as the reference document's example.
    Each rejected point counts in `rejectedDataPoints`; the distinct reasons (at most
    MAX_REASONS) are joined with "; ". `partialSuccess` is always answered, zeros included.
    Beyond inference-gateway, points it would record as garbage are rejected: a non-finite
    or negative Sum value, a histogram with bounds not finite and increasing or counts that
    disagree with them."""
    result = PushResult()
    for service_name, metrics in resources:
        for name, kind, temporality, monotonic, points in metrics:
            if not points:
                continue
            reason = _metric_rejection(name, kind, temporality, monotonic)
            if reason is not None:
                result.reject(len(points), reason)
                continue
            shown = name[:MAX_NAME_IN_REASON]
            family = instruments[name]
            for point in points:
                key = _series_key(point[0], service_name)
                if isinstance(family, Counter):
                    why = _add_sum(family, key, point[1])
                elif kind == "sum":
                    why = _observe_sum(family, key, point[1])
                else:
                    why = _replay_histogram(family, key, point)
                if why is None:
                    result.accepted += 1
                else:
                    result.reject(1, f'metric "{shown}": {why}')
    return result


def _metric_rejection(name: str, kind: str, temporality: int, monotonic: bool) -> str | None:
    kinds = ACCEPTED_KINDS.get(name)
    if kinds is None:
        return f'unsupported metric "{name[:MAX_NAME_IN_REASON]}"'
    if kind not in kinds:
        return f'metric "{name}": unsupported type {kind or "(none)"}'
    if temporality != DELTA:
        return f'metric "{name}": only delta temporality is supported'
    if name == TOOL_CALLS and not monotonic:
        return f'metric "{name}": must be a monotonic sum'
    return None


def _is_gateway(value: str) -> bool:
    return value.strip().casefold() == GATEWAY_SOURCE


def _series_key(attributes: Attributes, service_name: str | None) -> Labels:
    """`source` (the point's attribute, else the resource's service.name, else "unknown"),
    `team`, and ATTRIBUTE_LABELS. A push can never claim `source="gateway"` (skipped from
    either place), so it cannot impersonate the gateway's own traffic."""
    source = attributes.get("source", "")
    if not source or _is_gateway(source):
        source = service_name or ""
    if not source or _is_gateway(source):
        source = UNKNOWN
    values = {"source": source, "team": attributes.get("team") or UNKNOWN}
    for attribute, label in ATTRIBUTE_LABELS.items():
        value = attributes.get(attribute)
        if value:
            values[label] = value
    return labels(values)


def _sum_value(value: int | float | None) -> int | None:
    """A Sum point's value as a non-negative integer, or None when it is not one."""
    if value is None:
        return 0  # no value set: OTLP's default
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = math.trunc(value)
    return value if value >= 0 else None


def _observe_sum(family: Histogram, key: Labels, value: int | float | None) -> str | None:
    n = _sum_value(value)
    if n is None:
        return "invalid value"
    family.observe(key, n)
    return None


def _add_sum(family: Counter, key: Labels, value: int | float | None) -> str | None:
    n = _sum_value(value)
    if n is None:
        return "invalid value"
    family.inc(key, n)
    return None


def _replay_histogram(family: Histogram, key: Labels, point: tuple[Any, ...]) -> str | None:
    """Each bucket's count recorded at a representative value (the first bucket at its
    upper bound, interior ones at their midpoint, the overflow at the last bound; without
    bounds, at sum / count), at most MAX_REPLAY_OBSERVATIONS, as inference-gateway does;
    but weighted (one call per bucket) and, replayed whole, with its exact `sum`, so
    `_count` and `_sum` are exact. Percentiles stay approximate (the bounds differ)."""
    _, count, total, buckets, bounds = point
    malformed = "malformed histogram data point"
    if total is not None and not math.isfinite(total):
        return malformed
    if not all(math.isfinite(b) for b in bounds) or any(
        a >= b for a, b in zip(bounds, bounds[1:], strict=False)
    ):
        return malformed
    if (bounds or buckets) and len(buckets) != len(bounds) + 1:
        return malformed  # bucket_counts has one more entry than bounds, or both are empty
    if buckets and sum(buckets) != count:
        return malformed
    if bounds:
        values = [bounds[0]]
        values += [(lo + hi) / 2 for lo, hi in zip(bounds, bounds[1:], strict=False)]
        values.append(bounds[-1])
        weighted = list(zip(values, buckets, strict=True))
    else:
        mean = total / count if count and total is not None else 0.0
        weighted = [(mean, count)]
    left = MAX_REPLAY_OBSERVATIONS
    replay: list[tuple[float, int]] = []
    for value, n in weighted:
        if n and left:
            replay.append((value, min(n, left)))
            left -= min(n, left)
    capped = count > MAX_REPLAY_OBSERVATIONS
    exact = total is not None and not capped
    family.observe_weighted(key, replay, total if exact else sum(v * n for v, n in replay))
    return None


# --- protojson -------------------------------------------------------------------------

_INT = re.compile(r"-?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_KINDS = ("gauge", "sum", "histogram", "exponential_histogram", "summary")


class _Invalid(Exception):
    pass


@functools.cache
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _get(obj: dict[str, Any], name: str) -> Any:
    """A field by its JSON (lowerCamelCase) name or its proto name; null is absent."""
    value = obj.get(_camel(name))
    return obj.get(name) if value is None else value


def _obj(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid
    return value


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Invalid
    return value


def _str(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Invalid
    return value


def _bool(value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _Invalid
    return value


def _integer(value: Any, bounds: tuple[int, int]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise _Invalid
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise _Invalid
    return value


def _float(value: Any) -> float:
    if isinstance(value, bool):
        raise _Invalid
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        special = _SPECIAL_FLOATS.get(value)
        if special is not None:
            return special
        try:
            return float(value)
        except ValueError:
            raise _Invalid from None
    raise _Invalid


def _enum(value: Any) -> int:
    if isinstance(value, str):
        number = TEMPORALITY_NAMES.get(value)
        if number is None:
            raise _Invalid
        return number
    return _integer(value, (-(2**31), 2**31 - 1))


class _Reader:
    """protojson -> the shared shape, within the same limits as the Rust decoder."""

    def __init__(self) -> None:
        self.points = OTLP_MAX_DATA_POINTS
        self.attributes = OTLP_MAX_ATTRIBUTES

    def request(self, doc: Any) -> list[Resource]:
        return [self.resource(_obj(rm)) for rm in _list(_get(_obj(doc), "resource_metrics"))]

    def resource(self, rm: dict[str, Any]) -> Resource:
        attrs = self.attrs(_get(_obj(_get(rm, "resource")), "attributes"))
        metrics = [
            self.metric(_obj(m))
            for scope in _list(_get(rm, "scope_metrics"))
            for m in _list(_get(_obj(scope), "metrics"))
        ]
        return attrs.get("service.name"), metrics

    def attrs(self, value: Any) -> Attributes:
        out: Attributes = {}
        for kv in _list(value):
            kv = _obj(kv)
            key = _str(kv.get("key"))
            string = _get(_obj(kv.get("value")), "string_value")
            if string is not None:
                self.attributes -= 1
                if self.attributes < 0:
                    raise _too_many(OTLP_MAX_ATTRIBUTES)
                out[key] = _str(string)
        return out

    def take_points(self, n: int) -> None:
        self.points -= n
        if self.points < 0:
            raise _too_many(OTLP_MAX_DATA_POINTS)

    def metric(self, m: dict[str, Any]) -> Metric:
        name = _str(m.get("name"))
        present = [(kind, _obj(data)) for kind in _KINDS if (data := _get(m, kind)) is not None]
        if not present:
            return name, "", 0, False, []
        if len(present) > 1:
            raise _Invalid  # a oneof set twice
        kind, data = present[0]
        raw = _list(_get(data, "data_points"))
        self.take_points(len(raw))
        temporality = _enum(_get(data, "aggregation_temporality"))
        monotonic = _bool(_get(data, "is_monotonic"))
        points: list[Any]
        if kind in ("gauge", "sum"):
            points = [self.number(_obj(p)) for p in raw]
        elif kind == "histogram":
            points = [self.histogram(_obj(p)) for p in raw]
        else:
            points = [(self.attrs(_obj(p).get("attributes")),) for p in raw]
        if kind not in ("sum", "histogram", "exponential_histogram"):
            temporality = 0
        return name, kind, temporality, monotonic and kind == "sum", points

    def number(self, p: dict[str, Any]) -> tuple[Attributes, int | float | None]:
        as_int, as_double = _get(p, "as_int"), _get(p, "as_double")
        if as_int is not None and as_double is not None:
            raise _Invalid
        value: int | float | None = None
        if as_int is not None:
            value = _integer(as_int, _INT64)
        elif as_double is not None:
            value = _float(as_double)
        return self.attrs(p.get("attributes")), value

    def histogram(self, p: dict[str, Any]) -> tuple[Any, ...]:
        total = p.get("sum")
        return (
            self.attrs(p.get("attributes")),
            _integer(p.get("count"), _UINT64),
            None if total is None else _float(total),
            [_integer(c, _UINT64) for c in _list(_get(p, "bucket_counts"))],
            [_float(b) for b in _list(_get(p, "explicit_bounds"))],
        )


def _too_many(limit: int) -> GatewayError:
    return fail(
        "payload_too_large",
        f"OTLP payload carries more than {limit} data points or attributes",
    )


def decode_json(body: bytes) -> list[Resource]:
    """A protojson `ExportMetricsServiceRequest` in the shape `decode_otlp_metrics` gives.
    Unknown fields are ignored; a known field of the wrong type is a 400."""
    try:
        return _Reader().request(orjson.loads(body))
    except (orjson.JSONDecodeError, _Invalid):
        raise fail("invalid_request", "Failed to decode OTLP payload") from None
