"""Logs: LOG_FORMAT=json lines parse, one access line per request with its fields, no
credential at any level (a canary provider key and client key, LOG_LEVEL=DEBUG, every line
scanned), repeats of the same upstream error rate-limited."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest
import trio

from edgegw.logs import handler, redact
from edgegw.settings import Settings

from .conftest import Gateway, start_gateway
from .echo_upstream import Answer, EchoUpstream, Seen
from .rawhttp import request

PROVIDER_KEY = "sk-canary-provider-0123456789"
CLIENT_KEY = "ck-canary-client-key-42"
CANARY = "canary"


def answer(seen: Seen) -> Answer:
    doc = orjson.loads(seen.body)
    model = doc.get("model")
    if model == "leaky":  # an upstream that quotes the key it was sent, as some do
        auth = seen.headers.get("authorization", "")
        body = {"error": {"message": f"Incorrect API key provided: {auth}", "code": "bad_key"}}
        return Answer(status=401, body=orjson.dumps(body))
    if model == "broken":
        return Answer(
            status=500, body=b'{"error":{"message":"boom ' + PROVIDER_KEY.encode() + b'"}}'
        )
    if doc.get("stream"):
        return Answer(
            headers=[("content-type", "text/event-stream")],
            chunks=[b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n', b"data: [DONE]\n\n"],
        )
    return Answer(body=b'{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}')


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    """The gateway's logging as `edgegw serve` sets it up (JSON, DEBUG), into a buffer."""
    settings = Settings.load(
        environ={
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "DEBUG",
            "OPENAI_API_KEY": PROVIDER_KEY,
            "EDGEGW_API_KEYS": CLIENT_KEY,
        }
    )
    buffer = io.StringIO()
    out = handler(settings, buffer)
    root = logging.getLogger()
    level = root.level
    root.addHandler(out)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer, out
    finally:
        root.removeHandler(out)
        root.setLevel(level)


async def gateway(nursery: trio.Nursery, upstream_port: int, **extra: str) -> Gateway:
    return await start_gateway(
        nursery,
        {
            "OPENAI_API_URL": f"http://127.0.0.1:{upstream_port}/v1",
            "OPENAI_API_KEY": PROVIDER_KEY,
            "EDGEGW_API_KEYS": CLIENT_KEY,
            "LOG_LEVEL": "DEBUG",
            **extra,
        },
    )


async def chat(gw: Gateway, model: str, *, stream: bool = False, key: str = CLIENT_KEY):
    body = {
        "model": f"openai/{model}",
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps(body),
        [("authorization", f"Bearer {key}"), ("x-request-id", f"t-{model}")],
    )


def lines(buffer: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


async def test_json_logs_parse_and_hold_no_secret_at_debug(
    nursery: trio.Nursery, captured: tuple[io.StringIO, logging.Handler]
) -> None:
    buffer, _ = captured
    echo = EchoUpstream()
    echo.answer = answer
    await nursery.start(echo.serve)
    gw = await gateway(nursery, echo.port)
    assert (await chat(gw, "gpt-4o-mini")).status == 200
    assert (await chat(gw, "gpt-4o-mini", stream=True)).status == 200
    assert (await chat(gw, "leaky")).status == 401
    assert (await chat(gw, "broken")).status == 500
    assert (await chat(gw, "gpt-4o-mini", key="sk-canary-wrong-client-key")).status == 401
    logging.getLogger("edgegw.test").debug("a debug line quoting %s", PROVIDER_KEY)
    try:
        raise RuntimeError(f"an error quoting {CLIENT_KEY}")
    except RuntimeError:
        logging.getLogger("edgegw.test").exception("a traceback")
    records = lines(buffer)  # every line is one JSON object
    assert records
    for raw in buffer.getvalue().splitlines():
        assert CANARY not in raw, raw
    levels = {r["level"] for r in records}
    assert {"DEBUG", "INFO", "ERROR"} <= levels
    access = [r for r in records if r["logger"] == "edgegw.access"]
    assert len(access) == 5
    first = access[0]
    assert first["method"] == "POST"
    assert first["route"] == "/v1/chat/completions"
    assert first["status"] == 200
    assert first["duration_ms"] >= 0
    assert first["provider"] == "openai"
    assert first["model"] == "openai/gpt-4o-mini"
    assert first["request_id"] == "t-gpt-4o-mini"
    assert first["client"].startswith("127.0.0.1:")
    assert first["ttft_ms"] is None  # not a stream
    assert access[1]["ttft_ms"] is not None
    assert [r["status"] for r in access] == [200, 200, 401, 500, 401]
    assert "timestamp" in first


async def test_repeats_of_one_upstream_error_are_rate_limited(
    nursery: trio.Nursery, captured: tuple[io.StringIO, logging.Handler]
) -> None:
    buffer, _ = captured
    closed = trio.socket.socket()
    await closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    gw = await gateway(nursery, port)
    for _ in range(4):
        assert (await chat(gw, "gpt-4o-mini")).status == 502
    warnings = [
        r
        for r in lines(buffer)
        if r["level"] == "WARNING" and "upstream_unreachable" in r["message"]
    ]
    assert len(warnings) == 1
    assert len([r for r in lines(buffer) if r["logger"] == "edgegw.access"]) == 4


def test_text_is_the_default_format() -> None:
    settings = Settings.load(environ={"OPENAI_API_KEY": PROVIDER_KEY})
    buffer = io.StringIO()
    out = handler(settings, buffer)
    record = logging.LogRecord(
        "edgegw.x", logging.INFO, __file__, 1, "key %s", (PROVIDER_KEY,), None
    )
    out.handle(record)
    line = buffer.getvalue()
    assert "INFO edgegw.x: key [REDACTED]" in line


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abc.def.ghi",
        "x sk-proj-AbC123xyz",
        "url?api_key=zzz123&x=1",
        "authorization: BEARER abc.def.ghi",
        "x SK-proj-AbC123xyz",
        "url?API_KEY=zzz123",
    ],
)
def test_credential_shapes_are_redacted(text: str) -> None:
    out = redact(text)
    assert "[REDACTED]" in out
    assert not any(s in out for s in ("abc.def.ghi", "AbC123xyz", "zzz123"))


def test_a_line_without_a_credential_shape_is_left_as_it_is() -> None:
    line = "POST /v1/chat/completions 200 1.2ms ttft=- provider=openai model='gpt-4o' id=abc"
    assert redact(line) == line
