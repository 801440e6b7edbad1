"""The container image (scripts/build-image) run with podman as an operator runs it: read-only
root filesystem, a non-root user of the operator's choosing, two workers and the metrics
port (their sockets on the runtime's /tmp), a stream relayed from a mock on the host's
loopback, and `podman stop` ending it by edgegw's own drain (exit 0, no SIGKILL). The image
holds no shell. Skipped without podman or the image, failed under CI (which builds it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path

import orjson
import pytest
import trio

from edgegw.mock import MockUpstream

from .conftest import upstream_env
from .rawhttp import request

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"localhost/edgegw:{VERSION}"
# ../shared/notes/containers.md: crun fails here (rlimits above the hard limits, hybrid
# cgroups); runc with limits at or below the machine's works.
RUN = [
    "podman",
    "run",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=1024:1024",
]
STREAM = orjson.dumps(
    {"model": "openai/mock-small", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
)


def _image_present() -> bool:
    if shutil.which("podman") is None:
        return False
    found = subprocess.run(["podman", "image", "exists", IMAGE], capture_output=True, check=False)
    return found.returncode == 0


pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and not _image_present(),
    reason=f"podman or the image {IMAGE} is missing (bash scripts/build-image builds it)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            ["podman", *args], capture_stdout=True, capture_stderr=True, check=check
        )


async def test_the_image_serves_read_only_as_a_user_and_drains(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    port, metrics = free_port(), free_port()
    name = f"edgegw-test-{os.getpid()}"
    env = {
        **upstream_env(mock),
        "SERVER_PORT": str(port),
        "EDGEGW_WORKERS": "2",
        "TELEMETRY_ENABLED": "true",
        "TELEMETRY_METRICS_PORT": str(metrics),
    }
    flags = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
    command = [*RUN, "--name", name, "--read-only", "--user", "65534:65534", "--network=host"]
    proc = await trio.lowlevel.open_process(
        [*command, *flags, IMAGE], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with trio.fail_after(30):
            while True:
                try:
                    if (await request(port, "GET", "/ready")).status == 200:
                        break
                except OSError:
                    pass
                await trio.sleep(0.1)
        resp = await request(port, "POST", "/v1/chat/completions", STREAM)
        assert resp.status == 200 and resp.body.endswith(b"data: [DONE]\n\n")
        scraped = await request(metrics, "GET", "/metrics")
        assert scraped.status == 200 and b"gen_ai_server_request_duration_seconds" in scraped.body

        with trio.fail_after(20):
            stopped = await podman("stop", "-t", "10", name)
        # podman says so on stderr when it had to fall back to SIGKILL.
        assert b"SIGKILL" not in stopped.stderr, stopped.stderr
        with trio.fail_after(20):
            assert await proc.wait() == 0
        inspected = await podman("inspect", name, "--format", "{{.State.ExitCode}}")
        assert inspected.stdout.strip() == b"0"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await podman("rm", "-f", name, check=False)

    # Nothing but edgegw: no shell to run.
    shell = await podman(
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--entrypoint",
        "/bin/sh",
        IMAGE,
        "-c",
        "true",
        check=False,
    )
    assert shell.returncode != 0
