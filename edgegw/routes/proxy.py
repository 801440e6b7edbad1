"""GET/POST/PUT/DELETE/PATCH /proxy/{provider}/{path}: raw passthrough under the provider's
base URL, any body and content type, streamed both ways. The caller's credentials and the
hop-by-hop headers are removed, the provider's credentials added; a path that could leave
the provider's base URL is refused.

With GUARDRAILS_ENABLED, a POST to a generation API (edgegw.guardrails.apis.proxied_api:
chat/completions, completions, responses, messages, images/..., Cohere's chat, Workers
AI's run) is judged as the native routes are (edgegw.guardrails.route): its body is read
whole (under SERVER_MAX_REQUEST_BODY_SIZE) for `pre_call`, the answer asked for
uncompressed, a 2xx answer judged (a stream as it passes, anything else whole), errors in
the API's shape (Anthropic's for messages); the upstream's status and headers relayed."""

from __future__ import annotations

import re

import trio

from edgegw._core import RequestError, parse_passthrough
from edgegw.asgi import Call
from edgegw.errors import fail, payload_too_large, upstream_timeout
from edgegw.exchange import UpstreamRequest
from edgegw.gateway import Gateway
from edgegw.guardrails.apis import GuardedApi, proxied_api
from edgegw.guardrails.route import guard_request
from edgegw.octets import COLON
from edgegw.providers import Target
from edgegw.proxy_relay import relay_judged, relay_raw
from edgegw.routes.native import form_fields, multipart_boundary, multipart_parts

PROXY_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
# Never forwarded: the caller's credentials, and hop-by-hop or framing headers that
# edgegw sets itself.
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
        # Set by edgegw: the request's own id and trace context.
        b"x-request-id",
        b"traceparent",
        b"tracestate",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"expect",
        b"user-agent",
    }
)
# A proxied path: printable, no backslash, no encoded slash or dot tricks (checked on the
# raw path before percent-decoding).
_BAD_RAW_PATH = re.compile(rb"%2f|%5c|%2e|%00|\\", re.IGNORECASE)


def _proxy_target(call: Call) -> tuple[str, bytes]:
    """(provider id, upstream path relative to the provider's base) from /proxy/{id}/{path},
    refusing anything that could leave the provider's base URL."""
    raw = call.scope.get("raw_path") or call.path.encode()
    raw = raw.split(b"?", 1)[0]
    parts = raw.split(b"/", 3)  # b"", b"proxy", id, rest
    if len(parts) < 4 or not parts[2] or not parts[3]:
        raise fail("not_found", "use /proxy/{provider}/{path}")
    pid = parts[2].decode("latin-1").lower()
    rest = parts[3]
    segments = rest.split(b"/")
    if (
        _BAD_RAW_PATH.search(rest)
        or any(seg in (b"..", b".") for seg in segments)
        or rest.find(b"//") != -1
        or rest.startswith(b"/")
        or COLON in segments[0]
        or not rest.isascii()
        or any(b <= 0x20 or b == 0x7F for b in rest)
    ):
        raise fail(
            "invalid_path",
            "the proxied path must stay under the provider's base URL",
            param="path",
        )
    return pid, b"/" + rest


async def proxy(gw: Gateway, call: Call) -> None:
    pid, rest = _proxy_target(call)
    target = gw.resolver.named(pid, param="provider")
    base = target.origin.base_path.encode()
    # `/proxy/openai/v1/chat/completions` and `/proxy/openai/chat/completions` both reach
    # https://api.openai.com/v1/chat/completions: a path that already carries the base
    # path is not prefixed twice.
    path = rest if base and (rest == base or rest.startswith(base + b"/")) else base + rest
    query = call.query
    upstream_target = path + (b"?" + query if query else b"")
    client = [(k, v) for k, v in call.headers if k not in PROXY_DROPPED_REQUEST_HEADERS]
    sent = {k for k, _ in client}
    headers = [*client, *((k, v) for k, v in target.auth if k not in sent)]
    api = proxied_api(call.method, path[len(base) :].decode("latin-1"))
    if api is not None and gw.guardrails is not None:
        await _judged(gw, call, target, api, upstream_target, headers)
        return
    headers.append((b"x-request-id", call.request_id.encode()))
    span = on_connect = None
    if call.trace is not None:
        span, context, on_connect = call.trace.start_client(
            f"{call.method} {path.decode('latin-1')}", target.origin.host, target.origin.port
        )
        headers += context
    else:
        headers += call.trace_context
    limit = gw.settings.max_body_bytes
    content_length = call.content_length(limit)
    received = 0

    async def next_chunk() -> bytes:
        nonlocal received
        chunk = await call.next_body_chunk()
        received += len(chunk)
        if received > limit:
            raise payload_too_large(limit)
        return chunk

    if call.method in ("GET", "DELETE") and content_length is None:
        content_length = 0
    try:
        with trio.fail_after(gw.settings.first_byte_timeout_s):
            resp = await gw.pool.send_streaming(
                target.origin,
                call.method.encode(),
                upstream_target,
                headers,
                next_chunk,
                content_length,
                on_connect,
            )
    except BaseException as e:
        if span is not None and call.trace is not None:
            call.trace.fail(span, e)
            span.end()
        if isinstance(e, trio.TooSlowError):
            raise upstream_timeout() from None
        raise
    if span is not None:
        span.set_attribute("http.response.status_code", resp.status)
        span.end()
    await relay_raw(gw.exchanges, call, resp, target.secret)


async def _judged(
    gw: Gateway,
    call: Call,
    target: Target,
    api: GuardedApi,
    upstream_target: bytes,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """A proxied generation request through the guardrails, as the module says."""
    call.errors = api.shape
    body = await call.read_body(gw.settings.max_body_bytes)
    boundary = multipart_boundary(call.header(b"content-type") or b"")
    form = None
    if boundary is not None:
        form = form_fields(multipart_parts(body, boundary))
        model = next(
            (body[a:b].decode("utf-8", "replace") for n, a, b in form if n == "model"), None
        )
    else:
        try:
            model = parse_passthrough(body).model
        except RequestError:  # not a JSON object: the provider will say; the policy reads it
            model = None
    guard = guard_request(gw.guardrails, call, api, model)
    assert guard is not None
    body, added = await guard.pre_call(body, form)
    # Compressed, the answer could not be read as it passes.
    headers = [(k, v) for k, v in headers if k != b"accept-encoding"]
    headers.append((b"accept-encoding", b"identity"))
    up = UpstreamRequest(
        origin=target.origin,
        target=upstream_target,
        headers=headers,
        body=body,
        method=call.method.encode(),
        secret=target.secret,
    )
    await relay_judged(
        gw.exchanges,
        call,
        up,
        check=guard.stream(),
        inspect=guard.post_call,
        response_headers=added,
    )
