"""The Go benchmark peer (bench/gopeer/): its mock answers as edgegw's Python mock does, edgegw
relays its streams, its proxy passes streams whole, and its generators run and stay bounded.
Skipped where Go is not installed: nothing of the gateway needs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trustme

from bench import gopeer
from bench.harness import free_port, wait_port
from edgegw.mock import MockConfig, MockUpstream

from .conftest import in_thread, openai_client, start_gateway
from .rawhttp import request

pytestmark = pytest.mark.skipif(
    gopeer.go_binary() is None, reason="Go is not installed: bench/gopeer cannot be built"
)

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello in five"}]}
# What differs between two mocks' answers by design: ids, clocks.
_VOLATILE = re.compile(rb'"x_sent_ns":\d+,|"created":\d+|chatcmpl-mock\d+')


@pytest.fixture(scope="module")
def binary() -> Path:
    return gopeer.build()


@contextmanager
def run(binary: Path, *args: str) -> Iterator[int]:
    """`gopeer <args> --port P` on a free loopback port, until the block ends."""
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), *args, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, 10, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def generate(binary: Path, *args: str) -> dict:
    done = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=30, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[:2] == ["phase run", "phase done"]
    result: dict = json.loads(lines[-1])
    return result


@pytest.mark.parametrize(
    "body",
    [
        {**CHAT, "max_tokens": 3},
        {**CHAT, "stream": True},
        {**CHAT, "stream": True, "max_tokens": 2, "stream_options": {"include_usage": True}},
    ],
    ids=["whole", "stream", "stream-usage-capped"],
)
async def test_go_mock_answers_as_the_python_mock(
    nursery: trio.Nursery, binary: Path, body: dict
) -> None:
    py = MockUpstream(MockConfig(tokens=5, stamp=True))
    await nursery.start(py.serve, "127.0.0.1", 0)
    payload = json.dumps(body).encode()
    with run(binary, "mock", "--tokens", "5", "--stamp") as go_port:
        go = await request(go_port, "POST", "/v1/chat/completions", payload)
        models = await request(go_port, "GET", "/v1/models")
    want = await request(py.port, "POST", "/v1/chat/completions", payload)
    go_type = {k.lower(): v for k, v in go.headers.items()}[b"content-type"]
    assert (go.status, go_type) == (want.status, want.headers[b"content-type"])
    assert _VOLATILE.sub(b"", go.body) == _VOLATILE.sub(b"", want.body)
    if body.get("stream"):
        assert all(e.startswith(b'data: {"x_sent_ns":') for e in go.body.split(b"\n\n")[:-2]), (
            go.body
        )
    assert models.body == (await request(py.port, "GET", "/v1/models")).body


async def test_edgegw_relays_the_go_mock_stream(nursery: trio.Nursery, binary: Path) -> None:
    with run(binary, "mock", "--tokens", "5", "--stamp") as port:
        gw = await start_gateway(
            nursery,
            {"OPENAI_API_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "upstream-key"},
        )

        def chat() -> tuple[str, int | None, str]:
            with openai_client(gw.base) as client:
                chunks = list(
                    client.chat.completions.create(
                        model="openai/gpt-4o-mini",
                        messages=[{"role": "user", "content": "hi"}],
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                )
                whole = client.chat.completions.create(
                    model="openai/gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
                )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
            return (
                text,
                usage.completion_tokens if usage else None,
                whole.choices[0].message.content or "",
            )

        text, completion_tokens, whole = await in_thread(chat)
    assert text == whole == "the quick brown fox jumps"
    assert completion_tokens == 5


def test_streams_against_the_mock_direct(binary: Path, tmp_path: Path) -> None:
    with run(
        binary, "mock", "--tokens", "8", "--token-rate", "40", "--first-token-ms", "50",
        "--jitter", "0.2", "--stamp",
    ) as port:  # fmt: skip
        body = tmp_path / "body.json"
        body.write_text(json.dumps({**CHAT, "stream": True}))
        r = generate(
            binary, "streams", "--port", str(port), "--body-file", str(body), "--streams",
            "20", "--seconds", "1", "--stream-s", "0.25", "--nominal-gap-ms", "25",
        )  # fmt: skip
    assert r["requests"]["errors"] == 0 and r["requests"]["ok"] > 0, r
    assert r["gap_source"] == "stamps"
    assert 1 <= r["in_flight"]["min"] <= r["in_flight"]["max"] <= 20 + 64
    assert r["added_gap_ms"]["count"] > 0 and r["relay_lag_ms"]["count"] == r["events"]


def test_load_through_the_go_proxy(binary: Path, tmp_path: Path) -> None:
    with (
        run(binary, "mock", "--tokens", "200") as mock_port,
        run(binary, "proxy", "--upstream", f"http://127.0.0.1:{mock_port}") as port,
    ):
        body = tmp_path / "body.json"
        body.write_text(json.dumps({**CHAT, "stream": True, "max_tokens": 48}))
        r = generate(
            binary, "load", "--port", str(port), "--body-file", str(body), "--connections",
            "2", "--seconds", "0.5", "--warmup-s", "0.2", "--stream",
        )  # fmt: skip
    assert r["errors"] == 0 and r["ok"] > 0, r
    assert r["events_per_stream"] == 51  # role, 48 content chunks, finish, [DONE]


def test_load_over_tls_through_edgegw(binary: Path, tmp_path: Path) -> None:
    """`load --tls-ca`: the closed loop speaks HTTPS to a gateway serving TLS (bench https)."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key, ca_pem = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    ca_pem.write_bytes(ca.cert_pem.bytes())
    with run(binary, "mock", "--tokens", "16") as mock_port:
        port = free_port()
        env = {
            **os.environ,
            "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
            "OPENAI_API_KEY": "k",
            "SERVER_TLS_CERT_PATH": str(cert),
            "SERVER_TLS_KEY_PATH": str(key),
            "EDGEGW_WORKERS": "1",
        }
        gw = subprocess.Popen(
            [sys.executable, "-m", "edgegw", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_port(port, 20, gw)
            body = tmp_path / "body.json"
            body.write_text(json.dumps({**CHAT, "model": "openai/gpt-4o-mini"}))
            r = generate(
                binary, "load", "--port", str(port), "--body-file", str(body), "--connections",
                "2", "--seconds", "0.5", "--warmup-s", "0.2", "--tls-ca", str(ca_pem),
            )  # fmt: skip
        finally:
            gw.terminate()
            gw.wait(15)
    assert r["errors"] == 0 and r["ok"] > 0, r


def test_generators_refuse_other_than_loopback(binary: Path) -> None:
    done = subprocess.run(
        [str(binary), "streams", "--host", "10.0.0.1", "--port", "80", "--stream-s", "1"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 2 and "loopback" in done.stderr
