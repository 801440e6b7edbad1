"""The probes: /health (liveness) and /ready (readiness), answered without a client key and
outside the in-flight bound; /ready 503 with its reasons while nothing configured can
serve, from the fleet's cached checks."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

from edgegw.mock import MockUpstream

from .conftest import start_gateway, upstream_env
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request
from .test_local import local_gateway, profile_yaml
from .test_routing import closed_port


async def test_ready_with_a_provider_and_no_key_needed(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_API_KEYS="sk-client"))
    assert (await request(gw.port, "GET", "/v1/models")).status == 401  # keys are on
    health = await request(gw.port, "GET", "/health")
    assert health.status == 200 and orjson.loads(health.body) == {"message": "OK"}
    ready = await request(gw.port, "GET", "/ready")
    assert ready.status == 200
    assert orjson.loads(ready.body) == {
        "status": "ready",
        "reasons": [],
        "providers": ["openai"],
        "local_models": {},
    }


async def test_not_ready_until_a_local_worker_is_routable(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """No provider, one local model: its worker down is 503 `no_upstream`; once the fleet's
    checks find it healthy, 200. /health answers 200 all along."""
    port = closed_port()
    gw = await local_gateway(nursery, tmp_path, profile_yaml([(port, "default", None)]))
    ready = await request(gw.port, "GET", "/ready")
    assert ready.status == 503 and ready.headers[b"retry-after"] == b"5"
    assert orjson.loads(ready.body) == {
        "status": "not_ready",
        "reasons": ["no_upstream"],
        "providers": [],
        "local_models": {"qwen3-8b": 0},
    }
    assert (await request(gw.port, "GET", "/health")).status == 200

    worker = FakeSGLang(Script(lora_adapters=["sql-lora"]))
    await nursery.start(worker.serve)
    gw = await local_gateway(nursery, tmp_path, profile_yaml([(worker.port, "default", None)]), {})
    # Polled as a probe would: the first check of the worker makes it routable.
    with trio.fail_after(10):
        while (await request(gw.port, "GET", "/ready")).status != 200:  # noqa: ASYNC110
            await trio.sleep(0.05)
    body = orjson.loads((await request(gw.port, "GET", "/ready")).body)
    assert body["status"] == "ready" and body["local_models"] == {"qwen3-8b": 1}
