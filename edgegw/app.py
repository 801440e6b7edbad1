"""The ASGI application: the route table and the single error boundary.

The request pipeline, in order:
  1. route by exact path, then method (404 / 405 in the envelope);
  2. client authentication when `EDGEGW_API_KEYS` is set (every route but /health);
  3. read the body under `SERVER_MAX_REQUEST_BODY_SIZE` (413);
  4. parse and validate it in the Rust core (400 `invalid_request` / `unsupported_field`);
  5. resolve the target from `?provider=` or the `provider/` model prefix (400 if unknown);
  6. refuse fields the target cannot honour (400 `unsupported_field`);
  7. forward the canonical body with the provider's credentials (never the client's),
     relaying the answer (`streaming.forward`) or the SSE stream (`streaming.relay_sse`).

Every exception ends here: `GatewayError`/`RequestError` become the envelope, anything
else is logged with its traceback and answered with a generic 500.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qs

import orjson
import trio

from edgegw._core import (
    ParsedRequest,
    RequestError,
    parse_chat_request,
    parse_completions_request,
)
from edgegw.asgi import ClientGone, Receive, Send, read_body, respond_json
from edgegw.errors import INTERNAL_ERROR_BODY, GatewayError, render_error
from edgegw.local import serve as local
from edgegw.local.fleet import Fleet
from edgegw.models.catalog import ModelCatalog, list_models
from edgegw.providers import (
    GATEWAY_ONLY_FIELDS,
    OPENAI_CHAT_FIELDS,
    OPENAI_COMPLETIONS_FIELDS,
    PROVIDERS,
    auth_headers,
    model_allowed,
)
from edgegw.routes import passthrough
from edgegw.settings import ProviderConfig, Settings
from edgegw.streaming import DisconnectWatch, Exchange, forward, relay_sse
from edgegw.telemetry.recording import Telemetry, metrics_push
from edgegw.upstream import Origin, UpstreamPool

log = logging.getLogger("edgegw.app")

HEALTH_BODY = b'{"message":"OK"}'
UNKNOWN_PROVIDER = (
    "Unable to determine provider for model. Please specify a provider using the ?provider= "
    "query parameter or use the provider/model format (e.g., openai/gpt-4)."
)


Handler = Callable[["App", dict[str, Any], Receive, Send], Coroutine[Any, Any, None]]


class Target:
    """A resolved remote provider: where to send and with which credentials."""

    __slots__ = ("config", "origin", "auth", "json_headers", "sse_headers")

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.origin = Origin.from_url(config.url)
        self.auth = auth_headers(config.provider, config.key)
        ctype = (b"content-type", b"application/json")
        self.json_headers = (ctype, (b"accept", b"application/json"), *self.auth)
        self.sse_headers = (ctype, (b"accept", b"text/event-stream"), *self.auth)


class App:
    def __init__(
        self,
        settings: Settings,
        pool: UpstreamPool,
        watch: DisconnectWatch,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.watch = watch
        self.targets = {pid: Target(cfg) for pid, cfg in settings.providers.items()}
        self.catalog = ModelCatalog(settings, pool, self.targets)
        self.fleet = Fleet(settings.local_models, pool)
        # Requests being handled now (bounded by settings.max_in_flight), and whether a
        # shutdown has begun (new requests then get 503 with Connection: close).
        self.in_flight = 0
        self.draining = False
        self.sdk_versions = local.SdkVersionLog()
        self.telemetry = telemetry if telemetry is not None else Telemetry(settings)
        self._api_keys = settings.api_keys

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        try:
            path = scope["path"]
            methods = ROUTES.get(path)
            if methods is None and path.startswith("/proxy/"):
                methods = PROXY_ROUTE
            if methods is None:
                raise GatewayError(404, "not_found", "Requested route is not found")
            handler = methods.get(scope["method"])
            if handler is None:
                allow = ", ".join(sorted(methods)).encode()
                raise GatewayError(
                    405, "method_not_allowed", "Method not allowed", headers=((b"allow", allow),)
                )
            if self.draining:
                raise GatewayError(
                    503,
                    "shutting_down",
                    "The gateway is shutting down; retry on a new connection.",
                    type="server_error",
                    headers=((b"connection", b"close"), (b"retry-after", b"1")),
                )
            if self._api_keys and path != "/health":
                self._authenticate(scope)
            if path == "/health":
                await handler(self, scope, receive, send)
                return
            if self.in_flight >= self.settings.max_in_flight:
                raise GatewayError(
                    503,
                    "overloaded",
                    "Too many requests in flight; retry shortly.",
                    type="server_error",
                    headers=((b"retry-after", b"1"),),
                )
            self.in_flight += 1
            try:
                await handler(self, scope, receive, send)
            finally:
                self.in_flight -= 1
        except (GatewayError, RequestError) as e:
            status, extra, body = render_error(e)
            await respond_json(send, status, body, extra)
        except ClientGone:
            return
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            await respond_json(send, 500, INTERNAL_ERROR_BODY)

    def _authenticate(self, scope: dict[str, Any]) -> None:
        presented = None
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                presented = value[7:].strip()
            elif name == b"x-api-key":
                presented = value.strip()
        ok = False
        if presented:
            # Compare against every key, whatever matched, so timing tells nothing.
            for key in self._api_keys:
                ok |= hmac.compare_digest(presented, key)
        if not ok:
            raise GatewayError(
                401,
                "invalid_api_key",
                "A valid API key is required: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                headers=((b"www-authenticate", b"Bearer"),),
            )

    def resolve(self, model: str, scope: dict[str, Any]) -> tuple[Target, str]:
        """(target, upstream model) from `?provider=` or the `provider/` prefix."""
        query = scope.get("query_string", b"")
        pid = None
        if b"provider=" in query:
            values = parse_qs(query.decode("latin-1")).get("provider")
            if values:
                pid = values[0].strip().lower()
                prefix, sep, rest = model.partition("/")
                if sep and prefix.lower() == pid:
                    model = rest
        if pid is None:
            prefix, sep, rest = model.partition("/")
            if sep and prefix.lower() in PROVIDERS:
                pid, model = prefix.lower(), rest
        if pid is None or pid not in PROVIDERS:
            raise GatewayError(400, "unknown_provider", UNKNOWN_PROVIDER, param="model")
        target = self.resolve_target(pid)
        if not model:
            raise GatewayError(
                400,
                "invalid_request",
                "'model' names no model after the provider prefix",
                param="model",
            )
        self.check_model_allowed(pid, model)
        return target, model

    def resolve_target(self, pid: str) -> Target:
        """The configured provider `pid` (a known id), or 400 saying what to set."""
        target = self.targets.get(pid)
        if target is None:
            provider = PROVIDERS[pid]
            need = f"{pid.upper()}_API_URL" if provider.keyless else f"{pid.upper()}_API_KEY"
            raise GatewayError(
                400,
                "provider_not_configured",
                f"Provider '{pid}' is not configured on this gateway (set {need}).",
                param="model",
            )
        return target

    def check_model_allowed(self, pid: str, model: str) -> None:
        """ALLOWED_MODELS / DISALLOWED_MODELS: 403 with inference-gateway's messages."""
        s = self.settings
        if not model_allowed(s.allowed_models, s.disallowed_models, f"{pid}/{model}"):
            message = (
                "Model not allowed. Please check the list of allowed models."
                if s.allowed_models
                else "Model is disallowed. Please use a different model."
            )
            raise GatewayError(403, "model_not_allowed", message, param="model")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _unsupported_for_target(
    fields: tuple[str, ...], features: tuple[str, ...], allowed: frozenset[str]
) -> None:
    for name in fields:
        if name not in allowed:
            raise GatewayError(
                400,
                "unsupported_field",
                f"'{name}' is not supported by the selected provider",
                param=name,
            )
    for feature in features:
        raise GatewayError(
            400,
            "unsupported_field",
            f"'{feature.partition('.')[2]}' response formats are not supported by the selected provider",
            param="response_format.type",
        )


async def _generation(
    app: App, scope: dict[str, Any], receive: Receive, send: Send, *, chat: bool
) -> None:
    body = await read_body(scope, receive, app.settings.max_body_bytes)
    req = parse_chat_request(body) if chat else parse_completions_request(body)
    runtime = app.fleet.models.get(req.model)
    if runtime is not None:
        await local.serve(app, scope, receive, send, req, runtime, chat=chat)
        return
    await forward_remote(app, scope, receive, send, req, req.model)


async def forward_remote(
    app: App,
    scope: dict[str, Any],
    receive: Receive,
    send: Send,
    req: ParsedRequest,
    model_name: str,
    *,
    fallback: bool = False,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Steps 5-7 of the pipeline for a remote provider. `headers` go on a served answer
    (a local model's remote fallback says so)."""
    started = trio.current_time()
    chat = req.endpoint == "chat"
    # A fallback names its provider in the profile; ?provider= only routes client models.
    target, model = app.resolve(model_name, {} if fallback else scope)
    provider = target.config.provider
    if req.has_images and not app.settings.enable_vision:
        raise GatewayError(
            400,
            "vision_disabled",
            "Image content is not accepted: vision is disabled on this gateway (ENABLE_VISION=true enables it).",
            param="messages",
        )
    _unsupported_for_target(
        req.fields, req.features, OPENAI_CHAT_FIELDS if chat else OPENAI_COMPLETIONS_FIELDS
    )
    omit = GATEWAY_ONLY_FIELDS + provider.omit_fields
    path = provider.chat_path if chat else provider.completions_path
    ex = Exchange(
        origin=target.origin,
        target=(target.origin.base_path + path).encode(),
        headers=target.sse_headers if req.stream else target.json_headers,
        body=_quirks(provider.id, req.upstream_body(model, omit)),
    )
    status = 200
    outcome = None
    try:
        if req.stream:
            outcome = await relay_sse(
                app.settings, app.watch, app.pool, receive, send, ex, response_headers=headers
            )
        else:
            outcome = await forward(
                app.settings, app.watch, app.pool, receive, send, ex, response_headers=headers
            )
        if outcome.error is not None:
            status = 502
        if outcome.client_gone:
            log.debug("client went away; upstream request to %s cancelled", provider.id)
    except GatewayError as e:
        status = e.status
        raise
    finally:
        app.telemetry.record_generation(
            provider=provider.id,
            model=req.model,
            status=status,
            duration_s=trio.current_time() - started,
            ttft_s=None
            if outcome is None or outcome.first_chunk_at is None
            else outcome.first_chunk_at - started,
            usage=None if outcome is None else outcome.usage,
            tool_calls=[] if outcome is None else outcome.tool_calls,
            operation="chat" if chat else "text_completion",
        )


def _quirks(provider_id: str, body: bytes) -> bytes:
    """Per-provider request fix-ups that need the body: MiniMax has deprecated
    `max_tokens` in favour of `max_completion_tokens`."""
    if provider_id == "minimax" and b'"max_tokens"' in body:
        doc = orjson.loads(body)
        if "max_tokens" in doc and "max_completion_tokens" not in doc:
            doc["max_completion_tokens"] = doc.pop("max_tokens")
            return orjson.dumps(doc)
    return body


async def chat_completions(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await _generation(app, scope, receive, send, chat=True)


async def completions(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await _generation(app, scope, receive, send, chat=False)


async def health(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    await respond_json(send, 200, HEALTH_BODY)


ROUTES: dict[str, dict[str, Handler]] = {
    "/health": {"GET": health},
    "/v1/chat/completions": {"POST": chat_completions},
    "/v1/completions": {"POST": completions},
    "/v1/models": {"GET": list_models},
    "/v1/metrics": {"POST": metrics_push},
    "/v1/responses": {"POST": passthrough.responses},
    "/v1/messages": {"POST": passthrough.messages},
    "/v1/images/generations": {"POST": passthrough.images_generations},
    "/v1/images/edits": {"POST": passthrough.images_edits},
    "/v1/images/variations": {"POST": passthrough.images_variations},
}
PROXY_ROUTE: dict[str, Handler] = dict.fromkeys(passthrough.PROXY_METHODS, passthrough.proxy)
