"""The client key file (EDGEGW_API_KEYS_FILE): client keys, and the tenants they belong to.

One entry per line; blank lines and `#` comments are skipped:

    sk-a-plain-key                                  a key of the default tenant (as before)
    tenant team-a models=openai/*,fast rpm=60 tpm=40000 concurrency=4 expires=2027-01-01
    key ci tenant=team-a sha256=<64 hex digits> rpm=10 budget_usd=5/day budget_tokens=1e6/month

A `tenant` line names a tenant and its optional model scope, expiry, limits and budgets; a
`key` line names a key of a tenant, stored as the SHA-256 of the key (hex), never the key,
with its own optional scope, expiry, limits and budgets. The parse is all or nothing: a bad line raises
KeyFileError naming its number, and the caller keeps what it had (or refuses the start).

A line-oriented grammar rather than YAML: a line per key is what the plain format already
was, a bad entry is named by its line, and a key can be added or revoked with one line.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from types import MappingProxyType

# Tenant and key names: what the access log, the metrics and the store show.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# What the default tenant is called when the key file does not name one (TENANTS_DEFAULT).
DEFAULT_TENANT = "default"
# Largest limit accepted: beyond it a limit is no limit.
MAX_LIMIT = 10**12


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names the line."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Requests per minute, tokens (prompt + completion) per minute, requests at once;
    None: unlimited."""

    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None

    def __bool__(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.concurrency is not None


NO_LIMITS = Limits()

# Budget periods: calendar ones, in UTC (edgegw.tenants.budgets).
PERIODS = ("day", "week", "month")
# Money is counted in billionths of a US dollar: whole numbers, exact, and a cheap model's
# per-token price (a few 1e-8 USD) is still many units.
NANO_USD = Decimal(10) ** 9


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `limit` per calendar `period`: tokens, or money in nano-USD."""

    unit: str  # "tokens" or "usd"
    limit: int
    period: str


@dataclass(frozen=True, slots=True)
class Scope:
    """The models a tenant or key may use: fnmatch patterns over `provider/model`, local
    model names and routing aliases, lower case. Empty: every model."""

    patterns: tuple[str, ...] = ()

    def allows(self, name: str) -> bool:
        if not self.patterns:
            return True
        low = name.lower()
        return any(fnmatch.fnmatchcase(low, p) for p in self.patterns)


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    scope: Scope = Scope()
    expires: float | None = None  # Unix time; None: never
    limits: Limits = NO_LIMITS
    budgets: tuple[Budget, ...] = ()


@dataclass(frozen=True, slots=True)
class Key:
    """A client key: its tenant, a name for logs and metrics, its own scope, expiry and
    limits (on top of the tenant's)."""

    tenant: str
    name: str
    scope: Scope = Scope()
    expires: float | None = None
    limits: Limits = NO_LIMITS
    budgets: tuple[Budget, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyFile:
    """What the key file (and EDGEGW_API_KEYS) hold: the plain keys, as before, the tenants
    and every key by the SHA-256 of its bytes (the plain ones too)."""

    plain: tuple[bytes, ...] = ()
    tenants: Mapping[str, Tenant] = field(default_factory=lambda: MappingProxyType({}))
    keys: Mapping[bytes, Key] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def has_tenants(self) -> bool:
        return bool(self.tenants)

    @property
    def has_budgets(self) -> bool:
        return any(t.budgets for t in self.tenants.values()) or any(
            k.budgets for k in self.keys.values()
        )


def digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def plain_key_name(key: bytes) -> str:
    """A plain key's name in logs: 8 hex digits of its SHA-256 (which tell nothing of it)."""
    return "key-" + hashlib.sha256(key).hexdigest()[:8]


def check_plain_keys(var: str, keys: list[str]) -> tuple[bytes, ...]:
    for k in keys:
        if not k.isprintable() or " " in k:
            raise KeyFileError(f"{var}: keys must be printable and contain no spaces")
    return tuple(k.encode() for k in keys)


def parse_key_file(
    text: str,
    *,
    fixed: tuple[bytes, ...] = (),
    default_tenant: str = DEFAULT_TENANT,
    var: str = "EDGEGW_API_KEYS_FILE",
) -> KeyFile:
    """The key file's text (module doc), with `fixed` (EDGEGW_API_KEYS) as plain keys of
    `default_tenant`. Raises KeyFileError naming the line."""
    plain: list[bytes] = list(fixed)
    tenants: dict[str, Tenant] = {}
    keys: dict[bytes, Key] = {}
    key_lines: dict[bytes, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{var} line {number}"
        words = line.split()
        if len(words) == 1:  # a plain key, as before
            plain += check_plain_keys(where, words)
            continue
        kind, name, attrs = words[0], words[1], _attrs(where, words[2:])
        if not NAME.fullmatch(name):
            raise KeyFileError(f"{where}: a name is letters, digits and ._@- (64 at most)")
        if kind == "tenant":
            if name in tenants:
                raise KeyFileError(f"{where}: tenant {name} is defined twice")
            tenants[name] = Tenant(name, *_common(where, attrs))
            _no_more(where, attrs)
        elif kind == "key":
            tenant = attrs.pop("tenant", None)
            hexed = attrs.pop("sha256", None)
            if tenant is None or hexed is None:
                raise KeyFileError(f"{where}: a key line needs tenant= and sha256=")
            if not SHA256_HEX.fullmatch(hexed.lower()):
                raise KeyFileError(f"{where}: sha256= takes 64 hex digits (the key's SHA-256)")
            d = bytes.fromhex(hexed)
            if d in keys:
                raise KeyFileError(f"{where}: the same key as line {key_lines[d]}")
            keys[d] = Key(tenant, name, *_common(where, attrs))
            key_lines[d] = number
            _no_more(where, attrs)
        else:
            raise KeyFileError(f"{where}: expected a key, 'tenant <name> ...' or 'key <name> ...'")
    for d, key in keys.items():
        if key.tenant not in tenants:
            raise KeyFileError(
                f"{var} line {key_lines[d]}: tenant {key.tenant} is not defined by a tenant line"
            )
    names: dict[tuple[str, str], int] = {}
    for d, key in keys.items():
        if (seen := names.setdefault((key.tenant, key.name), key_lines[d])) != key_lines[d]:
            raise KeyFileError(
                f"{var} line {key_lines[d]}: key {key.name} of {key.tenant} is also on line {seen}"
            )
    plain = list(dict.fromkeys(plain))
    for k in plain:
        d = digest(k)
        if d in keys:
            raise KeyFileError(
                f"{var} line {key_lines[d]}: the same key is also given as a plain key"
            )
        keys[d] = Key(default_tenant, plain_key_name(k))
    return KeyFile(tuple(plain), MappingProxyType(tenants), MappingProxyType(keys))


def _attrs(where: str, words: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    # A word is named by its place, never quoted: a key pasted on the wrong line stays unlogged.
    for place, word in enumerate(words, 3):
        name, sep, value = word.partition("=")
        if not sep or not value:
            raise KeyFileError(f"{where}: word {place} is not name=value")
        if name in out:
            raise KeyFileError(f"{where}: word {place}: the attribute is given twice")
        out[name] = value
    return out


def _common(
    where: str, attrs: dict[str, str]
) -> tuple[Scope, float | None, Limits, tuple[Budget, ...]]:
    """models=, expires=, rpm=, tpm=, concurrency=, budget_tokens=, budget_usd= (taken out
    of `attrs`)."""
    scope = Scope()
    if (models := attrs.pop("models", None)) is not None:
        scope = Scope(tuple(p.strip().lower() for p in models.split(",") if p.strip()))
    expires = None
    if (text := attrs.pop("expires", None)) is not None:
        expires = _time(where, text)
    limits: dict[str, int] = {}
    for name in ("rpm", "tpm", "concurrency"):
        if (value := attrs.pop(name, None)) is not None:
            if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
                raise KeyFileError(f"{where}: {name}= takes a whole number from 1")
            limits[name] = int(value)
    budgets = []
    for unit in ("tokens", "usd"):
        if (value := attrs.pop(f"budget_{unit}", None)) is not None:
            budgets.append(_budget(where, unit, value))
    # NO_LIMITS itself, so admission tells a record without limits by identity.
    return scope, expires, Limits(**limits) if limits else NO_LIMITS, tuple(budgets)


def _budget(where: str, unit: str, text: str) -> Budget:
    """`<amount>/<period>`: tokens a whole number (1e6 allowed), money in USD."""
    amount, _, period = text.partition("/")
    if period not in PERIODS:
        raise KeyFileError(f"{where}: budget_{unit}= takes <amount>/day, /week or /month")
    try:
        value = Decimal(amount)
    except InvalidOperation:
        value = Decimal(-1)
    if unit == "usd":
        value *= NANO_USD
    if not value.is_finite() or value <= 0 or value != value.to_integral_value() or value > 2**62:
        raise KeyFileError(
            f"{where}: budget_{unit}= takes a positive amount "
            + ("(USD, to the nano-dollar)" if unit == "usd" else "(whole tokens)")
        )
    return Budget(unit, int(value), period)


def _no_more(where: str, attrs: dict[str, str]) -> None:
    if attrs:
        known = (
            "models, expires, rpm, tpm, concurrency, budget_tokens, budget_usd "
            "(and tenant, sha256 for a key)"
        )
        raise KeyFileError(f"{where}: an attribute is not one of {known}")


def _time(where: str, text: str) -> float:
    """ISO 8601: a date (its midnight, UTC) or a date and time (UTC unless it says)."""
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC).timestamp()
        at = datetime.fromisoformat(text)
    except ValueError:
        raise KeyFileError(
            f"{where}: expires= takes an ISO 8601 date or time (2027-01-01, 2027-01-01T12:00:00Z)"
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, once authentication found out: its tenant and its key (an
    OIDC caller's or an unauthenticated one's is a key of its own name, with no limits)."""

    tenant: Tenant
    key: Key

    def allows(self, model: str) -> bool:
        """Whether both the tenant's scope and the key's take `model`."""
        return self.tenant.scope.allows(model) and self.key.scope.allows(model)


def caller_of(key_file: KeyFile, key: Key) -> Caller:
    """`key` with its tenant (an undefined tenant, the default one, has no limits)."""
    tenant = key_file.tenants.get(key.tenant)
    return Caller(Tenant(key.tenant) if tenant is None else tenant, key)


def admin_keys(lines: Mapping[tuple[str, str], tuple[str, float]]) -> dict[bytes, Key]:
    """The admin API's keys (edgegw.routes.admin) by digest, from their stored key lines
    (checked when made; a line that no longer parses is left out)."""
    out: dict[bytes, Key] = {}
    for (tenant, _), (line, _) in lines.items():
        try:
            made = parse_key_file(f"tenant {tenant}\n{line}", var="admin key")
        except KeyFileError:
            continue
        out.update(made.keys)
    return out
