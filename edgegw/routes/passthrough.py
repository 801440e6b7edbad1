"""Endpoints that forward a provider's own API: /v1/responses, /v1/messages, the Images
API and the raw /proxy/{provider}/{path}.

Bodies go upstream as the client sent them; JSON bodies only have their `model` prefix
removed (the Rust core rewrites that one value and keeps every other byte). The caller's
credentials never go upstream: the provider's are added. A provider's own error answer
on these endpoints is relayed as it came (status, content type, body), because clients
of these APIs parse the provider's shapes; errors raised by edgegw itself use the
gateway's envelope, like everywhere else.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import trio

from edgegw._core import parse_passthrough
from edgegw.asgi import ClientGone, Receive, Send, read_body
from edgegw.errors import GatewayError
from edgegw.providers import PROVIDERS
from edgegw.streaming import Exchange, forward, relay_sse
from edgegw.upstream import Response

if TYPE_CHECKING:
    from edgegw.app import App, Target

log = logging.getLogger("edgegw.passthrough")

# Which providers implement which native API (inference-gateway's registry).
RESPONSES_PROVIDERS = frozenset({"openai"})
MESSAGES_PROVIDERS = frozenset({"anthropic"})
IMAGES_PROVIDERS = frozenset({"openai"})

RESPONSES_UNSUPPORTED = (
    "The Responses API is not supported by this provider yet. Use /v1/chat/completions instead."
)
MESSAGES_UNSUPPORTED = "The Messages API is only supported by the anthropic provider."
IMAGES_UNSUPPORTED = "The Images API is not supported by this provider yet."
IMAGES_DISABLED = "The Images API is not enabled. Set ENABLE_IMAGES=true to enable it."

# Client headers that carry API options, forwarded on the native-API endpoints.
FORWARDED_CLIENT_HEADERS = frozenset(
    {
        b"openai-beta",
        b"openai-organization",
        b"openai-project",
        b"idempotency-key",
        b"anthropic-beta",
        b"anthropic-version",
    }
)
# Never forwarded by /proxy: the caller's credentials, and hop-by-hop or framing headers
# that edgegw sets itself.
PROXY_DROPPED_REQUEST_HEADERS = frozenset(
    {
        b"authorization",
        b"proxy-authorization",
        b"x-api-key",
        b"api-key",
        b"x-goog-api-key",
        b"cookie",
        b"host",
        b"connection",
        b"keep-alive",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"expect",
        b"user-agent",
    }
)
HOP_BY_HOP_RESPONSE_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authenticate",
    }
)
PROXY_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
# A proxied path: printable, no backslash, no encoded slash or dot tricks (checked on the
# raw path before percent-decoding).
_BAD_RAW_PATH = re.compile(rb"%2f|%5c|%2e|%00|\\", re.IGNORECASE)


def _query_provider(scope: dict[str, Any]) -> str | None:
    query = scope.get("query_string", b"")
    if b"provider=" not in query:
        return None
    values = parse_qs(query.decode("latin-1")).get("provider")
    return values[0].strip().lower() if values else None


def _resolve(
    app: App, model: str | None, scope: dict[str, Any], supported: frozenset[str], unsupported: str
) -> tuple[Target, str | None]:
    """Provider from ?provider= or the model prefix; the model without its prefix."""
    pid = _query_provider(scope)
    if model is not None:
        prefix, sep, rest = model.partition("/")
        if sep and prefix.lower() in PROVIDERS and (pid is None or pid == prefix.lower()):
            pid, model = prefix.lower(), rest
    if pid is None or pid not in PROVIDERS:
        raise GatewayError(
            400,
            "unknown_provider",
            "Unable to determine provider for model. Please specify a provider using the "
            "?provider= query parameter or use the provider/model format (e.g., openai/gpt-4).",
            param="model",
        )
    if pid not in supported:
        raise GatewayError(400, "unsupported_provider", unsupported, param="model")
    _check_allowed(app, pid, model)
    return app.resolve_target(pid), model


def _check_allowed(app: App, pid: str, model: str | None) -> None:
    if model is not None:
        app.check_model_allowed(pid, model)


def _client_headers(scope: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in scope["headers"] if k in FORWARDED_CLIENT_HEADERS]


def _native_headers(
    target: Target, scope: dict[str, Any], *, stream: bool
) -> list[tuple[bytes, bytes]]:
    client = _client_headers(scope)
    sent = {k for k, _ in client}
    # The provider's fixed headers (anthropic-version) unless the client chose its own.
    provider = [(k, v) for k, v in target.auth if k not in sent]
    accept = b"text/event-stream" if stream else b"application/json"
    return [(b"content-type", b"application/json"), (b"accept", accept), *provider, *client]


async def _native_json(
    app: App,
    scope: dict[str, Any],
    receive: Receive,
    send: Send,
    *,
    path: str,
    supported: frozenset[str],
    unsupported: str,
    model_required: bool,
) -> None:
    body = await read_body(scope, receive, app.settings.max_body_bytes)
    req = parse_passthrough(body)
    if model_required and req.model is None:
        raise GatewayError(400, "invalid_request", "field 'model' is required", param="model")
    target, model = _resolve(app, req.model, scope, supported, unsupported)
    ex = Exchange(
        origin=target.origin,
        target=(target.origin.base_path + path).encode(),
        headers=_native_headers(target, scope, stream=req.stream),
        body=req.with_model(model) if model is not None else body,
    )
    if req.stream:
        await relay_sse(app.settings, app.watch, app.pool, receive, send, ex, raw_errors=True)
    else:
        await forward(app.settings, app.watch, app.pool, receive, send, ex, raw_errors=True)


async def responses(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await _native_json(
        app,
        scope,
        receive,
        send,
        path="/responses",
        supported=RESPONSES_PROVIDERS,
        unsupported=RESPONSES_UNSUPPORTED,
        model_required=True,
    )


async def messages(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await _native_json(
        app,
        scope,
        receive,
        send,
        path="/messages",
        supported=MESSAGES_PROVIDERS,
        unsupported=MESSAGES_UNSUPPORTED,
        model_required=True,
    )


async def images_generations(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if not app.settings.enable_images:
        raise GatewayError(404, "images_disabled", IMAGES_DISABLED)
    await _native_json(
        app,
        scope,
        receive,
        send,
        path="/images/generations",
        supported=IMAGES_PROVIDERS,
        unsupported=IMAGES_UNSUPPORTED,
        model_required=False,
    )


async def images_edits(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await _images_multipart(app, scope, receive, send, "/images/edits")


async def images_variations(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await _images_multipart(app, scope, receive, send, "/images/variations")


async def _images_multipart(
    app: App, scope: dict[str, Any], receive: Receive, send: Send, path: str
) -> None:
    """Multipart image edits/variations. The body is read under the body cap (never more
    than that in memory), the `model` form field's provider prefix is removed in place, and
    every other byte (files included) goes upstream as sent."""
    if not app.settings.enable_images:
        raise GatewayError(404, "images_disabled", IMAGES_DISABLED)
    ctype = _header(scope, b"content-type") or b""
    m = re.match(rb"multipart/form-data\s*;.*boundary=\"?([^\";]+)\"?", ctype, re.IGNORECASE)
    if m is None:
        raise GatewayError(
            415, "unsupported_media_type", "expected multipart/form-data with a boundary"
        )
    body = await read_body(scope, receive, app.settings.max_body_bytes)
    model, span = _multipart_field(body, m.group(1), b"model")
    target, bare = _resolve(app, model, scope, IMAGES_PROVIDERS, IMAGES_UNSUPPORTED)
    if span is not None and bare is not None and bare != model:
        body = body[: span[0]] + bare.encode() + body[span[1] :]
    ex = Exchange(
        origin=target.origin,
        target=(target.origin.base_path + path).encode(),
        headers=[
            (b"content-type", ctype),
            (b"accept", b"application/json"),
            *target.auth,
            *_client_headers(scope),
        ],
        body=body,
    )
    await forward(app.settings, app.watch, app.pool, receive, send, ex, raw_errors=True)


def _multipart_field(
    body: bytes, boundary: bytes, name: bytes
) -> tuple[str | None, tuple[int, int] | None]:
    """The value of a small text field of a multipart body, and its byte span."""
    delimiter = b"--" + boundary
    pos = body.find(delimiter)
    while pos >= 0:
        head_start = pos + len(delimiter) + 2
        head_end = body.find(b"\r\n\r\n", head_start)
        if head_end < 0:
            break
        head = body[head_start:head_end]
        nxt = body.find(b"\r\n" + delimiter, head_end)
        if nxt < 0:
            break
        if re.search(
            rb'content-disposition:[^\r\n]*;\s*name="?' + re.escape(name) + rb'"?(;|\s|$)',
            head,
            re.IGNORECASE | re.MULTILINE,
        ):
            start, end = head_end + 4, nxt
            try:
                return body[start:end].decode("utf-8"), (start, end)
            except UnicodeDecodeError:
                raise GatewayError(
                    400, "invalid_request", "the 'model' field is not UTF-8", param="model"
                ) from None
        pos = nxt + 2
    return None, None


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


def _proxy_target(scope: dict[str, Any]) -> tuple[str, bytes]:
    """(provider id, upstream path relative to the provider's base) from /proxy/{id}/{path},
    refusing anything that could leave the provider's base URL."""
    raw = scope.get("raw_path") or scope["path"].encode()
    raw = raw.split(b"?", 1)[0]
    parts = raw.split(b"/", 3)  # b"", b"proxy", id, rest
    if len(parts) < 4 or not parts[2] or not parts[3]:
        raise GatewayError(404, "not_found", "use /proxy/{provider}/{path}")
    pid = parts[2].decode("latin-1").lower()
    rest = parts[3]
    segments = rest.split(b"/")
    if (
        _BAD_RAW_PATH.search(rest)
        or any(seg in (b"..", b".") for seg in segments)
        or b"//" in rest
        or rest.startswith(b"/")
        or b":" in segments[0]
        or not rest.isascii()
        or any(b <= 0x20 or b == 0x7F for b in rest)
    ):
        raise GatewayError(
            400,
            "invalid_path",
            "the proxied path must stay under the provider's base URL",
            param="path",
        )
    return pid, b"/" + rest


async def proxy(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """/proxy/{provider}/{path}: any body and content type, streamed both ways."""
    pid, rest = _proxy_target(scope)
    if pid not in PROVIDERS:
        raise GatewayError(
            400,
            "unknown_provider",
            f"unknown provider; use one of {', '.join(PROVIDERS)}",
            param="provider",
        )
    target = app.resolve_target(pid)
    base = target.origin.base_path.encode()
    # `/proxy/openai/v1/chat/completions` and `/proxy/openai/chat/completions` both reach
    # https://api.openai.com/v1/chat/completions: a path that already carries the base
    # path is not prefixed twice.
    path = rest if base and (rest == base or rest.startswith(base + b"/")) else base + rest
    query = scope.get("query_string", b"")
    upstream_target = path + (b"?" + query if query else b"")
    client = [(k, v) for k, v in scope["headers"] if k not in PROXY_DROPPED_REQUEST_HEADERS]
    sent = {k for k, _ in client}
    headers = [*client, *((k, v) for k, v in target.auth if k not in sent)]
    length_header = _header(scope, b"content-length")
    try:
        content_length = int(length_header) if length_header is not None else None
    except ValueError:
        raise GatewayError(400, "invalid_request", "invalid Content-Length") from None
    limit = app.settings.max_body_bytes
    if content_length is not None and content_length > limit:
        raise GatewayError(413, "payload_too_large", f"request body exceeds {limit} bytes")
    received = 0
    more = True

    async def next_chunk() -> bytes:
        nonlocal received, more
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            more = message.get("more_body", False)
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:
                raise GatewayError(413, "payload_too_large", f"request body exceeds {limit} bytes")
            if chunk:
                return chunk
        return b""

    if scope["method"] in ("GET", "DELETE") and content_length is None:
        content_length = 0
    try:
        with trio.fail_after(app.settings.first_byte_timeout_s):
            resp = await app.pool.send_streaming(
                target.origin,
                scope["method"].encode(),
                upstream_target,
                headers,
                next_chunk,
                content_length,
            )
    except trio.TooSlowError:
        raise GatewayError(504, "upstream_timeout", "the upstream did not answer in time") from None
    await _relay_raw(app, receive, send, resp)


async def _relay_raw(app: App, receive: Receive, send: Send, resp: Response) -> None:
    """Status, headers and body as the upstream sends them, piece by piece. A failure after
    the head ends the response without its terminator, so the client sees the truncation."""
    w = app.watch.register(receive)
    complete = False
    try:
        with w.scope:
            try:
                headers = [(k, v) for k, v in resp.headers if k not in HOP_BY_HOP_RESPONSE_HEADERS]
                await send(
                    {"type": "http.response.start", "status": resp.status, "headers": headers}
                )
                while True:
                    with trio.fail_after(app.settings.idle_timeout_s):
                        chunk = await resp.receive_chunk()
                    if not chunk:
                        break
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                complete = True
            except (GatewayError, trio.TooSlowError) as e:
                log.warning(
                    "proxied response cut short: %s", getattr(e, "code", "upstream_timeout")
                )
            finally:
                await resp.aclose()
    finally:
        app.watch.release(w)
    if complete and not w.client_gone:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
