"""OTLP metrics push (POST /v1/metrics) and the Prometheus metrics on the metrics port,
end to end on loopback: real payloads built with opentelemetry-proto, a real gateway and
the mock upstream started on port 0, the exposition text read back over HTTP."""

from __future__ import annotations

import gzip
import math

import orjson
import pytest
import trio
import trio.testing
from google.protobuf.json_format import MessageToJson, Parse
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    Metric,
)
from prometheus_client.parser import text_string_to_metric_families

from edgegw._core import RequestError, decode_otlp_metrics, gunzip_capped
from edgegw.errors import GatewayError
from edgegw.mock import MockUpstream
from edgegw.settings import Settings
from edgegw.telemetry.instruments import OVERFLOW_VALUE
from edgegw.telemetry.otlp import MAX_REPLAY_OBSERVATIONS, decode_json
from edgegw.telemetry.recording import Telemetry

from .conftest import Gateway, sample, start_gateway, upstream_env
from .conftest import scrape as scrape_port
from .rawhttp import RawResponse, request

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENABLED = {"TELEMETRY_ENABLED": "true", "TELEMETRY_METRICS_PUSH_ENABLED": "true"}
DELTA = AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = AGGREGATION_TEMPORALITY_CUMULATIVE
MiB = 1 << 20


@pytest.fixture
async def node(nursery: trio.Nursery, mock: MockUpstream) -> Gateway:
    """A gateway with telemetry and pushes on; its metrics port is picked at start."""
    return await start_gateway(nursery, upstream_env(mock, **ENABLED))


# --- payloads -------------------------------------------------------------------------


def attrs(**values: str | int) -> list[KeyValue]:
    out = []
    for key, value in values.items():
        key = key.replace("__", ".")
        any_value = (
            AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)
        )
        out.append(KeyValue(key=key, value=any_value))
    return out


# An accepted push's answer in protojson, as inference-gateway's document shows it.
ZEROS = {"partialSuccess": {"rejectedDataPoints": "0", "errorMessage": ""}}


def export(*metrics: Metric, service: str | None = "my-agent") -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    if service is not None:
        rm.resource.attributes.extend(attrs(service__name=service))
    rm.scope_metrics.add().metrics.extend(metrics)
    return req


def delta_sum(
    name: str,
    *values: int | float,
    temporality: int = DELTA,
    monotonic: bool = True,
    **labels: str,
) -> Metric:
    m = Metric(name=name)
    m.sum.aggregation_temporality = temporality
    m.sum.is_monotonic = monotonic
    for v in values:
        p = m.sum.data_points.add(**({"as_int": v} if isinstance(v, int) else {"as_double": v}))
        p.attributes.extend(attrs(**labels))
    return m


def histogram(
    name: str,
    buckets: list[int],
    bounds: list[float],
    total: float,
    temporality: int = DELTA,
    **labels: str,
) -> Metric:
    m = Metric(name=name)
    m.histogram.aggregation_temporality = temporality
    p = m.histogram.data_points.add(
        count=sum(buckets), sum=total, bucket_counts=buckets, explicit_bounds=bounds
    )
    p.attributes.extend(attrs(**labels))
    return m


def encode(req: ExportMetricsServiceRequest, kind: str) -> bytes:
    return req.SerializeToString() if kind == PROTOBUF else MessageToJson(req).encode()


async def push(
    node: Gateway,
    body: bytes,
    content_type: str = PROTOBUF,
    *,
    gzipped: bool = False,
    port: int | None = None,
) -> RawResponse:
    headers = [("content-type", content_type)]
    if gzipped:
        headers.append(("content-encoding", "gzip"))
    return await request(port or node.port, "POST", "/v1/metrics", body, headers)


def parse_response(resp: RawResponse, kind: str) -> ExportMetricsServiceResponse:
    assert resp.status == 200, resp.body
    assert resp.headers[b"content-type"] == kind.encode()
    if kind == PROTOBUF:
        return ExportMetricsServiceResponse.FromString(resp.body)
    return Parse(resp.body, ExportMetricsServiceResponse())


def error_code(resp: RawResponse) -> str:
    return orjson.loads(resp.body)["error"]["code"]


async def scrape(node: Gateway) -> str:
    return await scrape_port(node.metrics_port)


def label_names(text: str, name: str) -> list[set[str]]:
    return [
        set(s.labels)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


# --- enabling, content negotiation ------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"TELEMETRY_ENABLED": "true"},
        {"TELEMETRY_METRICS_PUSH_ENABLED": "true"},
    ],
    ids=["neither", "telemetry-only", "push-only"],
)
async def test_push_disabled_is_403(
    nursery: trio.Nursery, mock: MockUpstream, env: dict[str, str]
) -> None:
    node = await start_gateway(nursery, upstream_env(mock, **env))
    resp = await push(node, encode(export(delta_sum("gen_ai.client.token.usage", 1)), PROTOBUF))
    assert resp.status == 403
    assert error_code(resp) == "metrics_push_disabled"


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/protobuf", "application/x-protobuf2", "application/xml", ""],
)
async def test_wrong_content_type_is_415(node: Gateway, content_type: str) -> None:
    resp = await push(node, encode(export(), PROTOBUF), content_type)
    assert resp.status == 415
    assert error_code(resp) == "unsupported_media_type"


async def test_content_type_parameters_are_allowed(node: Gateway) -> None:
    body = encode(export(delta_sum("gen_ai.client.token.usage", 3)), JSON)
    resp = await push(node, body, "Application/JSON; charset=utf-8")
    assert resp.status == 200
    assert orjson.loads(resp.body) == ZEROS


async def test_unknown_content_encoding_is_415(node: Gateway) -> None:
    headers = [("content-type", PROTOBUF), ("content-encoding", "br")]
    resp = await request(node.port, "POST", "/v1/metrics", b"", headers)
    assert resp.status == 415


async def test_only_post(node: Gateway) -> None:
    resp = await request(node.port, "GET", "/v1/metrics")
    assert resp.status == 405


# --- accepted payloads and partialSuccess -----------------------------------------------


@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
async def test_accepted_payload_answers_in_its_encoding(node: Gateway, kind: str) -> None:
    req = export(
        delta_sum("gen_ai.client.token.usage", 10, 20, gen_ai__token__type="input"),
        histogram("gen_ai.server.request.duration", [1, 2, 0], [0.5, 1.0], 1.75),
    )
    reply = parse_response(await push(node, encode(req, kind), kind), kind)
    assert reply.partial_success.rejected_data_points == 0
    assert reply.partial_success.error_message == ""
    if kind == JSON:
        assert orjson.loads((await push(node, encode(req, kind), kind)).body) == ZEROS


@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
async def test_an_empty_push_answers_partial_success_with_zeros(node: Gateway, kind: str) -> None:
    resp = await push(node, encode(ExportMetricsServiceRequest(), kind), kind)
    assert resp.status == 200
    if kind == JSON:
        # As the reference document's example, field for field.
        assert orjson.loads(resp.body) == ZEROS
    else:
        assert resp.body == b"\x0a\x00"  # partial_success set, both fields zero
        assert parse_response(resp, kind).HasField("partial_success")


@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
async def test_partial_success_counts_rejected_points(node: Gateway, kind: str) -> None:
    req = export(
        delta_sum("gen_ai.client.token.usage", 5),  # accepted
        delta_sum("my.custom.metric", 1, 2),  # unsupported name: 2 points
        histogram("gen_ai.server.request.duration", [1], [], 0.2, temporality=CUMULATIVE),
        delta_sum("gen_ai.server.request.duration", 1),  # a Sum where a Histogram is due
        delta_sum("inference_gateway.tool_calls", 1, monotonic=False),
    )
    reply = parse_response(await push(node, encode(req, kind), kind), kind)
    assert reply.partial_success.rejected_data_points == 5
    reasons = reply.partial_success.error_message.split("; ")
    assert reasons == [
        'unsupported metric "my.custom.metric"',
        'metric "gen_ai.server.request.duration": only delta temporality is supported',
        'metric "gen_ai.server.request.duration": unsupported type sum',
        'metric "inference_gateway.tool_calls": must be a monotonic sum',
    ]


async def test_cumulative_sum_is_rejected(node: Gateway) -> None:
    req = export(delta_sum("gen_ai.client.token.usage", 1, 2, 3, temporality=CUMULATIVE))
    reply = parse_response(await push(node, encode(req, PROTOBUF)), PROTOBUF)
    assert reply.partial_success.rejected_data_points == 3
    assert reply.partial_success.error_message == (
        'metric "gen_ai.client.token.usage": only delta temporality is supported'
    )


# --- gzip --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
async def test_gzip_body(node: Gateway, kind: str) -> None:
    req = export(delta_sum("gen_ai.client.token.usage", 7, gen_ai__token__type="output"))
    resp = await push(node, gzip.compress(encode(req, kind)), kind, gzipped=True)
    assert parse_response(resp, kind).partial_success.rejected_data_points == 0
    text = await scrape(node)
    assert sample(text, "gen_ai_client_token_usage_count", gen_ai_token_type="output") == 1


async def test_concatenated_gzip_members(node: Gateway) -> None:
    # Two requests' bytes back to back are one request with both resources.
    first = encode(export(delta_sum("gen_ai.client.token.usage", 1), service="a"), PROTOBUF)
    second = encode(export(delta_sum("gen_ai.client.token.usage", 2), service="b"), PROTOBUF)
    body = gzip.compress(first) + gzip.compress(second)
    assert len(decode_otlp_metrics(gunzip_capped(body, MiB))) == 2
    resp = await push(node, body, gzipped=True)
    assert parse_response(resp, PROTOBUF).partial_success.rejected_data_points == 0
    text = await scrape(node)
    assert sample(text, "gen_ai_client_token_usage_count", source="a") == 1
    assert sample(text, "gen_ai_client_token_usage_count", source="b") == 1


@pytest.mark.parametrize("decoded_mib", [5, 80], ids=["inline", "in-thread"])
async def test_gzip_bomb_is_413(node: Gateway, decoded_mib: int) -> None:
    bomb = gzip.compress(bytes(decoded_mib * MiB), compresslevel=9)
    assert len(bomb) < decoded_mib * MiB // 500
    resp = await push(node, bomb, gzipped=True)
    assert resp.status == 413
    error = orjson.loads(resp.body)["error"]
    assert (error["code"], error["message"]) == ("payload_too_large", "Payload exceeds 4 MiB limit")


async def test_exactly_4_mib_decoded_is_not_413(node: Gateway) -> None:
    # 4 MiB of zeros is not protobuf (field number 0): past the cap, the decoder says 400.
    resp = await push(node, gzip.compress(bytes(4 * MiB)), gzipped=True)
    assert resp.status == 400


@pytest.mark.parametrize("cut", [1, 8, 30])
async def test_truncated_gzip_is_400(node: Gateway, cut: int) -> None:
    body = gzip.compress(encode(export(delta_sum("gen_ai.client.token.usage", 1)), PROTOBUF))
    resp = await push(node, body[:-cut], gzipped=True)
    assert resp.status == 400
    assert error_code(resp) == "invalid_request"


async def test_not_gzip_is_400(node: Gateway) -> None:
    resp = await push(node, encode(export(), PROTOBUF), gzipped=True)
    assert resp.status == 400


# --- bad payloads --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (PROTOBUF, b"this is not protobuf"),
        (PROTOBUF, b"\x0a\xff\xff\xff\x0f"),  # a length far past the end
        (JSON, b"{not json"),
        (JSON, b"[]"),
        (JSON, b'{"resourceMetrics": {}}'),
        (JSON, b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": 5}]}]}]}'),
        (
            JSON,
            b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"sum": {}, "gauge": {}}]}]}]}',
        ),
    ],
)
async def test_undecodable_payload_is_400(node: Gateway, kind: str, body: bytes) -> None:
    resp = await push(node, body, kind)
    assert resp.status == 400
    error = orjson.loads(resp.body)["error"]
    assert (error["code"], error["message"]) == ("invalid_request", "Failed to decode OTLP payload")


async def test_body_over_the_server_cap_is_413(nursery: trio.Nursery, mock: MockUpstream) -> None:
    node = await start_gateway(
        nursery, upstream_env(mock, SERVER_MAX_REQUEST_BODY_SIZE="2048", **ENABLED)
    )
    resp = await push(node, bytes(4096))
    assert resp.status == 413
    assert error_code(resp) == "payload_too_large"


# --- what reaches /metrics --------------------------------------------------------------------


async def test_pushed_points_reach_metrics(node: Gateway) -> None:
    req = export(
        delta_sum(
            "gen_ai.client.token.usage",
            100,
            2.9,  # a double is truncated
            gen_ai__token__type="input",
            gen_ai__provider__name="openai",
            gen_ai__request__model="gpt-4o",
            team="search",
            not__allowlisted="dropped",
            gen_ai__tool__name=3,  # not a string: dropped
        ),
        delta_sum("inference_gateway.tool_calls", 2, 3, gen_ai__tool__name="lookup"),
        histogram(
            "gen_ai.client.operation.duration",
            [1, 2, 3],
            [0.1, 1.0],
            5.5,
            gen_ai__operation__name="chat",
        ),
    )
    parse_response(await push(node, encode(req, PROTOBUF)), PROTOBUF)
    text = await scrape(node)
    labels = {
        "source": "my-agent",
        "team": "search",
        "gen_ai_token_type": "input",
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": "gpt-4o",
    }
    assert sample(text, "gen_ai_client_token_usage_count", **labels) == 2
    assert sample(text, "gen_ai_client_token_usage_sum", **labels) == 102
    assert sample(text, "gen_ai_client_token_usage_bucket", le="4.0", **labels) == 1
    assert label_names(text, "gen_ai_client_token_usage_count") == [set(labels)]
    assert sample(text, "inference_gateway_tool_calls_total", gen_ai_tool_name="lookup") == 5
    # Replay: 1 at 0.1 (first bucket's bound), 2 at 0.55 (midpoint), 3 at 1.0 (last bound);
    # _count exact and, the point being replayed whole, _sum the pushed one.
    op = {"source": "my-agent", "team": "unknown", "gen_ai_operation_name": "chat"}
    name = "gen_ai_client_operation_duration_seconds"
    assert sample(text, name + "_count", **op) == 6
    assert sample(text, name + "_sum", **op) == 5.5
    assert sample(text, name + "_bucket", le="0.16", **op) == 1
    assert sample(text, name + "_bucket", le="0.64", **op) == 3
    assert sample(text, name + "_bucket", le="1.28", **op) == 6


async def test_histogram_replay_is_capped(node: Gateway) -> None:
    req = export(histogram("gen_ai.execute_tool.duration", [20_000], [], 40_000.0))
    parse_response(await push(node, encode(req, PROTOBUF)), PROTOBUF)
    text = await scrape(node)
    name = "gen_ai_execute_tool_duration_seconds"
    assert sample(text, name + "_count") == MAX_REPLAY_OBSERVATIONS
    # At the mean (2.0) each: the sum of what was replayed, not the pushed sum.
    assert sample(text, name + "_sum") == 2.0 * MAX_REPLAY_OBSERVATIONS


async def test_malformed_histogram_points_are_rejected(node: Gateway) -> None:
    bad = histogram("gen_ai.server.time_to_first_token", [1, 1], [0.5, 1.0], 1.0)  # 2 != 3
    nan = histogram("gen_ai.server.time_to_first_token", [1, 1], [math.nan], 1.0)
    negative = delta_sum("gen_ai.client.token.usage", -4)
    reply = parse_response(await push(node, encode(export(bad, nan, negative), PROTOBUF)), PROTOBUF)
    assert reply.partial_success.rejected_data_points == 3
    assert reply.partial_success.error_message == (
        'metric "gen_ai.server.time_to_first_token": malformed histogram data point; '
        'metric "gen_ai.client.token.usage": invalid value'
    )


@pytest.mark.parametrize(
    ("point_source", "service", "expected"),
    [
        ("my-team-bot", "my-agent", "my-team-bot"),
        ("gateway", "my-agent", "my-agent"),  # no impersonating the gateway's own series
        (" Gateway ", "my-agent", "my-agent"),
        ("gateway", "gateway", "unknown"),
        ("", None, "unknown"),
    ],
)
async def test_source_label(
    node: Gateway, point_source: str, service: str | None, expected: str
) -> None:
    extra = {"source": point_source} if point_source else {}
    req = export(delta_sum("gen_ai.client.token.usage", 1, **extra), service=service)
    parse_response(await push(node, encode(req, PROTOBUF)), PROTOBUF)
    text = await scrape(node)
    assert sample(text, "gen_ai_client_token_usage_count", source=expected) == 1
    assert sample(text, "gen_ai_client_token_usage_count", source="gateway") is None


async def test_gateway_traffic_reaches_metrics(node: Gateway) -> None:
    body = orjson.dumps(
        {
            "model": "openai/mock-small",
            "messages": [{"role": "user", "content": "one two three"}],
            "max_tokens": 4,
        }
    )
    resp = await request(node.port, "POST", "/v1/chat/completions", body)
    assert resp.status == 200
    # The gateway records the request after the last byte is sent: let it finish.
    await trio.testing.wait_all_tasks_blocked()
    text = await scrape(node)
    gw = {"source": "gateway", "team": "unknown", "gen_ai_provider_name": "openai"}
    assert sample(text, "gen_ai_server_request_duration_seconds_count", **gw) == 1
    tokens = "gen_ai_client_token_usage_sum"
    assert sample(text, tokens, gen_ai_token_type="output", **gw) == 4
    assert sample(text, tokens, gen_ai_token_type="input", **gw) == 3


async def test_metrics_server_routes(node: Gateway) -> None:
    assert (await request(node.metrics_port, "GET", "/other")).status == 404
    assert (await request(node.metrics_port, "POST", "/metrics", b"x")).status == 405
    head = await request(node.metrics_port, "HEAD", "/metrics")
    assert head.status == 200 and head.body == b""
    text = await scrape(node)  # every family is listed, even before any sample
    assert "# TYPE gen_ai_server_time_to_first_token_seconds histogram" in text
    assert "# TYPE inference_gateway_tool_calls_total counter" in text


async def test_metrics_gzipped_when_asked(node: Gateway) -> None:
    headers = [("accept-encoding", "gzip, deflate")]
    resp = await request(node.metrics_port, "GET", "/metrics", b"", headers)
    assert resp.headers[b"content-encoding"] == b"gzip"
    assert gzip.decompress(resp.body).decode() == await scrape(node)


async def test_metrics_server_keeps_connections_alive(node: Gateway) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", node.metrics_port)
    async with stream:
        req = b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n"
        await stream.send_all(req + req)
        received = b""
        while received.count(b"HTTP/1.1 200") < 2:
            chunk = await stream.receive_some(65536)
            assert chunk
            received += chunk


# --- Telemetry without a gateway: recorded by the test, read from its scrape server --------------


def telemetry(*, enabled: bool = True, **kw: int) -> Telemetry:
    return Telemetry(Settings(telemetry_enabled=enabled, telemetry_metrics_port=0), **kw)


async def scrape_telemetry(nursery: trio.Nursery, t: Telemetry) -> str:
    """What a scrape of `t` reads: its own scrape server, started on a free loopback port."""
    return await scrape_port(await nursery.start(t.serve_metrics))


def record(t: Telemetry, model: str, duration_s: float = 0.5) -> None:
    """One successful request without TTFT, usage or tool calls."""
    t.record_generation(
        provider="openai",
        model=model,
        status=200,
        duration_s=duration_s,
        ttft_s=None,
        usage=None,
        tool_calls=[],
    )


async def test_record_generation(nursery: trio.Nursery) -> None:
    t = telemetry()
    common = {"provider": "openai", "duration_s": 0.3, "tool_calls": []}
    t.record_generation(
        model="gpt-4o",
        status=200,
        ttft_s=0.05,
        usage={"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
        **common,
    )
    t.record_generation(model="gpt-4o", status=502, ttft_s=None, usage=None, **common)
    t.record_generation(
        model="claude",
        status=200,
        ttft_s=None,
        usage={"input_tokens": 1, "output_tokens": 2},
        provider="anthropic",
        duration_s=0.1,
        tool_calls=["search", "search"],
    )
    text = await scrape_telemetry(nursery, t)
    gw = {"source": "gateway", "gen_ai_request_model": "gpt-4o"}
    duration = "gen_ai_server_request_duration_seconds_count"
    assert sample(text, duration, **gw, error_type="502") == 1
    assert sample(text, "gen_ai_server_time_to_first_token_seconds_count", **gw) == 1
    assert sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **gw) == 12
    assert sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **gw) == 30
    claude = {"gen_ai_request_model": "claude", "gen_ai_provider_name": "anthropic"}
    assert sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **claude) == 1
    calls = {"gen_ai_tool_name": "search", "gen_ai_tool_type": "standard_tool_use"}
    assert sample(text, "inference_gateway_tool_calls_total", **calls) == 2


async def test_record_generation_is_off_without_telemetry(nursery: trio.Nursery) -> None:
    t = telemetry(enabled=False)
    record(t, "m", duration_s=1)
    text = await scrape_telemetry(nursery, t)
    assert "# TYPE gen_ai_server_request_duration_seconds histogram" in text  # a real scrape
    assert "gen_ai_server_request_duration_seconds_count" not in text


async def test_label_cardinality_is_bounded(nursery: trio.Nursery) -> None:
    t = telemetry(max_series=3)
    for i in range(10):
        record(t, f"model-{i}")
    text = await scrape_telemetry(nursery, t)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    counts = [
        s
        for s in families["gen_ai_server_request_duration_seconds"].samples
        if s.name.endswith("_count")
    ]
    assert len(counts) == 4  # three label sets, then one overflow series
    overflow = sample(
        text,
        "gen_ai_server_request_duration_seconds_count",
        gen_ai_request_model=OVERFLOW_VALUE,
    )
    assert overflow == 7
    # The gateway's own traffic stays apart from pushes even when folded.
    assert (
        sample(text, "gen_ai_server_request_duration_seconds_count", source="gateway", team="other")
        == 7
    )


async def test_long_label_values_are_cut(nursery: trio.Nursery) -> None:
    t = telemetry()
    record(t, "m" * 10_000)
    text = await scrape_telemetry(nursery, t)
    assert "m" * 257 not in text and "m" * 256 in text


# --- decoders agree, and never fail another way ----------------------------------------------


def rich_request() -> ExportMetricsServiceRequest:
    gauge = Metric(name="g")
    gauge.gauge.data_points.add(as_double=1.5).attributes.extend(attrs(a="b", n=1))
    summary = Metric(name="s")
    summary.summary.data_points.add(count=1, sum=2.0)
    expo = Metric(name="e")
    expo.exponential_histogram.aggregation_temporality = CUMULATIVE
    expo.exponential_histogram.data_points.add(count=3)
    no_sum = histogram("gen_ai.server.request.duration", [2], [], 0.0)
    no_sum.histogram.data_points[0].ClearField("sum")
    return export(
        delta_sum("gen_ai.client.token.usage", 2**62, -3, 0.5, team="t"),
        histogram("gen_ai.server.request.duration", [1, 2, 3], [0.5, 1.0], 3.25, source="x"),
        no_sum,
        gauge,
        summary,
        expo,
        Metric(name="empty"),
    )


@pytest.mark.parametrize("proto_names", [False, True], ids=["camelCase", "proto-names"])
def test_json_and_protobuf_decode_alike(proto_names: bool) -> None:
    req = rich_request()
    from_json = decode_json(MessageToJson(req, preserving_proto_field_name=proto_names).encode())
    assert from_json == decode_otlp_metrics(req.SerializeToString())
    # Enums as numbers, int64 as JSON numbers: protojson readers accept both.
    doc = orjson.loads(MessageToJson(req, use_integers_for_enums=True))
    doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"][1]["asInt"] = -3
    assert decode_json(orjson.dumps(doc)) == from_json


def test_json_limits() -> None:
    many = export(delta_sum("x", *range(50_001)))
    with pytest.raises(GatewayError) as info:
        decode_json(MessageToJson(many).encode())
    assert (info.value.status, info.value.code) == (413, "payload_too_large")
    with pytest.raises(RequestError) as err:
        decode_otlp_metrics(many.SerializeToString())
    assert (err.value.status, err.value.code) == (413, "payload_too_large")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_request_error(data: bytes) -> None:
    for fn in (decode_otlp_metrics, lambda d: gunzip_capped(d, 1 << 16)):
        try:
            fn(data)
        except RequestError as e:
            assert e.status == 400 and e.code == "invalid_request"
