"""Replicas behave as one: edgegw processes behind a small round-robin TCP balancer that
follows their /ready (as a Kubernetes Service's endpoints do). A routing key goes to the same
local worker from every replica; a replica told to stop (SIGTERM, SERVER_SHUTDOWN_DELAY) says
so on /ready while it still serves, so the balancer takes it out before its port closes and
no request is lost; a rolling restart of all three under steady streaming load fails none."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import h11
import orjson
import trio

from edgegw.mock import MockConfig, MockUpstream

from .conftest import UPSTREAM_KEY, upstream_env
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request
from .test_local import profile_yaml

# How often the balancer asks each replica's /ready (Kubernetes: periodSeconds, here faster).
POLL_S = 0.05
# A stopping replica's time on /ready before its port closes: many polls of the balancer.
SHUTDOWN_DELAY = "1s"
STREAM = orjson.dumps(
    {
        "model": "openai/mock-small",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
)


@dataclass
class Balancer:
    """Round-robin over the backends whose /ready last answered 200; a new backend
    connection per client connection; a refused connect tries the next backend."""

    backends: list[int] = field(default_factory=list)
    ready: set[int] = field(default_factory=set)
    port: int = 0
    turn: int = 0
    served: dict[int, int] = field(default_factory=dict)  # connections per backend

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._poll)
            task_status.started()
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    async def _poll(self) -> None:
        while True:
            for port in list(self.backends):
                try:
                    with trio.fail_after(1):
                        ok = (await request(port, "GET", "/ready")).status == 200
                # A replica whose port closes while it answers cuts the answer: not ready.
                except (OSError, trio.TooSlowError, trio.BrokenResourceError, h11.ProtocolError):
                    ok = False
                if ok and port in self.backends:
                    self.ready.add(port)
                else:
                    self.ready.discard(port)
            await trio.sleep(POLL_S)

    def _pick(self, tried: set[int]) -> int | None:
        rotation = [p for p in self.backends if p in self.ready and p not in tried]
        if not rotation:
            return None
        self.turn += 1
        return rotation[self.turn % len(rotation)]

    async def _connection(self, client: trio.SocketStream) -> None:
        tried: set[int] = set()
        async with client:
            while (port := self._pick(tried)) is not None:
                tried.add(port)
                try:
                    backend = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    continue
                self.served[port] = self.served.get(port, 0) + 1
                async with backend, trio.open_nursery() as nursery:
                    nursery.start_soon(_copy, client, backend, None)
                    # The backend's answer ends the exchange (edgegw closes after it).
                    await _copy(backend, client, nursery.cancel_scope)
                return


async def _copy(
    src: trio.SocketStream, dst: trio.SocketStream, done: trio.CancelScope | None
) -> None:
    try:
        while data := await src.receive_some(65536):
            await dst.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        if done is not None:
            done.cancel()


@dataclass
class Replica:
    proc: trio.Process
    port: int


@asynccontextmanager
async def replicas_of(env: dict[str, str], config: Path) -> AsyncIterator[list[Replica]]:
    """A list the test starts replicas into (`start_replica`); all killed at the end."""
    started: list[Replica] = []
    try:
        yield started
    finally:
        for r in started:
            if r.proc.returncode is None:
                r.proc.kill()
                await r.proc.wait()


async def start_replica(started: list[Replica], env: dict[str, str], config: Path) -> Replica:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "serve", "--workers", "1", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    out = b""
    with trio.fail_after(30):
        while not (m := re.search(rb"listening on http://127\.0\.0\.1:(\d+)", out)):
            chunk = await proc.stdout.receive_some(4096)  # type: ignore[union-attr]
            assert chunk, out
            out += chunk
    replica = Replica(proc, int(m.group(1)))
    started.append(replica)
    return replica


async def ready_with(port: int, workers: int) -> None:
    """Until the replica's /ready says every local worker is routable."""
    with trio.fail_after(20):
        while True:
            resp = await request(port, "GET", "/ready")
            if resp.status == 200 and orjson.loads(resp.body)["local_models"] == {
                "qwen3-8b": workers
            }:
                return
            await trio.sleep(0.05)


async def in_rotation(balancer: Balancer, port: int) -> None:
    with trio.fail_after(10):
        while port not in balancer.ready:  # noqa: ASYNC110 (the balancer's poll)
            await trio.sleep(POLL_S)


@dataclass
class Load:
    """Streaming chat requests, `clients` at once, each on its own connection, until
    stopped: every answer must be a 200 whose stream ends with [DONE]."""

    port: int
    clients: int = 4
    max_requests: int = 3000
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    stop: trio.Event = field(default_factory=trio.Event)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.clients):
                nursery.start_soon(self._client)

    async def _client(self) -> None:
        while not self.stop.is_set() and self.ok + len(self.failures) < self.max_requests:
            try:
                with trio.fail_after(20):
                    resp = await request(self.port, "POST", "/v1/chat/completions", STREAM)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError) as e:
                self.failures.append(repr(e))
                continue
            if resp.status == 200 and resp.body.endswith(b"data: [DONE]\n\n"):
                self.ok += 1
            else:
                self.failures.append(f"{resp.status} {resp.body[-200:]!r}")


async def test_replicas_behave_as_one(nursery: trio.Nursery, tmp_path: Path) -> None:
    # Streams of ~0.2 s, so that every drain has some running.
    mock = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, token_rate=50, tokens=10))
    await nursery.start(mock.serve, "127.0.0.1", 0)
    workers = [FakeSGLang(Script(lora_adapters=["sql-lora"], tokens=2)) for _ in range(3)]
    for w in workers:
        await nursery.start(w.serve)
    config = tmp_path / "edgegw.yaml"
    config.write_text(profile_yaml([(w.port, "default", None) for w in workers]))
    env = {
        **os.environ,
        **upstream_env(mock),
        "SERVER_PORT": "0",
        "SERVER_SHUTDOWN_DELAY": SHUTDOWN_DELAY,
        "LOG_LEVEL": "WARNING",
    }
    balancer = Balancer()
    await nursery.start(balancer.serve)

    async with replicas_of(env, config) as started:
        first = [await start_replica(started, env, config) for _ in range(3)]
        for r in first:
            await ready_with(r.port, len(workers))
            balancer.backends.append(r.port)
            await in_rotation(balancer, r.port)

        # Cache affinity: a routing key reaches the same worker from every replica.
        seen: dict[str, set[int]] = {}
        for key in (f"tenant-{i}" for i in range(9)):
            for _ in range(3):  # round robin: each of the three replicas in turn
                body = orjson.dumps(
                    {
                        "model": "qwen3-8b",
                        "routing_key": key,
                        "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"}],
                    }
                )
                resp = await request(balancer.port, "POST", "/v1/chat/completions", body)
                assert resp.status == 200, resp.body
                rid = resp.headers[b"x-sie-request-id"].decode()
                (served_by,) = [
                    i
                    for i, w in enumerate(workers)
                    if any(
                        isinstance(r.body, dict) and r.body.get("rid") == rid for r in w.requests
                    )
                ]
                seen.setdefault(key, set()).add(served_by)
        assert all(len(ws) == 1 for ws in seen.values()), seen
        assert len(set().union(*seen.values())) > 1  # the keys spread over the workers
        assert all(balancer.served.get(r.port, 0) >= 9 for r in first), balancer.served

        # A rolling restart under steady streaming load: a new replica in, an old one out.
        load = Load(balancer.port)
        async with trio.open_nursery() as clients:
            clients.start_soon(load.run)
            for old in first:
                new = await start_replica(started, env, config)
                await ready_with(new.port, len(workers))
                balancer.backends.append(new.port)
                await in_rotation(balancer, new.port)
                before = load.ok
                old.proc.send_signal(signal.SIGTERM)
                # Stopping, it says so on /ready and still serves what reaches it.
                with trio.fail_after(5):
                    while (resp := await request(old.port, "GET", "/ready")).status != 503:  # noqa: ASYNC110 (another process)
                        await trio.sleep(0.01)
                assert orjson.loads(resp.body)["reasons"] == ["draining"]
                direct = await request(old.port, "POST", "/v1/chat/completions", STREAM)
                assert direct.status == 200 and direct.body.endswith(b"data: [DONE]\n\n")
                with trio.fail_after(30):
                    assert await old.proc.wait() == 0
                balancer.backends.remove(old.port)
                assert load.ok > before  # the load went on through the change
            load.stop.set()
        assert load.failures == []
        assert load.ok >= 30, load.ok
