"""The ASGI application: the route table and the single error boundary.

The request pipeline, in order:
  1. route by exact path, then method (404 / 405 in the envelope);
  2. the probes, /health and /ready, answered at once (edgegw.routes.probes);
  3. refuse new work while draining (503 `shutting_down`, `Connection: close`);
  4. client authentication when `EDGEGW_API_KEYS` is set or `AUTH_ENABLED`: a client
     key, or an OIDC bearer token (edgegw.auth), either passes, and names the caller's
     tenant (`call.caller`; the tenant's limits are checked by the route, edgegw.tenants);
  5. the body read whole (edgegw.intake), then the in-flight bound (503 `overloaded` +
     `Retry-After` at once);
  6. the route (edgegw/routes/): it reads and validates its body, resolves its target
     (edgegw.resolve) and runs its exchange (edgegw.exchange), given the request-independent
     `Gateway` context and the request's `Call`.

Every exception ends here: `GatewayError`/`RequestError` become the envelope (also from an
exception group a nursery raised), anything else is logged with its traceback and
answered with a generic 500. Nothing imports this module but the server.

Around all of it: the request's id (edgegw.asgi), its server span when tracing is on
(edgegw.telemetry.tracing; not for /health and /v1/metrics, as in inference-gateway), and
one access-log line when it ends (edgegw.logs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from edgegw._core import RequestError, UpstreamProtocolError
from edgegw.asgi import Call, ClientGone, Receive, Scope, Send
from edgegw.errors import (
    ANTHROPIC_SHAPE,
    RESPONSES_SHAPE,
    Answerable,
    ErrorShape,
    GatewayError,
    fail,
    first_answerable,
    render_error,
)
from edgegw.gateway import Gateway
from edgegw.logs import access_line
from edgegw.routes import admin, generation, mcp, metrics, models, native, probes, proxy, retrieval

log = logging.getLogger("edgegw.app")

Handler = Callable[[Gateway, Call], Coroutine[Any, Any, None]]


ROUTES: dict[str, dict[str, Handler]] = {
    "/health": {"GET": probes.health},
    "/ready": {"GET": probes.ready},
    "/v1/chat/completions": {"POST": generation.chat_completions},
    "/v1/completions": {"POST": generation.completions},
    "/v1/embeddings": {"POST": retrieval.embeddings},
    "/v1/rerank": {"POST": retrieval.rerank},
    "/v1/models": {"GET": models.list_models},
    "/v1/metrics": {"POST": metrics.metrics_push},
    "/v1/mcp/tools": {"GET": mcp.list_tools},
    "/v1/responses": {"POST": native.responses},
    "/v1/messages": {"POST": native.messages},
    "/v1/messages/count_tokens": {"POST": native.count_tokens},
    "/v1/images/generations": {"POST": native.images_generations},
    "/v1/images/edits": {"POST": native.images_edits},
    "/v1/images/variations": {"POST": native.images_variations},
    "/admin/keys": {"GET": admin.list_keys, "POST": admin.create_key, "DELETE": admin.revoke_key},
    "/admin/usage": {"GET": admin.usage},
}
PROXY_ROUTE: dict[str, Handler] = dict.fromkeys(proxy.PROXY_METHODS, proxy.proxy)
# The routes whose API writes errors in its own shape (every other one: OpenAI's envelope).
ERROR_SHAPES: dict[str, ErrorShape] = {
    "/v1/messages": ANTHROPIC_SHAPE,
    "/v1/messages/count_tokens": ANTHROPIC_SHAPE,
    "/v1/responses": RESPONSES_SHAPE,
}
# Paths without a server span (probes and metric pushes would drown the traces).
UNTRACED = frozenset({"/health", "/ready", "/v1/metrics"})
# Kubernetes' probes (edgegw.routes.probes): answered before the drain, keys and the bound.
PROBES = frozenset({"/health", "/ready"})
# The tenants' admin API (edgegw.routes.admin): its own credential, not the client keys.
ADMIN = frozenset({"/admin/keys", "/admin/usage"})


class App:
    """The ASGI callable Hypercorn serves."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.watch = gateway.exchanges.watch  # its `now`: the run's clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(Call(scope, receive, send))
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, call: Call) -> None:
        started = self.watch.now()
        shape = ERROR_SHAPES.get(call.path)
        if shape is not None:
            call.errors = shape
        tracing = self.gateway.telemetry.tracing
        if tracing is not None and call.path not in UNTRACED:
            headers = call.scope["headers"]
            call.trace = tracing.start_request(call.method, call.path, headers, call.request_id)
            if call.trace is None and any(k == b"traceparent" for k, _ in headers):
                call.trace_context = tracing.passed_on(headers)
            elif call.trace is not None and tracing.content:
                call.trace_content = tracing.completion()
        answered = False
        error: str | None = None
        try:
            try:
                await self._dispatch(call)
            except* ClientGone:
                error = "client_gone"  # nobody to answer
            except* (GatewayError, RequestError, UpstreamProtocolError) as group:
                # Raised by the route, or by a nursery inside it (perhaps beside others).
                found = first_answerable(group.exceptions)
                assert found is not None
                answered = True
                error = found.code
                await _answer_error(call, found)
        except Exception:
            log.exception("unhandled error on %s %s", call.method, call.path)
            error = "internal_error"
            if not answered:
                body = call.errors.answer(
                    500, "server_error", None, "internal_error", "internal error"
                )
                await call.respond_json(500, body)
        finally:
            duration_s = self.watch.now() - started
            if call.trace is not None and call.trace.finish(call.final_status, error):
                assert tracing is not None
                tracing.wake()  # a whole batch of spans waits
            access_line(call, duration_s)

    async def _dispatch(self, call: Call) -> None:
        gw = self.gateway
        path = call.path
        methods = ROUTES.get(path)
        if methods is None and path.startswith("/proxy/"):
            methods = PROXY_ROUTE
        if methods is None:
            raise fail("not_found", "Requested route is not found")
        handler = methods.get(call.method)
        if handler is None:
            allow = ", ".join(sorted(methods)).encode()
            raise fail("method_not_allowed", "Method not allowed", headers=((b"allow", allow),))
        if path in PROBES:  # no key, no bound; /ready says when draining
            await handler(gw, call)
            return
        load = gw.load
        if load.draining:
            raise fail(
                "shutting_down",
                "The gateway is shutting down; retry on a new connection.",
                headers=((b"connection", b"close"), (b"retry-after", b"1")),
            )
        if (gw.client_keys.required or gw.verifier is not None) and path not in ADMIN:
            if call.trace is None:
                await self._authenticate(call)
            else:
                with call.trace.authenticate():
                    await self._authenticate(call)
        if call.has_body():  # read whole before it may take a slot (edgegw.intake)
            await gw.intake.read(call, gw.settings.max_body_bytes)
        if load.in_flight >= gw.settings.max_in_flight:
            raise fail(
                "overloaded",
                "Too many requests in flight; retry shortly.",
                headers=((b"retry-after", b"1"),),
            )
        load.in_flight += 1
        try:
            await handler(gw, call)
        finally:
            load.in_flight -= 1

    async def _authenticate(self, call: Call) -> None:
        """A client key passes; otherwise, with OIDC on, a bearer token that verifies. A
        bearer value that is not JWT-shaped is judged as a key when keys are set."""
        presented = bearer = None
        for name, value in call.scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                presented = bearer = value[7:].strip()
            elif name == b"x-api-key":
                presented = value.strip()
        verifier = self.gateway.verifier
        keys = self.gateway.client_keys
        if keys.required:
            if (caller := keys.caller(presented)) is not None:
                call.caller = caller
                return
            if verifier is None or (presented and not verifier.looks_like_jwt(bearer)):
                raise fail(
                    "invalid_api_key",
                    "A valid API key is required: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                    headers=((b"www-authenticate", b"Bearer"),),
                )
        assert verifier is not None
        if not bearer:
            raise verifier.missing_token()
        call.identity = await verifier.verify(bearer)
        call.caller = keys.oidc_caller(call.identity)


async def _answer_error(call: Call, e: Answerable) -> None:
    status, extra, body = render_error(e, call.errors)
    await call.respond_json(status, body, extra)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
