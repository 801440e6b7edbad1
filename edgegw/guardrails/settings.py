"""The GUARDRAILS_* settings, named and defaulted as inference-gateway names them.

Parsed here (edgegw.settings only embeds the result) so that guardrails own their table; a
bad value raises `GuardrailsSettingsError` naming the variable, which edgegw.settings turns
into its `SettingsError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from edgegw.grammar import parse_bool, parse_duration

FAIL_MODES = ("closed", "open")
# The reference's GUARDRAILS_EXTERNAL_TIMEOUT default.
DEFAULT_EXTERNAL_TIMEOUT_S = 5.0


class GuardrailsSettingsError(ValueError):
    """A GUARDRAILS_* value that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class GuardrailsSettings:
    enabled: bool = False  # GUARDRAILS_ENABLED
    # The *.rego files of this directory (not its subdirectories) are the policy; empty or
    # missing: no policy, every request allowed by it (GUARDRAILS_POLICY_DIR).
    policy_dir: str = ""
    # "closed": a policy or external checker that fails to decide blocks; "open": allows
    # (GUARDRAILS_FAIL_MODE).
    fail_mode: str = "closed"
    # POSTed the same input document; answers a decision (GUARDRAILS_EXTERNAL_URL).
    external_url: str = ""
    # The whole external check: connect, send, answer (GUARDRAILS_EXTERNAL_TIMEOUT).
    external_timeout_s: float = DEFAULT_EXTERNAL_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GuardrailsSettings:
        kw: dict[str, object] = {}
        if v := env.get("GUARDRAILS_ENABLED", "").strip():
            kw["enabled"] = _bool("GUARDRAILS_ENABLED", v)
        if v := env.get("GUARDRAILS_POLICY_DIR", "").strip():
            kw["policy_dir"] = v
        if v := env.get("GUARDRAILS_FAIL_MODE", "").strip():
            if v.lower() not in FAIL_MODES:
                raise GuardrailsSettingsError("GUARDRAILS_FAIL_MODE: expected closed or open")
            kw["fail_mode"] = v.lower()
        if v := env.get("GUARDRAILS_EXTERNAL_URL", "").strip():
            if not re.match(r"^https?://[^/\s]+", v) or not v.isprintable() or " " in v:
                raise GuardrailsSettingsError(
                    "GUARDRAILS_EXTERNAL_URL: expected an http:// or https:// URL"
                )
            kw["external_url"] = v
        if v := env.get("GUARDRAILS_EXTERNAL_TIMEOUT", "").strip():
            kw["external_timeout_s"] = _duration("GUARDRAILS_EXTERNAL_TIMEOUT", v)
        return cls(**kw)  # type: ignore[arg-type]


def _bool(name: str, text: str) -> bool:
    return parse_bool(name, text, GuardrailsSettingsError)


def _duration(name: str, text: str) -> float:
    return parse_duration(name, text, GuardrailsSettingsError)
