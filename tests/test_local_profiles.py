"""Profile keys and settings of the SIE second pass: `triggers`, a model with no workers
yet, an unparsable SIE_GATEWAY_DEFAULT_MAX_TOKENS."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgegw.local.profiles import DEFAULT_TRIGGERS, ProfileError, parse_profile
from edgegw.settings import Settings, SettingsError

WORKER = [{"url": "http://127.0.0.1:30000"}]


def profile(**extra: object) -> dict[str, object]:
    return {"name": "m1", "workers": WORKER, **extra}


def test_triggers_default_and_declared(tmp_path: Path) -> None:
    m = parse_profile(profile(remote_fallback="openai/x"), tmp_path, "cfg", 0)
    assert m.triggers == DEFAULT_TRIGGERS == {"provisioning", "model_loading"}
    m = parse_profile(
        profile(remote_fallback="openai/x", triggers=["saturated", "unhealthy"]), tmp_path, "cfg", 0
    )
    assert m.triggers == {"saturated", "unhealthy"}


@pytest.mark.parametrize(
    "extra",
    [
        {"remote_fallback": "openai/x", "triggers": ["busy"]},
        {"remote_fallback": "openai/x", "triggers": []},
        {"remote_fallback": "openai/x", "triggers": "saturated"},
        {"triggers": ["saturated"]},  # nothing to fall back to
    ],
)
def test_bad_triggers_stop_the_start(tmp_path: Path, extra: dict[str, object]) -> None:
    with pytest.raises(ProfileError, match="model 'm1': triggers: "):
        parse_profile(profile(**extra), tmp_path, "cfg", 0)


def test_no_workers_only_with_a_fallback(tmp_path: Path) -> None:
    m = parse_profile(
        {"name": "m1", "workers": [], "remote_fallback": "openai/x"}, tmp_path, "cfg", 0
    )
    assert m.workers == ()
    with pytest.raises(ProfileError, match="workers: "):
        parse_profile({"name": "m1", "workers": []}, tmp_path, "cfg", 0)


@pytest.mark.parametrize("value", ["lots", "0", "-3", "1.5"])
def test_unparsable_default_max_tokens_falls_back_to_1024(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.load(environ={"SIE_GATEWAY_DEFAULT_MAX_TOKENS": value})
    assert settings.default_max_tokens == 1024
    assert any("SIE_GATEWAY_DEFAULT_MAX_TOKENS" in r.getMessage() for r in caplog.records)
    assert Settings.load(environ={"SIE_GATEWAY_DEFAULT_MAX_TOKENS": "64"}).default_max_tokens == 64


def test_gpu_aliases() -> None:
    s = Settings.load(environ={"SIE_GATEWAY_GPU_ALIASES": "l4=l4-spot, a100=a100-80gb"})
    assert dict(s.gpu_aliases) == {"l4": "l4-spot", "a100": "a100-80gb"}
    for bad in ("l4", "l4=", "l4=a/b", "=x"):
        with pytest.raises(SettingsError, match="^SIE_GATEWAY_GPU_ALIASES"):
            Settings.load(environ={"SIE_GATEWAY_GPU_ALIASES": bad})


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"profiles": {"local": "a", "remote": "a"}}, "profiles: "),
        ({"profiles": {"gpu": "a"}}, "profiles: "),
        ({"profiles": {"local": "a/b"}}, "profiles: "),
        ({"capabilities": {"tools": "yes"}}, "capabilities.tools: "),
        ({"capabilities": {"grammar": ["lark"]}}, "capabilities.grammar: "),
        ({"capabilities": {"vision": True}}, "capabilities: "),
        ({"stop_tokens": "END"}, "stop_tokens: "),
        ({"stop_tokens": [""]}, "stop_tokens: "),
    ],
)
def test_bad_profile_names_capabilities_stop_tokens(
    tmp_path: Path, extra: dict[str, object], key: str
) -> None:
    with pytest.raises(ProfileError, match=f"model 'm1': {key}"):
        parse_profile(profile(**extra), tmp_path, "cfg", 0)


def test_profile_names_capabilities_stop_tokens(tmp_path: Path) -> None:
    m = parse_profile(profile(), tmp_path, "cfg", 0)
    assert (m.local_profile, m.remote_profile, m.tools, m.stop_tokens) == (
        "local",
        "remote",
        True,
        (),
    )
    assert m.grammars == {"json_schema", "regex", "ebnf"}
    m = parse_profile(
        profile(
            profiles={"local": "h100"},
            capabilities={"tools": False, "grammar": []},
            stop_tokens=["<|im_end|>", "<|im_end|>"],
        ),
        tmp_path,
        "cfg",
        0,
    )
    assert (m.local_profile, m.tools, m.grammars, m.stop_tokens) == (
        "h100",
        False,
        frozenset(),
        ("<|im_end|>",),
    )
