"""A local profile's `served_model_name`: what its workers list in /v1/models and are sent
as `model` (the profile's name unless set, as SIE launches SGLang). A worker that lists
other models (SGLang launched without --served-model-name lists its model path) is named in
one WARNING per state change and answered with a 503 that says it serves another model.
Fake SGLang workers and real gateways on loopback."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import orjson
import pytest
import trio

from edgegw.local.fleet import Fleet
from edgegw.local.profiles import ProfileError, parse_profile
from edgegw.upstream import UpstreamPool

from .conftest import Gateway, start_gateway
from .fake_sglang import FakeSGLang, Script
from .rawhttp import RawResponse, request, sse_events

MODEL_PATH = "/models/Qwen3-8B"
CHAT: dict[str, object] = {
    "model": "qwen3-8b",
    "messages": [{"role": "user", "content": "hello there"}],
}


def worker_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "edgegw.workers" and r.levelno == logging.WARNING
    ]


async def gateway(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang, served: str | None
) -> Gateway:
    lines = [
        "local_models:",
        "  - name: qwen3-8b",
        f'    workers: [{{url: "http://127.0.0.1:{worker.port}"}}]',
    ]
    if served is not None:
        lines.append(f'    served_model_name: "{served}"')
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    return await start_gateway(nursery, {}, config_file=cfg)


async def post(
    gw: Gateway, body: Mapping[str, object], path: str = "/v1/chat/completions"
) -> RawResponse:
    return await request(gw.port, "POST", path, orjson.dumps(body))


def test_the_served_name_is_the_profile_name_unless_set(tmp_path: Path) -> None:
    base = {"name": "qwen3-8b", "workers": [{"url": "http://127.0.0.1:30000"}]}
    assert parse_profile(base, tmp_path, "cfg", 0).served_name == "qwen3-8b"
    named = parse_profile({**base, "served_model_name": MODEL_PATH}, tmp_path, "cfg", 0)
    assert named.served_name == MODEL_PATH and named.name == "qwen3-8b"


@pytest.mark.parametrize("value", ["", " padded", "two\nlines", 7, "x" * 257])
def test_a_bad_served_model_name_stops_the_start(tmp_path: Path, value: object) -> None:
    data = {"name": "m1", "workers": [{"url": "http://127.0.0.1:30000"}]}
    with pytest.raises(ProfileError, match="model 'm1': served_model_name: "):
        parse_profile({**data, "served_model_name": value}, tmp_path, "cfg", 0)


async def test_a_worker_listing_another_model_is_named_and_refused(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SGLang launched without --served-model-name lists its model path: one WARNING names
    what it lists and what was expected; the client's 503 says the worker serves another
    model, without the worker's path."""
    worker = FakeSGLang(Script(model_path=MODEL_PATH))
    await nursery.start(worker.serve)
    gw = await gateway(nursery, tmp_path, worker, None)
    [warning] = worker_warnings(caplog)
    assert repr(MODEL_PATH) in warning and "'qwen3-8b'" in warning
    assert "served_model_name" in warning
    for path, body in (
        ("/v1/chat/completions", CHAT),
        ("/v1/completions", {"model": "qwen3-8b", "prompt": "hello"}),
    ):
        resp = await post(gw, body, path)
        assert resp.status == 503, resp.body
        error = orjson.loads(resp.body)["error"]
        assert error["code"] == "MODEL_LOADING"  # SIE's code for the state (its wire fixtures)
        assert error["message"] == (
            "the local workers of 'qwen3-8b' serve a different model "
            "(the gateway's log names what they list)"
        )
        assert MODEL_PATH.encode() not in resp.body
    assert not [r for r in worker.requests if r.path.endswith("completions")]
    assert len(worker_warnings(caplog)) == 1


async def test_the_warning_comes_once_per_state_change(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Polls that find the same listing say nothing more; a fixed worker is routable again,
    and a worker that goes back to listing another model is named again."""
    worker = FakeSGLang(Script(model_path=MODEL_PATH))
    await nursery.start(worker.serve)
    profile = parse_profile(
        {"name": "qwen3-8b", "workers": [{"url": f"http://127.0.0.1:{worker.port}"}]},
        tmp_path,
        "cfg",
        0,
    )
    pool = UpstreamPool()
    fleet = Fleet([profile], pool)
    [state] = fleet.all_workers()
    try:
        for _ in range(3):
            await fleet.check_all()
        assert len(worker_warnings(caplog)) == 1
        assert not state.routable
        worker.script.served_model_name = "qwen3-8b"
        await fleet.check_all()
        assert state.routable
        worker.script.served_model_name = "qwen3-8b-other"
        await fleet.check_all()
        await fleet.check_all()
        assert len(worker_warnings(caplog)) == 2
        assert "'qwen3-8b-other'" in worker_warnings(caplog)[1]
        assert not state.routable
    finally:
        await pool.aclose()


async def test_a_matching_served_model_name_is_what_the_worker_is_sent(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker is sent its own name as `model`; the client sees the profile's name."""
    worker = FakeSGLang(Script(model_path=MODEL_PATH, tokens=3))
    await nursery.start(worker.serve)
    gw = await gateway(nursery, tmp_path, worker, MODEL_PATH)
    assert worker_warnings(caplog) == []
    chat = await post(gw, CHAT)
    assert chat.status == 200, chat.body
    assert orjson.loads(chat.body)["model"] == "qwen3-8b"
    stream = await post(gw, {**CHAT, "stream": True})
    assert stream.status == 200
    events = sse_events(stream.body)
    assert events[-1] == "[DONE]"
    assert {e["model"] for e in events[:-1]} == {"qwen3-8b"}  # type: ignore[index]
    completion = await post(gw, {"model": "qwen3-8b", "prompt": "hello"}, "/v1/completions")
    assert completion.status == 200, completion.body
    sent = [r.body for r in worker.requests if r.path.endswith("completions")]
    assert [b["model"] for b in sent] == [MODEL_PATH] * 3
