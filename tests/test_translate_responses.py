"""/v1/responses for any model (ENABLE_API_TRANSLATION=true): the official OpenAI SDK's
Responses API (`responses.create`, `responses.stream`, a function-call round trip) against
a provider without the API (the mock, as groq) and a local model (the fake SGLang), through
translation; the refusals of what has no translation; openai/ models still forwarded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import trio

from edgegw.mock import WORDS, MockUpstream

from .conftest import UPSTREAM_KEY, Gateway, in_thread, openai_client, start_gateway
from .fake_sglang import FakeSGLang
from .fake_sglang import Script as WorkerScript
from .rawhttp import request
from .test_local import local_gateway, profile_yaml

ON = {"ENABLE_API_TRANSLATION": "true"}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture
async def gw(nursery: trio.Nursery, mock: MockUpstream) -> Gateway:
    env = {
        "GROQ_API_URL": f"http://127.0.0.1:{mock.port}/v1",
        "GROQ_API_KEY": UPSTREAM_KEY,
        "OPENAI_API_URL": f"http://127.0.0.1:{mock.port}/v1",
        "OPENAI_API_KEY": UPSTREAM_KEY,
        **ON,
    }
    return await start_gateway(nursery, env)


def chat_bodies(mock: MockUpstream) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in mock.requests if r.path == "/v1/chat/completions"]


async def test_create_text(gw: Gateway, mock: MockUpstream) -> None:
    with openai_client(gw.base) as client:
        resp = await in_thread(
            client.responses.create,
            model="groq/mock-small",
            instructions="Be brief.",
            input="hello",
            max_output_tokens=4,
            temperature=0.2,
        )
        done = await in_thread(
            client.responses.create,
            model="groq/mock-small",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        )
    assert resp.object == "response" and resp.model == "groq/mock-small"
    # The output cap cut it: incomplete, as OpenAI reports it.
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == " ".join(WORDS[:4])
    assert resp.usage.output_tokens == 4 and resp.usage.input_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + 4
    assert done.status == "completed" and done.output[0].type == "message"
    sent = chat_bodies(mock)[-2]
    assert sent["model"] == "mock-small"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert (sent["max_tokens"], sent["temperature"]) == (4, 0.2)
    assert chat_bodies(mock)[-1]["messages"] == [{"role": "user", "content": "hi"}]


async def test_stream_with_the_sdk_helper(gw: Gateway) -> None:
    with openai_client(gw.base) as client:

        def run() -> tuple[list[str], Any]:
            deltas = []
            with client.responses.stream(
                model="groq/mock-small", input="hello", max_output_tokens=100
            ) as stream:
                for event in stream:
                    if event.type == "response.output_text.delta":
                        deltas.append(event.delta)
                return deltas, stream.get_final_response()

        deltas, final = await in_thread(run)

        def raw() -> list[Any]:
            return list(client.responses.create(model="groq/mock-small", input="x", stream=True))

        events = await in_thread(raw)
    assert "".join(deltas) == final.output_text and final.output_text
    assert final.status == "completed" and final.usage.output_tokens > 0
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    assert kinds.index("response.output_text.done") < kinds.index("response.output_item.done")


@pytest.mark.parametrize("stream", [False, True])
async def test_function_call_round_trip(gw: Gateway, mock: MockUpstream, stream: bool) -> None:
    with openai_client(gw.base) as client:

        def ask(items: list[Any]) -> Any:
            kw: dict[str, Any] = {"model": "groq/mock-small", "input": items, "tools": [WEATHER]}
            if not stream:
                return client.responses.create(**kw)
            with client.responses.stream(**kw) as s:
                return s.get_final_response()

        items: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
        first = await in_thread(ask, items)
        (call,) = [o for o in first.output if o.type == "function_call"]
        assert call.name == "get_weather" and isinstance(orjson.loads(call.arguments)["city"], str)
        sent = chat_bodies(mock)[-1]
        assert sent["tools"][0]["function"]["name"] == "get_weather"
        assert sent["tools"][0]["function"]["parameters"] == WEATHER["parameters"]
        items += [
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ]
        answer = await in_thread(ask, items)
    assert answer.output_text and answer.status == "completed"
    messages = chat_bodies(mock)[-1]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call.call_id
    assert messages[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"store": True}, "store"),
        ({"input": [{"type": "file_search_call", "id": "x"}]}, "input[0].type"),
        ({"background": True}, "background"),
    ],
)
async def test_untranslatable_input_is_refused(
    gw: Gateway, mock: MockUpstream, body: dict[str, Any], param: str
) -> None:
    before = len(mock.requests)
    doc = {"model": "groq/mock-small", "input": "x", **body}
    resp = await request(gw.port, "POST", "/v1/responses", orjson.dumps(doc))
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"], err["param"]) == (400, "unsupported_field", param)
    assert len(mock.requests) == before
    with openai_client(gw.base) as client, pytest.raises(openai.BadRequestError):
        await in_thread(client.responses.create, **doc)


async def test_openai_models_still_forwarded(gw: Gateway, mock: MockUpstream) -> None:
    # The mock has no Responses API: its 404 relayed as sent shows the request went there.
    resp = await request(
        gw.port, "POST", "/v1/responses", b'{"model":"openai/mock-small","input":"x"}'
    )
    assert resp.status == 404
    assert mock.requests[-1].path == "/v1/responses"


async def test_error_answers_in_the_responses_shape(gw: Gateway) -> None:
    with openai_client(gw.base) as client:
        with pytest.raises(openai.RateLimitError) as limited:
            await in_thread(client.responses.create, model="groq/mock-error-429", input="x")

        def cut() -> list[Any]:
            with client.responses.stream(model="groq/mock-break-after-2", input="x") as s:
                return list(s)

        events = await in_thread(cut)
    assert limited.value.status_code == 429
    # The Responses API's `error` event ends the stream (the SDK hands it over, not raises).
    assert events[0].type == "response.created"
    assert events[-1].type == "error"
    assert events[-1].code in ("upstream_stream_truncated", "upstream_connection_lost")
    assert events[-1].sequence_number == len(events) - 1


async def test_local_model_stream(nursery: trio.Nursery, tmp_path: Path) -> None:
    worker = FakeSGLang(WorkerScript(tokens=5))
    await nursery.start(worker.serve)
    gw = await local_gateway(nursery, tmp_path, profile_yaml([(worker.port, "default", None)]), ON)
    with openai_client(gw.base) as client:

        def run() -> tuple[str, Any]:
            with client.responses.stream(model="qwen3-8b", input="hello") as stream:
                text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
                return text, stream.get_final_response()

        text, final = await in_thread(run)
        whole = await in_thread(client.responses.create, model="qwen3-8b", input="hello")
    assert len(text.split()) == 5 and text == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens > 0


async def test_the_openai_agents_sdk_runs_a_tool_loop(gw: Gateway, mock: MockUpstream) -> None:
    """The README's example: the OpenAI Agents SDK's Responses model pointed at edgegw, a
    function tool called and its output sent back (`openai-agents`, a test extra)."""
    import agents
    from openai import AsyncOpenAI

    called: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return "sunny"

    agents.set_tracing_disabled(True)

    def run() -> Any:
        # The SDK is asyncio's: its client is made, used and closed in the thread's loop.
        async def main() -> Any:
            async with AsyncOpenAI(base_url=f"{gw.base}/v1", api_key="k", max_retries=0) as client:
                agent = agents.Agent(
                    name="helper",
                    instructions="Answer briefly.",
                    model=agents.OpenAIResponsesModel(
                        model="groq/mock-small", openai_client=client
                    ),
                    tools=[get_weather],
                )
                return await agents.Runner.run(agent, "weather in Paris?")

        return asyncio.run(main())

    result = await in_thread(run)
    assert len(called) == 1 and result.final_output
    rounds = chat_bodies(mock)[-2:]
    assert rounds[0]["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert rounds[1]["messages"][-1]["role"] == "tool"
