"""`edgegw demo` as a user runs it: a real process, answered by the official SDK,
streaming and not, and a clean exit on SIGINT/SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
import trio
from openai import OpenAI


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
async def test_demo_answers_the_openai_sdk(stop_signal: signal.Signals) -> None:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "demo", "--port", "0", "--token-rate", "500"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = b""
        with trio.fail_after(30):
            while (m := re.search(rb"gateway on (http://127\.0\.0\.1:\d+)", seen)) is None:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, seen
                seen += chunk
        client = OpenAI(base_url=m.group(1).decode() + "/v1", api_key="unused", max_retries=0)

        def talk() -> tuple[str, str]:
            messages = [{"role": "user", "content": "Hello"}]
            whole = client.chat.completions.create(model="openai/gpt-4o-mini", messages=messages)
            streamed = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(
                    model="openai/gpt-4o-mini", messages=messages, stream=True
                )
                if chunk.choices
            )
            return whole.choices[0].message.content, streamed

        try:
            whole, streamed = await trio.to_thread.run_sync(talk)
        finally:
            client.close()
        assert whole and whole == streamed
        proc.send_signal(stop_signal)
        with trio.fail_after(15):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
