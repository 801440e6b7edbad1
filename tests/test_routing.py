"""Model routing (ROUTING_ENABLED, ROUTING_CONFIG_PATH): aliases over deployments, against
real gateways and fake upstreams on loopback. Several providers point at the same mock (its
scripted models decide how each deployment answers: `mock-error-<status>`,
`mock-break-after-<k>`); a scriptable raw upstream plays a deployment that fails and
recovers; a closed port is a deployment that refuses connections."""

from __future__ import annotations

import socket
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from edgegw.envcheck import unhonoured
from edgegw.mock import MockUpstream
from edgegw.routing.breaker import Breaker, BreakerState
from edgegw.routing.config import Alias, Deployment, RoutingConfig
from edgegw.routing.router import Router, retry_after_s
from edgegw.settings import Settings
from edgegw.telemetry.recording import Telemetry

from .bad_upstream import BadUpstream, Script, response
from .conftest import (
    UPSTREAM_KEY,
    Gateway,
    in_thread,
    openai_client,
    sample,
    scrape,
    start_gateway,
)
from .fake_sglang import FakeSGLang
from .fake_sglang import Script as SglScript
from .rawhttp import RawResponse, request, sse_data, sse_events

MESSAGES = [{"role": "user", "content": "hi"}]
ANSWER = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "model": "recovering",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
    }
)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def providers(mock: MockUpstream, **urls: str) -> dict[str, str]:
    """openai, groq and deepseek configured, each at the mock unless `urls` says otherwise."""
    env = {}
    for pid in ("openai", "groq", "deepseek"):
        env[f"{pid.upper()}_API_URL"] = urls.get(pid, f"http://127.0.0.1:{mock.port}/v1")
        env[f"{pid.upper()}_API_KEY"] = UPSTREAM_KEY
    return env


async def routed(
    nursery: trio.Nursery, tmp_path: Path, config: object, env: dict[str, str]
) -> Gateway:
    path = tmp_path / "routing.yaml"
    path.write_bytes(orjson.dumps(config))  # JSON is YAML
    return await start_gateway(
        nursery,
        {
            "ROUTING_ENABLED": "true",
            "ROUTING_CONFIG_PATH": str(path),
            "TELEMETRY_ENABLED": "true",
            # Fail over at once: the tests that jump a MockClock cannot sleep the backoff.
            "UPSTREAM_RETRY_BACKOFF": "0",
            **env,
        },
    )


def alias(*deployments: tuple[str, str], strategy: str = "round_robin", **extra: object) -> object:
    return {
        "strategy": strategy,
        "deployments": [{"provider": p, "model": m} for p, m in deployments],
        **extra,
    }


async def chat(gw: Gateway, model: str = "fast", *, stream: bool = False) -> RawResponse:
    body = orjson.dumps({"model": model, "messages": MESSAGES, "stream": stream})
    return await request(gw.port, "POST", "/v1/chat/completions", body)


def selected(resp: RawResponse) -> tuple[bytes | None, bytes | None]:
    return resp.headers.get(b"x-selected-provider"), resp.headers.get(b"x-selected-model")


def models_seen(mock: MockUpstream) -> list[str]:
    return [orjson.loads(r.body)["model"] for r in mock.requests]


# --- strategies -------------------------------------------------------------------------


async def test_round_robin_takes_the_deployments_in_turn(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    config = {"models": {"fast": alias(("openai", "m1"), ("groq", "m2"), ("deepseek", "m3"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    picks = []
    for _ in range(6):
        resp = await chat(gw)
        assert resp.status == 200
        picks.append(selected(resp))
        # The answer is the deployment's, relayed as sent.
        assert orjson.loads(resp.body)["model"] == selected(resp)[1].decode()  # type: ignore[union-attr]
    assert picks == [(b"openai", b"m1"), (b"groq", b"m2"), (b"deepseek", b"m3")] * 2
    assert models_seen(mock) == ["m1", "m2", "m3"] * 2


async def test_weights_give_each_deployment_its_share(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """Smooth weighted round robin is deterministic: over every 4 requests, exactly 3 and 1;
    and never two light ones in a row."""
    config = {
        "models": {
            "fast": {
                "strategy": "weighted",
                "deployments": [
                    {"provider": "openai", "model": "heavy", "weight": 3},
                    {"provider": "groq", "model": "light", "weight": 1},
                ],
            }
        }
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    for _ in range(40):
        assert (await chat(gw)).status == 200
    seen = models_seen(mock)
    assert Counter(seen) == {"heavy": 30, "light": 10}
    assert all(Counter(seen[i : i + 4]) == {"heavy": 3, "light": 1} for i in range(0, 40, 4))


async def test_least_latency_prefers_the_faster_deployment(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """Each deployment is measured once (never-measured ones go first), then the one with
    the lower time to its answer head takes the traffic."""
    slow, fast = "mock-slow-first-byte-200", "m-fast"
    config = {"models": {"fast": alias(("openai", slow), ("groq", fast), strategy="least_latency")}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    for _ in range(6):
        assert (await chat(gw)).status == 200
    seen = models_seen(mock)
    assert sorted(seen[:2]) == sorted([slow, fast])
    assert seen[2:] == [fast] * 4


async def test_least_latency_does_not_prefer_a_deployment_that_fails_fast(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """A 5xx answers at once: it is a failure for the breaker, never a latency sample."""
    slow, failing = "mock-slow-first-byte-100", "mock-error-500"
    config = {
        "models": {"fast": alias(("openai", failing), ("groq", slow), strategy="least_latency")}
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    for _ in range(3):
        assert selected(await chat(gw)) == (b"groq", slow.encode())
    # Still unmeasured, the failing one is tried first each time, then fails over.
    assert models_seen(mock) == [failing, slow] * 3


# --- failover before the first byte -----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", ["mock-error-500", "mock-error-503", "mock-error-429"])
async def test_an_error_answer_moves_the_request_to_the_next_deployment(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, failure: str, stream: bool
) -> None:
    config = {"models": {"fast": alias(("openai", failure), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    resp = await chat(gw, stream=stream)
    assert resp.status == 200
    assert selected(resp) == (b"groq", b"m2")
    assert models_seen(mock) == [failure, "m2"]
    if stream:
        # Whole, and from one deployment: every chunk is the second one's, then [DONE].
        events = sse_events(resp.body)
        assert events[-1] == "[DONE]"
        assert {e["model"] for e in events[:-1]} == {"m2"}  # type: ignore[index]
    text = await scrape(gw.metrics_port)
    reason = failure.rsplit("-", 1)[1]
    assert (
        sample(
            text,
            "inference_gateway_routing_failovers_total",
            routing_alias="fast",
            routing_deployment=f"openai/{failure}",
            reason=reason,
        )
        == 1
    )
    assert (
        sample(
            text,
            "inference_gateway_routing_attempts_total",
            routing_deployment="groq/m2",
            outcome="ok",
        )
        == 1
    )


async def test_a_client_error_answer_is_not_failed_over(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """A 4xx other than 429 is the deployment's answer about the request: relayed."""
    config = {"models": {"fast": alias(("openai", "mock-error-400"), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    resp = await chat(gw)
    assert resp.status == 400
    assert selected(resp) == (b"openai", b"mock-error-400")
    assert models_seen(mock) == ["mock-error-400"]


async def test_a_429_keeps_its_deployment_out_until_its_retry_after(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """The mock's 429 says Retry-After: 7; until then the deployment is not asked at all,
    although round robin starts with it on every other request; after it, it is."""
    config = {"models": {"fast": alias(("openai", "mock-error-429"), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    for _ in range(4):
        resp = await chat(gw)
        assert resp.status == 200 and selected(resp) == (b"groq", b"m2")
    assert models_seen(mock) == ["mock-error-429", "m2", "m2", "m2", "m2"]
    mock_clock.jump(7)
    assert selected(await chat(gw)) == (b"groq", b"m2")
    assert models_seen(mock)[5:] == ["mock-error-429", "m2"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_refused_connection_moves_the_request_on(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, stream: bool
) -> None:
    config = {"models": {"fast": alias(("openai", "m1"), ("groq", "m2"))}}
    env = providers(mock, openai=f"http://127.0.0.1:{closed_port()}/v1")
    gw = await routed(nursery, tmp_path, config, env)
    resp = await chat(gw, stream=stream)
    assert resp.status == 200
    assert selected(resp) == (b"groq", b"m2")
    assert models_seen(mock) == ["m2"]
    if stream:
        assert sse_events(resp.body)[-1] == "[DONE]"
    text = await scrape(gw.metrics_port)
    assert sample(text, "inference_gateway_routing_failovers_total", reason="connect") == 1


async def test_no_failover_after_the_first_byte(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """A stream cut after its head stays the first deployment's: an error event ends it,
    and the next deployment is never asked."""
    config = {"models": {"fast": alias(("openai", "mock-break-after-1"), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    resp = await chat(gw, stream=True)
    assert resp.status == 200
    assert selected(resp) == (b"openai", b"mock-break-after-1")
    events = sse_data(resp.body)
    assert b"[DONE]" not in events
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_connection_lost"
    assert {orjson.loads(e)["model"] for e in events[:-1]} == {"mock-break-after-1"}
    assert models_seen(mock) == ["mock-break-after-1"]


async def test_the_last_deployment_answers_as_it_would_unrouted(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """max_attempts bounds the tries; the last one's error is the answer, with its status
    and Retry-After, and says which deployment gave it."""
    config = {
        "models": {
            "fast": alias(
                ("openai", "mock-error-503"),
                ("groq", "mock-error-429"),
                ("deepseek", "m3"),
                max_attempts=2,
            )
        }
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    resp = await chat(gw)
    assert resp.status == 429
    assert resp.headers[b"retry-after"] == b"7"
    assert selected(resp) == (b"groq", b"mock-error-429")
    assert models_seen(mock) == ["mock-error-503", "mock-error-429"]


async def test_the_official_client_streams_through_a_failover(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    config = {"models": {"fast": alias(("openai", "mock-error-502"), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))

    def run() -> tuple[str, list[str]]:
        with openai_client(gw.base) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="fast",
                messages=MESSAGES,
                stream=True,  # type: ignore[arg-type]
            )
            chunks = [c.model for c in raw.parse()]
            return raw.headers["x-selected-provider"], chunks

    provider, chunk_models = await in_thread(run)
    assert provider == "groq"
    assert chunk_models and set(chunk_models) == {"m2"}


# --- local deployments ------------------------------------------------------------------


async def local_routed(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang, mock: MockUpstream, **extra: object
) -> Gateway:
    """An alias over the local model qwen3-8b (on `worker`) and openai/m2."""
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(
        f'local_models:\n  - name: qwen3-8b\n    workers: [{{url: "http://127.0.0.1:{worker.port}"}}]\n'
    )
    routing = tmp_path / "routing.yaml"
    routing.write_bytes(
        orjson.dumps({"models": {"mixed": alias(("local", "qwen3-8b"), ("openai", "m2"), **extra)}})
    )
    env = {
        "ROUTING_ENABLED": "true",
        "ROUTING_CONFIG_PATH": str(routing),
        "OPENAI_API_URL": f"http://127.0.0.1:{mock.port}/v1",
        "OPENAI_API_KEY": UPSTREAM_KEY,
    }
    return await start_gateway(nursery, env, config_file=cfg)


async def test_an_alias_may_name_a_local_model(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    worker = FakeSGLang(SglScript(tokens=3))
    await nursery.start(worker.serve)
    gw = await local_routed(nursery, tmp_path, worker, mock)
    first, second = await chat(gw, "mixed"), await chat(gw, "mixed", stream=True)
    assert (first.status, second.status) == (200, 200)
    assert selected(first) == (b"local", b"qwen3-8b")
    assert first.headers[b"x-sie-served-by"] == b"local"
    assert selected(second) == (b"openai", b"m2")
    assert models_seen(mock) == ["m2"]
    # X-SIE-Remote: forbid passes over the remote deployment whose turn it is.
    body = orjson.dumps({"model": "mixed", "messages": MESSAGES})
    headers = [("x-sie-remote", "forbid")]
    for _ in range(2):
        resp = await request(gw.port, "POST", "/v1/chat/completions", body, headers)
        assert resp.status == 200 and selected(resp) == (b"local", b"qwen3-8b")
    assert models_seen(mock) == ["m2"]


async def test_a_local_model_without_a_worker_moves_the_request_on(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """No healthy worker (provisioning) is the local deployment's "cannot": the next
    deployment serves; as the last one tried, its refusal is the answer (SIE's 503)."""
    worker = FakeSGLang(SglScript(healthy=False))
    await nursery.start(worker.serve)
    gw = await local_routed(nursery, tmp_path, worker, mock)
    resp = await chat(gw, "mixed")
    assert resp.status == 200 and selected(resp) == (b"openai", b"m2")
    assert models_seen(mock) == ["m2"]

    gw = await local_routed(nursery, tmp_path, worker, mock, max_attempts=1)
    resp = await chat(gw, "mixed")
    assert resp.status == 503
    assert resp.headers[b"x-sie-error-code"] == b"PROVISIONING"
    assert selected(resp) == (b"local", b"qwen3-8b")
    assert models_seen(mock) == ["m2"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 10), min_size=2, max_size=5), st.integers(1, 3))
def test_weighted_shares_are_exact_over_every_sum_of_weights(weights: list[int], k: int) -> None:
    deployments = tuple(Deployment("openai", f"m{i}", w) for i, w in enumerate(weights))
    config = RoutingConfig("routing.yaml", {"a": Alias("a", "weighted", deployments, 1)})
    pool = Router(config, Telemetry(Settings())).pools["a"]
    for _ in range(k):
        firsts = [pool.order()[0].deployment.model for _ in range(sum(weights))]
        assert Counter(firsts) == {f"m{i}": w for i, w in enumerate(weights)}


# --- the circuit breaker ----------------------------------------------------------------


def test_the_breaker_opens_after_consecutive_failures_and_probes_after_the_cooldown() -> None:
    b = Breaker(threshold=3, cooldown_s=10)
    b.failed(0)
    b.failed(1)
    b.succeeded()  # consecutive: a success starts the count again
    b.failed(2)
    b.failed(3)
    assert b.state is BreakerState.CLOSED and b.admits(3)
    b.failed(4)
    assert b.state is BreakerState.OPEN
    assert not b.admits(13.9)
    assert b.admits(14)
    b.begin(14)
    assert b.state is BreakerState.HALF_OPEN
    assert not b.admits(14)  # one probe at a time
    b.failed(15)  # the probe failed: another cooldown
    assert b.state is BreakerState.OPEN and not b.admits(24.9) and b.admits(25)
    b.begin(25)
    b.succeeded()
    assert b.state is BreakerState.CLOSED and b.failures == 0


def test_a_probe_that_ends_without_a_verdict_hands_its_turn_on() -> None:
    b = Breaker(threshold=1, cooldown_s=10)
    b.failed(0)
    b.begin(10)
    b.abandoned()  # the client went away
    assert b.state is BreakerState.OPEN and b.admits(10)
    b.abandoned()  # nothing to hand on when no probe is out
    assert b.state is BreakerState.OPEN


def test_retry_after_is_read_as_seconds_or_a_date_and_bounded() -> None:
    assert retry_after_s(b"7") == 7
    assert retry_after_s(b"86400") == 300
    assert retry_after_s(b"Wed, 21 Oct 2015 07:28:00 GMT") == 0  # in the past
    assert retry_after_s(b"soon") is None
    assert retry_after_s(None) is None


async def test_the_breaker_opens_and_closes_on_the_gateway(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Virtual time that moves only when the test moves it: the cooldown passes at once."""
    bad = BadUpstream()
    await nursery.start(bad.serve)
    failing = Script([(0, response(500, [("content-length", "2")], b"{}"))])
    bad.script = failing
    config = {
        "models": {"fast": alias(("openai", "recovering"), ("groq", "m2"))},
        "circuit_breaker": {"failures": 2, "cooldown": "10s"},
    }
    gw = await routed(
        nursery, tmp_path, config, providers(mock, openai=f"http://127.0.0.1:{bad.port}/v1")
    )

    async def state() -> dict[str, float | None]:
        text = await scrape(gw.metrics_port)
        return {
            s: sample(
                text,
                "inference_gateway_routing_breaker_state",
                routing_deployment="openai/recovering",
                state=s,
            )
            for s in ("closed", "half_open", "open")
        }

    assert await state() == {"closed": 1, "half_open": 0, "open": 0}
    # Round robin starts with the failing deployment on every other request.
    for _ in range(4):
        resp = await chat(gw)
        assert resp.status == 200 and selected(resp) == (b"groq", b"m2")
    assert len(bad.requests) == 2
    assert await state() == {"closed": 0, "half_open": 0, "open": 1}
    for _ in range(4):  # open: not asked, though its turn comes twice
        assert selected(await chat(gw)) == (b"groq", b"m2")
    assert len(bad.requests) == 2

    bad.script = Script([(0, response(200, [("content-length", str(len(ANSWER)))], ANSWER))])
    mock_clock.jump(10)
    picks = [selected(await chat(gw)) for _ in range(2)]  # one of the two is its turn: the probe
    assert (b"openai", b"recovering") in picks
    assert len(bad.requests) == 3
    assert await state() == {"closed": 1, "half_open": 0, "open": 0}


async def test_every_deployment_out_is_503_with_retry_after(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    config = {
        "models": {"fast": alias(("openai", "mock-error-500"), ("groq", "mock-error-502"))},
        "circuit_breaker": {"failures": 1, "cooldown": "30s"},
    }
    gw = await routed(nursery, tmp_path, config, providers(mock))
    assert (await chat(gw)).status == 502  # both tried; the last one's answer
    resp = await chat(gw)
    assert resp.status == 503
    assert orjson.loads(resp.body)["error"]["code"] == "no_deployment_available"
    assert resp.headers[b"retry-after"] == b"30"
    assert len(mock.requests) == 2
    mock_clock.jump(30)
    assert (await chat(gw)).status == 502  # probed again


# --- names: allow/deny, /v1/models ------------------------------------------------------


async def test_allow_and_deny_lists_apply_to_the_alias_as_sent(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    config = {
        "models": {
            "fast": alias(("openai", "m1"), ("groq", "m2")),
            "slow": alias(("openai", "m1"), ("groq", "m2")),
        }
    }
    gw = await routed(nursery, tmp_path, config, {**providers(mock), "ALLOWED_MODELS": "fast"})
    assert (await chat(gw, "fast")).status == 200
    for model in ("slow", "openai/m1"):  # the deployments' own names are not what is allowed
        resp = await chat(gw, model)
        assert resp.status == 403
        assert orjson.loads(resp.body)["error"]["code"] == "model_not_allowed"
    listed = orjson.loads((await request(gw.port, "GET", "/v1/models")).body)["data"]
    aliases = [m for m in listed if m["owned_by"] == "edgegw-router"]
    assert aliases == [
        {
            "id": "fast",
            "object": "model",
            "created": 0,
            "owned_by": "edgegw-router",
            "served_by": "router",
        }
    ]

    gw = await routed(nursery, tmp_path, config, {**providers(mock), "DISALLOWED_MODELS": "fast"})
    resp = await chat(gw, "fast")
    assert resp.status == 403
    assert orjson.loads(resp.body)["error"]["message"] == (
        "Model is disallowed. Please use a different model."
    )
    assert (await chat(gw, "slow")).status == 200


async def test_provider_query_bypasses_aliases(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    """?provider= wins over an alias (inference-gateway's order): the name goes as sent."""
    config = {"models": {"fast": alias(("openai", "m1"), ("groq", "m2"))}}
    gw = await routed(nursery, tmp_path, config, providers(mock))
    body = orjson.dumps({"model": "fast", "messages": MESSAGES})
    resp = await request(gw.port, "POST", "/v1/chat/completions?provider=deepseek", body)
    assert resp.status == 200
    assert selected(resp) == (None, None)
    assert models_seen(mock) == ["fast"]


# --- the start ----------------------------------------------------------------------------


async def _serve(env: dict[str, str]) -> trio.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "edgegw", "serve", "--workers", "1", "--port", "0"],
            env={"PATH": "", "OPENAI_API_KEY": "k", "GROQ_API_KEY": "k", **env},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


GOOD = [{"provider": "openai", "model": "a"}, {"provider": "groq", "model": "b"}]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"models": {"fast": {"deployments": [{"provider": "nope", "model": "a"}, GOOD[1]]}}},
            "models.fast.deployments[0].provider: unknown provider 'nope'",
        ),
        (
            {"models": {"fast": {"deployments": GOOD[:1]}}},
            "models.fast.deployments: expected a list of two or more",
        ),
        (
            {"models": {"fast": {"strategy": "random", "deployments": GOOD}}},
            "models.fast.strategy: expected one of round_robin, weighted, least_latency",
        ),
        (
            {"models": {"fast": {"deployments": [GOOD[0], {"provider": "mistral", "model": "c"}]}}},
            "models.fast.deployments[1].provider: provider 'mistral' is not configured "
            "(set MISTRAL_API_KEY)",
        ),
        (
            {"models": {"fast": {"deployments": [{**GOOD[0], "weight": 2}, GOOD[1]]}}},
            "models.fast.deployments[0].weight: only with strategy weighted",
        ),
        (
            {"models": {"fast": {"deployments": GOOD, "retries": 2}}},
            "models.fast.retries: unknown key",
        ),
        (
            {"models": {"fast": {"deployments": [GOOD[0], {"provider": "local", "model": "q"}]}}},
            "models.fast.deployments[1].model: no local model profile named 'q'",
        ),
    ],
)
async def test_a_bad_routing_file_refuses_the_start(
    tmp_path: Path, config: object, message: str
) -> None:
    path = tmp_path / "routing.yaml"
    path.write_bytes(orjson.dumps(config))
    done = await _serve({"ROUTING_ENABLED": "true", "ROUTING_CONFIG_PATH": str(path)})
    assert done.returncode == 2
    assert f"edgegw: ROUTING_CONFIG_PATH {path}: {message}".encode() in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ROUTING_ENABLED": "true"}, "ROUTING_CONFIG_PATH: required when ROUTING_ENABLED=true"),
        (
            {"ROUTING_ENABLED": "true", "ROUTING_CONFIG_PATH": "/nonexistent/routing.yaml"},
            "ROUTING_CONFIG_PATH /nonexistent/routing.yaml: cannot read (No such file or directory)",
        ),
        ({"ROUTING_ENABLED": "maybe"}, "ROUTING_ENABLED: expected true or false"),
    ],
)
async def test_routing_enabled_without_a_usable_file_refuses_the_start(
    env: dict[str, str], message: str
) -> None:
    done = await _serve(env)
    assert done.returncode == 2
    assert f"edgegw: {message}".encode() in done.stderr


def test_a_routing_file_without_routing_enabled_is_named_at_start() -> None:
    assert unhonoured({"ROUTING_CONFIG_PATH": "/etc/routing.yaml"}) == [
        "ROUTING_CONFIG_PATH is set but not honoured: ROUTING_ENABLED is not true"
    ]
    assert unhonoured({"ROUTING_ENABLED": "true", "ROUTING_CONFIG_PATH": "/r.yaml"}) == []
    assert unhonoured({"ROUTING_ENABLED": "true", "ROUTING_STRATEGY": "x"}) == [
        "ROUTING_STRATEGY is set but edgegw has no such setting (a typo?)"
    ]
