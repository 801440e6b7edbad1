"""The connection layer's limits table (edgegw.http1.limits) agrees with the settings, the
README's "Limits and timeouts" table and the supervisor's backlog."""

from __future__ import annotations

import resource
from dataclasses import fields
from pathlib import Path

import pytest

from edgegw import supervisor
from edgegw.http1.limits import (
    DEFAULT_LIMITS,
    LIMIT_TABLE,
    LISTEN_BACKLOG,
    SETTABLE,
    ConnectionLimits,
)
from edgegw.http1.server import connection_cap, raise_nofile
from edgegw.server import limits_of
from edgegw.settings import Settings, SettingsError

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_section() -> str:
    text = README.read_text()
    start = text.index("## Limits and timeouts")
    return text[start : text.index("\n## ", start + 1)]


def test_every_limit_is_in_the_table_with_a_reason_and_a_counterpart() -> None:
    assert {f.name for f in fields(ConnectionLimits)} == {row.name for row in SETTABLE}
    for row in LIMIT_TABLE:
        assert row.reason and row.counterpart and row.answer, row.name


def test_the_readme_documents_every_variable_with_its_default() -> None:
    section = readme_section()
    for row in LIMIT_TABLE:
        if row.env is None:
            continue
        assert f"| `{row.env}` |" in section, row.env
    for row in SETTABLE:
        value = getattr(DEFAULT_LIMITS, row.name)
        shown = f"{value:g}s" if row.unit == "s" else str(value)
        assert f"| `{row.env}` | `{shown}` |" in section, row.env


def test_settings_defaults_are_the_tables() -> None:
    settings = Settings.load(environ={})
    assert limits_of(settings) == DEFAULT_LIMITS
    assert settings.server == "edgegw"


def test_settings_from_the_environment() -> None:
    env = {
        "SERVER_HEADER_TIMEOUT": "2s",
        "SERVER_BODY_IDLE_TIMEOUT": "500ms",
        "SERVER_BODY_TIMEOUT": "1m",
        "SERVER_KEEPALIVE_TIMEOUT": "5",
        "SERVER_WRITE_STALL_TIMEOUT": "10s",
        "SERVER_MAX_HEADER_SIZE": "8192",
        "SERVER_MAX_CONNECTIONS": "100",
        "EDGEGW_SERVER": "Hypercorn",
    }
    settings = Settings.load(environ=env)
    assert limits_of(settings) == ConnectionLimits(2.0, 0.5, 60.0, 5.0, 10.0, 8192, 100)
    assert settings.server == "hypercorn"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"SERVER_HEADER_TIMEOUT": "soon"}, "SERVER_HEADER_TIMEOUT"),
        ({"SERVER_WRITE_STALL_TIMEOUT": "0s"}, "SERVER_WRITE_STALL_TIMEOUT"),
        ({"SERVER_MAX_HEADER_SIZE": "100"}, "SERVER_MAX_HEADER_SIZE"),
        ({"SERVER_MAX_CONNECTIONS": "0"}, "SERVER_MAX_CONNECTIONS"),
        ({"EDGEGW_SERVER": "uvicorn"}, "EDGEGW_SERVER"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.load(environ=env)


def test_one_backlog_for_the_supervisor_and_the_workers() -> None:
    assert supervisor.BACKLOG == LISTEN_BACKLOG == 4096


def test_descriptors() -> None:
    assert raise_nofile() == resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limits = ConnectionLimits(max_connections=10_000)
    assert connection_cap(limits, 1024) == (1024 - 256) // 2
    assert connection_cap(limits, 1 << 20) == 10_000
    assert connection_cap(limits, resource.RLIM_INFINITY) == 10_000
