"""`edgegw serve --workers N` as a user runs it: N processes on one port, a dead worker
replaced without the port going down, SIGTERM ending everything with exit 0; with
telemetry, one metrics port that sums the workers and carries their exemplars."""

from __future__ import annotations

import gzip
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import trio
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from edgegw import supervisor as supervisor_module
from edgegw.mock import MockConfig, MockUpstream
from edgegw.settings import Settings
from edgegw.telemetry.recording import Telemetry
from edgegw.telemetry.scrape import Merged

from .conftest import UPSTREAM_KEY, sample, scrape, upstream_env
from .rawhttp import request

CHAT = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]})
REQUESTS = "gen_ai_server_request_duration_seconds_count"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


async def read_until(
    proc: trio.Process, buffer: list[bytes], pattern: bytes, count: int = 1
) -> list[re.Match[bytes]]:
    with trio.fail_after(30):
        while len(found := list(re.finditer(pattern, b"".join(buffer)))) < count:
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, b"".join(buffer)
            buffer.append(chunk)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@asynccontextmanager
async def supervisor(
    env: dict[str, str], pids: list[int], stderr: int = subprocess.DEVNULL
) -> AsyncIterator[trio.Process]:
    """`edgegw serve --workers 2`; killed at the end if still running, and so are the
    workers whose pids the test put in `pids`."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "serve", "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


async def wait_until_serving(port: int) -> None:
    with trio.fail_after(20):
        while True:  # the workers are listening once one answers
            try:
                if (await request(port, "GET", "/health")).status == 200:
                    return
            except OSError:
                await trio.sleep(0.1)


async def serving(proc: trio.Process, out: list[bytes], pids: list[int]) -> int:
    """The supervisor's port once its two workers answer; their pids added to `pids`."""
    (listening,) = await read_until(proc, out, rb"listening on http://127\.0\.0\.1:(\d+) ")
    port = int(listening.group(1))
    pids += [int(m.group(1)) for m in await read_until(proc, out, rb"worker (\d+) started", 2)]
    await wait_until_serving(port)
    return port


def total(text: str, name: str) -> float:
    """The sum of the samples `name` over all their label sets."""
    families = text_string_to_metric_families(text)
    return sum(s.value for family in families for s in family.samples if s.name == name)


async def test_workers_share_the_port_and_are_replaced(mock: MockUpstream) -> None:
    env = {**os.environ, **upstream_env(mock), "SERVER_PORT": "0", "LOG_LEVEL": "WARNING"}
    out: list[bytes] = []
    pids: list[int] = []
    async with supervisor(env, pids) as proc:
        (listening,) = await read_until(
            proc, out, rb"listening on http://127\.0\.0\.1:(\d+) with 2 workers"
        )
        port = int(listening.group(1))
        pids += [int(m.group(1)) for m in await read_until(proc, out, rb"worker (\d+) started", 2)]
        await wait_until_serving(port)
        for _ in range(10):
            assert (await request(port, "POST", "/v1/chat/completions", CHAT)).status == 200
        os.kill(pids[0], signal.SIGKILL)
        # Each worker listens on a socket of its own (SO_REUSEPORT, Linux): a connection the
        # kernel put in the dead worker's queue before its socket closed is reset, so wait
        # until the supervisor has seen it die. The port stays up: the other worker answers
        # while a replacement starts (after a pause of 0.5 s).
        await read_until(proc, out, rb"worker %d exited" % pids[0])
        for _ in range(10):
            assert (await request(port, "GET", "/health")).status == 200
        (_, _, third) = await read_until(proc, out, rb"worker (\d+) started", 3)
        pids.append(int(third.group(1)))
        assert pids[2] not in pids[:2]
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await proc.wait() == 0
        with trio.fail_after(5):
            while any(alive(pid) for pid in pids[1:]):  # noqa: ASYNC110 (other processes)
                await trio.sleep(0.05)


async def test_a_worker_outlives_the_supervisors_idle_threads(nursery: trio.Nursery) -> None:
    # trio starts each worker from a worker thread that its thread cache ends after 10 s
    # idle; a worker tied to that thread (PR_SET_PDEATHSIG) was drained then, cutting this
    # 14 s stream.
    slow = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, token_rate=2.0, tokens=28))
    await nursery.start(slow.serve, "127.0.0.1", 0)
    env = {**os.environ, **upstream_env(slow), "SERVER_PORT": "0", "LOG_LEVEL": "WARNING"}
    out: list[bytes] = []
    pids: list[int] = []
    async with supervisor(env, pids) as proc:
        port = await serving(proc, out, pids)
        body = orjson.dumps(
            {
                "model": "openai/m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "max_tokens": 28,
            }
        )
        with trio.fail_after(30):
            resp = await request(port, "POST", "/v1/chat/completions", body)
        assert resp.status == 200
        assert resp.body.rstrip().endswith(b"data: [DONE]"), resp.body[-300:]
        assert b"shutting_down" not in resp.body
        assert all(alive(pid) for pid in pids)
        assert b"exited" not in b"".join(out)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await proc.wait() == 0


async def test_workers_exit_when_the_supervisor_is_killed(mock: MockUpstream) -> None:
    env = {**os.environ, **upstream_env(mock), "SERVER_PORT": "0", "LOG_LEVEL": "WARNING"}
    out: list[bytes] = []
    pids: list[int] = []
    async with supervisor(env, pids) as proc:
        port = await serving(proc, out, pids)
        proc.kill()  # SIGKILL: the supervisor cannot pass anything on
        await proc.wait()
        with trio.fail_after(15):
            while any(alive(pid) for pid in pids):  # noqa: ASYNC110 (other processes)
                await trio.sleep(0.05)
        # Nobody holds the port any more.
        try:
            with trio.fail_after(5):
                await request(port, "GET", "/health")
        except OSError:
            pass
        else:
            raise AssertionError("the port still answers after every edgegw process is gone")


async def test_workers_metrics_one_port_summed(mock: MockUpstream, tmp_path: Path) -> None:
    env = {
        **os.environ,
        **upstream_env(mock, TELEMETRY_ENABLED="true"),
        "SERVER_PORT": "0",
        "TELEMETRY_METRICS_PORT": "0",
        "LOG_LEVEL": "WARNING",
        "TMPDIR": str(tmp_path),  # where the supervisor makes the workers' socket directory
    }
    out: list[bytes] = []
    pids: list[int] = []
    async with supervisor(env, pids, stderr=subprocess.STDOUT) as proc:
        (listening,) = await read_until(proc, out, rb"listening on http://127\.0\.0\.1:(\d+) ")
        (metrics,) = await read_until(proc, out, rb"metrics on http://127\.0\.0\.1:(\d+)/metrics")
        port, metrics_port = int(listening.group(1)), int(metrics.group(1))
        pids += [int(m.group(1)) for m in await read_until(proc, out, rb"worker (\d+) started", 2)]
        await wait_until_serving(port)
        (socket_dir,) = await trio.Path(tmp_path).iterdir()
        assert stat.S_IMODE((await socket_dir.stat()).st_mode) == 0o700

        async def chat() -> None:  # a fresh connection each: the kernel spreads them
            assert (await request(port, "POST", "/v1/chat/completions", CHAT)).status == 200

        async def per_worker() -> list[float]:
            sockets = sorted(str(p) for p in await socket_dir.glob("*.sock"))
            return [
                total((await request(0, "GET", "/metrics", unix_socket=s)).body.decode(), REQUESTS)
                for s in sockets
            ]

        sent = 0
        with trio.fail_after(60):
            while True:  # until both workers have served (and recorded) some
                async with trio.open_nursery() as nursery:
                    for _ in range(8):
                        nursery.start_soon(chat)
                sent += 8
                counts = await per_worker()
                if len(counts) == 2 and all(counts):
                    break
        # A worker records a request just after its last byte: wait for the last ones.
        with trio.fail_after(10):
            while total(await scrape(metrics_port), REQUESTS) != sent:  # noqa: ASYNC110 (other processes)
                await trio.sleep(0.05)
        assert sum(await per_worker()) == sent

        headers = [("accept", OPENMETRICS), ("accept-encoding", "gzip")]
        resp = await request(metrics_port, "GET", "/metrics", headers=headers)
        assert resp.headers[b"content-type"].startswith(b"application/openmetrics-text")
        families = openmetrics_families(gzip.decompress(resp.body).decode())
        assert sum(s.value for f in families for s in f.samples if s.name == REQUESTS) == sent

        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await proc.wait() == 0
            while chunk := await proc.stdout.receive_some(4096):
                out.append(chunk)
        log = b"".join(out)
        # Both workers stayed up: no "exited; starting another", no port taken twice.
        assert len(re.findall(rb"worker \d+ started", log)) == 2, log
        assert b"exited" not in log and b"Address already in use" not in log, log
        assert list(await trio.Path(tmp_path).iterdir()) == []


def test_merged_expositions_sum_each_series() -> None:
    workers = [Telemetry(Settings(telemetry_enabled=True)) for _ in range(2)]
    for t, model in ((workers[0], "gpt"), (workers[1], "gpt"), (workers[1], "other")):
        t.record_generation(
            provider="openai",
            model=model,
            status=200,
            duration_s=0.3,
            ttft_s=None,
            usage={"prompt_tokens": 2, "completion_tokens": 5},
            tool_calls=["search"],
        )
    texts = [t.exposition()[0].decode() for t in workers]
    # One worker's exposition comes back as it was, in either format.
    for accept in ("", OPENMETRICS):
        encoder, _ = choose_encoder(accept)
        assert encoder(Merged(texts[:1])) == workers[0].exposition(accept)[0]
    merged = choose_encoder("")[0](Merged(texts)).decode()
    gpt = {"gen_ai_request_model": "gpt"}
    assert sample(merged, REQUESTS, **gpt) == 2
    assert sample(merged, REQUESTS, gen_ai_request_model="other") == 1
    bucket = "gen_ai_server_request_duration_seconds_bucket"
    assert sample(merged, bucket, le="0.32", **gpt) == 2
    assert sample(merged, bucket, le="0.16", **gpt) == 0
    tokens = "gen_ai_client_token_usage_sum"
    assert sample(merged, tokens, gen_ai_token_type="output", **gpt) == 10
    assert sample(merged, "inference_gateway_tool_calls_total", **gpt) == 2
    assert "# TYPE gen_ai_server_time_to_first_token_seconds histogram" in merged


def test_merged_openmetrics_keep_each_buckets_latest_exemplar() -> None:
    settings = Settings(telemetry_enabled=True)
    workers = [Telemetry(settings), Telemetry(settings)]
    for t, trace_id in ((workers[1], "a" * 32), (workers[0], "b" * 32), (workers[0], "c" * 32)):
        t.record_generation(
            provider="openai",
            model="gpt",
            status=200,
            duration_s=0.3 if trace_id != "c" * 32 else 5.0,  # another bucket
            ttft_s=None,
            usage=None,
            tool_calls=[],
            trace_id=trace_id,
        )
    texts = [t.exposition(OPENMETRICS)[0].decode() for t in workers]
    merged = choose_encoder(OPENMETRICS)[0](Merged(texts, openmetrics=True)).decode()
    assert merged.count("# {trace_id=") == 2  # the duration histogram's two buckets
    bucket = "gen_ai_server_request_duration_seconds_bucket"
    found = {
        s.labels["le"]: s.exemplar.labels["trace_id"]
        for f in openmetrics_families(merged)
        for s in f.samples
        if s.name == bucket and s.exemplar is not None
    }
    # Per bucket the one recorded last, whichever worker has it.
    assert found == {"0.32": "b" * 32, "5.12": "c" * 32}
    # Exemplars aside, one worker's OpenMetrics comes back as it was.
    quiet = Telemetry(settings)
    quiet.record_generation(
        provider="openai",
        model="gpt",
        status=200,
        duration_s=0.3,
        ttft_s=None,
        usage=None,
        tool_calls=[],
    )
    text = quiet.exposition(OPENMETRICS)[0]
    assert choose_encoder(OPENMETRICS)[0](Merged([text.decode()], openmetrics=True)) == text


async def test_workers_metrics_carry_exemplars_of_exported_traces(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    from .otlp_receiver import OtlpReceiver

    collector = OtlpReceiver()
    collector.port = await nursery.start(collector.serve)
    env = {
        **os.environ,
        **upstream_env(mock, TELEMETRY_ENABLED="true", TELEMETRY_TRACING_ENABLED="true"),
        "TELEMETRY_TRACING_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "SERVER_PORT": "0",
        "TELEMETRY_METRICS_PORT": "0",
        "LOG_LEVEL": "WARNING",
        "TMPDIR": str(tmp_path),
    }
    out: list[bytes] = []
    pids: list[int] = []
    async with supervisor(env, pids) as proc:
        port = await serving(proc, out, pids)
        (metrics,) = await read_until(proc, out, rb"metrics on http://127\.0\.0\.1:(\d+)/metrics")
        for _ in range(4):
            assert (await request(port, "POST", "/v1/chat/completions", CHAT)).status == 200
        with trio.fail_after(10):
            while True:
                resp = await request(
                    int(metrics.group(1)), "GET", "/metrics", headers=[("accept", OPENMETRICS)]
                )
                shown = {
                    s.exemplar.labels["trace_id"]
                    for f in openmetrics_families(resp.body.decode())
                    for s in f.samples
                    if s.exemplar is not None
                }
                if shown & {s.trace_id for s in collector.spans}:
                    break
                await trio.sleep(0.05)


def listening_inodes(port: int) -> set[str]:
    """Inodes of the sockets listening on 127.0.0.1:`port` (Linux procfs)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
            found.add(fields[9])
    return found


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


@pytest.mark.skipif(not supervisor_module.REUSEPORT, reason="SO_REUSEPORT groups: Linux only")
async def test_each_worker_listens_on_a_socket_of_its_own(mock: MockUpstream) -> None:
    env = {**os.environ, **upstream_env(mock), "SERVER_PORT": "0", "LOG_LEVEL": "WARNING"}
    out: list[bytes] = []
    pids: list[int] = []
    async with supervisor(env, pids) as proc:
        (listening,) = await read_until(
            proc, out, rb"listening on http://127\.0\.0\.1:(\d+) with 2 workers"
        )
        port = int(listening.group(1))
        pids += [int(m.group(1)) for m in await read_until(proc, out, rb"worker (\d+) started", 2)]
        await wait_until_serving(port)
        # Two listening sockets on the port, one in each worker; the supervisor's only holds
        # the port (bound, not listening), so no connection waits in a queue nobody reads.
        listeners = listening_inodes(port)
        assert len(listeners) == 2
        assert [len(listeners & socket_inodes(pid)) for pid in pids] == [1, 1]
        assert not listeners & socket_inodes(proc.pid)
        os.kill(pids[0], signal.SIGKILL)
        (_, _, third) = await read_until(proc, out, rb"worker (\d+) started", 3)
        pids.append(int(third.group(1)))
        await wait_until_serving(port)
        with trio.fail_after(10):  # the dead worker's socket left the group with it
            while len(listening_inodes(port)) != 2:  # noqa: ASYNC110 (kernel state)
                await trio.sleep(0.05)
        assert len(listening_inodes(port) & socket_inodes(pids[2])) == 1
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await proc.wait() == 0
