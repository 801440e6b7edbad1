"""Guardrails end to end: the real gateway with GUARDRAILS_ENABLED, a policy directory the
test writes into tmp_path, a scripted model that records what reaches it
(tests/scripted_model.py), an external checker served on loopback, and a real MCP server
for the tool phases."""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from edgegw import plainhttp
from edgegw.envcheck import unhonoured
from edgegw.settings import EXIT_CONFIG, Settings, SettingsError

from .conftest import Gateway, sample, scrape, start_gateway
from .mcp_server import ToolServer
from .oidc_issuer import Issuer
from .rawhttp import RawResponse, request, sse_events
from .scripted_model import ScriptedModel, last_tool_results, text, tool_calls
from .test_mcp import (  # noqa: F401  (pytestmark and the fixture: the SDK's garbage)
    _collect_sdk_garbage,
    mcp_env,
    pytestmark,
    wait_for_tool,
)

# A typical policy: block a word (before and after the model), redact secrets the built-in
# detectors found, warn on an e-mail address, allow the rest.
POLICY = """\
package guardrails

import rego.v1

main := {"action": "block", "message": "no forbidden words"} if {
    contains(input.request.body, "forbidden")
} else := {"action": "redact", "message": "secrets removed"} if {
    redactable
} else := {"action": "warn", "message": "mentions an e-mail address"} if {
    "email" in input.detected
} else := {"action": "allow"}

redactable if {
    some d in input.detected
    d in {"api_key", "bearer_token", "credit_card"}
}
"""
SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234"
CARD = "4111 1111 1111 1111"


def policy_dir(tmp_path: Path, source: str = POLICY, name: str = "main.rego") -> Path:
    d = tmp_path / "policies"
    d.mkdir(exist_ok=True)
    (d / name).write_text(source)
    return d


def chat(content: str, **extra: Any) -> bytes:
    return orjson.dumps(
        {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": content}], **extra}
    )


def echo(body: dict[str, Any]) -> dict[str, Any]:
    """The model repeats the user's last message."""
    return text(f"you said: {body['messages'][-1]['content']}")


async def setup(
    nursery: trio.Nursery, tmp_path: Path, script: Any = echo, **env: str
) -> tuple[ScriptedModel, Gateway]:
    model = ScriptedModel(script)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path)),
            "TELEMETRY_ENABLED": "true",
            **env,
        },
    )
    return model, gw


def error_of(resp: RawResponse) -> dict[str, Any]:
    doc = orjson.loads(resp.body)
    assert set(doc) == {"error"}
    assert set(doc["error"]) == {"message", "type", "param", "code"}
    return dict(doc["error"])


async def test_a_block_is_a_403_and_the_upstream_is_never_called(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model, gw = await setup(nursery, tmp_path)
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat("a forbidden word"))
    assert resp.status == 403
    err = error_of(resp)
    assert err["code"] == "guardrails_blocked"
    assert err["type"] == "permission_error"
    assert err["message"] == "no forbidden words"
    # Streaming or not, completions too: nothing reaches the model.
    stream = await request(gw.port, "POST", "/v1/chat/completions", chat("forbidden", stream=True))
    assert stream.status == 403
    completion = orjson.dumps({"model": "openai/gpt-4o", "prompt": "forbidden"})
    assert (await request(gw.port, "POST", "/v1/completions", completion)).status == 403
    assert model.bodies == []
    # An ordinary request goes through.
    ok = await request(gw.port, "POST", "/v1/chat/completions", chat("hello"))
    assert ok.status == 200, ok.body
    assert b"x-guardrails-warning" not in ok.headers
    metrics = await scrape(gw.metrics_port)
    blocked = {"guardrail_phase": "pre_call", "guardrail_action": "block"}
    chat_path = {"guardrail_path": "/v1/chat/completions"}
    assert sample(metrics, "inference_gateway_guardrails_total", **blocked, **chat_path) == 2
    path = {"guardrail_path": "/v1/completions"}
    assert sample(metrics, "inference_gateway_guardrails_total", **blocked, **path) == 1
    allowed = {"guardrail_phase": "pre_call", "guardrail_action": "allow"}
    assert sample(metrics, "inference_gateway_guardrails_total", **allowed) == 1


async def test_redact_removes_secrets_before_the_upstream(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    seen: list[str] = []

    def remember(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body["messages"][-1]["content"])
        return text("ok")

    model, gw = await setup(nursery, tmp_path, remember)
    content = f"my key is {SECRET}, my card {CARD}, write to jane@example.com"
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat(content, temperature=0.5))
    assert resp.status == 200, resp.body
    assert seen == ["my key is [REDACTED], my card [REDACTED], write to jane@example.com"]
    # The body stays the same document: only the string changed.
    assert model.bodies[0]["temperature"] == 0.5
    assert model.bodies[0]["model"] == "gpt-4o"
    # A number that looks like a card but fails the Luhn check is left alone (and so the
    # policy, seeing no secret, only warns for the address).
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", chat("order 4111111111111112 for a@b.io")
    )
    assert resp.status == 200
    assert seen[-1] == "order 4111111111111112 for a@b.io"


async def test_warn_forwards_and_says_so(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.guardrails")
    model, gw = await setup(nursery, tmp_path)
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", chat("mail jane@example.com please")
    )
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-guardrails-warning"] == b"mentions an e-mail address"
    # Forwarded unchanged: e-mail is detected, never redacted.
    assert model.bodies[0]["messages"][0]["content"] == "mail jane@example.com please"
    warned = [r for r in caplog.records if "warn on pre_call" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    # The log names the phase and the path, never the body.
    assert "jane@example.com" not in caplog.text
    # A stream carries the header too.
    stream = await request(
        gw.port, "POST", "/v1/chat/completions", chat("mail jane@example.com", stream=True)
    )
    assert stream.status == 200
    assert stream.headers[b"x-guardrails-warning"] == b"mentions an e-mail address"
    assert b"[DONE]" in stream.body
    metrics = await scrape(gw.metrics_port)
    warn = {"guardrail_phase": "pre_call", "guardrail_action": "warn"}
    assert sample(metrics, "inference_gateway_guardrails_total", **warn) == 2


async def test_post_call_judges_the_answer(nursery: trio.Nursery, tmp_path: Path) -> None:
    answers = {
        "a": "the answer is forbidden",
        "b": f"here is a card: {CARD}",
        "c": "nothing to see",
    }
    model, gw = await setup(
        nursery, tmp_path, lambda body: text(answers[body["messages"][0]["content"]])
    )
    blocked = await request(gw.port, "POST", "/v1/chat/completions", chat("a"))
    assert blocked.status == 403
    assert error_of(blocked)["code"] == "guardrails_blocked"
    assert len(model.bodies) == 1  # the model was asked; its answer did not reach the client
    redacted = await request(gw.port, "POST", "/v1/chat/completions", chat("b"))
    assert redacted.status == 200
    doc = orjson.loads(redacted.body)
    assert doc["choices"][0]["message"]["content"] == "here is a card: [REDACTED]"
    assert int(redacted.headers[b"content-length"]) == len(redacted.body)
    assert doc["usage"]["total_tokens"] == 15  # the rest of the answer as it was
    plain = await request(gw.port, "POST", "/v1/chat/completions", chat("c"))
    assert orjson.loads(plain.body)["choices"][0]["message"]["content"] == "nothing to see"
    # A stream is judged as it passes (tests/test_guardrails_routes.py): cut by the block.
    stream = await request(gw.port, "POST", "/v1/chat/completions", chat("a", stream=True))
    assert stream.status == 200
    last = sse_events(stream.body)[-1]
    assert isinstance(last, dict) and last["error"]["code"] == "guardrails_blocked"
    metrics = await scrape(gw.metrics_port)
    post = {"guardrail_phase": "post_call"}
    assert (
        sample(metrics, "inference_gateway_guardrails_total", **post, guardrail_action="block") == 2
    )
    assert (
        sample(metrics, "inference_gateway_guardrails_total", **post, guardrail_action="redact")
        == 1
    )


TOOL_POLICY = """\
package guardrails

import rego.v1

main := {"action": "block", "message": "13 is unlucky"} if {
    input.phase == "tool_args"
    input.path == "mcp_add"
    json.unmarshal(input.request.body).a == 13
} else := {"action": "redact"} if {
    input.phase == "tool_output"
    "credit_card" in input.detected
} else := {"action": "block", "message": "no sums of 4"} if {
    input.phase == "tool_output"
    contains(input.request.body, "\\"result\\":4}")
}
"""


async def test_tool_args_and_tool_output(nursery: trio.Nursery, tmp_path: Path) -> None:
    tools = ToolServer()
    url = await nursery.start(tools.serve)

    def script(body: dict[str, Any]) -> dict[str, Any]:
        results = last_tool_results(body)
        if not results:
            a = int(body["messages"][0]["content"])
            return tool_calls(("mcp_add", {"a": a, "b": 3}))
        return text(results["call_0"])

    model = ScriptedModel(script)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            **mcp_env(url, MCP_TOOL_MODE="direct", MCP_POLLING_ENABLED="false"),
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path, TOOL_POLICY)),
        },
    )
    await wait_for_tool(gw.port, "mcp_add")

    async def ask(a: int) -> str:
        resp = await request(gw.port, "POST", "/v1/chat/completions", chat(str(a)))
        assert resp.status == 200, resp.body
        return str(orjson.loads(resp.body)["choices"][0]["message"]["content"])

    # tool_args blocks: the tool never runs; the model reads an error result.
    answer = await ask(13)
    assert answer == "Error: the guardrails blocked this tool call: 13 is unlucky"
    assert tools.calls == []
    # tool_output blocks: the tool ran, its output never reaches the model.
    answer = await ask(1)
    assert answer == "Error: the guardrails blocked this tool's output: no sums of 4"
    assert tools.calls == ["add"]
    # Allowed: the result as the tool gave it.
    answer = await ask(2)
    assert orjson.loads(answer)["structuredContent"]["result"] == 5


async def _serve_checker(nursery: trio.Nursery, decide: Any, seen: list[dict[str, Any]]) -> int:
    async def answer(req: plainhttp.Request, out: plainhttp.Responder) -> None:
        doc = orjson.loads(req.body or b"{}")
        seen.append(doc)
        status, body = decide(doc)
        await out.send(status, [(b"content-type", b"application/json")], body)

    server = plainhttp.Server("checker", answer)
    port: int = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    return port


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_external_checker_allows_and_blocks(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    seen: list[dict[str, Any]] = []

    def decide(doc: dict[str, Any]) -> tuple[int, bytes]:
        if "nope" in doc["request"]["body"]:
            return 200, b'{"action": "block", "message": "the checker says no"}'
        return 200, b'{"action": "allow"}'

    port = await _serve_checker(nursery, decide, seen)
    model, gw = await setup(
        nursery, tmp_path, GUARDRAILS_EXTERNAL_URL=f"http://127.0.0.1:{port}/check"
    )
    ok = await request(gw.port, "POST", "/v1/chat/completions", chat("hello"))
    assert ok.status == 200, ok.body
    no = await request(gw.port, "POST", "/v1/chat/completions", chat("nope"))
    assert no.status == 403
    assert error_of(no) == {
        "message": "the checker says no",
        "type": "permission_error",
        "param": None,
        "code": "guardrails_blocked",
    }
    assert len(model.bodies) == 1
    # The checker got the reference's input document (pre_call and post_call of the first
    # request, pre_call of the second).
    assert [d["phase"] for d in seen] == ["pre_call", "post_call", "pre_call"]
    first = seen[0]
    assert first["method"] == "POST"
    assert first["path"] == "/v1/chat/completions"
    assert first["request"]["model"] == "openai/gpt-4o"
    assert orjson.loads(first["request"]["body"])["messages"][0]["content"] == "hello"
    assert first["identity"] is None
    assert first["detected"] == []
    # A block by the policy never asks the checker.
    await request(gw.port, "POST", "/v1/chat/completions", chat("forbidden"))
    assert len(seen) == 3


@pytest.mark.parametrize(("mode", "status"), [("closed", 403), ("open", 200), (None, 403)])
async def test_a_checker_that_is_down_fails_closed_unless_told_open(
    nursery: trio.Nursery, tmp_path: Path, mode: str | None, status: int
) -> None:
    env = {"GUARDRAILS_EXTERNAL_URL": f"http://127.0.0.1:{_closed_port()}/check"}
    if mode is not None:
        env["GUARDRAILS_FAIL_MODE"] = mode
    model, gw = await setup(nursery, tmp_path, **env)
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat("hello"))
    assert resp.status == status, resp.body
    if status == 403:
        assert error_of(resp)["code"] == "guardrails_unavailable"
        assert model.bodies == []
    else:
        assert len(model.bodies) == 1


@pytest.mark.parametrize(
    "answer",
    [
        (500, b'{"action": "allow"}'),  # not a 2xx
        (200, b"not json"),
        (200, b'{"action": "shrug"}'),  # not an action
    ],
)
async def test_a_checker_answer_that_is_no_decision_fails_closed(
    nursery: trio.Nursery, tmp_path: Path, answer: tuple[int, bytes]
) -> None:
    port = await _serve_checker(nursery, lambda doc: answer, [])
    model, gw = await setup(nursery, tmp_path, GUARDRAILS_EXTERNAL_URL=f"http://127.0.0.1:{port}/")
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat("hello"))
    assert resp.status == 403
    assert error_of(resp)["code"] == "guardrails_unavailable"
    assert model.bodies == []


async def test_a_policy_that_fails_to_evaluate_fails_closed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    # Two complete definitions of main with different values: a conflict at evaluation.
    conflict = 'package guardrails\nmain := {"action": "allow"}\nmain := {"action": "warn"} if input.phase\n'
    model = ScriptedModel(echo)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path, conflict)),
        },
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat("hello"))
    assert resp.status == 403
    assert error_of(resp)["code"] == "guardrails_unavailable"
    assert model.bodies == []


async def test_the_identity_is_the_verified_claims(nursery: trio.Nursery, tmp_path: Path) -> None:
    issuer = Issuer()
    await nursery.start(issuer.serve)
    key = issuer.add_key("RS256")
    only_alice = """\
package guardrails

import rego.v1

main := {"action": "block", "message": "only alice"} if input.identity.sub != "alice"
"""
    model = ScriptedModel(echo)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            **issuer.env(),
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path, only_alice)),
        },
    )

    async def as_user(sub: str) -> int:
        auth = [("authorization", f"Bearer {issuer.token(key, sub=sub)}")]
        resp = await request(gw.port, "POST", "/v1/chat/completions", chat("hi"), auth)
        return resp.status

    assert await as_user("alice") == 200
    assert await as_user("bob") == 403
    assert len(model.bodies) == 1


async def test_no_policy_file_allows(nursery: trio.Nursery, tmp_path: Path) -> None:
    model = ScriptedModel(echo)
    await nursery.start(model.serve)
    gw = await start_gateway(
        nursery,
        {
            **model.env(),
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_POLICY_DIR": str(tmp_path / "missing"),
        },
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", chat("forbidden"))
    assert resp.status == 200


async def test_a_bad_policy_refuses_the_start_with_file_and_line(tmp_path: Path) -> None:
    policies = policy_dir(tmp_path, POLICY)
    (policies / "broken.rego").write_text('package guardrails\n\nmain := {"action": }\n')
    (policies / "notes.txt").write_text("not a policy: ignored")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GUARDRAILS_", "EDGEGW_"))}
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "edgegw", "serve", "--workers", "1", "--port", "0"],
            env={**base, "GUARDRAILS_ENABLED": "true", "GUARDRAILS_POLICY_DIR": str(policies)},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == EXIT_CONFIG
    assert b"GUARDRAILS_POLICY_DIR: broken.rego:3:" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr


def test_settings_are_read_and_checked() -> None:
    s = Settings.load(
        environ={
            "GUARDRAILS_ENABLED": "true",
            "GUARDRAILS_FAIL_MODE": "OPEN",
            "GUARDRAILS_EXTERNAL_URL": "http://127.0.0.1:9/check",
            "GUARDRAILS_EXTERNAL_TIMEOUT": "250ms",
        }
    ).guardrails
    assert (s.enabled, s.fail_mode, s.external_timeout_s) == (True, "open", 0.25)
    assert Settings.load(environ={}).guardrails.fail_mode == "closed"
    for var, value in (
        ("GUARDRAILS_FAIL_MODE", "sometimes"),
        ("GUARDRAILS_EXTERNAL_URL", "ftp://x"),
        ("GUARDRAILS_EXTERNAL_TIMEOUT", "soon"),
        ("GUARDRAILS_ENABLED", "maybe"),
    ):
        with pytest.raises(SettingsError, match=f"^{var}: "):
            Settings.load(environ={var: value})


def test_guardrails_variables_without_guardrails_are_named() -> None:
    warnings = unhonoured({"GUARDRAILS_POLICY_DIR": "/etc/p", "GUARDRAILS_FAIL_MOD": "open"})
    assert warnings == [
        "GUARDRAILS_FAIL_MOD is set but edgegw has no such setting "
        "(did you mean GUARDRAILS_FAIL_MODE?)",
        "GUARDRAILS_POLICY_DIR is set but not honoured: GUARDRAILS_ENABLED is not true",
    ]
    assert unhonoured({"GUARDRAILS_ENABLED": "true", "GUARDRAILS_POLICY_DIR": "/etc/p"}) == []
