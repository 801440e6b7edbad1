"""Fixtures: a fake upstream (edgegw's mock provider) and a real gateway, both on
loopback port 0, started with nursery.start. Nothing of edgegw's own is mocked. And the
helpers more than one test module uses: reading metrics, polling a fake peer, the SDK."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from edgegw.handoff import Handoff
from edgegw.mock import MockConfig, MockUpstream
from edgegw.server import serve
from edgegw.settings import Settings
from edgegw.telemetry.recording import Telemetry
from edgegw.upstream import UpstreamPool

from .rawhttp import request

UPSTREAM_KEY = "upstream-secret-key"
# Modules whose tests open sockets: collect garbage after each, so that a leaked socket's
# ResourceWarning fails the test that leaked it (warnings are errors), not a later one.
SOCKET_MODULES = (
    "test_gateway",
    "test_mock",
    "test_demo",
    "test_tls",
    "test_passthrough",
    "test_local",
    "test_lifecycle",
    "test_models",
    "test_otlp",
    "test_bench_cmd",
    "test_plainhttp",
    "test_retrieval",
)
# How long a test waits for a fake peer to notice something (tests normally take
# milliseconds). Wall time: what is awaited is other tasks' socket work, not a timer.
WAIT_S = 2.0


@pytest.fixture(autouse=True)
def _collect_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if request.module.__name__.rsplit(".", 1)[-1] in SOCKET_MODULES:
        gc.collect()


@dataclass
class Gateway:
    base: str
    port: int
    pool: UpstreamPool
    settings: Settings
    telemetry: Telemetry
    # The core's relay thread (None with EDGEGW_STREAM_RELAY=trio): `handed` counts its streams.
    handoff: Handoff | None = None

    @property
    def metrics_port(self) -> int:
        """Where the scrape server listens (TELEMETRY_METRICS_PORT=0 picks a free port)."""
        assert self.telemetry.metrics_port is not None
        return self.telemetry.metrics_port


async def start_gateway(
    nursery: trio.Nursery, env: Mapping[str, str], config_file: Path | None = None
) -> Gateway:
    settings = Settings.load(
        environ={"SERVER_PORT": "0", "TELEMETRY_METRICS_PORT": "0", **env},
        config_file=config_file,
    )
    pool = UpstreamPool(
        connect_timeout_s=settings.connect_timeout_s,
        idle_per_host=settings.pool_idle_per_host,
        max_per_host=settings.pool_max_per_host,
    )
    telemetry = Telemetry(settings)
    handoff = Handoff() if settings.stream_relay == "core" else None
    binds = await nursery.start(
        lambda task_status: serve(
            settings, pool=pool, telemetry=telemetry, handoff=handoff, task_status=task_status
        )
    )
    base = binds[0]
    return Gateway(
        base=base,
        port=int(base.rsplit(":", 1)[1]),
        pool=pool,
        settings=settings,
        telemetry=telemetry,
        handoff=handoff,
    )


async def scrape(port: int) -> str:
    """The Prometheus text of the scrape server on `port`."""
    resp = await request(port, "GET", "/metrics")
    assert resp.status == 200
    assert resp.headers[b"content-type"].startswith(b"text/plain")
    return resp.body.decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample `name` whose labels include `labels` (None: absent)."""
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


async def wait_until(condition: Callable[[], bool], within_s: float = WAIT_S) -> None:
    """Poll a fake peer's counter or record until `condition()` holds: the fakes offer no
    events to wait on, and a test wants no more than this."""
    with trio.fail_after(within_s):
        while not condition():  # noqa: ASYNC110 (a fake peer's counter)
            await trio.sleep(0.005)


@contextmanager
def openai_client(
    base: str, *, api_key: str = "client-key", timeout: float = 10
) -> Iterator[OpenAI]:
    """The official client against a gateway's base URL, no retries; closed after (its
    pool's sockets would leak)."""
    client = OpenAI(base_url=f"{base}/v1", api_key=api_key, max_retries=0, timeout=timeout)
    try:
        yield client
    finally:
        client.close()


async def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a blocking function (the SDK's) in a worker thread."""
    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def upstream_env(mock: MockUpstream, **extra: str) -> dict[str, str]:
    return {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock.port}/v1",
        "OPENAI_API_KEY": UPSTREAM_KEY,
        **extra,
    }


@pytest.fixture
async def mock(nursery: trio.Nursery) -> MockUpstream:
    upstream = MockUpstream(MockConfig(api_key=UPSTREAM_KEY))
    await nursery.start(upstream.serve, "127.0.0.1", 0)
    return upstream


@pytest.fixture
async def gateway(nursery: trio.Nursery, mock: MockUpstream) -> Gateway:
    return await start_gateway(nursery, upstream_env(mock))
