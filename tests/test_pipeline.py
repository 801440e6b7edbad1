"""The request pipeline as one piece: what the generation route records for every way a
request can end, and how the one resolver treats local models (allow/deny lists,
`?provider=`). Real gateway, the mock upstream and a fake SGLang worker on loopback; the
metrics are read by scraping /metrics."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

from edgegw.mock import MockConfig, MockUpstream

from .conftest import UPSTREAM_KEY, Gateway, sample, scrape, start_gateway, upstream_env
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request
from .test_local import profile_yaml

DURATION = "gen_ai_server_request_duration_seconds_count"
TELEMETRY = {"TELEMETRY_ENABLED": "true"}


def chat(model: str, **extra: object) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], **extra})


async def post(gw: Gateway, body: bytes, path: str = "/v1/chat/completions"):
    return await request(gw.port, "POST", path, body)


async def local_gateway(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang, mock: MockUpstream, **env: str
) -> Gateway:
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(profile_yaml([(worker.port, "default", None)]))
    return await start_gateway(nursery, upstream_env(mock, **TELEMETRY, **env), config_file=cfg)


async def worker_fixture(nursery: trio.Nursery) -> FakeSGLang:
    fake = FakeSGLang(Script(tokens=6))
    await nursery.start(fake.serve)
    return fake


async def test_refusals_before_the_upstream_are_recorded(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(
        nursery, upstream_env(mock, **TELEMETRY, DISALLOWED_MODELS="openai/blocked")
    )
    image = [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
    cases = [
        (chat("openai/blocked"), 403, "openai"),
        (chat("groq/llama"), 400, "unknown"),  # not configured: no provider resolved
        (
            orjson.dumps({"model": "openai/gpt", "messages": [{"role": "user", "content": image}]}),
            400,
            "openai",
        ),
        (chat("openai/gpt", top_k=5), 400, "openai"),  # an SIE-only field: unsupported_field
    ]
    for body, status, _ in cases:
        assert (await post(gw, body)).status == status
    text = await scrape(gw.metrics_port)
    assert sample(text, DURATION, gen_ai_request_model="openai/blocked", error_type="403") == 1
    assert sample(text, DURATION, gen_ai_request_model="groq/llama", error_type="400") == 1
    assert (
        sample(text, DURATION, gen_ai_provider_name="openai", gen_ai_request_model="openai/gpt")
        == 2
    )


async def test_a_client_that_hangs_up_mid_stream_is_not_recorded_as_a_success(
    nursery: trio.Nursery,
) -> None:
    slow = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, token_rate=20, tokens=40))
    await nursery.start(slow.serve, "127.0.0.1", 0)
    gw = await start_gateway(nursery, upstream_env(slow, **TELEMETRY))
    # A 2 s stream; hang up after its first pieces.
    body = chat("openai/mock", stream=True)
    got = await request(gw.port, "POST", "/v1/chat/completions", body, max_chunks=2)
    assert got.status == 200
    text = ""
    with trio.fail_after(10):
        while sample(text, DURATION, gen_ai_request_model="openai/mock") is None:
            await trio.sleep(0.05)
            text = await scrape(gw.metrics_port)
    assert sample(text, DURATION, gen_ai_request_model="openai/mock", error_type="499") == 1


async def test_a_client_that_hangs_up_after_the_whole_stream_is_recorded_as_a_success(
    nursery: trio.Nursery, mock_clock: trio.testing.MockClock
) -> None:
    # Virtual time: 1 s streams, so the disconnect watch reads each client meanwhile. The
    # core's relay writes a stream's end; the client closes as soon as it has it, which may
    # be before the gateway took the stream back. The relay's thread runs on real time: the
    # clock jumps only after 50 ms with every task blocked.
    mock_clock.autojump_threshold = 0.05
    slow = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, token_rate=4, tokens=4))
    await nursery.start(slow.serve, "127.0.0.1", 0)
    gw = await start_gateway(nursery, upstream_env(slow, **TELEMETRY))
    assert gw.handoff is not None
    body = chat("openai/mock", stream=True)
    for _ in range(3):
        got = await request(gw.port, "POST", "/v1/chat/completions", body)
        assert got.status == 200 and got.body.endswith(b"data: [DONE]\n\n")
    text = ""
    with trio.fail_after(10):
        while sample(text, DURATION, gen_ai_request_model="openai/mock") != 3:
            await trio.sleep(0.05)
            text = await scrape(gw.metrics_port)
    assert sample(text, DURATION, gen_ai_request_model="openai/mock", error_type="499") is None
    assert gw.handoff.handed == 3
    assert gw.pool.connections_opened == 1  # each stream's connection was reused


async def test_local_requests_are_recorded(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream
) -> None:
    worker = await worker_fixture(nursery)
    gw = await local_gateway(nursery, tmp_path, worker, mock)
    assert (await post(gw, chat("qwen3-8b"))).status == 200
    stream = await post(gw, chat("qwen3-8b", stream=True))
    assert stream.status == 200 and stream.body.endswith(b"data: [DONE]\n\n")
    text = await scrape(gw.metrics_port)
    local = {"gen_ai_provider_name": "local", "gen_ai_request_model": "qwen3-8b"}
    assert sample(text, DURATION, **local) == 2
    tokens = "gen_ai_client_token_usage_count"
    assert sample(text, tokens, **local, gen_ai_token_type="output") == 2
    ttft = "gen_ai_server_time_to_first_token_seconds_count"
    assert sample(text, ttft, **local) == 2


async def test_deny_list_refuses_a_local_model(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream
) -> None:
    worker = await worker_fixture(nursery)
    gw = await local_gateway(nursery, tmp_path, worker, mock, DISALLOWED_MODELS="local/qwen3-8b")
    resp = await post(gw, chat("qwen3-8b"))
    assert resp.status == 403
    assert orjson.loads(resp.body)["error"]["code"] == "model_not_allowed"
    assert not [r for r in worker.requests if r.path.startswith("/v1/c")]


async def test_allow_list_without_the_local_model_refuses_it(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream
) -> None:
    worker = await worker_fixture(nursery)
    gw = await local_gateway(nursery, tmp_path, worker, mock, ALLOWED_MODELS="openai/gpt-4o")
    assert (await post(gw, chat("qwen3-8b"))).status == 403
    allowed = await local_gateway(nursery, tmp_path, worker, mock, ALLOWED_MODELS="local/qwen3-8b")
    assert (await post(allowed, chat("qwen3-8b"))).status == 200


async def test_provider_query_wins_over_a_local_model_name(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream
) -> None:
    worker = await worker_fixture(nursery)
    gw = await local_gateway(nursery, tmp_path, worker, mock)
    resp = await post(gw, chat("qwen3-8b"), "/v1/chat/completions?provider=openai")
    assert resp.status == 200
    assert b"x-sie-served-by" not in resp.headers
    assert orjson.loads(mock.requests[-1].body)["model"] == "qwen3-8b"
    assert not [r for r in worker.requests if r.path.startswith("/v1/c")]
