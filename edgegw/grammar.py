"""The one grammar of the values an operator sets, for every reader of settings (the
environment, the config file, MCP's, the guardrails', the routing file's): durations,
booleans and bounded integers. Each parser names the setting in its error and raises the
caller's error class, so that each reader keeps its own."""

from __future__ import annotations

import re

# `30s`, `500ms`, `2m`, `1h`, or plain seconds (`1.5`); spaces around are allowed.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
TRUE = frozenset({"true", "1", "yes", "on"})
FALSE = frozenset({"false", "0", "no", "off"})


def parse_duration(
    name: str,
    text: str,
    error: type[ValueError] = ValueError,
    *,
    zero: bool = False,
    most_s: float | None = None,
) -> float:
    """Seconds; more than zero unless `zero`, at most `most_s` when given."""
    m = _DURATION.match(text)
    if not m:
        raise error(f"{name}: expected a duration such as 30s, 500ms or 2m")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if value < 0 or (value == 0 and not zero):
        raise error(f"{name}: must be greater than zero")
    if most_s is not None and value > most_s:
        raise error(f"{name}: must be at most {most_s:g}s")
    return value


def parse_bool(name: str, text: str, error: type[ValueError] = ValueError) -> bool:
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise error(f"{name}: expected true or false")


def parse_int(name: str, text: str, lo: int, hi: int, error: type[ValueError] = ValueError) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise error(f"{name}: expected an integer") from None
    if not lo <= value <= hi:
        raise error(f"{name}: must be in [{lo}, {hi}]")
    return value
