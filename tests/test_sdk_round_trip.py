"""The conversation round trip of the official SDKs: a returned message appended to the
messages as the SDKs' own documentation does (`messages.append(completion.choices[0].message)`)
is accepted for every target. What reaches each target is asserted at the fake: OpenAI gets
the response members it takes back, a strict provider (Groq) and a local worker get none, and
no target gets a null member or the SDKs' own additions."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from openai import OpenAI

from .conftest import Gateway, in_thread, openai_client, start_gateway
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request
from .scripted_model import Message, ScriptedModel, last_tool_results
from .test_local import profile_yaml

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# What OpenAI's API returns beside the content, on every message.
RESPONSE_MEMBERS = {"refusal": None, "annotations": []}
# Members that must reach no provider.
NEVER_SENT = {"parsed", "audio", "function_call"}


def conversation(body: dict[str, Any]) -> Message:
    """Two tool rounds, then an answer: the turn number is the tool results seen so far."""
    rounds = sum(1 for m in body["messages"] if m["role"] == "tool")
    if rounds < 2:
        city = ("Paris", "Oslo")[rounds]
        return {
            "role": "assistant",
            "content": None,
            **RESPONSE_MEMBERS,
            "tool_calls": [
                {
                    "id": f"call_{rounds}",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                }
            ],
        }
    results = last_tool_results(body)
    return {"role": "assistant", "content": f"done: {results}", **RESPONSE_MEMBERS}


@pytest.fixture
async def model(nursery: trio.Nursery) -> ScriptedModel:
    fake = ScriptedModel(conversation)
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def gw(nursery: trio.Nursery, model: ScriptedModel) -> Gateway:
    base = f"http://127.0.0.1:{model.upstream.port}"
    env = {**model.env(), "GROQ_API_URL": f"{base}/groq", "GROQ_API_KEY": "gsk"}
    return await start_gateway(nursery, env)


def tool_loop(client: OpenAI, model_name: str, *, stream_helper: bool = False) -> list[str]:
    """A tool-calling loop as the SDK's guide writes it; returns each turn's finish reason."""
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris, then Oslo?"}]
    finishes = []
    for _ in range(3):
        if stream_helper:
            with client.chat.completions.stream(
                model=model_name, messages=messages, tools=[WEATHER_TOOL]
            ) as stream:
                for _event in stream:
                    pass
                completion: Any = stream.get_final_completion()
        else:
            completion = client.chat.completions.create(
                model=model_name, messages=messages, tools=[WEATHER_TOOL]
            )
        choice = completion.choices[0]
        finishes.append(choice.finish_reason)
        messages.append(choice.message)
        for call in choice.message.tool_calls or ():
            city = json.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"sun in {city}"})
    messages.append({"role": "user", "content": "Thanks, and tomorrow?"})
    completion = client.chat.completions.create(model=model_name, messages=messages)
    finishes.append(completion.choices[0].finish_reason)
    return finishes


def assistant_turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


@pytest.mark.parametrize("stream_helper", [False, True], ids=["create", "stream-helper"])
async def test_openai_python_tool_loop_to_openai_keeps_what_openai_takes(
    gw: Gateway, model: ScriptedModel, stream_helper: bool
) -> None:
    with openai_client(gw.base) as client:
        finishes = await in_thread(
            tool_loop, client, "openai/gpt-4o-mini", stream_helper=stream_helper
        )
    assert finishes == ["tool_calls", "tool_calls", "stop", "stop"]
    last = model.bodies[-1]
    turns = assistant_turns(last)
    assert len(turns) == 3
    for turn in turns:
        # The SDK sent back what it got (a stream has no annotations); OpenAI takes
        # `annotations`; nulls go nowhere.
        assert turn.get("annotations", []) == [] and ("annotations" in turn) != stream_helper
        assert not {k for k, v in turn.items() if v is None and k != "content"}
        assert not NEVER_SENT & turn.keys()
        for call in turn.get("tool_calls") or ():
            assert set(call) == {"id", "type", "function"}
            assert set(call["function"]) == {"name", "arguments"}


async def test_openai_python_tool_loop_to_a_strict_provider_sends_request_members_only(
    gw: Gateway, model: ScriptedModel
) -> None:
    with openai_client(gw.base) as client:
        finishes = await in_thread(tool_loop, client, "groq/llama-3.3-70b-versatile")
    assert finishes == ["tool_calls", "tool_calls", "stop", "stop"]
    for body in model.bodies[1:]:
        for turn in assistant_turns(body):
            assert set(turn) <= {"role", "content", "tool_calls"}, turn


async def test_the_raw_echo_from_the_issue_is_accepted(gw: Gateway, model: ScriptedModel) -> None:
    raw = (
        b'{"model":"groq/llama-3.3-70b-versatile","messages":[{"role":"user","content":"Hi"},'
        b'{"role":"assistant","content":"Hello!","refusal":null,"annotations":[],"audio":null,'
        b'"function_call":null,"tool_calls":null,"parsed":null},'
        b'{"role":"user","content":"And again?"}]}'
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", raw)
    assert resp.status == 200, resp.body
    assert model.bodies[-1]["messages"][1] == {"role": "assistant", "content": "Hello!"}


async def test_members_no_sdk_sends_are_still_refused(gw: Gateway, model: ScriptedModel) -> None:
    raw = (
        b'{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"Hi"},'
        b'{"role":"assistant","content":"Hello!","logprobs":null}]}'
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", raw)
    assert resp.status == 400
    err = json.loads(resp.body)["error"]
    assert (err["code"], err["param"]) == ("unsupported_field", "messages[1].logprobs")
    assert model.bodies == []


@pytest.fixture
async def worker(nursery: trio.Nursery) -> FakeSGLang:
    fake = FakeSGLang(Script(tokens=3))
    await nursery.start(fake.serve)
    return fake


async def test_a_local_worker_gets_no_response_members(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang
) -> None:
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(profile_yaml([(worker.port, "default", None)]))
    local = await start_gateway(nursery, {}, config_file=cfg)

    def two_turns(client: OpenAI) -> str | None:
        messages: list[Any] = [{"role": "user", "content": "Hi"}]
        first = client.chat.completions.create(model="qwen3-8b", messages=messages)
        messages += [first.choices[0].message, {"role": "user", "content": "More?"}]
        second = client.chat.completions.create(model="qwen3-8b", messages=messages)
        return second.choices[0].finish_reason

    with openai_client(local.base) as client:
        assert await in_thread(two_turns, client) is not None
    sent = [r.body for r in worker.requests if r.path.startswith("/v1/chat")]
    assert len(sent) == 2
    assert set(sent[-1]["messages"][1]) <= {"role", "content"}, sent[-1]["messages"][1]


NODE_SCRIPT = Path(__file__).parent / "node" / "round_trip.mjs"
NODE_MODULES = Path(__file__).parent / "node" / "node_modules" / "openai"


async def test_openai_node_tool_loop(gw: Gateway, model: ScriptedModel) -> None:
    if shutil.which("node") is None or not NODE_MODULES.is_dir():
        reason = "openai-node not installed: run `npm ci --prefix tests/node` (needs Node.js 18+)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    proc = await trio.run_process(
        ["node", str(NODE_SCRIPT), f"{gw.base}/v1", "groq/llama-3.3-70b-versatile"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout) == ["tool_calls", "tool_calls", "stop", "stop"]
    for body in model.bodies[1:]:
        for turn in assistant_turns(body):
            assert set(turn) <= {"role", "content", "tool_calls"}, turn
