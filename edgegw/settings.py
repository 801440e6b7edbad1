"""Settings: one frozen object, built once at start and passed explicitly.

Sources, later ones winning: the config file (`--config`, YAML or JSON, keys named like
the environment variables), the environment, the command line. Variable names follow
inference-gateway (`SERVER_HOST`, `<ID>_API_URL`, `<ID>_API_KEY`, ...) so that its
deployments switch without edits. A bad value stops the start with a message naming
the variable; no secret value is ever printed. What is set and not acted on (edgegw.envcheck,
both sources alike) is kept in `start_warnings`, which `edgegw serve` logs once.

Longer than the guide because it is the one place where every variable is read and checked,
in effect one table; the features with settings of their own (MCP, routing, guardrails)
parse them in their own modules.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from urllib.parse import unquote, urlsplit

from edgegw import envcheck, grammar
from edgegw.guardrails.settings import GuardrailsSettings, GuardrailsSettingsError
from edgegw.http1.limits import DEFAULT_LIMITS, SETTABLE
from edgegw.keyfile import DEFAULT_TENANT, NAME, KeyFile, KeyFileError, parse_key_file
from edgegw.local.profiles import LocalModel, ProfileError, load_local_models, parse_gpu_aliases
from edgegw.mcp.settings import McpSettings, McpSettingsError
from edgegw.providers import PROVIDERS, ProviderConfig
from edgegw.routing.config import RoutingConfig, RoutingConfigError, routing_from_env

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024  # inference-gateway's SERVER_MAX_REQUEST_BODY_SIZE
DEFAULT_MAX_TOKENS = 1024  # SIE_GATEWAY_DEFAULT_MAX_TOKENS, the SIE spec's default
# Config-file sections that are not variables.
STRUCTURED_KEYS = frozenset({"local_models"})


# The exit status of a process whose start was refused by its settings (sysexits' EX_CONFIG):
# a supervisor seeing it from a worker stops instead of restarting it forever.
EXIT_CONFIG = 78


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    # SIE_GATEWAY_GPU_ALIASES: X-SIE-MACHINE-PROFILE alias -> the workers' machine_profile.
    gpu_aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Client keys for edgegw itself; empty means no client auth.
    api_keys: tuple[bytes, ...] = field(default=(), repr=False)
    # The keys with their tenants (edgegw.keyfile): the plain keys above, the key file's
    # tenants and hashed keys.
    key_file: KeyFile = field(default_factory=KeyFile, repr=False)
    # TENANTS_DEFAULT: the tenant of plain keys, of OIDC callers no claim maps, and of
    # requests without client authentication.
    tenants_default: str = DEFAULT_TENANT
    # TENANTS_OIDC_CLAIM: the token claim naming an OIDC caller's tenant (None: the default).
    tenants_oidc_claim: str | None = None
    # TENANTS_STORE_PATH: the SQLite file of the tenants' usage (budgets survive a restart);
    # None: tenants.sqlite3 in edgegw's data directory (edgegw.tenants.budgets).
    tenants_store_path: str | None = None
    # TENANTS_ADMIN_KEY: the admin API's credential (edgegw.routes.admin); None: no admin API.
    tenants_admin_key: bytes | None = field(default=None, repr=False)
    # TENANTS_REDIS_*: limits and budgets shared through Redis (edgegw.tenants.shared).
    tenants_redis_url: str | None = field(default=None, repr=False)
    tenants_redis_timeout_s: float = 0.25
    tenants_redis_limits_fail: str = "local"
    tenants_redis_budgets_fail: str = "closed"
    # MODEL_PRICES: USD per token (input, output) by model, over the community table's.
    model_prices: Mapping[str, tuple[Decimal, Decimal]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Where some of them came from: EDGEGW_API_KEYS_FILE (re-read when it changes, see
    # edgegw.auth.client_keys), and the keys of EDGEGW_API_KEYS, which a re-read keeps.
    api_keys_file: str | None = None
    api_keys_fixed: tuple[bytes, ...] = field(default=(), repr=False)
    # OIDC bearer tokens (edgegw.auth): the issuer (discovered at start) and the audience
    # a token must name. The client secret is accepted for inference-gateway's
    # deployments and unused: verifying a token needs only the issuer's public keys.
    # HTTPS on the client side (SERVER_TLS_CERT_PATH / SERVER_TLS_KEY_PATH, PEM files):
    # served by edgegw.http1 under the plain port's limits, TLS 1.2 or newer, ALPN
    # http/1.1. SERVER_HTTP2_ENABLED hands it to Hypercorn for HTTP/2, without those limits.
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    http2_enabled: bool = False
    # Oldest TLS version edgegw accepts from a provider (CLIENT_TLS_MIN_VERSION).
    client_tls_min_version: str = "TLS12"
    auth_enabled: bool = False
    auth_oidc_issuer: str | None = None
    auth_oidc_client_id: str | None = None
    auth_oidc_client_secret: str | None = field(default=None, repr=False)
    # Providers that can serve requests: keyed ones with a key, keyless ones with a URL.
    providers: Mapping[str, ProviderConfig] = field(default_factory=lambda: MappingProxyType({}))
    connect_timeout_s: float = 10.0
    # Time from sending the request to the response head: for a non-streaming request
    # this is the whole generation, hence generous.
    first_byte_timeout_s: float = 300.0
    # Longest silence between two pieces of a response body (stream chunks included).
    idle_timeout_s: float = 60.0
    # Largest non-streaming upstream response held in memory (UPSTREAM_MAX_RESPONSE_SIZE):
    # a chat answer is kilobytes; an image answer with base64 data a few megabytes.
    max_response_bytes: int = 16 * 1024 * 1024
    # Whole upstream answers held by one process at once, each charged twice its size
    # (EDGEGW_RESPONSE_BUFFER_BUDGET); past it 503 `overloaded`.
    response_buffer_budget_bytes: int = 256 * 1024 * 1024
    # UPSTREAM_RETRY_*: a failure that reached no client byte is tried again on the same
    # target (edgegw.retry): attempts in all, the first backoff and its cap, the longest
    # Retry-After waited for, and the deadline of all attempts together.
    retry_attempts: int = 3
    retry_backoff_s: float = 0.25
    retry_max_backoff_s: float = 2.0
    retry_max_retry_after_s: float = 5.0
    retry_deadline_s: float = 15.0
    # Idle keep-alive connections kept per upstream host.
    pool_idle_per_host: int = 64
    # Open connections per upstream host, idle or in use (upstream.MAX_PER_HOST); past it, queue.
    pool_max_per_host: int = 1024
    models_timeout_s: float = 5.0
    # SIGTERM: how long running streams may finish before they are ended with an SSE error.
    graceful_timeout_s: float = 30.0
    # SIGTERM: how long the gateway still accepts and serves while /ready answers 503, so
    # that a balancer polling readiness takes it out before the port closes (0: at once).
    shutdown_delay_s: float = 0.0
    # Requests handled at once by one process; past it, 503 with Retry-After at once.
    max_in_flight: int = 1024
    # Request bodies being read (edgegw.intake): in the process, from one client address,
    # and their bytes received so far (EDGEGW_MAX_BODIES, _PER_CLIENT, _BYTES).
    max_bodies: int = 4096
    max_bodies_per_client: int = 256
    max_body_bytes_in_progress: int = 256 * 1024 * 1024
    # /v1/embeddings and /v1/rerank (edgegw.retrieval): inputs (documents) per request, and
    # the UTF-8 bytes of one input text (a query or document too).
    embeddings_max_inputs: int = 2048
    rerank_max_documents: int = 1000
    retrieval_max_input_bytes: int = 64 * 1024
    # Processes sharing the port (`edgegw serve`); None means one per core.
    workers: int | None = None
    log_level: str = "INFO"
    # Model filters (inference-gateway's ALLOWED_MODELS / DISALLOWED_MODELS), lower-cased;
    # an allow-list wins over the deny-list.
    allowed_models: frozenset[str] = frozenset()
    disallowed_models: frozenset[str] = frozenset()
    enable_vision: bool = False
    enable_images: bool = False
    # /v1/messages and /v1/responses for targets without the API (edgegw.routes.translated).
    enable_api_translation: bool = False
    telemetry_enabled: bool = False
    telemetry_metrics_push_enabled: bool = False
    telemetry_metrics_port: int = 9464
    # OTLP/HTTP tracing (TELEMETRY_TRACING_*; needs TELEMETRY_ENABLED, as in
    # inference-gateway): the traces URL, `/v1/traces` appended to a path-less endpoint.
    tracing_enabled: bool = False
    tracing_endpoint: str = "http://localhost:4318/v1/traces"
    # TELEMETRY_TRACING_CONTENT: prompts and completions as span events. Off unless asked:
    # spans leave the machine, and prompts are the users' data.
    tracing_content: bool = False
    # OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, the SDK's names and rules
    # (edgegw.telemetry.tracing): which requests are traced.
    tracing_sampler: str = "parentbased_always_on"
    tracing_sampler_ratio: float = 1.0
    # LOG_FORMAT: "text" (default) or "json" (edgegw.logs).
    log_format: str = "text"
    # How long one provider's model list is reused.
    models_cache_ttl_s: float = 300.0
    # The community model table (context windows, pricing, modalities) written by
    # `edgegw models sync`; None looks in $XDG_DATA_HOME/edgegw/community_models.json,
    # then in the package (edgegw.models.community.default_table_paths).
    community_models_file: str | None = None
    # Models served by local SGLang workers (edgegw.local.profiles), from the config file.
    local_models: tuple[LocalModel, ...] = ()
    # What serves plain HTTP/1.1 (EDGEGW_SERVER): "edgegw" (edgegw.http1) or "hypercorn".
    server: str = "edgegw"
    # Who relays a stream no Python must see event by event (EDGEGW_STREAM_RELAY): "core"
    # (the Rust core's relay thread, edgegw.handoff) or "trio" (the pump, edgegw.pump).
    stream_relay: str = "core"
    # The connection layer's bounds; reasons and counterparts in edgegw.http1.limits.
    header_timeout_s: float = DEFAULT_LIMITS.header_timeout_s
    body_idle_timeout_s: float = DEFAULT_LIMITS.body_idle_timeout_s
    body_timeout_s: float = DEFAULT_LIMITS.body_timeout_s
    keepalive_timeout_s: float = DEFAULT_LIMITS.keepalive_timeout_s
    write_stall_timeout_s: float = DEFAULT_LIMITS.write_stall_timeout_s
    max_head_bytes: int = DEFAULT_LIMITS.max_head_bytes
    max_connections: int = DEFAULT_LIMITS.max_connections
    # MCP tools and guardrails (MCP_*, GUARDRAILS_*: their settings modules have the tables).
    mcp: McpSettings = field(default_factory=McpSettings)
    guardrails: GuardrailsSettings = field(default_factory=GuardrailsSettings)
    # Model routing (ROUTING_ENABLED, ROUTING_CONFIG_PATH; edgegw.routing); None when off.
    routing: RoutingConfig | None = None
    # What the operator set that edgegw does not act on, or reads under a newer name, each
    # naming its variable and source (edgegw.envcheck); logged at start.
    start_warnings: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        config_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> Settings:
        """Build from the config file, then the environment, then `overrides` (CLI)."""
        flat: dict[str, str] = {}
        local_models: tuple[LocalModel, ...] = ()
        if config_file is not None:
            path = Path(config_file)
            flat, structured = _read_config_file(path)
            if "local_models" in structured:
                try:
                    local_models = load_local_models(
                        structured["local_models"], path.parent, str(path)
                    )
                except ProfileError as e:
                    raise SettingsError(str(e)) from None
        reading = envcheck.read(
            environ if environ is not None else os.environ,
            flat,
            None if config_file is None else str(config_file),
        )
        merged = _Lookups(reading.values)
        try:
            settings = _build(merged, overrides or {})
            # After the providers and the local models: the deployments must name them.
            routing = routing_from_env(merged, settings.providers, {m.name for m in local_models})
        except (SettingsError, RoutingConfigError) as e:
            if not reading.renamed:
                raise SettingsError(str(e)) from None
            # A value given under a renamed variable's old name is checked under the new one.
            read_as = "; ".join(
                f"{old} is read as {envcheck.RENAMED[old]}" for old in reading.renamed
            )
            raise SettingsError(f"{e} ({read_as})") from None
        warnings, refusals = reading.findings(merged.asked)
        if refusals:
            raise SettingsError("; ".join(refusals))
        if settings.http2_enabled:
            warnings.append(
                "SERVER_HTTP2_ENABLED=true: HTTPS is served by Hypercorn, which offers HTTP/2 "
                "but none of edgegw's connection limits (no head, body or write-stall "
                "deadlines, no head screen, no connection cap; README 'HTTPS and HTTP/2')"
                if settings.tls_cert_path
                else "SERVER_HTTP2_ENABLED is ignored without SERVER_TLS_CERT_PATH: HTTP/2 is "
                "offered over TLS only"
            )
        return replace(
            settings,
            local_models=local_models,
            routing=routing,
            start_warnings=tuple(warnings),
        )


class _Lookups(Mapping[str, str]):
    """The merged variables, remembering each name looked up: whatever envcheck's table
    says, a variable the settings ask for is never called unknown."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = values
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def parse_duration(name: str, text: str, *, zero: bool = False) -> float:
    """edgegw.grammar's duration, refused as a SettingsError."""
    return grammar.parse_duration(name, text, SettingsError, zero=zero)


def _int(name: str, text: str, lo: int, hi: int) -> int:
    return grammar.parse_int(name, text, lo, hi, SettingsError)


def _bool(name: str, text: str) -> bool:
    return grammar.parse_bool(name, text, SettingsError)


def _url(name: str, text: str) -> str:
    text = text.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", text) or not text.isprintable() or " " in text:
        raise SettingsError(f"{name}: expected an http:// or https:// URL")
    return text


# OTEL_TRACES_SAMPLER values (the SDK's built-in samplers).
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: `/v1/traces` appended to an endpoint with no path (as
    inference-gateway does since its #555), any other path kept as written."""
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def idp_url_problem(url: str) -> str | None:
    """Why `url` cannot locate an identity provider's documents (None when it can): https,
    or http on a loopback host only, since whoever answers it chooses the keys that admit
    clients."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an unclosed IPv6 bracket
        host = None
    if host is None or parts.scheme not in ("http", "https") or not url.isprintable():
        return "must be an http:// or https:// URL"
    if parts.query or parts.fragment or " " in url:
        return "must have no query, fragment or spaces"
    if parts.scheme == "http" and not _loopback(host):
        return "must be https:// (http:// only on a loopback host)"
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_config_file(path: Path) -> tuple[dict[str, str], dict[str, object]]:
    """(scalar settings by variable name, structured sections by key)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SettingsError(f"--config {path}: cannot read ({e.strerror})") from None
    try:
        import yaml

        data = yaml.safe_load(raw)
    except Exception as e:  # yaml's errors carry the position, never a value we hide
        raise SettingsError(f"--config {path}: not valid YAML/JSON ({type(e).__name__})") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise SettingsError(f"--config {path}: the top level must be a mapping")
    out: dict[str, str] = {}
    structured: dict[str, object] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise SettingsError(f"--config {path}: keys must be strings")
        if key in STRUCTURED_KEYS:
            structured[key] = value
            continue
        if isinstance(value, dict | list):
            raise SettingsError(f"--config {path}: {key}: expected a single value")
        out[key.upper()] = (
            "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        )
    return out, structured


def _build(env: Mapping[str, str], overrides: Mapping[str, object]) -> Settings:
    kw: dict[str, object] = {}
    if v := env.get("SERVER_HOST"):
        kw["host"] = v.strip()
    if v := env.get("SERVER_PORT"):
        kw["port"] = _int("SERVER_PORT", v, 0, 65535)
    if v := env.get("SERVER_MAX_REQUEST_BODY_SIZE"):
        kw["max_body_bytes"] = _int("SERVER_MAX_REQUEST_BODY_SIZE", v, 1024, 1 << 31)
    if v := env.get("SIE_GATEWAY_DEFAULT_MAX_TOKENS"):
        try:
            kw["default_max_tokens"] = _int("SIE_GATEWAY_DEFAULT_MAX_TOKENS", v, 1, 2**32 - 1)
        except SettingsError:  # SIE: an unparsable value falls back to the default
            logging.getLogger("edgegw.settings").warning(
                "SIE_GATEWAY_DEFAULT_MAX_TOKENS is unparsable; using %d", DEFAULT_MAX_TOKENS
            )
    if v := env.get("SIE_GATEWAY_GPU_ALIASES"):
        try:
            kw["gpu_aliases"] = parse_gpu_aliases(v)
        except ProfileError as e:
            raise SettingsError(f"SIE_GATEWAY_GPU_ALIASES: {e}") from None
    for var, attr in (
        ("UPSTREAM_CONNECT_TIMEOUT", "connect_timeout_s"),
        ("UPSTREAM_FIRST_BYTE_TIMEOUT", "first_byte_timeout_s"),
        ("UPSTREAM_IDLE_TIMEOUT", "idle_timeout_s"),
        ("UPSTREAM_RETRY_DEADLINE", "retry_deadline_s"),
        ("MODELS_TIMEOUT", "models_timeout_s"),
        ("SERVER_GRACEFUL_TIMEOUT", "graceful_timeout_s"),
    ):
        if v := env.get(var):
            kw[attr] = parse_duration(var, v)
    # Waits may be zero: try again at once (0 Retry-After bound: retry only a 429 saying 0).
    for var, attr in (
        ("UPSTREAM_RETRY_BACKOFF", "retry_backoff_s"),
        ("UPSTREAM_RETRY_MAX_BACKOFF", "retry_max_backoff_s"),
        ("UPSTREAM_RETRY_MAX_RETRY_AFTER", "retry_max_retry_after_s"),
        ("SERVER_SHUTDOWN_DELAY", "shutdown_delay_s"),
    ):
        if v := env.get(var):
            kw[attr] = parse_duration(var, v, zero=True)
    for var, attr in (
        ("ALLOWED_MODELS", "allowed_models"),
        ("DISALLOWED_MODELS", "disallowed_models"),
    ):
        if v := env.get(var):
            kw[attr] = frozenset(m.strip().lower() for m in v.split(",") if m.strip())
    for var, attr in (
        ("ENABLE_VISION", "enable_vision"),
        ("ENABLE_IMAGES", "enable_images"),
        ("ENABLE_API_TRANSLATION", "enable_api_translation"),
        ("SERVER_HTTP2_ENABLED", "http2_enabled"),
        ("TELEMETRY_ENABLED", "telemetry_enabled"),
        ("TELEMETRY_METRICS_PUSH_ENABLED", "telemetry_metrics_push_enabled"),
        ("TELEMETRY_TRACING_ENABLED", "tracing_enabled"),
        ("TELEMETRY_TRACING_CONTENT", "tracing_content"),
    ):
        if v := env.get(var):
            kw[attr] = _bool(var, v)
    if v := env.get("TELEMETRY_METRICS_PORT"):
        kw["telemetry_metrics_port"] = _int("TELEMETRY_METRICS_PORT", v, 0, 65535)
    if v := env.get("TELEMETRY_TRACING_OTLP_ENDPOINT"):
        kw["tracing_endpoint"] = traces_url(_url("TELEMETRY_TRACING_OTLP_ENDPOINT", v))
    if v := env.get("OTEL_TRACES_SAMPLER"):
        sampler = v.strip().lower()
        if sampler not in SAMPLERS:
            raise SettingsError(f"OTEL_TRACES_SAMPLER: expected one of {', '.join(SAMPLERS)}")
        kw["tracing_sampler"] = sampler
    if v := env.get("OTEL_TRACES_SAMPLER_ARG"):
        try:
            ratio = float(v)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise SettingsError("OTEL_TRACES_SAMPLER_ARG: expected a ratio from 0 to 1")
        kw["tracing_sampler_ratio"] = ratio
    if not kw.get("telemetry_enabled"):  # as in inference-gateway (envcheck names it)
        kw["tracing_enabled"] = False
    if v := env.get("LOG_FORMAT"):
        fmt = v.strip().lower()
        if fmt not in ("text", "json"):
            raise SettingsError("LOG_FORMAT: expected text or json")
        kw["log_format"] = fmt
    if v := env.get("MODELS_CACHE_TTL"):
        kw["models_cache_ttl_s"] = parse_duration("MODELS_CACHE_TTL", v)
    if v := env.get("EDGEGW_COMMUNITY_MODELS_FILE"):
        kw["community_models_file"] = v.strip()
    if v := env.get("EDGEGW_MAX_IN_FLIGHT"):
        kw["max_in_flight"] = _int("EDGEGW_MAX_IN_FLIGHT", v, 1, 1_000_000)
    if v := env.get("EDGEGW_MAX_BODIES"):
        kw["max_bodies"] = _int("EDGEGW_MAX_BODIES", v, 1, 1_000_000)
    if v := env.get("EDGEGW_MAX_BODIES_PER_CLIENT"):
        kw["max_bodies_per_client"] = _int("EDGEGW_MAX_BODIES_PER_CLIENT", v, 1, 1_000_000)
    if v := env.get("EDGEGW_MAX_BODIES_BYTES"):
        kw["max_body_bytes_in_progress"] = _int("EDGEGW_MAX_BODIES_BYTES", v, 1 << 20, 1 << 40)
    if v := env.get("EDGEGW_EMBEDDINGS_MAX_INPUTS"):
        kw["embeddings_max_inputs"] = _int("EDGEGW_EMBEDDINGS_MAX_INPUTS", v, 1, 1_000_000)
    if v := env.get("EDGEGW_RERANK_MAX_DOCUMENTS"):
        kw["rerank_max_documents"] = _int("EDGEGW_RERANK_MAX_DOCUMENTS", v, 1, 1_000_000)
    if v := env.get("EDGEGW_RETRIEVAL_MAX_INPUT_BYTES"):
        kw["retrieval_max_input_bytes"] = _int("EDGEGW_RETRIEVAL_MAX_INPUT_BYTES", v, 1, 1 << 30)
    if v := env.get("EDGEGW_WORKERS"):
        kw["workers"] = _int("EDGEGW_WORKERS", v, 1, 1024)
    if v := env.get("UPSTREAM_MAX_RESPONSE_SIZE"):
        kw["max_response_bytes"] = _int("UPSTREAM_MAX_RESPONSE_SIZE", v, 64 * 1024, 1 << 30)
    if v := env.get("EDGEGW_RESPONSE_BUFFER_BUDGET"):
        kw["response_buffer_budget_bytes"] = _int(
            "EDGEGW_RESPONSE_BUFFER_BUDGET", v, 1 << 20, 1 << 40
        )
    if v := env.get("UPSTREAM_RETRY_ATTEMPTS"):
        kw["retry_attempts"] = _int("UPSTREAM_RETRY_ATTEMPTS", v, 1, 10)
    if v := env.get("UPSTREAM_POOL_IDLE_PER_HOST"):
        kw["pool_idle_per_host"] = _int("UPSTREAM_POOL_IDLE_PER_HOST", v, 0, 10_000)
    if v := env.get("UPSTREAM_POOL_MAX_PER_HOST"):
        kw["pool_max_per_host"] = _int("UPSTREAM_POOL_MAX_PER_HOST", v, 1, 100_000)
    if v := env.get("EDGEGW_SERVER"):
        name = v.strip().lower()
        if name not in ("edgegw", "hypercorn"):
            raise SettingsError("EDGEGW_SERVER: expected edgegw or hypercorn")
        kw["server"] = name
    if v := env.get("EDGEGW_STREAM_RELAY"):
        name = v.strip().lower()
        if name not in ("core", "trio"):
            raise SettingsError("EDGEGW_STREAM_RELAY: expected core or trio")
        kw["stream_relay"] = name
    for row in SETTABLE:  # the connection layer's limits (edgegw.http1.limits)
        if row.env and (v := env.get(row.env)):
            if row.unit == "s":
                kw[row.name] = parse_duration(row.env, v)
            elif row.name == "max_head_bytes":
                kw[row.name] = _int(row.env, v, 1024, 1 << 24)
            else:
                kw[row.name] = _int(row.env, v, 1, 10_000_000)
    if v := env.get("LOG_LEVEL"):
        level = v.strip().upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise SettingsError("LOG_LEVEL: expected one of DEBUG, INFO, WARNING, ERROR")
        kw["log_level"] = level

    if v := env.get("TENANTS_DEFAULT", "").strip():
        if not NAME.fullmatch(v):
            raise SettingsError("TENANTS_DEFAULT: a name is letters, digits and ._@- (64 at most)")
        kw["tenants_default"] = v
    if v := env.get("TENANTS_OIDC_CLAIM", "").strip():
        if not v.isprintable():
            raise SettingsError("TENANTS_OIDC_CLAIM: must be printable")
        kw["tenants_oidc_claim"] = v
    if v := env.get("TENANTS_STORE_PATH", "").strip():
        kw["tenants_store_path"] = v
    if v := env.get("TENANTS_ADMIN_KEY", "").strip():
        if len(v) < 16 or not v.isprintable() or " " in v:
            raise SettingsError("TENANTS_ADMIN_KEY: at least 16 printable characters, no spaces")
        kw["tenants_admin_key"] = v.encode()
    if v := env.get("TENANTS_REDIS_URL", "").strip():
        try:
            parse_redis_url(v)
        except ValueError as e:
            raise SettingsError(f"TENANTS_REDIS_URL: {e}") from None
        kw["tenants_redis_url"] = v
    if v := env.get("TENANTS_REDIS_TIMEOUT"):
        kw["tenants_redis_timeout_s"] = parse_duration("TENANTS_REDIS_TIMEOUT", v)
    for var, attr, modes in (
        ("TENANTS_REDIS_LIMITS_FAIL", "tenants_redis_limits_fail", ("local", "open", "closed")),
        ("TENANTS_REDIS_BUDGETS_FAIL", "tenants_redis_budgets_fail", ("closed", "open")),
    ):
        if v := env.get(var, "").strip().lower():
            if v not in modes:
                raise SettingsError(f"{var}: expected one of {', '.join(modes)}")
            kw[attr] = v
    if v := env.get("MODEL_PRICES", "").strip():
        kw["model_prices"] = parse_prices(v)
    fixed: tuple[bytes, ...] = ()
    if v := env.get("EDGEGW_API_KEYS"):
        fixed = check_keys("EDGEGW_API_KEYS", [k.strip() for k in v.split(",") if k.strip()])
    text = ""
    if v := env.get("EDGEGW_API_KEYS_FILE"):
        try:
            text = Path(v).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = getattr(e, "strerror", None) or "not UTF-8"
            raise SettingsError(f"EDGEGW_API_KEYS_FILE: cannot read ({reason})") from None
        kw["api_keys_file"] = v
    key_file = read_key_file(text, fixed, str(kw.get("tenants_default", DEFAULT_TENANT)))
    kw["api_keys_fixed"] = fixed
    kw["api_keys"] = key_file.plain
    kw["key_file"] = key_file

    _tls(env, kw)
    try:
        kw["mcp"] = McpSettings.from_env(env)
        kw["guardrails"] = GuardrailsSettings.from_env(env)
    except (McpSettingsError, GuardrailsSettingsError) as e:
        raise SettingsError(str(e)) from None
    if v := env.get("AUTH_ENABLED"):
        kw["auth_enabled"] = _bool("AUTH_ENABLED", v)
    for var, attr in (
        ("AUTH_OIDC_ISSUER", "auth_oidc_issuer"),
        ("AUTH_OIDC_CLIENT_ID", "auth_oidc_client_id"),
        ("AUTH_OIDC_CLIENT_SECRET", "auth_oidc_client_secret"),
    ):
        if v := env.get(var, "").strip():
            if not v.isprintable():
                raise SettingsError(f"{var}: must be printable")
            kw[attr] = v
    if kw.get("auth_enabled"):
        # Never fail open: with auth on, a missing or unusable issuer stops the start.
        issuer = kw.get("auth_oidc_issuer")
        if not isinstance(issuer, str):
            raise SettingsError("AUTH_OIDC_ISSUER: required when AUTH_ENABLED=true")
        if problem := idp_url_problem(issuer):
            raise SettingsError(f"AUTH_OIDC_ISSUER: {problem}")
        if not kw.get("auth_oidc_client_id"):
            raise SettingsError(
                "AUTH_OIDC_CLIENT_ID: required when AUTH_ENABLED=true (the audience tokens name)"
            )

    providers: dict[str, ProviderConfig] = {}
    for pid, provider in PROVIDERS.items():
        prefix = pid.upper()
        url_var, key_var = f"{prefix}_API_URL", f"{prefix}_API_KEY"
        url_text = env.get(url_var, "").strip()
        key = env.get(key_var, "").strip() or None
        if key is not None and (not key.isprintable() or " " in key):
            raise SettingsError(f"{key_var}: must be printable and contain no spaces")
        url = _url(url_var, url_text) if url_text else provider.default_url
        if "{ACCOUNT_ID}" in url and key:
            raise SettingsError(
                f"{url_var}: replace {{ACCOUNT_ID}} with your Cloudflare account id"
            )
        if key or (provider.keyless and url_text):
            providers[pid] = ProviderConfig(provider, url, key)
    kw["providers"] = MappingProxyType(providers)

    for name, value in overrides.items():
        if value is None:
            continue
        if name == "port":
            kw["port"] = _int("--port", str(value), 0, 65535)
        elif name == "workers":
            kw["workers"] = _int("--workers", str(value), 1, 1024)
        elif name == "host":
            kw["host"] = str(value)
        else:
            raise SettingsError(f"unknown override {name}")
    return Settings(**kw)  # type: ignore[arg-type]


def _tls(env: Mapping[str, str], kw: dict[str, object]) -> None:
    """SERVER_TLS_* (both or neither, and loadable: checked here so that a bad file stops
    the start naming its variable) and CLIENT_TLS_MIN_VERSION."""
    cert = env.get("SERVER_TLS_CERT_PATH", "").strip()
    key = env.get("SERVER_TLS_KEY_PATH", "").strip()
    if bool(cert) != bool(key):
        missing = "SERVER_TLS_KEY_PATH" if cert else "SERVER_TLS_CERT_PATH"
        raise SettingsError(f"{missing}: required with the other SERVER_TLS_* variable")
    if cert:
        for var, path in (("SERVER_TLS_CERT_PATH", cert), ("SERVER_TLS_KEY_PATH", key)):
            if not Path(path).is_file():
                raise SettingsError(f"{var}: no such file")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise SettingsError(
                "SERVER_TLS_CERT_PATH / SERVER_TLS_KEY_PATH: cannot load the certificate and "
                f"key ({getattr(e, 'reason', None) or type(e).__name__})"
            ) from None
        kw["tls_cert_path"], kw["tls_key_path"] = cert, key
    if v := env.get("CLIENT_TLS_MIN_VERSION", "").strip():
        version = v.upper()
        if version not in TLS_VERSIONS:
            raise SettingsError("CLIENT_TLS_MIN_VERSION: expected TLS12 or TLS13")
        kw["client_tls_min_version"] = version


TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class RedisAddress:
    host: str
    port: int
    password: str | None = field(default=None, repr=False)
    username: str | None = None
    db: int = 0


def parse_redis_url(url: str) -> RedisAddress:
    """`redis://[[user]:password@]host[:port][/db]`; raises ValueError."""
    parts = urlsplit(url)
    try:
        host, port = parts.hostname, parts.port or 6379
    except ValueError:
        host = None
    if parts.scheme != "redis" or not host:
        raise ValueError("expected redis://[:password@]host[:port][/db]")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ValueError("the path is a database number")
    return RedisAddress(
        host,
        port,
        None if parts.password is None else unquote(parts.password),
        unquote(parts.username) if parts.username else None,
        int(path) if path else 0,
    )


def parse_prices(text: str) -> Mapping[str, tuple[Decimal, Decimal]]:
    """MODEL_PRICES: `model=input:output,...`, USD per million tokens -> per token."""
    out: dict[str, tuple[Decimal, Decimal]] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        model, _, rates = item.strip().rpartition("=")
        given, sep, taken = rates.partition(":")
        try:
            prices = (Decimal(given), Decimal(taken))
        except InvalidOperation:
            prices = (Decimal(-1), Decimal(-1))
        if not model or not sep or not all(p.is_finite() and p >= 0 for p in prices):
            raise SettingsError(
                "MODEL_PRICES: expected model=input:output (USD per million tokens), "
                "comma separated"
            )
        out[model.strip().lower()] = (prices[0].scaleb(-6), prices[1].scaleb(-6))
    return MappingProxyType(out)


def read_key_file(text: str, fixed: tuple[bytes, ...], default_tenant: str) -> KeyFile:
    """EDGEGW_API_KEYS_FILE's text (edgegw.keyfile) with EDGEGW_API_KEYS as `fixed`."""
    try:
        return parse_key_file(text, fixed=fixed, default_tenant=default_tenant)
    except KeyFileError as e:
        raise SettingsError(str(e)) from None


def check_keys(var: str, keys: list[str]) -> tuple[bytes, ...]:
    for k in keys:
        if not k.isprintable() or " " in k:
            raise SettingsError(f"{var}: keys must be printable and contain no spaces")
    return tuple(k.encode() for k in keys)
