"""Nothing an operator sets is silently ignored.

inference-gateway's variables that edgegw does not implement (yet) are named in one warning
each at start; a variable that asks for protection edgegw cannot give stops the start
instead (never fail open); an `EDGEGW_*` variable edgegw does not know (a typo) is named too.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping

log = logging.getLogger("edgegw.settings")

# inference-gateway variables (and prefixes, ending in "_") edgegw does not act on, with
# what that means for the operator.
NOT_IMPLEMENTED: dict[str, str] = {
    "A2A_": "agent-to-agent endpoints are not part of edgegw",
    "MCP_RESPONSE_HEADER_TIMEOUT": "each MCP request is bounded whole by MCP_REQUEST_TIMEOUT",
    "MCP_EXPECT_CONTINUE_TIMEOUT": "the MCP client sends request bodies without Expect",
    # The OpenTelemetry SDK's own variables that edgegw fixes (edgegw.telemetry.tracing);
    # edgegw.telemetry.otelsdk honours OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _COMPRESSION,
    # _CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE and OTEL_BSP_SCHEDULE_DELAY, the SDK's
    # resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; settings read
    # OTEL_TRACES_SAMPLER(_ARG).
    "OTEL_BSP_MAX_QUEUE_SIZE": "edgegw bounds the export queue at 2048 spans",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "edgegw exports 512 spans per request at most",
    "OTEL_BSP_EXPORT_TIMEOUT": "edgegw bounds each export at 5 s",
    "OTEL_EXPORTER_OTLP_TIMEOUT": "edgegw bounds each export at 5 s",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "edgegw bounds each export at 5 s",
    "OTEL_TRACES_EXPORTER": "edgegw exports spans by OTLP/HTTP protobuf only",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "edgegw exports spans by OTLP/HTTP protobuf only",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "edgegw exports spans by OTLP/HTTP protobuf only",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "edgegw reads TELEMETRY_TRACING_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "edgegw reads TELEMETRY_TRACING_OTLP_ENDPOINT",
    "OTEL_PROPAGATORS": "edgegw propagates W3C trace context (traceparent, tracestate) only",
    "OTEL_SDK_DISABLED": "edgegw reads TELEMETRY_TRACING_ENABLED",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER": "edgegw's exporter takes no "
    "session provider; set OTEL_EXPORTER_OTLP_HEADERS",
    "DEBUG_CONTENT_TRUNCATE_WORDS": "edgegw logs no prompt or completion text",
    "DEBUG_MAX_MESSAGES": "edgegw logs no prompt or completion text",
    "ENVIRONMENT": "edgegw has no development mode; LOG_LEVEL sets the verbosity",
    "ENABLE_AUDIO": "the audio endpoints are not served",
    "ENABLE_TELEMETRY": "edgegw reads TELEMETRY_ENABLED",
    "SERVER_READ_TIMEOUT": "edgegw reads SERVER_HEADER_TIMEOUT and SERVER_BODY_*_TIMEOUT",
    "SERVER_WRITE_TIMEOUT": "edgegw reads SERVER_WRITE_STALL_TIMEOUT",
    "SERVER_IDLE_TIMEOUT": "edgegw reads SERVER_KEEPALIVE_TIMEOUT",
    "CLIENT_MAX_IDLE_CONNS": "edgegw reads UPSTREAM_POOL_IDLE_PER_HOST",
    "CLIENT_MAX_IDLE_CONNS_PER_HOST": "edgegw reads UPSTREAM_POOL_IDLE_PER_HOST",
    "CLIENT_IDLE_CONN_TIMEOUT": "idle upstream connections are checked before reuse instead",
    "CLIENT_RESPONSE_HEADER_TIMEOUT": "edgegw reads UPSTREAM_FIRST_BYTE_TIMEOUT",
    "CLIENT_TIMEOUT": "edgegw reads UPSTREAM_FIRST_BYTE_TIMEOUT and UPSTREAM_IDLE_TIMEOUT",
    "CLIENT_DISABLE_COMPRESSION": "edgegw always asks upstreams for identity encoding",
    "CLIENT_EXPECT_CONTINUE_TIMEOUT": "edgegw sends request bodies without Expect",
}

# MCP_* variables that act with MCP_ENABLED unset (MCP_EXPOSE: an empty tool list).
MCP_WITHOUT_MCP = frozenset({"MCP_ENABLED", "MCP_EXPOSE"})
# The GUARDRAILS_* variables edgegw reads (edgegw.guardrails.settings); the others only
# act with GUARDRAILS_ENABLED true.
GUARDRAILS_KNOWN = frozenset(
    {
        "GUARDRAILS_ENABLED",
        "GUARDRAILS_POLICY_DIR",
        "GUARDRAILS_FAIL_MODE",
        "GUARDRAILS_EXTERNAL_URL",
        "GUARDRAILS_EXTERNAL_TIMEOUT",
    }
)

# The routing variables (edgegw.routing.config); the path acts only with ROUTING_ENABLED.
ROUTING = frozenset({"ROUTING_ENABLED", "ROUTING_CONFIG_PATH"})

# Settings that ask for protection: set (an *_ENABLED one: to a true value) and not
# implemented, they stop the start. Each is (variable, what to do).
REFUSED: tuple[tuple[str, str], ...] = ()

# Every EDGEGW_* variable edgegw reads.
KNOWN_EDGEGW = frozenset(
    {
        "EDGEGW_API_KEYS",
        "EDGEGW_API_KEYS_FILE",
        "EDGEGW_WORKERS",
        "EDGEGW_MAX_IN_FLIGHT",
        "EDGEGW_COMMUNITY_MODELS_FILE",
        "EDGEGW_RESPONSE_BUFFER_BUDGET",
        "EDGEGW_SERVER",
        "EDGEGW_BENCH_API_KEY",
    }
)


def _enabled(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def refusals(environ: Mapping[str, str]) -> list[str]:
    """Messages for the settings that must stop the start (empty: none)."""
    out = []
    for name, why in REFUSED:
        value = environ.get(name, "")
        if value.strip() and (not name.endswith("_ENABLED") or _enabled(value)):
            out.append(f"{name}: {why}")
    return out


def unhonoured(environ: Mapping[str, str], extra_known: Iterable[str] = ()) -> list[str]:
    """One warning per variable that is set and that edgegw does not act on."""
    known = KNOWN_EDGEGW | set(extra_known)
    mcp_off = not _enabled(environ.get("MCP_ENABLED", ""))
    routing_off = not _enabled(environ.get("ROUTING_ENABLED", ""))
    guardrails_off = not _enabled(environ.get("GUARDRAILS_ENABLED", ""))
    out = []
    if _enabled(environ.get("TELEMETRY_TRACING_ENABLED", "")) and not _enabled(
        environ.get("TELEMETRY_ENABLED", "")
    ):
        out.append(
            "TELEMETRY_TRACING_ENABLED is set but not honoured: TELEMETRY_ENABLED is not true"
        )
    for name in sorted(environ):
        if not environ[name].strip():
            continue
        if mcp_off and name.startswith("MCP_") and name not in MCP_WITHOUT_MCP:
            out.append(f"{name} is set but not honoured: MCP_ENABLED is not true")
            continue
        if name.startswith("ROUTING_") and name != "ROUTING_ENABLED":
            if name not in ROUTING:
                out.append(f"{name} is set but edgegw has no such setting (a typo?)")
            elif routing_off:
                out.append(f"{name} is set but not honoured: ROUTING_ENABLED is not true")
            continue
        if name.startswith("GUARDRAILS_") and name != "GUARDRAILS_ENABLED":
            if name not in GUARDRAILS_KNOWN:
                out.append(f"{name} is set but edgegw has no such setting (a typo?)")
            elif guardrails_off:
                out.append(f"{name} is set but not honoured: GUARDRAILS_ENABLED is not true")
            continue
        for key, why in NOT_IMPLEMENTED.items():
            if name == key or (key.endswith("_") and name.startswith(key)):
                out.append(f"{name} is set but not honoured: {why}")
                break
        else:
            if name.startswith("EDGEGW_") and name not in known:
                out.append(f"{name} is set but edgegw has no such setting (a typo?)")
    return out


def warn_unhonoured(environ: Mapping[str, str], extra_known: Iterable[str] = ()) -> None:
    for message in unhonoured(environ, extra_known):
        log.warning("%s", message)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def exposure(host: str, authenticated: bool) -> str | None:
    """The warning for a gateway reachable from a network with nobody asked who they are."""
    if is_loopback(host) or authenticated:
        return None
    return (
        f"SERVER_HOST={host} is not a loopback address and no client authentication "
        "is set (EDGEGW_API_KEYS, EDGEGW_API_KEYS_FILE or AUTH_ENABLED): anyone who reaches "
        "this port uses the providers' keys"
    )
