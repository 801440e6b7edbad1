"""What requests cost and the budgets they are held to: the cost header, the access log, the
metrics by tenant and model, token and money budgets reached (mid-stream too) and kept
across a restart in a real SQLite file."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import openai
import orjson
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from edgegw.keyfile import NANO_USD, Budget, KeyFileError, parse_key_file
from edgegw.mock import MockConfig, MockUpstream
from edgegw.models.community import CommunityEntry, CommunityTable
from edgegw.settings import Settings, SettingsError
from edgegw.tenants.budgets import period_end, period_key
from edgegw.tenants.pricing import Prices, usd_text

from .conftest import (
    UPSTREAM_KEY,
    Gateway,
    in_thread,
    openai_client,
    sample,
    scrape,
    start_gateway,
    upstream_env,
)
from .rawhttp import RawResponse, request

# USD per million tokens: input 1000, output 2000 (so a token is 0.001 / 0.002 USD).
PRICES = "openai/m=1000:2000"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def body_of(max_tokens: int = 10, stream: bool = False, model: str = "openai/m") -> bytes:
    doc: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }
    if stream:
        doc["stream"] = True
        doc["stream_options"] = {"include_usage": True}
    return orjson.dumps(doc)


async def chat(gw: Gateway, key: str, body: bytes | None = None) -> RawResponse:
    return await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        body or body_of(),
        [("authorization", f"Bearer {key}")],
    )


def code_of(resp: RawResponse) -> str:
    return str(orjson.loads(resp.body)["error"]["code"])


async def upstream(nursery: trio.Nursery, tokens: int) -> MockUpstream:
    mock = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, tokens=tokens))
    await nursery.start(mock.serve, "127.0.0.1", 0)
    return mock


def env_with(mock: MockUpstream, tmp_path: Path, text: str, **extra: str) -> dict[str, str]:
    keys = tmp_path / "keys"
    keys.write_text(text)
    return upstream_env(
        mock,
        EDGEGW_API_KEYS_FILE=str(keys),
        TENANTS_STORE_PATH=str(tmp_path / "usage.sqlite3"),
        MODEL_PRICES=PRICES,
        **extra,
    )


# -- the grammar and the calendar ----------------------------------------------------------


def test_budgets_in_the_key_file() -> None:
    kf = parse_key_file(
        "tenant t budget_tokens=1e6/month budget_usd=12.5/day\n"
        f"key k tenant=t sha256={sha('k')} budget_usd=0.000000001/week\n"
    )
    assert kf.tenants["t"].budgets == (
        Budget("tokens", 1_000_000, "month"),
        Budget("usd", 12_500_000_000, "day"),
    )
    assert kf.keys[hashlib.sha256(b"k").digest()].budgets == (Budget("usd", 1, "week"),)
    assert kf.has_budgets
    for bad in ("budget_usd=5", "budget_tokens=1.5/day", "budget_usd=0/day", "budget_usd=x/month"):
        with pytest.raises(KeyFileError, match="line 1: budget_"):
            parse_key_file(f"tenant t {bad}\n")


def test_periods_are_calendar_ones_in_utc() -> None:
    at = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()  # a Thursday
    assert [period_key(p, at) for p in ("day", "week", "month")] == [
        "day:2026-12-31",
        "week:2026-12-28",
        "month:2026-12",
    ]
    assert period_end("day", at) == period_end("month", at) == at + 1
    assert period_end("week", at) == datetime(2027, 1, 4, tzinfo=UTC).timestamp()


def test_model_prices_setting() -> None:
    settings = Settings.load(environ={"MODEL_PRICES": "openai/M=2.5:10, qwen3-8b=0:0"})
    assert {m: tuple(map(str, p)) for m, p in settings.model_prices.items()} == {
        "openai/m": ("0.0000025", "0.000010"),
        "qwen3-8b": ("0.000000", "0.000000"),
    }
    with pytest.raises(SettingsError, match="MODEL_PRICES"):
        Settings.load(environ={"MODEL_PRICES": "openai/m=2.5"})


# -- cost per request ------------------------------------------------------------------------

# Per-token prices as MODEL_PRICES and the community table give them: up to 15 decimals.
PER_TOKEN = st.builds(lambda units, places: Decimal(units).scaleb(-places),
                   st.integers(0, 10**8), st.integers(6, 15))  # fmt: skip


@given(PER_TOKEN, PER_TOKEN, st.integers(0, 10**7), st.integers(0, 10**7))
def test_a_cost_in_whole_femto_dollars_is_the_exact_decimal_one(
    price_in: Decimal, price_out: Decimal, tokens_in: int, tokens_out: int
) -> None:
    usage = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out}
    exact = int((tokens_in * price_in + tokens_out * price_out) * NANO_USD)
    assert Prices({"m": (price_in, price_out)}).cost_nano("m", usage) == exact
    text = f"{Decimal(exact) / NANO_USD:f}"
    plain = text.rstrip("0").rstrip(".") if "." in text else text
    assert usd_text(exact) == (plain or "0")  # a free model's cost is "0", not ""


def test_the_community_table_prices_a_model_once_it_is_loaded() -> None:
    looked_up: list[str] = []

    class Entries(dict):
        def get(self, key, default=None):
            looked_up.append(key)
            return super().get(key, default)

    pricing = {"input_per_token": "0.000001", "output_per_token": "0.000002"}
    table = CommunityTable(load=lambda: Entries({"openai/m": CommunityEntry(pricing=pricing)}))
    prices = Prices({}, table)
    usage = {"prompt_tokens": 10, "completion_tokens": 5}
    # Not loaded yet: no request waits for it, nothing is priced from it.
    assert prices.cost_nano("openai/m", usage) is None and not looked_up
    assert len(table) == 1  # loaded (as /v1/models or the tenants' start load it)
    looked_up.clear()
    assert prices.cost_nano("openai/m", usage) == 20_000
    assert prices.cost_nano("openai/unpriced", usage) is None
    asked = len(looked_up)
    # Found or not, a model is looked up in the loaded table once.
    assert prices.cost_nano("openai/m", usage) == 20_000
    assert prices.cost_nano("openai/unpriced", usage) is None
    assert len(looked_up) == asked


async def test_what_a_request_cost_in_its_header_log_metrics_and_span(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.access")
    mock = await upstream(nursery, tokens=5)
    text = f"tenant team\nkey ci tenant=team sha256={sha('sk-ci')}\n"
    env = env_with(mock, tmp_path, text, TELEMETRY_ENABLED="true")
    gw = await start_gateway(nursery, env)
    whole = await chat(gw, "sk-ci")
    usage = orjson.loads(whole.body)["usage"]
    cost = usage["prompt_tokens"] * 0.001 + usage["completion_tokens"] * 0.002
    assert whole.headers[b"x-edgegw-cost-usd"] == b"%g" % cost
    # A stream's head goes before its usage is known: no header, the same cost recorded.
    streamed = await chat(gw, "sk-ci", body_of(stream=True))
    assert streamed.status == 200 and b"x-edgegw-cost-usd" not in streamed.headers
    # A model without a price: no cost, tokens still counted.
    unpriced = await chat(gw, "sk-ci", body_of(model="openai/other"))
    assert unpriced.status == 200 and b"x-edgegw-cost-usd" not in unpriced.headers
    lines = [r.getMessage() for r in caplog.records if r.name == "edgegw.access"]
    assert lines[0].endswith(f"tenant=team key=ci cost={cost:g}")
    assert lines[1].endswith(f"tenant=team key=ci cost={cost:g}")
    assert lines[2].endswith("tenant=team key=ci cost=-")
    text = await scrape(gw.metrics_port)
    by_model = {"tenant": "team", "gen_ai_request_model": "openai/m"}
    assert sample(text, "edgegw_tenant_requests_total", **by_model) == 2
    assert sample(text, "edgegw_tenant_tokens_total", **by_model) == 2 * usage["total_tokens"]
    assert sample(text, "edgegw_tenant_cost_usd_total", **by_model) == pytest.approx(2 * cost)
    other = {"tenant": "team", "gen_ai_request_model": "openai/other"}
    assert sample(text, "edgegw_tenant_tokens_total", **other) == usage["total_tokens"]
    assert sample(text, "edgegw_tenant_cost_usd_total", **other) is None


# -- budgets ---------------------------------------------------------------------------------


async def test_a_token_budget_reached_mid_stream_and_across_a_restart(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    mock = await upstream(nursery, tokens=40)
    text = f"tenant t budget_tokens=80/day\nkey k tenant=t sha256={sha('sk-k')}\n"
    env = env_with(mock, tmp_path, text)
    async with trio.open_nursery() as first_life:
        gw = await start_gateway(first_life, env)
        assert (await chat(gw, "sk-k", body_of(max_tokens=100))).status == 200  # 41 tokens
        # Starts under the budget, ends past it: a started answer is never cut.
        streamed = await chat(gw, "sk-k", body_of(max_tokens=100, stream=True))
        assert streamed.status == 200 and streamed.body.endswith(b"data: [DONE]\n\n")
        refused = await chat(gw, "sk-k")
        assert (refused.status, code_of(refused)) == (429, "insufficient_quota")
        assert orjson.loads(refused.body)["error"]["type"] == "insufficient_quota"
        assert 0 < int(refused.headers[b"retry-after"]) <= 86400
        first_life.cancel_scope.cancel()  # a graceful stop writes what is left
    with sqlite3.connect(tmp_path / "usage.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        rows = dict(db.execute("SELECT scope || ' ' || period, tokens FROM usage").fetchall())
    today = period_key("day", datetime.now(UTC).timestamp())
    assert rows[f"t/t {today}"] == rows[f"k/t/k {today}"] == 82
    served = len(mock.requests)
    # A new process: the budget is still spent.
    gw = await start_gateway(nursery, env)
    refused = await chat(gw, "sk-k")
    assert (refused.status, code_of(refused)) == (429, "insufficient_quota")
    assert len(mock.requests) == served


async def test_a_money_budget_of_a_key_and_the_sdks_view_of_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    mock = await upstream(nursery, tokens=10)
    # A request: 1 prompt token and 10 completion tokens, 0.021 USD; the key may spend 0.05.
    text = (
        "tenant t budget_usd=100/month\n"
        f"key small tenant=t sha256={sha('sk-small')} budget_usd=0.05/week\n"
        f"key big tenant=t sha256={sha('sk-big')}\n"
    )
    gw = await start_gateway(nursery, env_with(mock, tmp_path, text))
    for _ in range(3):
        assert (await chat(gw, "sk-small")).status == 200
    with openai_client(gw.base, api_key="sk-small") as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await in_thread(
                client.chat.completions.create,
                model="openai/m",
                messages=[{"role": "user", "content": "hi"}],
            )
    assert caught.value.code == "insufficient_quota"
    assert (await chat(gw, "sk-big")).status == 200  # the tenant's budget is not spent


async def test_an_unusable_store_refuses_the_start(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = env_with(mock, tmp_path, "tenant t\n")
    env["TENANTS_STORE_PATH"] = str(blocker / "usage.sqlite3")  # under a file: no directory
    with pytest.raises(ExceptionGroup) as caught:
        async with trio.open_nursery() as inner:
            await start_gateway(inner, env)
    assert caught.group_contains(SettingsError, match="TENANTS_STORE_PATH: cannot use", depth=None)


async def test_the_server_span_names_the_tenant_key_and_cost(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    from .otlp_receiver import OtlpReceiver
    from .test_tracing import exported, server_span, tracing_env

    collector = OtlpReceiver()
    collector.port = await nursery.start(collector.serve)
    mock = await upstream(nursery, tokens=5)
    text = f"tenant team\nkey ci tenant=team sha256={sha('sk-ci')}\n"
    env = env_with(mock, tmp_path, text, **tracing_env(f"http://127.0.0.1:{collector.port}"))
    gw = await start_gateway(nursery, env)
    resp = await chat(gw, "sk-ci")
    usage = orjson.loads(resp.body)["usage"]
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert server.attributes["edgegw.tenant"] == "team"
    assert server.attributes["edgegw.key"] == "ci"
    assert server.attributes["edgegw.tokens"] == usage["total_tokens"]
    assert server.attributes["edgegw.cost_usd"] == float(resp.headers[b"x-edgegw-cost-usd"])


def test_the_store_is_kept_where_something_must_survive_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgegw.tenants.budgets import store_path

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    keys = tmp_path / "keys"

    def path_for(text: str, **env: str) -> Path | None:
        keys.write_text(text)
        return store_path(Settings.load(environ={"EDGEGW_API_KEYS_FILE": str(keys), **env}))

    assert path_for("tenant t rpm=5\n") is None  # limits only: nothing to keep
    assert path_for("tenant t budget_usd=5/day\n") == tmp_path / "edgegw" / "tenants.sqlite3"
    admin = {"TENANTS_ADMIN_KEY": "admin-credential-0123456789"}
    assert path_for("tenant t\n", **admin) == tmp_path / "edgegw" / "tenants.sqlite3"
    assert path_for("tenant t\n", TENANTS_STORE_PATH=str(tmp_path / "x.db")) == tmp_path / "x.db"


def test_usage_is_added_up_whenever_something_can_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgegw.gateway import _tenancy

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    keys = tmp_path / "keys"
    keys.write_text("tenant t\n")

    def counted(**env: str) -> bool:
        return _tenancy(Settings.load(environ=env), Prices({})).counted

    assert not counted()  # no key file, tenant, store or admin API: nothing ever reads it
    assert counted(EDGEGW_API_KEYS_FILE=str(keys))  # a budget may come with a re-read
    assert counted(TENANTS_ADMIN_KEY="admin-credential-0123456789")
    assert counted(TENANTS_STORE_PATH=str(tmp_path / "x.db"))
