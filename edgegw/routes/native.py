"""The providers' own APIs, forwarded: /v1/responses (openai), /v1/messages and
/v1/messages/count_tokens (anthropic) and the Images API (openai, with ENABLE_IMAGES=true).
With ENABLE_API_TRANSLATION=true, a Responses or Messages request for any other model is
served by edgegw.routes.translated instead (translated to and from chat).

Bodies go upstream as the client sent them; JSON bodies only have their `model` prefix
removed (the Rust core rewrites that one value and keeps every other byte). With
GUARDRAILS_ENABLED every one of them passes `pre_call` once read and checked (a multipart
form as its text fields), a whole 2xx answer `post_call`, a stream `post_call` as it is
relayed (edgegw.guardrails.route); a block is answered in the API's own shape. The caller's
credentials never go upstream: the provider's are added. A provider's own error answer
on these endpoints is relayed as it came (status, content type, body), because clients
of these APIs parse the provider's shapes; errors raised by edgegw itself are written in
the API's shape (edgegw.errors.ErrorShape: Anthropic's for Messages).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgegw._core import PassthroughRequest, parse_passthrough
from edgegw.answer import Outcome
from edgegw.asgi import Call
from edgegw.errors import Headers, fail
from edgegw.exchange import UpstreamRequest
from edgegw.gateway import Gateway
from edgegw.guardrails import apis
from edgegw.guardrails.apis import GuardedApi
from edgegw.guardrails.route import FormField, RequestGuard, guard_request
from edgegw.providers import Target
from edgegw.resolve import (
    IMAGES_EDITS,
    IMAGES_GENERATIONS,
    IMAGES_VARIATIONS,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
    NativeApi,
    Remote,
)
from edgegw.routes import translated
from edgegw.routes.record import Recording
from edgegw.translate import messages as messages_api
from edgegw.translate import responses as responses_api
from edgegw.translate.messages_answer import MessagesAnswers
from edgegw.translate.responses_answer import ResponsesAnswers

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


def _client_headers(call: Call) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in call.headers if k in FORWARDED_CLIENT_HEADERS]


def _native_headers(target: Target, call: Call, *, stream: bool) -> list[tuple[bytes, bytes]]:
    client = _client_headers(call)
    sent = {k for k, _ in client}
    # The provider's fixed headers (anthropic-version) unless the client chose its own.
    provider = [(k, v) for k, v in target.auth if k not in sent]
    accept = b"text/event-stream" if stream else b"application/json"
    return [
        (b"content-type", b"application/json"),
        (b"accept", accept),
        (b"accept-encoding", b"identity"),
        *provider,
        *client,
    ]


async def _read_json(
    gw: Gateway, call: Call, *, model_required: bool
) -> tuple[PassthroughRequest, bytes]:
    body = await call.read_body(gw.settings.max_body_bytes)
    req = parse_passthrough(body)
    if model_required and req.model is None:
        raise fail("invalid_request", "field 'model' is required", param="model")
    return req, body


async def _judged(
    gw: Gateway, call: Call, api: GuardedApi, req: PassthroughRequest, body: bytes
) -> tuple[PassthroughRequest, bytes, RequestGuard | None, Headers]:
    """A JSON body read and checked, through the guardrails' pre_call: the request and body
    to forward (redacted: parsed again), its guard and the headers the decision adds."""
    guard = guard_request(gw.guardrails, call, api, req.model)
    if guard is None:
        return req, body, None, ()
    forwarded, headers = await guard.pre_call(body)
    if forwarded is not body:
        req = parse_passthrough(forwarded)
    return req, forwarded, guard, headers


async def _native_json(
    gw: Gateway,
    call: Call,
    api: NativeApi,
    remote: Remote,
    req: PassthroughRequest,
    body: bytes,
    guard: RequestGuard | None,
    headers: Headers,
) -> Outcome:
    """`guard` judges the answer (a stream as it passes); `headers`: added to the answer."""
    target = remote.target
    up = UpstreamRequest(
        origin=target.origin,
        target=target.path(api.path),
        headers=_native_headers(target, call, stream=req.stream),
        body=req.with_model(remote.model) if remote.model is not None else body,
        secret=target.secret,
        # A generation is sent again on any retried failure; an image only when refused.
        retry="refused" if api.path.startswith("/images") else "all",
    )
    if req.stream:
        check = None if guard is None else guard.stream()
        return await gw.exchanges.relay_sse(
            call, up, raw_errors=True, response_headers=headers, check=check
        )
    inspect = None if guard is None else guard.post_call
    return await gw.exchanges.forward(
        call, up, raw_errors=True, response_headers=headers, inspect=inspect
    )


async def _observed(
    gw: Gateway,
    call: Call,
    api: NativeApi,
    guarded: GuardedApi,
    translation: tuple[translated.ChatRequest, translated.Answers],
) -> None:
    """A generation API's request, recorded as chat's are (edgegw.routes.record): provider,
    model, status, the usage and finish tapped from the API's own answer, TTFT, spans. A
    target without the API is served through `translation` (edgegw.routes.translated)."""
    req, body = await _read_json(gw, call, model_required=True)
    assert req.model is not None
    if translated.translates(gw, call, req.model, api):
        await translated.serve(gw, call, body, *translation)
        return
    with Recording(gw, call, req.model, "chat", req.stream) as rec:
        req, body, guard, headers = await _judged(gw, call, guarded, req, body)
        remote = gw.resolver.native(req.model, call.provider_param(), api)
        rec.provider = remote.target.provider.id
        # No max_tokens is read from a native body: the default bounds the estimate.
        await rec.admit(f"{rec.provider}/{remote.model}", len(body), gw.settings.default_max_tokens)
        rec.outcome = await _native_json(gw, call, api, remote, req, body, guard, headers)


async def responses(gw: Gateway, call: Call) -> None:
    await _observed(
        gw,
        call,
        RESPONSES,
        apis.RESPONSES,
        (responses_api.chat_request, ResponsesAnswers.of),
    )


async def messages(gw: Gateway, call: Call) -> None:
    await _observed(
        gw,
        call,
        MESSAGES,
        apis.MESSAGES,
        (messages_api.chat_request, MessagesAnswers.of),
    )


async def count_tokens(gw: Gateway, call: Call) -> None:
    """/v1/messages/count_tokens: Anthropic's own for its models, else (with translation
    on) counted from a local model's tokenizer (edgegw.routes.translated)."""
    req, body = await _read_json(gw, call, model_required=True)
    assert req.model is not None
    if translated.translates(gw, call, req.model, MESSAGES_COUNT_TOKENS):
        await translated.count_tokens(gw, call, body, req.model)
        return
    remote = gw.resolver.native(req.model, call.provider_param(), MESSAGES_COUNT_TOKENS)
    await _native_json(gw, call, MESSAGES_COUNT_TOKENS, remote, req, body, None, ())


async def images_generations(gw: Gateway, call: Call) -> None:
    if not gw.settings.enable_images:
        raise fail("images_disabled", IMAGES_DISABLED)
    req, body = await _read_json(gw, call, model_required=False)
    req, body, guard, headers = await _judged(gw, call, apis.IMAGES_GENERATIONS, req, body)
    remote = gw.resolver.native(req.model, call.provider_param(), IMAGES_GENERATIONS)
    await _native_json(gw, call, IMAGES_GENERATIONS, remote, req, body, guard, headers)


async def images_edits(gw: Gateway, call: Call) -> None:
    await _images_multipart(gw, call, IMAGES_EDITS, apis.IMAGES_EDITS, needs_prompt=True)


async def images_variations(gw: Gateway, call: Call) -> None:
    await _images_multipart(gw, call, IMAGES_VARIATIONS, apis.IMAGES_VARIATIONS, needs_prompt=False)


async def _images_multipart(
    gw: Gateway, call: Call, api: NativeApi, guarded: GuardedApi, *, needs_prompt: bool
) -> None:
    """Multipart image edits/variations. The body is read under the body cap (never more
    than that in memory), checked as the reference checks it (an `image` or `image[]` file;
    edits a non-empty `prompt`), passed through the guardrails as its text fields, the
    `model` form field's provider prefix is removed in place, and every other byte (files
    included) goes upstream as sent."""
    if not gw.settings.enable_images:
        raise fail("images_disabled", IMAGES_DISABLED)
    ctype = call.header(b"content-type") or b""
    boundary = multipart_boundary(ctype)
    if boundary is None:
        raise fail("unsupported_media_type", "expected multipart/form-data with a boundary")
    body = await call.read_body(gw.settings.max_body_bytes)
    parts = multipart_parts(body, boundary)
    if not any(p.name in (b"image", b"image[]") and p.is_file for p in parts):
        raise fail("invalid_request", "an 'image' file is required", param="image")
    if needs_prompt and not any(p.name == b"prompt" and p.end > p.start for p in parts):
        raise fail("invalid_request", "a non-empty 'prompt' is required", param="prompt")
    model, span = _text_field(body, parts, b"model")
    guard = guard_request(gw.guardrails, call, guarded, model)
    headers: Headers = ()
    if guard is not None:
        forwarded, headers = await guard.pre_call(body, form_fields(parts))
        if forwarded is not body:  # redacted: the fields' spans moved
            body = forwarded
            parts = multipart_parts(body, boundary)
            span = _text_field(body, parts, b"model")[1]
    remote = gw.resolver.native(model, call.provider_param(), api)
    bare = remote.model
    if span is not None and bare is not None and bare != model:
        body = body[: span[0]] + bare.encode() + body[span[1] :]
    target = remote.target
    up = UpstreamRequest(
        origin=target.origin,
        target=target.path(api.path),
        headers=[
            (b"content-type", ctype),
            (b"accept", b"application/json"),
            *target.auth,
            *_client_headers(call),
        ],
        body=body,
        secret=target.secret,
        retry="refused",
    )
    inspect = None if guard is None else guard.post_call
    await gw.exchanges.forward(call, up, raw_errors=True, response_headers=headers, inspect=inspect)


_BOUNDARY = re.compile(rb"multipart/form-data\s*;.*boundary=\"?([^\";]+)\"?", re.IGNORECASE)
# The Images API's file fields: every other part of a form is text the guardrails read.
IMAGE_FILE_FIELDS = frozenset({b"image", b"image[]", b"mask"})


def multipart_boundary(content_type: bytes) -> bytes | None:
    m = _BOUNDARY.match(content_type)
    return None if m is None else m.group(1)


def form_fields(parts: list[Part]) -> list[FormField]:
    """The parts of an Images form the guardrails read: all but its image files (a text
    sent as a file is read too)."""
    return [
        (p.name.decode("utf-8", "replace"), p.start, p.end)
        for p in parts
        if p.name is not None and p.name not in IMAGE_FILE_FIELDS
    ]


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a multipart body: its form name, whether it is a file, its value's span."""

    name: bytes | None
    is_file: bool
    start: int
    end: int


_DISPOSITION = re.compile(rb"^content-disposition:([^\r\n]*)", re.IGNORECASE | re.MULTILINE)
_PARAM = re.compile(rb';\s*(name|filename)="?([^";\r\n]*)"?', re.IGNORECASE)


def multipart_parts(body: bytes, boundary: bytes) -> list[Part]:
    """The parts of a multipart body, in order (a part cut short ends the list)."""
    delimiter = b"--" + boundary
    parts: list[Part] = []
    pos = body.find(delimiter)
    while pos >= 0:
        head_start = pos + len(delimiter) + 2
        head_end = body.find(b"\r\n\r\n", head_start)
        if head_end < 0:
            break
        nxt = body.find(b"\r\n" + delimiter, head_end)
        if nxt < 0:
            break
        disposition = _DISPOSITION.search(body[head_start:head_end])
        params = (
            {k.lower(): v for k, v in _PARAM.findall(disposition.group(1))} if disposition else {}
        )
        parts.append(Part(params.get(b"name"), b"filename" in params, head_end + 4, nxt))
        pos = nxt + 2
    return parts


def _text_field(
    body: bytes, parts: list[Part], name: bytes
) -> tuple[str | None, tuple[int, int] | None]:
    """The value of a small text field of a multipart body, and its byte span."""
    for part in parts:
        if part.name == name:
            try:
                return body[part.start : part.end].decode("utf-8"), (part.start, part.end)
            except UnicodeDecodeError:
                raise fail(
                    "invalid_request", "the 'model' field is not UTF-8", param="model"
                ) from None
    return None, None
