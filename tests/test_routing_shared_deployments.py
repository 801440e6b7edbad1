"""Two aliases naming the same deployments: each alias keeps its own weights and cursor,
while a deployment's breaker is shared (a broken upstream is broken for every alias).
Real gateways and the mock upstream on loopback; every strategy here is deterministic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing

from edgegw.mock import MockUpstream
from edgegw.routing.config import RoutingConfigError, load_routing

from .test_routing import alias, chat, models_seen, providers, routed, selected


def weighted(*deployments: tuple[str, str, int]) -> object:
    return {
        "strategy": "weighted",
        "deployments": [{"provider": p, "model": m, "weight": w} for p, m, w in deployments],
    }


async def test_weights_hold_when_another_alias_shares_the_deployments(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """`even` is declared first and lists the same deployments at weight 1: `fast` still
    sends exactly 3 of every 4 of its requests to `heavy`, interleaved with `even`'s."""
    config = {
        "models": {
            "even": alias(("openai", "heavy"), ("groq", "light")),
            "fast": weighted(("openai", "heavy", 3), ("groq", "light", 1)),
        }
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    picks: dict[str, list[bytes | None]] = {"fast": [], "even": []}
    for i in range(40):
        resp = await chat(gw, "fast")
        assert resp.status == 200
        picks["fast"].append(selected(resp)[1])
        if i % 2:
            resp = await chat(gw, "even")
            assert resp.status == 200
            picks["even"].append(selected(resp)[1])
    assert Counter(picks["fast"]) == {b"heavy": 30, b"light": 10}
    assert all(
        Counter(picks["fast"][i : i + 4]) == {b"heavy": 3, b"light": 1} for i in range(0, 40, 4)
    )
    assert Counter(picks["even"]) == {b"heavy": 10, b"light": 10}
    # What the upstreams got: 30 + 10 and 10 + 10.
    assert Counter(models_seen(mock)) == {"heavy": 40, "light": 20}


async def test_each_alias_has_its_own_cursor(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    config = {
        "models": {
            "a": alias(("openai", "m1"), ("groq", "m2")),
            "b": alias(("openai", "m1"), ("groq", "m2")),
        }
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    for model in ("a", "b", "a", "b"):
        assert (await chat(gw, model)).status == 200
    assert models_seen(mock) == ["m1", "m1", "m2", "m2"]


async def test_a_breaker_opened_through_one_alias_keeps_the_other_away(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    failing = "mock-error-500"
    config = {
        "models": {
            "a": alias(("openai", failing), ("groq", "m2")),
            "b": alias(("openai", failing), ("deepseek", "m3")),
        },
        "circuit_breaker": {"failures": 1, "cooldown": "30s"},
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    assert selected(await chat(gw, "a")) == (b"groq", b"m2")
    # b's first choice is the same upstream, whose breaker a's request opened: not asked.
    assert selected(await chat(gw, "b")) == (b"deepseek", b"m3")
    assert models_seen(mock) == [failing, "m2", "m3"]


@pytest.mark.parametrize("weights", [(3, 1), (1, 1)])
def test_a_deployment_listed_twice_in_one_alias_is_refused(
    tmp_path: Path, weights: tuple[int, int]
) -> None:
    """The same provider/model twice, whatever the weights: one upstream, listed twice."""
    path = tmp_path / "routing.yaml"
    twice = weighted(("openai", "m1", weights[0]), ("openai", "m1", weights[1]))
    path.write_bytes(orjson.dumps({"models": {"fast": twice}}))
    with pytest.raises(RoutingConfigError, match=r"models\.fast\.deployments\[1\]: listed twice"):
        load_routing(path, {"openai"}, ())
