"""One grammar for every value an operator sets: the environment's settings, MCP's, the
guardrails' and the routing file's read durations and booleans alike."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from edgegw.guardrails.settings import GuardrailsSettings, GuardrailsSettingsError
from edgegw.mcp.settings import McpSettings, McpSettingsError
from edgegw.routing.config import RoutingConfigError, load_routing
from edgegw.settings import Settings, SettingsError

DURATIONS = {"1.5": 1.5, "500ms": 0.5, " 30s ": 30.0, "2m": 120.0, "1h": 3600.0}
NOT_DURATIONS = ["soon", "-1s", "1d", "0", "1e3", "5 s s"]
BOOLEANS = {"true": True, "ON": True, " yes ": True, "1": True, "false": False, "Off": False}


def readers(text: str) -> list[object]:
    """The same duration read by each reader (its value, or the error it raised)."""
    out: list[object] = []
    for read in (
        lambda: Settings.load(environ={"UPSTREAM_IDLE_TIMEOUT": text}).idle_timeout_s,
        lambda: McpSettings.from_env(
            {
                "MCP_ENABLED": "true",
                "MCP_SERVERS": "http://127.0.0.1:9/mcp",
                "MCP_REQUEST_TIMEOUT": text,
            }
        ),
        lambda: (
            GuardrailsSettings.from_env(
                {"GUARDRAILS_ENABLED": "true", "GUARDRAILS_EXTERNAL_TIMEOUT": text}
            ).external_timeout_s
        ),
    ):
        try:
            out.append(read())
        except (SettingsError, McpSettingsError, GuardrailsSettingsError) as e:
            out.append(type(e))
    return out


@pytest.mark.parametrize(("text", "seconds"), DURATIONS.items())
def test_every_reader_takes_the_same_durations(text: str, seconds: float) -> None:
    settings, mcp, guardrails = readers(text)
    assert settings == guardrails == seconds
    assert isinstance(mcp, McpSettings) and mcp.request_timeout_s == seconds


@pytest.mark.parametrize("text", NOT_DURATIONS)
def test_every_reader_refuses_the_same_durations(text: str) -> None:
    assert readers(text) == [SettingsError, McpSettingsError, GuardrailsSettingsError]


@pytest.mark.parametrize(("text", "value"), BOOLEANS.items())
def test_booleans(text: str, value: bool) -> None:
    assert Settings.load(environ={"ENABLE_VISION": text}).enable_vision is value
    assert GuardrailsSettings.from_env({"GUARDRAILS_ENABLED": text}).enabled is value


def test_a_routing_cooldown_reads_the_same_grammar(tmp_path: Path) -> None:
    def cooldown(value: object) -> float:
        path = tmp_path / "routing.yaml"
        deployments = [{"provider": "openai", "model": m} for m in ("m1", "m2")]
        config = {
            "models": {"fast": {"deployments": deployments}},
            "circuit_breaker": {"failures": 3, "cooldown": value},
        }
        path.write_bytes(orjson.dumps(config))
        return load_routing(path, {"openai"}, ()).breaker.cooldown_s

    assert cooldown("1h") == 3600.0
    assert cooldown(" 30s ") == 30.0
    for bad in ("2h", "soon", True, 0):
        with pytest.raises(RoutingConfigError, match="circuit_breaker.cooldown"):
            cooldown(bad)
