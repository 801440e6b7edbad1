"""POST /v1/metrics: an OTLP/HTTP metrics export (protobuf or JSON, optionally gzipped)
whose accepted points add to the gateway's metrics (rules in edgegw.telemetry.otlp)."""

from __future__ import annotations

import logging

from edgegw._core import OTLP_MAX_DECODED_BYTES, encode_otlp_metrics_response
from edgegw.asgi import Call
from edgegw.errors import GatewayError, fail
from edgegw.gateway import Gateway
from edgegw.telemetry.otlp import record_push
from edgegw.telemetry.recording import JSON, PROTOBUF

log = logging.getLogger("edgegw.telemetry")


def _too_large(limit: int) -> GatewayError:
    if limit == OTLP_MAX_DECODED_BYTES:
        return fail("payload_too_large", "Payload exceeds 4 MiB limit")
    return fail("payload_too_large", f"Payload exceeds {limit} bytes limit")


def _header(call: Call, name: bytes) -> str | None:
    value = call.header(name)
    return None if value is None else value.decode("latin-1")


async def metrics_push(gw: Gateway, call: Call) -> None:
    """Record what the rules accept; answer ExportMetricsServiceResponse in the request's
    encoding."""
    telemetry = gw.telemetry
    if not telemetry.push_enabled:
        raise fail("metrics_push_disabled", "Metrics push is not enabled")
    media_type = (_header(call, b"content-type") or "").partition(";")[0].strip().lower()
    if media_type not in (PROTOBUF, JSON):
        raise fail("unsupported_media_type", f"Content-Type must be {PROTOBUF} or {JSON}")
    encoding = (_header(call, b"content-encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip"):
        raise fail("unsupported_media_type", "Content-Encoding must be gzip or absent")
    limit = min(gw.settings.max_body_bytes, OTLP_MAX_DECODED_BYTES)
    try:
        body = await call.read_body(limit)
    except GatewayError as e:
        if e.status == 413:
            raise _too_large(limit) from None
        raise
    as_json = media_type == JSON
    resources = await telemetry.decode_push(body, gzip=encoding != "identity", as_json=as_json)
    result = record_push(resources, telemetry.instruments)
    if result.rejected:
        log.debug("OTLP push: %d points rejected (%s)", result.rejected, result.error_message)
    if as_json:
        await call.respond_json(200, result.json_response())
        return
    payload = encode_otlp_metrics_response(result.rejected, result.error_message)
    headers = [(b"content-type", PROTOBUF.encode()), (b"content-length", b"%d" % len(payload))]
    await call.respond(200, headers, payload)
