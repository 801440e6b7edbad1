"""The provider-native endpoints (/v1/responses, /v1/messages, Images, /proxy), vision
gating, model allow/deny lists and per-provider request quirks, against a recording fake
provider on loopback."""

from __future__ import annotations

import orjson
import pytest
import trio

from edgegw.mock import MockUpstream

from .conftest import Gateway, start_gateway, upstream_env
from .echo_upstream import Answer, EchoUpstream
from .rawhttp import request, sse_data

OPENAI_KEY = "sk-openai-provider"
ANTHROPIC_KEY = "sk-ant-provider"
CLIENT_AUTH = [("authorization", "Bearer client-token"), ("x-api-key", "client-x-key")]


@pytest.fixture
async def echo(nursery: trio.Nursery) -> EchoUpstream:
    upstream = EchoUpstream()
    await nursery.start(upstream.serve)
    return upstream


def provider_env(echo: EchoUpstream, **extra: str) -> dict[str, str]:
    base = f"http://127.0.0.1:{echo.port}"
    return {
        "OPENAI_API_URL": f"{base}/v1",
        "OPENAI_API_KEY": OPENAI_KEY,
        "ANTHROPIC_API_URL": f"{base}/anthropic/v1",
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "GROQ_API_URL": f"{base}/groq/openai/v1",
        "GROQ_API_KEY": "gsk",
        "MINIMAX_API_URL": f"{base}/minimax/v1",
        "MINIMAX_API_KEY": "mm",
        **extra,
    }


@pytest.fixture
async def gw(nursery: trio.Nursery, echo: EchoUpstream) -> Gateway:
    return await start_gateway(nursery, provider_env(echo, ENABLE_IMAGES="true"))


def assert_provider_credentials_only(
    headers: dict[str, str], *, bearer: str | None = None, xkey: str | None = None
) -> None:
    assert headers.get("authorization") == (f"Bearer {bearer}" if bearer else None)
    assert headers.get("x-api-key") == xkey
    assert "client-token" not in str(headers) and "client-x-key" not in str(headers)


# --- /v1/responses -------------------------------------------------------------------


async def test_responses_forwarded_byte_for_byte_but_the_model(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = b'{"input": [{"role": "user", "content": "hi", "model": "keep/this"}],\n "model": "openai/gpt-4o" , "store": false}'
    echo.answer = lambda seen: Answer(body=b'{"id":"resp_1","object":"response"}')
    resp = await request(
        gw.port, "POST", "/v1/responses", body, [*CLIENT_AUTH, ("openai-beta", "responses=v1")]
    )
    assert resp.status == 200
    assert orjson.loads(resp.body)["id"] == "resp_1"
    seen = echo.seen[-1]
    assert (seen.method, seen.target) == ("POST", "/v1/responses")
    assert seen.body == body.replace(b'"openai/gpt-4o"', b'"gpt-4o"')
    assert seen.headers["openai-beta"] == "responses=v1"
    assert_provider_credentials_only(seen.headers, bearer=OPENAI_KEY)


async def test_responses_streaming_is_relayed_verbatim(gw: Gateway, echo: EchoUpstream) -> None:
    events = [
        b'event: response.created\ndata: {"type":"response.created"}\n\n',
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi"}\n\n',
        b'event: response.completed\ndata: {"type":"response.completed"}\n\n',
    ]
    echo.answer = lambda seen: Answer(
        headers=[("content-type", "text/event-stream")], chunks=events
    )
    resp = await request(
        gw.port, "POST", "/v1/responses", b'{"model":"openai/gpt-4o","input":"hi","stream":true}'
    )
    assert resp.status == 200
    assert resp.headers[b"content-type"] == b"text/event-stream"
    assert resp.body == b"".join(events)
    assert echo.seen[-1].headers["accept"] == "text/event-stream"


async def test_responses_unsupported_provider_and_missing_model(
    gw: Gateway, echo: EchoUpstream
) -> None:
    resp = await request(
        gw.port, "POST", "/v1/responses", b'{"model":"anthropic/claude","input":"hi"}'
    )
    assert resp.status == 400
    err = orjson.loads(resp.body)["error"]
    assert (
        err["message"]
        == "The Responses API is not supported by this provider yet. Use /v1/chat/completions instead."
    )
    resp = await request(gw.port, "POST", "/v1/responses", b'{"input":"hi"}')
    assert resp.status == 400 and orjson.loads(resp.body)["error"]["param"] == "model"
    assert echo.seen == []


async def test_responses_upstream_error_is_relayed_as_sent(gw: Gateway, echo: EchoUpstream) -> None:
    native = b'{"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}'
    echo.answer = lambda seen: Answer(
        status=429,
        headers=[("content-type", "application/json"), ("retry-after", "3")],
        body=native,
    )
    resp = await request(
        gw.port, "POST", "/v1/responses", b'{"model":"openai/gpt-4o","input":"hi"}'
    )
    assert (resp.status, resp.body, resp.headers[b"retry-after"]) == (429, native, b"3")


async def test_responses_unreachable_upstream(nursery: trio.Nursery) -> None:
    gw = await start_gateway(
        nursery, {"OPENAI_API_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}
    )
    resp = await request(
        gw.port, "POST", "/v1/responses", b'{"model":"openai/gpt-4o","input":"hi"}'
    )
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_unreachable"


# --- /v1/messages --------------------------------------------------------------------


async def test_messages_to_anthropic_with_its_headers(gw: Gateway, echo: EchoUpstream) -> None:
    body = b'{"model":"anthropic/claude-sonnet-4","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'
    resp = await request(
        gw.port,
        "POST",
        "/v1/messages",
        body,
        [*CLIENT_AUTH, ("anthropic-beta", "prompt-caching-2024-07-31")],
    )
    assert resp.status == 200
    seen = echo.seen[-1]
    assert seen.target == "/anthropic/v1/messages"
    assert seen.body == body.replace(b"anthropic/claude", b"claude")
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert_provider_credentials_only(seen.headers, xkey=ANTHROPIC_KEY)
    # A client's own anthropic-version wins over the default.
    await request(gw.port, "POST", "/v1/messages", body, [("anthropic-version", "2099-01-01")])
    assert echo.seen[-1].headers["anthropic-version"] == "2099-01-01"


async def test_messages_refused_for_other_providers(gw: Gateway, echo: EchoUpstream) -> None:
    resp = await request(
        gw.port, "POST", "/v1/messages", b'{"model":"openai/gpt-4o","max_tokens":5,"messages":[]}'
    )
    assert resp.status == 400
    # Anthropic's envelope on its route, with edgegw's code beside its members.
    doc = orjson.loads(resp.body)
    assert doc["type"] == "error"
    assert doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["code"] == "unsupported_provider"
    assert echo.seen == []


async def test_messages_streaming_and_upstream_error(gw: Gateway, echo: EchoUpstream) -> None:
    events = [
        b'event: message_start\ndata: {"type":"message_start"}\n\n',
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ]
    echo.answer = lambda seen: Answer(
        headers=[("content-type", "text/event-stream")], chunks=events
    )
    resp = await request(
        gw.port,
        "POST",
        "/v1/messages",
        b'{"model":"anthropic/claude","stream":true,"max_tokens":5,"messages":[]}',
    )
    assert resp.body == b"".join(events)
    native = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    echo.answer = lambda seen: Answer(status=529, body=native)
    resp = await request(
        gw.port,
        "POST",
        "/v1/messages",
        b'{"model":"anthropic/claude","max_tokens":5,"messages":[]}',
    )
    assert (resp.status, resp.body) == (529, native)


# --- Images --------------------------------------------------------------------------

BOUNDARY = "----edgegwBoundary7MA4YWxkTrZu0gW"
PNG = bytes(range(256)) * 64  # 16 KiB of every byte value, CRLFs included


def multipart(fields: list[tuple[str, bytes, str | None]]) -> bytes:
    out = b""
    for name, value, filename in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n".encode()
        if filename:
            out += b"Content-Type: image/png\r\n"
        out += b"\r\n" + value + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


MULTIPART = [("content-type", f"multipart/form-data; boundary={BOUNDARY}")]


async def test_images_disabled_is_404(nursery: trio.Nursery, echo: EchoUpstream) -> None:
    gw = await start_gateway(nursery, provider_env(echo))
    for path in ("/v1/images/generations", "/v1/images/edits", "/v1/images/variations"):
        resp = await request(gw.port, "POST", path, b'{"prompt":"cat"}')
        assert resp.status == 404
        assert (
            orjson.loads(resp.body)["error"]["message"]
            == "The Images API is not enabled. Set ENABLE_IMAGES=true to enable it."
        )
    assert echo.seen == []


async def test_image_generation(gw: Gateway, echo: EchoUpstream) -> None:
    echo.answer = lambda seen: Answer(body=b'{"created":1,"data":[{"url":"https://x/y.png"}]}')
    body = b'{"model":"openai/gpt-image-1","prompt":"a cat","n":1,"size":"1024x1024"}'
    resp = await request(gw.port, "POST", "/v1/images/generations", body, CLIENT_AUTH)
    assert resp.status == 200 and orjson.loads(resp.body)["data"][0]["url"] == "https://x/y.png"
    assert echo.seen[-1].target == "/v1/images/generations"
    assert echo.seen[-1].body == body.replace(b"openai/gpt-image-1", b"gpt-image-1")
    assert_provider_credentials_only(echo.seen[-1].headers, bearer=OPENAI_KEY)
    # No model: the provider comes from ?provider=.
    resp = await request(
        gw.port, "POST", "/v1/images/generations?provider=openai", b'{"prompt":"a cat"}'
    )
    assert resp.status == 200 and echo.seen[-1].body == b'{"prompt":"a cat"}'


async def test_images_unsupported_provider_and_unknown(gw: Gateway, echo: EchoUpstream) -> None:
    resp = await request(
        gw.port, "POST", "/v1/images/generations", b'{"model":"groq/x","prompt":"a"}'
    )
    assert resp.status == 400
    assert (
        orjson.loads(resp.body)["error"]["message"]
        == "The Images API is not supported by this provider yet."
    )
    resp = await request(gw.port, "POST", "/v1/images/generations", b'{"prompt":"a"}')
    assert resp.status == 400 and orjson.loads(resp.body)["error"]["code"] == "unknown_provider"
    assert echo.seen == []


async def test_image_edit_multipart_byte_for_byte(gw: Gateway, echo: EchoUpstream) -> None:
    fields = [
        ("image", PNG, "cat.png"),
        ("mask", PNG[::-1], "mask.png"),
        ("prompt", b"Add a red wizard hat", None),
        ("model", b"openai/gpt-image-1", None),
        ("n", b"1", None),
    ]
    body = multipart(fields)
    resp = await request(gw.port, "POST", "/v1/images/edits", body, [*MULTIPART, *CLIENT_AUTH])
    assert resp.status == 200
    seen = echo.seen[-1]
    assert seen.target == "/v1/images/edits"
    expected = multipart([*fields[:3], ("model", b"gpt-image-1", None), fields[4]])
    assert seen.body == expected
    assert seen.headers["content-type"] == f"multipart/form-data; boundary={BOUNDARY}"
    assert_provider_credentials_only(seen.headers, bearer=OPENAI_KEY)


async def test_image_variation_multipart_with_query_provider(
    gw: Gateway, echo: EchoUpstream
) -> None:
    body = multipart([("image", PNG, "cat.png"), ("n", b"2", None)])
    resp = await request(gw.port, "POST", "/v1/images/variations?provider=openai", body, MULTIPART)
    assert resp.status == 200
    assert echo.seen[-1].body == body
    resp = await request(
        gw.port, "POST", "/v1/images/variations", body, [("content-type", "application/json")]
    )
    assert resp.status == 415


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        # an image is required, as a file (an `image` text field is not one)
        ("/v1/images/edits", [("prompt", b"a hat", None)], "image"),
        ("/v1/images/edits", [("image", b"not-a-file", None), ("prompt", b"a", None)], "image"),
        ("/v1/images/variations", [("n", b"2", None)], "image"),
        ("/v1/images/variations", [], "image"),
        # edits need a non-empty prompt
        ("/v1/images/edits", [("image", PNG, "cat.png")], "prompt"),
        ("/v1/images/edits", [("image", PNG, "cat.png"), ("prompt", b"", None)], "prompt"),
    ],
)
async def test_image_forms_are_checked_before_forwarding(
    gw: Gateway, echo: EchoUpstream, path: str, fields: list, param: str
) -> None:
    fields = [*fields, ("model", b"openai/gpt-image-1", None)]
    resp = await request(gw.port, "POST", path, multipart(fields), MULTIPART)
    assert resp.status == 400
    err = orjson.loads(resp.body)["error"]
    assert (err["code"], err["param"], err["type"]) == (
        "invalid_request",
        param,
        "invalid_request_error",
    )
    assert echo.seen == []


async def test_image_array_field_name_is_an_image(gw: Gateway, echo: EchoUpstream) -> None:
    body = multipart([("image[]", PNG, "a.png"), ("prompt", b"x", None)])
    resp = await request(gw.port, "POST", "/v1/images/edits?provider=openai", body, MULTIPART)
    assert resp.status == 200
    assert echo.seen[-1].body == body


async def test_image_upstream_failure(gw: Gateway, echo: EchoUpstream) -> None:
    echo.answer = lambda seen: Answer(
        status=500,
        body=b'{"error":{"message":"boom","type":"server_error","param":null,"code":null}}',
    )
    resp = await request(
        gw.port, "POST", "/v1/images/generations", b'{"model":"openai/dall-e-3","prompt":"a"}'
    )
    assert resp.status == 500
    assert orjson.loads(resp.body)["error"]["message"] == "boom"


# --- /proxy --------------------------------------------------------------------------


async def test_proxy_get_with_query_and_response_headers(gw: Gateway, echo: EchoUpstream) -> None:
    echo.answer = lambda seen: Answer(
        status=203,
        headers=[("content-type", "application/json"), ("x-request-id", "abc")],
        body=b'{"data":[]}',
    )
    resp = await request(gw.port, "GET", "/proxy/openai/models?limit=5&after=x", b"", CLIENT_AUTH)
    assert (resp.status, resp.body) == (203, b'{"data":[]}')
    # The provider's request id is relayed beside the gateway's own.
    assert resp.headers[b"x-upstream-request-id"] == b"abc"
    assert resp.headers[b"x-request-id"] != b"abc"
    seen = echo.seen[-1]
    assert (seen.method, seen.target) == ("GET", "/v1/models?limit=5&after=x")
    assert_provider_credentials_only(seen.headers, bearer=OPENAI_KEY)


async def test_proxy_base_path_is_not_doubled(gw: Gateway, echo: EchoUpstream) -> None:
    await request(gw.port, "POST", "/proxy/openai/v1/chat/completions", b"{}")
    assert echo.seen[-1].target == "/v1/chat/completions"
    await request(gw.port, "POST", "/proxy/openai/chat/completions", b"{}")
    assert echo.seen[-1].target == "/v1/chat/completions"
    await request(gw.port, "GET", "/proxy/anthropic/models")
    assert echo.seen[-1].target == "/anthropic/v1/models"
    assert echo.seen[-1].headers["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_proxy_multipart_and_methods_byte_for_byte(
    gw: Gateway, echo: EchoUpstream, method: str
) -> None:
    body = multipart([("file", PNG * 8, "big.png"), ("purpose", b"fine-tune", None)])
    resp = await request(
        gw.port,
        method,
        "/proxy/openai/files",
        body,
        [*MULTIPART, *CLIENT_AUTH, ("x-custom", "kept")],
    )
    assert resp.status == 200
    seen = echo.seen[-1]
    assert (seen.method, seen.target, seen.body) == (method, "/v1/files", body)
    assert seen.headers["content-type"] == f"multipart/form-data; boundary={BOUNDARY}"
    assert seen.headers["x-custom"] == "kept"
    assert_provider_credentials_only(seen.headers, bearer=OPENAI_KEY)


async def test_proxy_streams_the_response(gw: Gateway, echo: EchoUpstream) -> None:
    pieces = [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    echo.answer = lambda seen: Answer(
        headers=[("content-type", "text/event-stream")], chunks=pieces, gap_s=0.05
    )
    resp = await request(gw.port, "POST", "/proxy/openai/chat/completions", b'{"stream":true}')
    assert resp.body == b"".join(pieces)
    assert len(resp.chunks) >= 3  # relayed piece by piece, not buffered into one


@pytest.mark.parametrize(
    "path",
    [
        "/proxy/openai/../secret",
        "/proxy/openai/a/../../x",
        "/proxy/openai/%2e%2e/x",
        "/proxy/openai/a%2fb",
        "/proxy/openai/a%2Fb",
        "/proxy/openai//evil.example/x",
        "/proxy/openai/http://evil.example/x",
        "/proxy/openai/a\\b",
    ],
)
async def test_proxy_path_cannot_leave_the_base(gw: Gateway, echo: EchoUpstream, path: str) -> None:
    resp = await request(gw.port, "GET", path)
    assert resp.status in (400, 404)
    assert echo.seen == []


async def test_proxy_unknown_and_unconfigured_provider(gw: Gateway, echo: EchoUpstream) -> None:
    resp = await request(gw.port, "GET", "/proxy/nope/models")
    assert resp.status == 400 and orjson.loads(resp.body)["error"]["code"] == "unknown_provider"
    resp = await request(gw.port, "GET", "/proxy/mistral/models")
    assert (
        resp.status == 400 and orjson.loads(resp.body)["error"]["code"] == "provider_not_configured"
    )
    resp = await request(gw.port, "HEAD", "/proxy/openai/models")
    assert resp.status == 405
    assert echo.seen == []


async def test_proxy_upstream_failure(nursery: trio.Nursery) -> None:
    gw = await start_gateway(
        nursery, {"OPENAI_API_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}
    )
    resp = await request(gw.port, "GET", "/proxy/openai/models")
    assert resp.status == 502


# --- vision, allow/deny, quirks ------------------------------------------------------

IMAGE_CHAT = orjson.dumps(
    {
        "model": "openai/gpt-4o",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                ],
            }
        ],
    }
)


async def test_vision_disabled_by_default(nursery: trio.Nursery, mock: MockUpstream) -> None:
    gw = await start_gateway(nursery, upstream_env(mock))
    resp = await request(gw.port, "POST", "/v1/chat/completions", IMAGE_CHAT)
    assert resp.status == 400
    err = orjson.loads(resp.body)["error"]
    assert (err["code"], err["param"]) == ("vision_disabled", "messages")
    assert mock.requests == []


async def test_vision_enabled_forwards_image_parts(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, ENABLE_VISION="true"))
    resp = await request(gw.port, "POST", "/v1/chat/completions", IMAGE_CHAT)
    assert resp.status == 200
    sent = orjson.loads(mock.requests[-1].body)
    assert sent["messages"] == orjson.loads(IMAGE_CHAT)["messages"]


async def test_allowed_and_disallowed_models(nursery: trio.Nursery, echo: EchoUpstream) -> None:
    chat = b'{"model":"openai/%s","messages":[{"role":"user","content":"x"}]}'
    allow = await start_gateway(
        nursery, provider_env(echo, ALLOWED_MODELS="openai/gpt-a, GPT-B", DISALLOWED_MODELS="gpt-a")
    )
    assert (
        await request(allow.port, "POST", "/v1/chat/completions", chat % b"gpt-a")
    ).status == 200
    assert (
        await request(allow.port, "POST", "/v1/chat/completions", chat % b"gpt-b")
    ).status == 200
    denied = await request(allow.port, "POST", "/v1/chat/completions", chat % b"gpt-c")
    assert denied.status == 403
    assert (
        orjson.loads(denied.body)["error"]["message"]
        == "Model not allowed. Please check the list of allowed models."
    )
    deny = await start_gateway(nursery, provider_env(echo, DISALLOWED_MODELS="openai/gpt-a"))
    denied = await request(deny.port, "POST", "/v1/chat/completions", chat % b"gpt-a")
    assert denied.status == 403
    assert (
        orjson.loads(denied.body)["error"]["message"]
        == "Model is disallowed. Please use a different model."
    )
    resp = await request(
        deny.port, "POST", "/v1/responses", b'{"model":"openai/gpt-a","input":"x"}'
    )
    assert resp.status == 403
    assert (await request(deny.port, "POST", "/v1/chat/completions", chat % b"gpt-b")).status == 200


async def test_minimax_gets_max_completion_tokens(gw: Gateway, echo: EchoUpstream) -> None:
    echo.answer = lambda seen: Answer(body=b'{"choices":[]}')
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        b'{"model":"minimax/MiniMax-M2","messages":[{"role":"user","content":"x"}],"max_tokens":7}',
    )
    assert resp.status == 200
    sent = orjson.loads(echo.seen[-1].body)
    assert sent["max_completion_tokens"] == 7 and "max_tokens" not in sent
    assert echo.seen[-1].target == "/minimax/v1/chat/completions"


async def test_cohere_gets_no_stream_options(nursery: trio.Nursery, echo: EchoUpstream) -> None:
    gw = await start_gateway(
        nursery, {"COHERE_API_URL": f"http://127.0.0.1:{echo.port}/cohere", "COHERE_API_KEY": "co"}
    )
    echo.answer = lambda seen: Answer(
        headers=[("content-type", "text/event-stream")], chunks=[b"data: [DONE]\n\n"]
    )
    body = b'{"model":"cohere/command-a","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}'
    resp = await request(gw.port, "POST", "/v1/chat/completions", body)
    assert sse_data(resp.body) == [b"[DONE]"]
    seen = echo.seen[-1]
    assert seen.target == "/cohere/compatibility/v1/chat/completions"
    assert "stream_options" not in orjson.loads(seen.body)


# --- every provider: chat path and credentials ----------------------------------------

EXPECTED_CHAT = {
    # id: (path under the provider's base URL, auth header, expected value, extra header)
    "openai": ("/chat/completions", "authorization", "Bearer key-openai", None),
    "anthropic": (
        "/chat/completions",
        "x-api-key",
        "key-anthropic",
        ("anthropic-version", "2023-06-01"),
    ),
    "cohere": ("/compatibility/v1/chat/completions", "authorization", "Bearer key-cohere", None),
    "groq": ("/chat/completions", "authorization", "Bearer key-groq", None),
    "cloudflare": ("/v1/chat/completions", "authorization", "Bearer key-cloudflare", None),
    "ollama": ("/chat/completions", "authorization", None, None),
    "ollama_cloud": ("/chat/completions", "authorization", "Bearer key-ollama_cloud", None),
    "google": ("/chat/completions", "authorization", "Bearer key-google", None),
    "deepseek": ("/chat/completions", "authorization", "Bearer key-deepseek", None),
    "mistral": ("/chat/completions", "authorization", "Bearer key-mistral", None),
    "minimax": ("/chat/completions", "authorization", "Bearer key-minimax", None),
    "moonshot": ("/chat/completions", "authorization", "Bearer key-moonshot", None),
    "nvidia": ("/chat/completions", "authorization", "Bearer key-nvidia", None),
    "llamacpp": ("/chat/completions", "authorization", None, None),
    "zai": ("/chat/completions", "authorization", "Bearer key-zai", None),
}


@pytest.mark.parametrize("pid", sorted(EXPECTED_CHAT))
async def test_every_provider_gets_its_path_and_credentials(
    nursery: trio.Nursery, echo: EchoUpstream, pid: str
) -> None:
    env = {f"{pid.upper()}_API_URL": f"http://127.0.0.1:{echo.port}/{pid}"}
    if pid not in ("ollama", "llamacpp"):
        env[f"{pid.upper()}_API_KEY"] = f"key-{pid}"
    gw = await start_gateway(nursery, env)
    model = "meta/llama-3.1-8b-instruct" if pid == "nvidia" else "some-model"
    body = orjson.dumps({"model": f"{pid}/{model}", "messages": [{"role": "user", "content": "x"}]})
    resp = await request(gw.port, "POST", "/v1/chat/completions", body, CLIENT_AUTH)
    assert resp.status == 200
    seen = echo.seen[-1]
    path, header, value, extra = EXPECTED_CHAT[pid]
    assert seen.target == f"/{pid}{path}"
    assert seen.headers.get(header) == value
    assert orjson.loads(seen.body)["model"] == model
    if extra:
        assert seen.headers[extra[0]] == extra[1]
    assert "client-token" not in str(seen.headers) and "client-x-key" not in str(seen.headers)
