"""Nothing an operator sets is silently ignored.

Every variable `edgegw serve` is given, in its environment or its `--config` file, is honoured
or named in a warning at start: inference-gateway's variables that edgegw does not implement
(yet), a name edgegw does not know (with the known name nearest to it: a typo), a setting whose
feature is off, and a config-file key edgegw reads from the environment only. Old names (before
the `*_ENABLE` -> `*_ENABLED` rename) are read as the new, with a warning. A setting asking for
protection edgegw cannot give (not implemented, misspelt, contradicted) stops the start instead.

Every key of the config file is edgegw's; in the environment only the names with edgegw's or
inference-gateway's prefixes are (PATH, HOME and the like are not ours to judge).
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from edgegw.http1.limits import LIMIT_TABLE
from edgegw.providers import PROVIDERS

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
    "AUTH_OIDC_CLIENT_SECRET": "verifying a token needs only the issuer's public keys",
}

# inference-gateway's names before its rename of the boolean toggles (its #515/#516), which
# it still reads as a fallback: each is read as its new name, with a warning, and the
# new name wins when both are set.
RENAMED: dict[str, str] = {
    "TELEMETRY_ENABLE": "TELEMETRY_ENABLED",
    "TELEMETRY_METRICS_PUSH_ENABLE": "TELEMETRY_METRICS_PUSH_ENABLED",
    "TELEMETRY_TRACING_ENABLE": "TELEMETRY_TRACING_ENABLED",
    "MCP_ENABLE": "MCP_ENABLED",
    "MCP_POLLING_ENABLE": "MCP_POLLING_ENABLED",
    "AUTH_ENABLE": "AUTH_ENABLED",
}

# Settings that protect (who may call, over what, which models and tools). A name that is
# not a setting but is nearest to one of these, and asks for it (an *_ENABLED one: true),
# stops the start: running without the protection would be failing open.
PROTECTION = frozenset(
    {
        "AUTH_ENABLED",
        "EDGEGW_API_KEYS",
        "EDGEGW_API_KEYS_FILE",
        "SERVER_TLS_CERT_PATH",
        "SERVER_TLS_KEY_PATH",
        "ALLOWED_MODELS",
        "DISALLOWED_MODELS",
        "GUARDRAILS_ENABLED",
        "GUARDRAILS_POLICY_DIR",
        "GUARDRAILS_EXTERNAL_URL",
        "MCP_INCLUDE_TOOLS",
        "MCP_EXCLUDE_TOOLS",
    }
)

# Settings that ask for protection: set (an *_ENABLED one: to a true value) and not
# implemented, they stop the start. Each is (variable, what to do).
REFUSED: tuple[tuple[str, str], ...] = ()

# MCP_* variables that act with MCP_ENABLED unset (MCP_EXPOSE: an empty tool list).
MCP_WITHOUT_MCP = frozenset({"MCP_ENABLED", "MCP_EXPOSE"})
MCP_KNOWN = frozenset(
    {
        "MCP_ENABLED",
        "MCP_EXPOSE",
        "MCP_SERVERS",
        "MCP_TOOL_MODE",
        "MCP_INCLUDE_TOOLS",
        "MCP_EXCLUDE_TOOLS",
        "MCP_CLIENT_TIMEOUT",
        "MCP_DIAL_TIMEOUT",
        "MCP_TLS_HANDSHAKE_TIMEOUT",
        "MCP_REQUEST_TIMEOUT",
        "MCP_MAX_RETRIES",
        "MCP_RETRY_INTERVAL",
        "MCP_INITIAL_BACKOFF",
        "MCP_ENABLE_RECONNECT",
        "MCP_RECONNECT_INTERVAL",
        "MCP_POLLING_ENABLED",
        "MCP_POLLING_INTERVAL",
        "MCP_POLLING_TIMEOUT",
        "MCP_DISABLE_HEALTHCHECK_LOGS",
    }
)
# The GUARDRAILS_* variables edgegw reads (edgegw.guardrails.settings); the others only
# act with GUARDRAILS_ENABLED true.
GUARDRAILS_KNOWN = frozenset(
    f"GUARDRAILS_{n}"
    for n in ("ENABLED", "POLICY_DIR", "FAIL_MODE", "EXTERNAL_URL", "EXTERNAL_TIMEOUT")
)
# Tenants (edgegw.keyfile, edgegw.tenants); the OIDC claim acts only with AUTH_ENABLED.
TENANTS_KNOWN = frozenset(
    {f"TENANTS_{n}" for n in ("DEFAULT", "OIDC_CLAIM", "STORE_PATH", "REDIS_URL", "REDIS_TIMEOUT")}
    | {"TENANTS_REDIS_LIMITS_FAIL", "TENANTS_REDIS_BUDGETS_FAIL", "TENANTS_ADMIN_KEY"}
    | {"MODEL_PRICES"}
)
# The routing variables (edgegw.routing.config); the path acts only with ROUTING_ENABLED.
ROUTING = frozenset({"ROUTING_ENABLED", "ROUTING_CONFIG_PATH"})
# Every EDGEGW_* variable edgegw reads.
KNOWN_EDGEGW = frozenset(
    {
        "EDGEGW_API_KEYS",
        "EDGEGW_API_KEYS_FILE",
        "EDGEGW_WORKERS",
        "EDGEGW_MAX_IN_FLIGHT",
        "EDGEGW_MAX_BODIES",
        "EDGEGW_MAX_BODIES_PER_CLIENT",
        "EDGEGW_MAX_BODIES_BYTES",
        "EDGEGW_EMBEDDINGS_MAX_INPUTS",
        "EDGEGW_RERANK_MAX_DOCUMENTS",
        "EDGEGW_RETRIEVAL_MAX_INPUT_BYTES",
        "EDGEGW_COMMUNITY_MODELS_FILE",
        "EDGEGW_RESPONSE_BUFFER_BUDGET",
        "EDGEGW_SERVER",
        "EDGEGW_STREAM_RELAY",
        "EDGEGW_BENCH_API_KEY",
    }
)
# Read from the process's environment only (edgegw.telemetry.otelsdk, `edgegw bench`): in the
# config file they are named, not honoured.
ENVIRONMENT_ONLY = frozenset(
    {
        f"OTEL_EXPORTER_OTLP_{traces}{name}"
        for traces in ("", "TRACES_")
        for name in ("HEADERS", "COMPRESSION", "CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
    }
    | {"OTEL_BSP_SCHEDULE_DELAY", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"}
    | {"EDGEGW_BENCH_API_KEY"}
)
# Every variable edgegw reads (edgegw.settings and the feature modules it calls; the test of
# this module checks the table against their source). At start the names the settings
# looked up count as known too (`Reading.findings`), so a table lagging a new setting does
# not call it a typo.
KNOWN: frozenset[str] = (
    frozenset(
        {
            "SERVER_HOST",
            "SERVER_PORT",
            "SERVER_MAX_REQUEST_BODY_SIZE",
            "SERVER_GRACEFUL_TIMEOUT",
            "SERVER_SHUTDOWN_DELAY",
            "SERVER_TLS_CERT_PATH",
            "SERVER_TLS_KEY_PATH",
            "SERVER_HTTP2_ENABLED",
            "CLIENT_TLS_MIN_VERSION",
            "SIE_GATEWAY_DEFAULT_MAX_TOKENS",
            "SIE_GATEWAY_GPU_ALIASES",
            "UPSTREAM_CONNECT_TIMEOUT",
            "UPSTREAM_FIRST_BYTE_TIMEOUT",
            "UPSTREAM_IDLE_TIMEOUT",
            "UPSTREAM_MAX_RESPONSE_SIZE",
            "UPSTREAM_POOL_IDLE_PER_HOST",
            "UPSTREAM_POOL_MAX_PER_HOST",
            "UPSTREAM_RETRY_ATTEMPTS",
            "UPSTREAM_RETRY_BACKOFF",
            "UPSTREAM_RETRY_MAX_BACKOFF",
            "UPSTREAM_RETRY_MAX_RETRY_AFTER",
            "UPSTREAM_RETRY_DEADLINE",
            "MODELS_TIMEOUT",
            "MODELS_CACHE_TTL",
            "ALLOWED_MODELS",
            "DISALLOWED_MODELS",
            "ENABLE_VISION",
            "ENABLE_IMAGES",
            "ENABLE_API_TRANSLATION",
            "LOG_LEVEL",
            "LOG_FORMAT",
            "TELEMETRY_ENABLED",
            "TELEMETRY_METRICS_PUSH_ENABLED",
            "TELEMETRY_METRICS_PORT",
            "TELEMETRY_TRACING_ENABLED",
            "TELEMETRY_TRACING_OTLP_ENDPOINT",
            "TELEMETRY_TRACING_CONTENT",
            "OTEL_TRACES_SAMPLER",
            "OTEL_TRACES_SAMPLER_ARG",
            "AUTH_ENABLED",
            "AUTH_OIDC_ISSUER",
            "AUTH_OIDC_CLIENT_ID",
        }
    )
    | {row.env for row in LIMIT_TABLE if row.env}
    | {f"{pid.upper()}_API_{part}" for pid in PROVIDERS for part in ("URL", "KEY")}
    | KNOWN_EDGEGW
    | MCP_KNOWN
    | GUARDRAILS_KNOWN
    | ROUTING
    | TENANTS_KNOWN
    | ENVIRONMENT_ONLY
)
# What edgegw names as not read, by exact name.
_NOT_READ = frozenset(name for name in NOT_IMPLEMENTED if not name.endswith("_"))
_NAMED = KNOWN | _NOT_READ
# How alike a name and a known one must be (difflib's ratio) to be called a typo of it.
NEAR_CUTOFF = 0.8

# The environment's names that are edgegw's (or inference-gateway's) to judge.
PREFIXES = (
    "EDGEGW_",
    "SIE_GATEWAY_",
    "SERVER_",
    "CLIENT_",
    "UPSTREAM_",
    "MODELS_",
    "TELEMETRY_",
    "OTEL_",
    "AUTH_",
    "MCP_",
    "GUARDRAILS_",
    "ROUTING_",
    "TENANTS_",
    "A2A_",
    "ENABLE_",
    "DEBUG_",
    "LOG_",
    "ALLOWED_",
    "DISALLOWED_",
) + tuple(f"{pid.upper()}_API_" for pid in PROVIDERS)


@dataclass(frozen=True, slots=True)
class Reading:
    """The config file's keys and the environment's variables, the old names read as their
    new ones: what the settings are built from, and what to tell the operator about it."""

    # The file's keys, then the environment's variables over them.
    values: dict[str, str]
    # Each source: its variables, how a message says where they were set, and whether every
    # name is edgegw's (the file) or only those with its prefixes (the environment).
    sources: tuple[tuple[dict[str, str], str, bool], ...]
    # The old names read as their new ones (for the message of a refused start), and what
    # reading them found.
    renamed: tuple[str, ...]
    rename_warnings: tuple[str, ...]
    rename_refusals: tuple[str, ...]

    def findings(self, read: Collection[str] = ()) -> tuple[list[str], list[str]]:
        """(warnings, refusals): each variable set that edgegw does not act on, named once
        with its source (`<NAME> in <file>` for a config-file key); a refusal stops the
        start. `read`: names the settings were seen to look up, known whatever KNOWN says."""
        warnings, refusals = list(self.rename_warnings), list(self.rename_refusals)
        values = self.values
        if _enabled(values.get("TELEMETRY_TRACING_ENABLED", "")) and not _enabled(
            values.get("TELEMETRY_ENABLED", "")
        ):
            warnings.append(
                "TELEMETRY_TRACING_ENABLED is set but not honoured: TELEMETRY_ENABLED is not true"
            )
        known = KNOWN.union(read)
        for source, where, every_key in self.sources:
            for name in sorted(source):
                value = source[name]
                if value.strip() and (every_key or name in _NAMED or name.startswith(PREFIXES)):
                    _check(name, value, where, every_key, known, values, warnings, refusals)
        return warnings, refusals


def _enabled(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def _asks(name: str, value: str) -> bool:
    """Whether `value` set for `name` asks for what the setting does."""
    return bool(value.strip()) and (not name.endswith("_ENABLED") or _enabled(value))


def read(
    environ: Mapping[str, str],
    config: Mapping[str, str] | None = None,
    config_path: str | None = None,
) -> Reading:
    """The sources merged, the file first, the environment over it."""
    sources = ((dict(config or {}), f" in {config_path}", True), (dict(environ), "", False))
    warnings: list[str] = []
    refusals: list[str] = []
    renamed: list[str] = []
    values: dict[str, str] = {}
    for source, where, _ in sources:
        _rename(source, where, warnings, refusals, renamed)
        values.update(source)
    return Reading(values, sources, tuple(renamed), tuple(warnings), tuple(refusals))


def unhonoured(
    environ: Mapping[str, str],
    config: Mapping[str, str] | None = None,
    config_path: str | None = None,
) -> list[str]:
    """The start-up warnings for these sources."""
    return read(environ, config, config_path).findings()[0]


def _rename(
    source: dict[str, str],
    where: str,
    warnings: list[str],
    refusals: list[str],
    renamed: list[str],
) -> None:
    """Replace the old names in `source` with their new ones, the new name winning."""
    for old, new in RENAMED.items():
        value = source.pop(old, "")
        if not value.strip():
            continue
        current = source.get(new, "")
        renamed_it = f"{old}{where} is deprecated (inference-gateway renamed it {new})"
        if not current.strip():
            source[new] = value
            renamed.append(old)
            warnings.append(f"{renamed_it}: read as {new}")
        elif _enabled(current) == _enabled(value):
            warnings.append(f"{renamed_it}, which is set too: remove {old}")
        elif new in PROTECTION and _enabled(value):
            refusals.append(
                f"{old}{where} asks for what {new}, its new name, turns off: remove one "
                "(edgegw does not start unprotected on a contradiction)"
            )
        else:
            warnings.append(
                f"{old}{where} is not honoured: {new}, its new name, is set too, to another "
                "value, and wins"
            )


def _check(
    name: str,
    value: str,
    where: str,
    from_file: bool,
    known: frozenset[str],
    values: Mapping[str, str],
    warnings: list[str],
    refusals: list[str],
) -> None:
    """Name `name` (set to `value`) if edgegw does not act on it; `values` decide which
    features are on."""
    subject = f"{name}{where}"
    for refused, why in REFUSED:
        if name == refused and _asks(name, value):
            refusals.append(f"{subject}: {why}")
            return
    if from_file and name in ENVIRONMENT_ONLY:
        warnings.append(
            f"{subject} is set but not honoured: edgegw reads it from the environment only"
        )
        return
    for key, why in NOT_IMPLEMENTED.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            warnings.append(f"{subject} is set but not honoured: {why}")
            return
    if name not in known:
        near = difflib.get_close_matches(name, sorted(known | _NOT_READ), 1, NEAR_CUTOFF)
        if near and near[0] in PROTECTION and _asks(near[0], value):
            refusals.append(
                f"{subject}: edgegw has no such setting (did you mean {near[0]}?); it does "
                "not start while a protection setting may be misspelt"
            )
        elif near and near[0] in NOT_IMPLEMENTED:
            warnings.append(
                f"{subject} is set but edgegw has no such setting (did you mean {near[0]}? "
                f"That one is not honoured either: {NOT_IMPLEMENTED[near[0]]})"
            )
        elif near:
            warnings.append(
                f"{subject} is set but edgegw has no such setting (did you mean {near[0]}?)"
            )
        elif name.startswith("OTEL_"):
            warnings.append(
                f"{subject} is set but not honoured: edgegw reads no such OpenTelemetry variable"
            )
        else:
            warnings.append(f"{subject} is set but edgegw has no such setting (a typo?)")
        return
    for prefix, switch, exempt in _GATES:
        if name.startswith(prefix) and name not in exempt and not _enabled(values.get(switch, "")):
            warnings.append(f"{subject} is set but not honoured: {switch} is not true")
            return


# Variables that act only with a feature on: (prefix, the switch, the names exempt).
_GATES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("MCP_", "MCP_ENABLED", MCP_WITHOUT_MCP),
    ("ROUTING_", "ROUTING_ENABLED", frozenset({"ROUTING_ENABLED"})),
    ("GUARDRAILS_", "GUARDRAILS_ENABLED", frozenset({"GUARDRAILS_ENABLED"})),
    ("AUTH_", "AUTH_ENABLED", frozenset({"AUTH_ENABLED"})),
    ("TENANTS_OIDC_", "AUTH_ENABLED", frozenset()),
    ("TENANTS_REDIS_", "TENANTS_REDIS_URL", frozenset({"TENANTS_REDIS_URL"})),
)


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
