"""The gateway's error type, the catalogue of its codes, and the one envelope every error
response uses.

`{"error": {"message", "type", "param", "code"}}`, as OpenAI and the SIE gateway write it.
Codes are stable strings (snake_case; SIE's `INVALID_INPUT` as SIE spells it); nothing
ever parses a message. Every code edgegw raises itself is in `CATALOGUE` with its status
and type, and is raised through `fail()` or one of the named constructors below, so a code
cannot drift to another status in one of the places that raise it. An upstream's own
error answer keeps the upstream's status and code (`GatewayError` directly, see
`edgegw.exchange.upstream_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from edgegw._core import RequestError, UpstreamProtocolError

# Header fields, lower-cased names: the one type every module passes them as.
Headers = Sequence[tuple[bytes, bytes]]

# code -> (status, type). Types follow OpenAI's names for client errors; everything the
# gateway or an upstream got wrong is `server_error`, as SIE writes it.
CATALOGUE: dict[str, tuple[int, str]] = {
    # -- the request itself
    "invalid_request": (400, "invalid_request_error"),
    "unsupported_field": (400, "invalid_request_error"),
    "vision_disabled": (400, "invalid_request_error"),
    "invalid_path": (400, "invalid_request_error"),
    "INVALID_INPUT": (400, "invalid_request_error"),
    "unknown_lora_adapter": (400, "invalid_request_error"),
    "context_length_exceeded": (400, "invalid_request_error"),
    # /v1/embeddings and /v1/rerank: more inputs than the route's bound, one input too long
    "too_many_inputs": (400, "invalid_request_error"),
    "input_too_long": (400, "invalid_request_error"),
    "payload_too_large": (413, "invalid_request_error"),
    "unsupported_media_type": (415, "invalid_request_error"),
    # -- the request head (the Rust screen, rust/src/head.rs) and the connection layer's
    # own answers (edgegw.http1)
    "bad_request_line": (400, "invalid_request_error"),
    "bad_line_ending": (400, "invalid_request_error"),
    "obs_fold": (400, "invalid_request_error"),
    "bad_header_name": (400, "invalid_request_error"),
    "bad_header_value": (400, "invalid_request_error"),
    "conflicting_framing": (400, "invalid_request_error"),
    "bad_content_length": (400, "invalid_request_error"),
    "bad_transfer_encoding": (400, "invalid_request_error"),
    "missing_host": (400, "invalid_request_error"),
    "duplicate_host": (400, "invalid_request_error"),
    "incomplete_head": (400, "invalid_request_error"),
    "request_timeout": (408, "invalid_request_error"),
    "head_too_large": (431, "invalid_request_error"),
    "too_many_headers": (431, "invalid_request_error"),
    "request_header_fields_too_large": (431, "invalid_request_error"),
    "not_implemented": (501, "server_error"),
    # -- where it goes
    "not_found": (404, "not_found_error"),
    "method_not_allowed": (405, "invalid_request_error"),
    "unknown_provider": (400, "invalid_request_error"),
    "unsupported_provider": (400, "invalid_request_error"),
    # a local model whose profile's `kind` does not serve the route (a chat model's embeddings)
    "unsupported_model": (400, "invalid_request_error"),
    "provider_not_configured": (400, "invalid_request_error"),
    "images_disabled": (404, "not_found_error"),
    "metrics_push_disabled": (403, "permission_error"),
    "mcp_tools_not_exposed": (403, "permission_error"),
    "model_not_found": (404, "model_not_found"),
    # -- who may send it
    "invalid_api_key": (401, "authentication_error"),
    "missing_token": (401, "authentication_error"),  # OIDC (edgegw.auth): no bearer token
    "invalid_token": (401, "authentication_error"),
    "token_expired": (401, "authentication_error"),
    "token_not_yet_valid": (401, "authentication_error"),
    "model_not_allowed": (403, "permission_error"),
    # -- the caller's tenant (edgegw.keyfile, edgegw.tenants): a key past its `expires`, a
    # model outside the tenant's or key's scope, a limit reached (OpenAI's code and type)
    "key_expired": (401, "authentication_error"),
    "model_not_in_scope": (403, "permission_error"),
    "rate_limit_exceeded": (429, "requests"),
    "concurrency_limit_exceeded": (429, "requests"),
    "insufficient_quota": (429, "insufficient_quota"),
    # Redis, holding the shared limits and budgets, did not answer (TENANTS_REDIS_*_FAIL)
    "tenant_store_unavailable": (503, "server_error"),
    # -- what the guardrails decided (edgegw.guardrails.check): a policy's block, and a
    # check that could not decide under GUARDRAILS_FAIL_MODE=closed (the reference's 403)
    "guardrails_blocked": (403, "permission_error"),
    "guardrails_unavailable": (403, "permission_error"),
    # -- the gateway's own state
    "overloaded": (503, "server_error"),
    "shutting_down": (503, "server_error"),
    "internal_error": (500, "server_error"),
    # -- remote providers
    "upstream_timeout": (504, "server_error"),
    "upstream_unreachable": (502, "server_error"),
    "upstream_connection_lost": (502, "server_error"),
    "upstream_response_too_large": (502, "server_error"),
    "upstream_stream_truncated": (502, "server_error"),
    "upstream_event_too_large": (502, "server_error"),
    "bad_upstream_response": (502, "server_error"),
    "upstream_error": (502, "server_error"),
    "mcp_rounds_exhausted": (502, "server_error"),
    # every deployment of a routing alias is out (breaker open, Retry-After pending)
    "no_deployment_available": (503, "server_error"),
    # -- local workers (SIE's codes)
    "provisioning": (503, "server_error"),
    "MODEL_LOADING": (503, "server_error"),
    "QUEUE_FULL": (503, "server_error"),
    "MODEL_LOAD_FAILED": (502, "server_error"),
    "transport_failure": (503, "server_error"),
    "first_chunk_timeout": (504, "server_error"),
    "inter_chunk_timeout": (504, "server_error"),
    "overall_timeout": (504, "server_error"),
    "inference_error": (502, "server_error"),
    # 502 for a chunk that is not JSON; SIE answers a missing final usage with 500.
    "malformed_worker_response": (502, "server_error"),
}


class GatewayError(Exception):
    """An error answered to the client with `status` and the envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        headers: Headers = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type or default_type(status)
        self.param = param
        self.headers = headers

    def replace(
        self, *, status: int | None = None, message: str | None = None, more_headers: Headers = ()
    ) -> GatewayError:
        """The same error anew (code, type, param), to raise again: with another status or
        message, or more headers."""
        return GatewayError(
            self.status if status is None else status,
            self.code,
            self.message if message is None else message,
            type=self.type,
            param=self.param,
            headers=(*self.headers, *more_headers),
        )


def fail(
    code: str,
    message: str,
    *,
    param: str | None = None,
    headers: Headers = (),
    status: int | None = None,
    type: str | None = None,
) -> GatewayError:
    """The error for a catalogued `code` (raise what this returns). `status` and `type`
    override the catalogue's only where a spec gives one code two of them."""
    default_status, type_ = CATALOGUE[code]
    return GatewayError(
        default_status if status is None else status,
        code,
        message,
        type=type_ if type is None else type,
        param=param,
        headers=headers,
    )


def default_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status < 500:
        return "invalid_request_error"
    return "server_error"


# -- the errors raised in more than one place -------------------------------------------


def upstream_timeout(message: str = "the upstream did not answer in time") -> GatewayError:
    return fail("upstream_timeout", message)


def shutting_down(message: str = "The gateway is shutting down.") -> GatewayError:
    """Refused (or cut) because a shutdown began: the client retries on a new connection."""
    return fail(
        "shutting_down", message, headers=((b"connection", b"close"), (b"retry-after", b"1"))
    )


def payload_too_large(limit: int) -> GatewayError:
    return fail("payload_too_large", f"request body exceeds {limit} bytes")


def invalid_content_length() -> GatewayError:
    return fail("invalid_request", "invalid Content-Length")


def unsupported_field(name: str, message: str | None = None) -> GatewayError:
    return fail(
        "unsupported_field",
        message or f"'{name}' is not supported by the selected provider",
        param=name,
    )


def shown(value: str, limit: int = 64) -> str:
    """A client-sent value cut to a length fit for an error message."""
    return value if len(value) <= limit else value[:limit] + "…"


# -- rendering ----------------------------------------------------------------------------


def envelope(message: str, type: str, param: str | None, code: str | None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


Answerable = GatewayError | RequestError | UpstreamProtocolError


# -- each API's own error shapes ----------------------------------------------------------


def _anthropic_type(status: int) -> str:
    """Anthropic's error type for a status (its documented table; 503 is its overload)."""
    return _ANTHROPIC_TYPES.get(status) or (
        "invalid_request_error" if status < 500 else "api_error"
    )


_ANTHROPIC_TYPES = {
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _anthropic_body(status: int, type: str, param: str | None, code: str, message: str) -> bytes:
    # `code` beside Anthropic's two members: edgegw's stable code, which the SDK keeps in
    # the error's body and ignores otherwise.
    error = {"type": _anthropic_type(status), "message": message, "code": code}
    return orjson.dumps({"type": "error", "error": error})


def _openai_event(status: int, code: str, message: str, seq: int) -> bytes:
    # The catalogue's type (a guardrails block is a permission_error, not the server's).
    type_ = CATALOGUE.get(code, (status, default_type(status)))[1]
    return b"data: " + envelope(message, type_, None, code) + b"\n\n"


def _anthropic_event(status: int, code: str, message: str, seq: int) -> bytes:
    return b"event: error\ndata: " + _anthropic_body(status, "", None, code, message) + b"\n\n"


def _responses_event(status: int, code: str, message: str, seq: int) -> bytes:
    doc = {"type": "error", "code": code, "message": message, "param": None, "sequence_number": seq}
    return b"event: error\ndata: " + orjson.dumps(doc) + b"\n\n"


def _openai_body(status: int, type: str, param: str | None, code: str, message: str) -> bytes:
    return envelope(message, type, param, code)


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How one API writes an error edgegw raises: the answer's body (`answer(status, type,
    param, code, message)`), and the last event of a stream that fails after its head
    (`event(status, code, message, seq)`, `seq` the events already relayed). The route's
    API chooses it, so each client library sees errors it parses."""

    name: str
    answer: Callable[[int, str, str | None, str, str], bytes]
    event: Callable[[int, str, str, int], bytes]


# Chat and completions: `{"error": {...}}`, and in a stream an unnamed `data:` event with
# it, as OpenAI sends (the SDKs raise on it).
OPENAI_SHAPE = ErrorShape("openai", _openai_body, _openai_event)
# /v1/messages: `{"type": "error", "error": {"type", "message"}}` with Anthropic's type
# names, and `event: error` in a stream (the Anthropic SDK skips unnamed events).
ANTHROPIC_SHAPE = ErrorShape("anthropic", _anthropic_body, _anthropic_event)
# /v1/responses: OpenAI's envelope for an answer; in a stream the Responses API's `error`
# event (type, code, message, param, sequence_number).
RESPONSES_SHAPE = ErrorShape("responses", _openai_body, _responses_event)


def render_error(exc: Answerable, shape: ErrorShape = OPENAI_SHAPE) -> tuple[int, Headers, bytes]:
    """(status, extra headers, body) for an error raised anywhere in the pipeline, in the
    route's API's shape; an upstream's protocol fault that no relay caught is a 502 with its
    code."""
    if isinstance(exc, GatewayError):
        body = shape.answer(exc.status, exc.type, exc.param, exc.code, exc.message)
        return exc.status, exc.headers, body
    if isinstance(exc, UpstreamProtocolError):
        return 502, (), shape.answer(502, "server_error", None, exc.code, str(exc))
    return exc.status, (), shape.answer(exc.status, exc.type, exc.param, exc.code, str(exc))


def first_answerable(excs: Sequence[BaseException]) -> Answerable | None:
    """The error to answer for an exception group raised by a nursery: the first
    GatewayError/RequestError in it, or None when it holds none."""
    for e in excs:
        if isinstance(e, (GatewayError, RequestError, UpstreamProtocolError)):
            return e
        if isinstance(e, BaseExceptionGroup):
            found = first_answerable(e.exceptions)
            if found is not None:
                return found
    return None


# Upstream error messages are relayed, but never at any length.
MAX_UPSTREAM_MESSAGE = 2000


def upstream_error(status: int, headers: list[tuple[bytes, bytes]], payload: bytes) -> GatewayError:
    """An upstream's error answer in the envelope, keeping its status (and Retry-After)."""
    message, type_, param, code = f"the upstream answered with status {status}", None, None, None
    try:
        doc = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, str):
            message = err
        elif isinstance(err, dict):
            if isinstance(err.get("message"), str):
                message = err["message"]
            if isinstance(err.get("type"), str):
                type_ = err["type"]
            if isinstance(err.get("param"), str):
                param = err["param"]
            if isinstance(err.get("code"), str):
                code = err["code"]
    extra: Headers = ()
    if status in (429, 503):
        extra = tuple((b"retry-after", v) for k, v in headers if k.lower() == b"retry-after")[:1]
    if not 400 <= status <= 599:
        status = 502
    return GatewayError(
        status,
        code or "upstream_error",
        message[:MAX_UPSTREAM_MESSAGE],
        type=type_,
        param=param,
        headers=extra,
    )
