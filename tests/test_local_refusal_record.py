"""A local request the SIE contract refuses (`n: 2` on /v1/completions: OpenAI's schema
takes it, the contract does not) is answered 400, and logged and metered as 400, served
directly or through a routing alias. Real gateway, fake SGLang worker, mock upstream."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
import trio

from edgegw.mock import MockUpstream

from .conftest import Gateway, sample, scrape, start_gateway, upstream_env
from .fake_sglang import FakeSGLang, Script
from .rawhttp import RawResponse, request

DURATION = "gen_ai_server_request_duration_seconds_count"
REFUSED = {"prompt": "hello", "n": 2}


async def gateway(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream, routing: bool
) -> Gateway:
    worker = FakeSGLang(Script(tokens=3))
    await nursery.start(worker.serve)
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(
        "local_models:\n  - name: qwen3-8b\n"
        f'    workers: [{{url: "http://127.0.0.1:{worker.port}"}}]\n'
    )
    env = upstream_env(mock, TELEMETRY_ENABLED="true")
    if routing:
        path = tmp_path / "routing.yaml"
        deployments = [
            {"provider": "local", "model": "qwen3-8b"},
            {"provider": "openai", "model": "m2"},
        ]
        path.write_bytes(orjson.dumps({"models": {"mixed": {"deployments": deployments}}}))
        env |= {"ROUTING_ENABLED": "true", "ROUTING_CONFIG_PATH": str(path)}
    return await start_gateway(nursery, env, config_file=cfg)


async def complete(gw: Gateway, model: str) -> RawResponse:
    body = orjson.dumps({"model": model, **REFUSED})
    return await request(gw.port, "POST", "/v1/completions", body)


def access_statuses(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The status field of each access-log line (`METHOD PATH STATUS ...`)."""
    return [r.getMessage().split()[2] for r in caplog.records if r.name == "edgegw.access"]


@pytest.mark.parametrize("model", ["qwen3-8b", "mixed"])
async def test_a_contract_refusal_is_recorded_with_its_status(
    nursery: trio.Nursery,
    tmp_path: Path,
    mock: MockUpstream,
    caplog: pytest.LogCaptureFixture,
    model: str,
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.access")
    gw = await gateway(nursery, tmp_path, mock, routing=model == "mixed")
    resp = await complete(gw, model)
    assert resp.status == 400, resp.body
    error = orjson.loads(resp.body)["error"]
    assert (error["code"], error["param"]) == ("unsupported_field", "n")
    assert mock.requests == []
    if model == "mixed":  # the router's first choice refused it: said, not failed over
        assert resp.headers[b"x-selected-provider"] == b"local"
    assert access_statuses(caplog) == ["400"]
    text = await scrape(gw.metrics_port)
    assert sample(text, DURATION, gen_ai_request_model=model, error_type="400") == 1
    assert sample(text, DURATION, gen_ai_request_model=model, error_type="500") is None
    if model == "mixed":
        attempts = "inference_gateway_routing_attempts_total"
        assert sample(text, attempts, routing_deployment="local/qwen3-8b", outcome="error") == 1
