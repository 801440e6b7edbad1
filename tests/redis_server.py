"""A real redis-server for the tests, on a loopback port, with no persistence: started by
`RedisServer.start` (skipped, saying why, when the binary is missing or does not answer;
under CI that is a failure), stopped and started again by the tests that need Redis gone."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import trio

START_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.process: trio.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    async def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            _unavailable("redis-server is not installed (.ci/run installs it)")
        assert binary is not None
        self.process = await trio.lowlevel.open_process(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with trio.move_on_after(START_S):
            while not await self.answers():  # noqa: ASYNC110 (another process's state)
                await trio.sleep(0.02)
            return
        await self.stop()
        _unavailable(f"redis-server did not answer on port {self.port} within {START_S:g} s")

    async def answers(self) -> bool:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        except OSError:
            return False
        async with stream:
            await stream.send_all(b"*1\r\n$4\r\nPING\r\n")
            return (await stream.receive_some(64)).startswith(b"+PONG")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self.process = None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Redis is required under CI: {reason}")  # never skipped silently
    pytest.skip(reason)
