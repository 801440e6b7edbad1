"""Logging: the format (LOG_FORMAT=text, the default, or json), credentials redacted in
every line, repeats of the same warning rate-limited, and one access-log line per request.

- json: one JSON object per line (python-json-logger's orjson formatter, imported only with
  LOG_FORMAT=json: 2.5-6.5 ms against structlog's 40-80 ms, measured on top of the gateway's
  own imports; bench/README.md), keys `timestamp` (ISO 8601, UTC), `level`, `logger`,
  `message`, the access line's fields, and `exc_info` for a traceback.
- Redaction runs over the whole formatted line (message, fields and traceback): every
  configured secret (provider keys, client keys, the OIDC client secret) and anything shaped
  like a bearer token or an `sk-` key becomes `[REDACTED]`.
- The same warning (logger, message and arguments) is written at most once per
  REPEAT_INTERVAL_S; the next line after the interval says how many were held back. An
  upstream that fails every request therefore logs one line a minute, not one per request.
- The access line (logger `edgegw.access`, INFO; DEBUG for /health): method, route, status, duration, time to
  first token of a stream, provider, model, request id, client address, and the caller's
  tenant and key name (edgegw.keyfile: a name, never the key) and the request's cost in USD.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from edgegw.asgi import Call
    from edgegw.settings import Settings

access_log = logging.getLogger("edgegw.access")
# Whether the access line carries its fields as record attributes: only the JSON format
# writes them (set by `configure`; making the attributes costs every line).
_fields = True

REDACTED = "[REDACTED]"
# A repeated warning is written once per this many seconds.
REPEAT_INTERVAL_S = 60.0
# Distinct warnings remembered for the repeat check; past it the memory starts over.
MAX_REPEAT_KEYS = 1024
# Shapes of credentials, whatever their value: bearer tokens, OpenAI-style keys, key= pairs.
SECRET_SHAPES = re.compile(
    r"(?i)(?<=bearer )[^\s\"',;]+|\bsk-[A-Za-z0-9_-]{6,}|(?<=api_key=)[^\s&\"',;]+"
)


class Redacting(logging.Formatter):
    """Another formatter's output with every secret replaced (module doc)."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str]) -> None:
        super().__init__()
        self.inner = inner
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= 4:  # a shorter "secret" would redact ordinary words
                forms.add(secret)
                forms.add(orjson.dumps(secret).decode()[1:-1])  # as it appears in JSON
        self._exact = (
            re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
            if forms
            else None
        )

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), self._exact)


def redact(text: str, exact: re.Pattern[str] | None = None) -> str:
    if exact is not None:
        text = exact.sub(REDACTED, text)
    # SECRET_SHAPES tries its lookbehinds at every position; these substring tests (what any
    # match must contain) are a small fraction of that (bench/README.md).
    low = text.lower()
    if "bearer " in low or "sk-" in low or "api_key=" in low:
        text = SECRET_SHAPES.sub(REDACTED, text)
    return text


class RepeatFilter(logging.Filter):
    """Holds back a warning already written within REPEAT_INTERVAL_S (module doc)."""

    def __init__(self, interval_s: float = REPEAT_INTERVAL_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._seen: dict[tuple[object, ...], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        # The SDK's export warnings vary in their arguments (delays, batch sizes).
        args = () if record.name.startswith("opentelemetry") else record.args
        try:
            key = (record.name, record.msg, args if isinstance(args, tuple) else repr(args))
            hash(key)
        except TypeError:
            return True
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval_s:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        if len(self._seen) >= MAX_REPEAT_KEYS:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if seen is not None and seen[1]:
            record.msg = (
                f"{record.msg} (and {seen[1]} more like it in the last {self.interval_s:.0f} s)"
            )
        return True


def handler(settings: Settings, stream: IO[str] | None = None) -> logging.Handler:
    """A handler writing to `stream` (stderr) as LOG_FORMAT says, redacting, rate-limited."""
    out = logging.StreamHandler(stream or sys.stderr)
    out.setFormatter(Redacting(_formatter(settings.log_format), secrets_of(settings)))
    out.addFilter(RepeatFilter())
    return out


def configure(settings: Settings) -> None:
    """The root logger's one handler, as LOG_LEVEL and LOG_FORMAT say."""
    global _fields
    # What no line of edgegw shows, not gathered for every record (logging's documented
    # optimisations): the caller's file and line (a walk up the stack), thread, process.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    _fields = settings.log_format == "json"
    handler_ = handler(settings)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler_)
    root.setLevel(settings.log_level)


def _formatter(log_format: str) -> logging.Formatter:
    if log_format != "json":
        return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pythonjsonlogger.orjson import OrjsonFormatter

    return OrjsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,
    )


def secrets_of(settings: Settings) -> list[str]:
    """Every credential the settings hold, to redact wherever it shows up."""
    found = [cfg.key for cfg in settings.providers.values() if cfg.key]
    found += [k.decode("utf-8", "replace") for k in settings.api_keys]
    if settings.auth_oidc_client_secret:
        found.append(settings.auth_oidc_client_secret)
    if settings.tenants_redis_url:
        found.append(settings.tenants_redis_url)
    if settings.tenants_admin_key:
        found.append(settings.tenants_admin_key.decode())
    return found


def access_line(call: Call, duration_s: float) -> None:
    """The request's one access-log line (module doc)."""
    # Probes (/health every few seconds) are logged at DEBUG only.
    level = logging.DEBUG if call.path == "/health" else logging.INFO
    if not access_log.isEnabledFor(level):
        return
    result = call.result
    status = call.final_status or 0
    client = call.scope.get("client")
    address = f"{client[0]}:{client[1]}" if client else "-"
    ttft_s = None if result is None else result.ttft_s
    ttft_ms = None if ttft_s is None else round(ttft_s * 1000, 1)
    duration_ms = round(duration_s * 1000, 1)
    caller = call.caller
    tenant = None if caller is None else caller.tenant.name
    key = None if caller is None else caller.key.name
    access_log.log(
        level,
        "%s %s %d %.1fms ttft=%s provider=%s model=%s id=%s client=%s tenant=%s key=%s cost=%s",
        call.method,
        call.path,
        status,
        duration_ms,
        "-" if ttft_ms is None else f"{ttft_ms}ms",
        "-" if result is None else result.provider,
        "-" if result is None else repr(result.model[:200]),
        call.request_id,
        address,
        tenant or "-",
        key or "-",
        "-" if result is None or result.cost_usd is None else result.cost_usd,
        extra=None
        if not _fields
        else {
            "method": call.method,
            "route": call.path,
            "status": status,
            "duration_ms": duration_ms,
            "ttft_ms": ttft_ms,
            "provider": None if result is None else result.provider,
            "model": None if result is None else result.model,
            "request_id": call.request_id,
            "client": address,
            "tenant": tenant,
            "key": key,
            "cost_usd": None if result is None else result.cost_usd,
        },
    )
