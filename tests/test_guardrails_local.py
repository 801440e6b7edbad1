"""post_call on a local model's answers: a whole answer blocked before the client sees it,
and a stream cut by a block with SIE's final error chunk."""

from __future__ import annotations

from pathlib import Path

import openai
import orjson
import pytest
import trio

from .conftest import Gateway, openai_client
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request, sse_data
from .test_guardrails import policy_dir
from .test_local import local_gateway, profile_yaml

# The fake worker answers "the quick brown fox ...": a policy that will not have a fox.
NO_FOX = """\
package guardrails

import rego.v1

main := {"action": "block", "message": "no foxes"} if {
    input.phase == "post_call"
    contains(input.request.body, "fox")
} else := {"action": "allow"}
"""
CHAT = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hello there"}]}


@pytest.fixture
async def worker(nursery: trio.Nursery) -> FakeSGLang:
    fake = FakeSGLang(Script(tokens=12))
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def gw(nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang) -> Gateway:
    env = {"GUARDRAILS_ENABLED": "true", "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path, NO_FOX))}
    yaml = profile_yaml([(worker.port, "default", None)], lora_adapters="")
    return await local_gateway(nursery, tmp_path, yaml, env)


async def test_a_whole_local_answer_is_blocked(gw: Gateway) -> None:
    with (
        openai_client(gw.base, api_key="x") as client,
        pytest.raises(openai.PermissionDeniedError) as raised,
    ):
        await trio.to_thread.run_sync(
            lambda: client.chat.completions.create(model="qwen3-8b", messages=CHAT["messages"])
        )
    assert raised.value.code == "guardrails_blocked"


async def test_a_local_stream_is_cut_by_a_block(gw: Gateway, worker: FakeSGLang) -> None:
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", orjson.dumps({**CHAT, "stream": True})
    )
    assert resp.status == 200
    events = sse_data(resp.body)
    assert events[-1] == b"[DONE]"  # SIE's mid-stream failure: a final chunk, then [DONE]
    last = orjson.loads(events[-2])
    assert last["error"]["code"] == "guardrails_blocked"
    # Judged as it passes (README "Guardrails"): text below the check's step may go out
    # before the verdict; the stream ends with the block, never with the answer's finish.
    finishes = [
        c.get("finish_reason") for e in events[:-2] for c in orjson.loads(e).get("choices", ())
    ]
    assert "stop" not in finishes and "length" not in finishes
