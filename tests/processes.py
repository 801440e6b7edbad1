"""`edgegw serve` in a process of its own, on a loopback port of its own, for the tests that
need a whole process (the start's warnings, several gateways sharing one store)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .rawhttp import request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def gateway_process(
    env: dict[str, str], *, stderr: int = subprocess.DEVNULL
) -> AsyncIterator[tuple[trio.Process, int]]:
    """`edgegw serve --workers 1` with `env` over this process's environment; (the process,
    its port) once GET /health answers 200; killed on the way out."""
    port = free_port()
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "serve", "--workers", "1"],
        env={**os.environ, **env, "SERVER_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        with trio.fail_after(20):
            while True:
                try:
                    if (await request(port, "GET", "/health")).status == 200:
                        break
                except OSError:
                    await trio.sleep(0.1)
        yield proc, port
    finally:
        proc.kill()
        await proc.wait()
