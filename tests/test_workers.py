"""`edgegw serve --workers N` as a user runs it: N processes on one port, a dead worker
replaced without the port going down, SIGTERM ending everything with exit 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import orjson
import trio

from edgegw.bench.mock import MockUpstream

from .conftest import upstream_env
from .rawhttp import request


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


async def test_workers_share_the_port_and_are_replaced(mock: MockUpstream) -> None:
    env = {**os.environ, **upstream_env(mock), "SERVER_PORT": "0", "LOG_LEVEL": "WARNING"}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "serve", "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    out: list[bytes] = []
    pids: list[int] = []
    try:
        (listening,) = await read_until(
            proc, out, rb"listening on http://127\.0\.0\.1:(\d+) with 2 workers"
        )
        port = int(listening.group(1))
        pids = [int(m.group(1)) for m in await read_until(proc, out, rb"worker (\d+) started", 2)]
        body = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]})
        with trio.fail_after(20):
            while True:  # the workers are listening once one answers
                try:
                    if (await request(port, "GET", "/health")).status == 200:
                        break
                except OSError:
                    await trio.sleep(0.1)
        for _ in range(10):
            assert (await request(port, "POST", "/v1/chat/completions", body)).status == 200
        os.kill(pids[0], signal.SIGKILL)
        # The port stays up: the other worker answers while a replacement starts.
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
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
