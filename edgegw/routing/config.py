"""The routing file (ROUTING_CONFIG_PATH), read once at start and validated whole.

inference-gateway's shape, read as it is, with edgegw's optional keys beside it:

    models:
      <alias>:
        strategy: round_robin        # or weighted, least_latency (default round_robin)
        max_attempts: 3              # deployments tried per request (default: all, at most 3)
        deployments:                 # two or more
          - {provider: openai, model: gpt-4o-mini, weight: 3}   # weight: `weighted` only
          - {provider: local, model: qwen-small}                # a local model profile
    circuit_breaker:                 # per deployment, shared by every alias naming it
      failures: 5                    # consecutive failures that open it
      cooldown: 30s                  # how long it stays open before one probe

A provider is a provider id that is configured on this gateway, or `local` with the name of
a local model profile (the config file's `local_models`). Anything else refuses the start
with a message naming the file, the alias and the key; nothing is ignored.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from edgegw.grammar import parse_bool, parse_duration
from edgegw.providers import PROVIDERS

STRATEGIES = ("round_robin", "weighted", "least_latency")
LOCAL = "local"
# Deployments tried for one request unless an alias says otherwise: every try before the
# first byte costs the client a round trip to a failing upstream.
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BREAKER_FAILURES = 5
DEFAULT_BREAKER_COOLDOWN_S = 30.0
# A weight is a share, not a count: a million to one is already "never".
MAX_WEIGHT = 1_000_000

_ALIAS_KEYS = frozenset({"strategy", "deployments", "max_attempts"})
_DEPLOYMENT_KEYS = frozenset({"provider", "model", "weight"})
_BREAKER_KEYS = frozenset({"failures", "cooldown"})


class RoutingConfigError(ValueError):
    """The routing settings cannot be used; the message names the file, alias and key."""


@dataclass(frozen=True, slots=True)
class Deployment:
    provider: str  # a provider id, or LOCAL
    model: str
    weight: int = 1

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.model}"


@dataclass(frozen=True, slots=True)
class Alias:
    name: str
    strategy: str
    deployments: tuple[Deployment, ...]
    max_attempts: int


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failures: int = DEFAULT_BREAKER_FAILURES
    cooldown_s: float = DEFAULT_BREAKER_COOLDOWN_S


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    path: str
    aliases: Mapping[str, Alias]
    breaker: BreakerPolicy = BreakerPolicy()


def routing_from_env(
    env: Mapping[str, str], configured: Collection[str], local_models: Collection[str]
) -> RoutingConfig | None:
    """ROUTING_ENABLED / ROUTING_CONFIG_PATH: the validated config, or None when routing is
    off. `configured`: the provider ids with credentials; `local_models`: profile names."""
    enabled = env.get("ROUTING_ENABLED", "").strip()
    if not enabled or not parse_bool("ROUTING_ENABLED", enabled, RoutingConfigError):
        return None
    path = env.get("ROUTING_CONFIG_PATH", "").strip()
    if not path:
        raise RoutingConfigError("ROUTING_CONFIG_PATH: required when ROUTING_ENABLED=true")
    return load_routing(Path(path), configured, local_models)


def load_routing(
    path: Path, configured: Collection[str], local_models: Collection[str]
) -> RoutingConfig:
    where = f"ROUTING_CONFIG_PATH {path}"
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RoutingConfigError(f"{where}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise RoutingConfigError(f"{where}: not UTF-8") from None
    import yaml

    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise RoutingConfigError(f"{where}: not valid YAML{at}") from None
    if not isinstance(data, dict):
        raise RoutingConfigError(f"{where}: the top level must be a mapping with 'models'")
    _no_other_keys(where, "", data, frozenset({"models", "circuit_breaker"}))
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise RoutingConfigError(f"{where}: models: expected a mapping of aliases")
    aliases = {}
    for name, spec in models.items():
        if not isinstance(name, str) or not name.strip() or not name.isprintable():
            raise RoutingConfigError(f"{where}: models: alias names must be printable strings")
        if name in local_models:
            raise RoutingConfigError(
                f"{where}: models.{name}: the alias is also a local model's name"
            )
        aliases[name] = _alias(where, name, spec, configured, local_models)
    breaker = _breaker(where, data.get("circuit_breaker"))
    return RoutingConfig(str(path), MappingProxyType(aliases), breaker)


def _alias(
    where: str, name: str, spec: object, configured: Collection[str], local: Collection[str]
) -> Alias:
    at = f"models.{name}"
    if not isinstance(spec, dict):
        raise RoutingConfigError(f"{where}: {at}: expected a mapping")
    _no_other_keys(where, at, spec, _ALIAS_KEYS)
    strategy = spec.get("strategy", "round_robin")
    if strategy not in STRATEGIES:
        raise RoutingConfigError(f"{where}: {at}.strategy: expected one of {', '.join(STRATEGIES)}")
    items = spec.get("deployments")
    if not isinstance(items, list) or len(items) < 2:
        raise RoutingConfigError(f"{where}: {at}.deployments: expected a list of two or more")
    deployments: list[Deployment] = []
    for i, item in enumerate(items):
        d = _deployment(where, f"{at}.deployments[{i}]", item, strategy, configured, local)
        if any(seen.name == d.name for seen in deployments):  # whatever their weights
            raise RoutingConfigError(f"{where}: {at}.deployments[{i}]: listed twice")
        deployments.append(d)
    attempts = spec.get("max_attempts", min(DEFAULT_MAX_ATTEMPTS, len(deployments)))
    if _bad_int(attempts, 1, len(deployments)):
        raise RoutingConfigError(
            f"{where}: {at}.max_attempts: expected an integer in [1, {len(deployments)}]"
        )
    return Alias(name, strategy, tuple(deployments), attempts)


def _deployment(
    where: str,
    at: str,
    item: object,
    strategy: str,
    configured: Collection[str],
    local: Collection[str],
) -> Deployment:
    if not isinstance(item, dict):
        raise RoutingConfigError(f"{where}: {at}: expected a mapping with provider and model")
    _no_other_keys(where, at, item, _DEPLOYMENT_KEYS)
    provider, model = item.get("provider"), item.get("model")
    if not isinstance(provider, str) or not provider:
        raise RoutingConfigError(f"{where}: {at}.provider: required")
    if not isinstance(model, str) or not model.strip() or not model.isprintable():
        raise RoutingConfigError(f"{where}: {at}.model: required")
    provider = provider.lower()
    if provider == LOCAL:
        if model not in local:
            raise RoutingConfigError(f"{where}: {at}.model: no local model profile named '{model}'")
    elif provider not in PROVIDERS:
        raise RoutingConfigError(
            f"{where}: {at}.provider: unknown provider '{provider}' "
            f"(known: {LOCAL}, {', '.join(PROVIDERS)})"
        )
    elif provider not in configured:
        need = f"{provider.upper()}_API_{'URL' if PROVIDERS[provider].keyless else 'KEY'}"
        raise RoutingConfigError(
            f"{where}: {at}.provider: provider '{provider}' is not configured (set {need})"
        )
    weight = item.get("weight", 1)
    if "weight" in item and strategy != "weighted":
        raise RoutingConfigError(f"{where}: {at}.weight: only with strategy weighted")
    if _bad_int(weight, 1, MAX_WEIGHT):
        raise RoutingConfigError(f"{where}: {at}.weight: expected an integer in [1, {MAX_WEIGHT}]")
    return Deployment(provider, model, weight)


def _breaker(where: str, spec: object) -> BreakerPolicy:
    if spec is None:
        return BreakerPolicy()
    if not isinstance(spec, dict):
        raise RoutingConfigError(f"{where}: circuit_breaker: expected a mapping")
    _no_other_keys(where, "circuit_breaker", spec, _BREAKER_KEYS)
    failures = spec.get("failures", DEFAULT_BREAKER_FAILURES)
    if _bad_int(failures, 1, 1000):
        raise RoutingConfigError(
            f"{where}: circuit_breaker.failures: expected an integer in [1, 1000]"
        )
    cooldown = spec.get("cooldown", DEFAULT_BREAKER_COOLDOWN_S)
    if isinstance(cooldown, bool):
        cooldown = "not a duration"
    seconds = parse_duration(
        f"{where}: circuit_breaker.cooldown", str(cooldown), RoutingConfigError, most_s=3600
    )
    return BreakerPolicy(failures, seconds)


def _no_other_keys(where: str, at: str, spec: dict[object, object], known: frozenset[str]) -> None:
    for key in spec:
        if key not in known:
            shown = key if isinstance(key, str) and key.isprintable() else repr(key)
            prefix = f"{at}." if at else ""
            raise RoutingConfigError(
                f"{where}: {prefix}{str(shown)[:80]}: unknown key (expected {', '.join(sorted(known))})"
            )


def _bad_int(value: object, lo: int, hi: int) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi
