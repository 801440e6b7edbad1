"""SIE's wire fixtures (tests/sie_wire_fixtures/, copied from superlinked/sie
packages/wire-fixtures), read as data and checked vector by vector against a real gateway,
a fake SGLang worker and a scripted remote provider.

edgegw is the "gateway" topology. Its local states, on static workers (see
edgegw/local/fleet.py):
  ready      a worker passed its health check and lists the model;
  loading    a worker passes its health check but does not list the model (not loaded);
  no_worker  no worker of the model has passed a health check since the gateway started;
  saturated  every healthy worker answers 503 (SGLang's full queue) or is at its bound;
  unhealthy  a worker that was healthy no longer answers.
The fixtures' models: `bare` is the local model's name (routing policy: the profile's
`remote_fallback`), `local_profile` / `remote_profile` its profiles named (`qwen3-8b:local`,
`qwen3-8b:remote`, or the fallback as `openai/gpt-4o-mini`), `remote_only` a model only a
provider serves (`openai/gpt-4o`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from edgegw import plainhttp

from .conftest import Gateway, start_gateway
from .fake_sglang import FakeSGLang, Script
from .rawhttp import RawResponse, request

FIXTURES = Path(__file__).parent / "sie_wire_fixtures"
ROUTING = json.loads((FIXTURES / "remote_routing.json").read_text())
DISCLOSURE = json.loads((FIXTURES / "serving_disclosure.json").read_text())
TOPOLOGY = "gateway"

BARE = "qwen3-8b"
REMOTE_PROFILE = "openai/gpt-4o-mini"
REMOTE_ONLY = "openai/gpt-4o"
# Each fixture model and the names edgegw knows it by (`model:profile` and provider/model).
MODELS = {
    "bare": [BARE],
    "local_profile": [f"{BARE}:local"],
    "remote_profile": [f"{BARE}:remote", REMOTE_PROFILE],
    "remote_only": [REMOTE_ONLY],
}
# The gateway's deadline for a remote attempt's first byte (unanswered_before_deadline).
FIRST_BYTE_TIMEOUT_S = 0.5


def vectors(section: str) -> list[Any]:
    """The vectors of one section that apply to a gateway, each with an id."""
    return [
        pytest.param(vector, id=f"{section}[{i}]")
        for i, vector in enumerate(ROUTING[section])
        if TOPOLOGY in vector.get("topologies", [TOPOLOGY])
    ]


# -- the peers ----------------------------------------------------------------------------


@dataclass
class Provider:
    """A remote OpenAI-compatible provider answering as scripted: 200 with an answer, or
    `status` with an SIE error `code` (None: no code), or nothing for `delay_s`."""

    status: int = 200
    code: str | None = None
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        self.server = plainhttp.Server("fake provider", self._answer)
        await self.server.serve_tcp("127.0.0.1", 0, task_status=task_status)

    async def _answer(self, req: plainhttp.Request, out: plainhttp.Responder) -> None:
        self.requests.append(orjson.loads(req.body or b"{}"))
        self.headers.append(req.headers)
        if self.delay_s:
            await trio.sleep(self.delay_s)
        json_type = ((b"content-type", b"application/json"),)
        if self.status != 200:
            err: dict[str, Any] = {"message": "scripted", "type": "error"}
            if self.code is not None:
                err["code"] = self.code
            await out.send(self.status, json_type, orjson.dumps({"error": err}))
            return
        model = self.requests[-1].get("model")
        answer = {
            "id": "chatcmpl-remote",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "remote"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        }
        await out.send(200, json_type, orjson.dumps(answer))


@dataclass
class Setup:
    gw: Gateway
    worker: FakeSGLang
    provider: Provider

    @property
    def worker_generations(self) -> int:
        return len([r for r in self.worker.requests if r.path.endswith("completions")])


async def _serve_until(scope: trio.CancelScope, fake: FakeSGLang, task_status: Any) -> None:
    with scope:
        await fake.serve(task_status=task_status)


async def setup(
    nursery: trio.Nursery, tmp_path: Path, local: str, triggers: list[str] | None = None
) -> Setup:
    """A gateway whose one local model `BARE` is in the `local` state, with the remote
    fallback `REMOTE_PROFILE` on a scripted provider."""
    script = Script()
    if local == "loading":
        script.served_model_name = "another-model"
    elif local == "no_worker":
        script.healthy = False
    elif local == "saturated":
        script.overloaded = True
    worker = FakeSGLang(script)
    scope = trio.CancelScope()
    await nursery.start(_serve_until, scope, worker)
    provider = Provider()
    port = await nursery.start(provider.serve)
    lines = [
        "local_models:",
        f"  - name: {BARE}",
        f'    workers: [{{url: "http://127.0.0.1:{worker.port}"}}]',
        "    timeouts: {first_chunk_s: 5, inter_chunk_s: 2, overall_s: 20}",
        f"    remote_fallback: {REMOTE_PROFILE}",
    ]
    if triggers is not None:
        lines.append(f"    triggers: [{', '.join(triggers)}]")
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    env = {
        "OPENAI_API_URL": f"http://127.0.0.1:{port}/v1",
        "OPENAI_API_KEY": "provider-key",
        "UPSTREAM_FIRST_BYTE_TIMEOUT": str(FIRST_BYTE_TIMEOUT_S),
    }
    gw = await start_gateway(nursery, env, config_file=cfg)
    if local == "unhealthy":
        # Healthy when the gateway checked it; gone now (the request finds it so).
        scope.cancel()
        with trio.fail_after(2):
            while worker.open_connections:  # noqa: ASYNC110 (a fake peer's counter)
                await trio.sleep(0.01)
    return Setup(gw, worker, provider)


async def chat(s: Setup, model: str, headers: list[tuple[str, str]] | None = None) -> RawResponse:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    return await request(s.gw.port, "POST", "/v1/chat/completions", orjson.dumps(body), headers)


# -- what every answer must disclose (serving_disclosure.json) ----------------------------

_RESPONSE_HEADERS = DISCLOSURE["response_headers"]


def check_disclosure(resp: RawResponse) -> None:
    """The four response headers hold only their declared values, and never on a 4xx."""
    for spec in _RESPONSE_HEADERS.values():
        value = resp.headers.get(spec["name"].lower().encode())
        if value is None:
            continue
        assert not 400 <= resp.status < 500, (spec["name"], resp.status)
        text = value.decode()
        if "values" in spec:
            assert text in spec["values"], (spec["name"], text)
        else:
            assert re.fullmatch(spec["pattern"], text), (spec["name"], text)


def fallback_headers(resp: RawResponse) -> dict[bytes, bytes]:
    return {k: v for k, v in resp.headers.items() if k.startswith(b"x-sie-fallback-")}


def error_code(resp: RawResponse) -> str:
    return str(orjson.loads(resp.body)["error"]["code"])


# -- remote_header --------------------------------------------------------------------------


@pytest.mark.parametrize("values", ROUTING["remote_header"]["accepted"])
async def test_remote_header_accepted(
    nursery: trio.Nursery, tmp_path: Path, values: list[str]
) -> None:
    s = await setup(nursery, tmp_path, "ready")
    resp = await chat(s, BARE, [("x-sie-remote", v) for v in values])
    check_disclosure(resp)
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"local"


@pytest.mark.parametrize("model", [m for names in MODELS.values() for m in names])
@pytest.mark.parametrize("values", ROUTING["remote_header"]["refused"])
async def test_remote_header_refused(
    nursery: trio.Nursery, tmp_path: Path, values: list[str], model: str
) -> None:
    refusal = ROUTING["remote_header"]["refusal"]
    s = await setup(nursery, tmp_path, "ready")
    resp = await chat(s, model, [("x-sie-remote", v) for v in values])
    check_disclosure(resp)
    assert (resp.status, error_code(resp)) == (refusal["status"], refusal["code"])
    for v in values:
        if v and v != "forbid":
            assert v.encode() not in resp.body  # the offending value is never echoed
    assert s.provider.requests == [] and s.worker_generations == 0


# -- forbid ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", vectors("forbid"))
async def test_forbid(nursery: trio.Nursery, tmp_path: Path, vector: dict[str, Any]) -> None:
    s = await setup(nursery, tmp_path, vector.get("local", "ready"))
    for model in MODELS[vector["model"]]:
        resp = await chat(s, model, [("x-sie-remote", "forbid")])
        check_disclosure(resp)
        assert s.provider.requests == []
        if "refusal" in vector:
            refusal = vector["refusal"]
            assert (resp.status, error_code(resp)) == (refusal["status"], refusal["code"])
        else:
            assert not vector["remote"]
            check_not_remote(s, resp, vector["local"])


# -- named_profile --------------------------------------------------------------------------


@pytest.mark.parametrize("vector", vectors("named_profile"))
async def test_named_profile(nursery: trio.Nursery, tmp_path: Path, vector: dict[str, Any]) -> None:
    s = await setup(nursery, tmp_path, vector["local"])
    # The `model:profile` form (provider/model is a plain remote target, test_forbid's).
    for model in MODELS[vector["model"]][:1]:
        resp = await chat(s, model)
        check_disclosure(resp)
        if vector["remote"]:
            check_served_remotely(s, resp, vector["fallback_reason"])
        else:
            check_not_remote(s, resp, vector["local"])


# -- bridge ---------------------------------------------------------------------------------


def check_served_remotely(s: Setup, resp: RawResponse, reason: str | None) -> None:
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"remote"
    assert resp.headers[b"x-sie-upstream"] == b"openai"
    assert resp.headers.get(b"x-sie-fallback-reason") == (reason and reason.encode())
    assert b"x-sie-fallback-error" not in resp.headers
    assert s.provider.requests[-1]["model"] == REMOTE_PROFILE.partition("/")[2]


def check_not_remote(s: Setup, resp: RawResponse, local: str) -> None:
    assert s.provider.requests == []
    assert fallback_headers(resp) == {}
    assert resp.headers.get(b"x-sie-served-by") == b"local"
    assert b"x-sie-upstream" not in resp.headers
    if local == "ready":
        assert resp.status == 200, resp.body
    else:
        assert resp.status >= 500, resp.body  # the local refusal


@pytest.mark.parametrize("vector", vectors("bridge"))
async def test_bridge(nursery: trio.Nursery, tmp_path: Path, vector: dict[str, Any]) -> None:
    s = await setup(nursery, tmp_path, vector["local"], vector["triggers"])
    resp = await chat(s, BARE)
    check_disclosure(resp)
    if vector["remote"]:
        check_served_remotely(s, resp, vector["fallback_reason"])
    else:
        check_not_remote(s, resp, vector["local"])


# -- fallback_error and restored_refusal ----------------------------------------------------

# The local state (and triggers) behind each fallback reason.
_STATE = {
    "provisioning": ("no_worker", None),
    "model_loading": ("loading", None),
    "saturated": ("saturated", ["saturated"]),
    "unhealthy": ("unhealthy", ["unhealthy"]),
}


@pytest.mark.parametrize("vector", vectors("fallback_error"))
async def test_fallback_error(
    nursery: trio.Nursery, tmp_path: Path, vector: dict[str, Any]
) -> None:
    s = await setup(nursery, tmp_path, "no_worker")
    s.provider.status, s.provider.code = vector["status"], vector["code"]
    resp = await chat(s, BARE)
    check_disclosure(resp)
    assert len(s.provider.requests) == 1
    assert resp.headers[b"x-sie-fallback-error"] == vector["fallback_error"].encode()
    assert resp.headers[b"x-sie-served-by"] == b"local"


@pytest.mark.parametrize("vector", vectors("restored_refusal"))
async def test_restored_refusal(
    nursery: trio.Nursery, tmp_path: Path, vector: dict[str, Any]
) -> None:
    local, triggers = _STATE[vector["fallback_reason"]]
    s = await setup(nursery, tmp_path, local, triggers)
    attempt = vector["attempt"]
    if attempt == "unanswered_before_deadline":
        s.provider.delay_s = FIRST_BYTE_TIMEOUT_S * 4
    else:
        s.provider.status, s.provider.code = attempt["status"], attempt["code"]
    resp = await chat(s, BARE)
    check_disclosure(resp)
    assert len(s.provider.requests) == 1
    want = vector["local"]
    assert resp.status == want["status"], resp.body
    assert resp.headers[b"x-sie-error-code"] == want["code"].encode()
    assert error_code(resp).upper() == want["code"]
    retry_after = resp.headers.get(b"retry-after")
    assert retry_after == (want["retry_after"] and want["retry_after"].encode())
    assert resp.headers[b"x-sie-served-by"] == b"local"
    assert b"x-sie-upstream" not in resp.headers
    assert resp.headers[b"x-sie-fallback-reason"] == vector["fallback_reason"].encode()
    assert resp.headers[b"x-sie-fallback-error"] == vector["fallback_error"].encode()
