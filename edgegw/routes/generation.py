"""POST /v1/chat/completions and /v1/completions: the generation route.

  1. read the body under `SERVER_MAX_REQUEST_BODY_SIZE` (413) and parse and validate it in
     the Rust core (400 `invalid_request` / `unsupported_field`);
  2. resolve the target (edgegw.resolve): `?provider=`, a routing alias (edgegw.routing:
     its deployments tried in turn by `Trip.run`, each through step 3 or 4 with the
     X-Selected-Provider / X-Selected-Model headers), a local model, `provider/model`;
  3. local: the SIE contract (edgegw.local.contract), then a worker (edgegw.local.serve);
     with no worker able to serve, the profile's `remote_fallback` when its triggers list
     the reason and `X-SIE-Remote` is not `forbid` (edgegw.local.fallback: the disclosure
     headers, the fields dropped, the local refusal answering a failed remote attempt),
     else the local refusal;
  4. remote: vision gate, fields the provider cannot honour (400 `unsupported_field`), the
     body written by the Rust core (model replaced, the provider's omitted and renamed
     fields, `stream_options` dropped from a request that does not stream, earlier turns'
     reasoning members kept only for a provider that takes them back, usage asked for
     on a stream whose client did not ask, withheld from it again by the relay), forwarded
     or relayed with the provider's credentials (never the client's).
With GUARDRAILS_ENABLED (edgegw.guardrails.route), `pre_call` runs after step 1 for every
target (block: 403; redact: the redacted body is parsed again and is what goes on), and a
remote answer passes `post_call`, a whole one before the client sees it, a stream as it
is relayed; MCP tool calls pass `tool_args` and `tool_output`.
The route records telemetry once, in one `finally`, with the status of what happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from edgegw._core import ParsedRequest, parse_chat_request, parse_completions_request
from edgegw.asgi import Call
from edgegw.errors import CATALOGUE, GatewayError, Headers, fail, unsupported_field
from edgegw.exchange import Outcome
from edgegw.gateway import Gateway
from edgegw.guardrails.apis import CHAT, COMPLETIONS
from edgegw.guardrails.route import RequestGuard, guard_request
from edgegw.local import fallback as local_fallback
from edgegw.local import serve as local
from edgegw.local.contract import (
    LOCAL_MESSAGE_MEMBERS,
    LocalRequest,
    check_request,
    named_profile,
    remote_forbidden,
    remote_target_forbidden,
)
from edgegw.local.fleet import LocalRuntime
from edgegw.mcp import agent as mcp_agent
from edgegw.mcp.models import LocalModel, RemoteModel
from edgegw.mcp.tools import Offered
from edgegw.providers import provider_body
from edgegw.relay import RetryScope, UpstreamRequest
from edgegw.resolve import Local, Remote
from edgegw.routes.record import Recording
from edgegw.routing.config import LOCAL, Deployment
from edgegw.routing.router import Failover, Pool, Screen, selected_headers

log = logging.getLogger("edgegw.app")


async def chat_completions(gw: Gateway, call: Call) -> None:
    await _generation(gw, call, parse_chat_request)


async def completions(gw: Gateway, call: Call) -> None:
    await _generation(gw, call, parse_completions_request)


async def _generation(gw: Gateway, call: Call, parse: Callable[[bytes], ParsedRequest]) -> None:
    body = await call.read_body(gw.settings.max_body_bytes)
    trace = call.trace
    # With tracing on, one call for the `parse` span and the prompt event.
    req = parse(body) if trace is None else trace.parse(parse, body)
    call.note.model = req.model
    operation = "chat" if req.endpoint == "chat" else "text_completion"
    with Recording(gw, call, req.model, operation, req.stream) as rec:
        guard_headers: Headers = ()
        if (guard := _guard(gw, call, req)) is not None:
            # pre_call, for every target: a block is raised (403); redacted, the body is
            # parsed again (its model is the same), so what is forwarded is the new one.
            forwarded, guard_headers = await guard.pre_call(body)
            if forwarded is not body:
                req = parse(forwarded)
        # SIE: the header is checked for every target; `forbid` refuses a remote one.
        forbid = remote_forbidden(call)
        # With tracing on, the `route` span is recorded whole after the decision (one call).
        routing_ns = 0 if trace is None else time.time_ns()
        try:
            pool = _alias(gw, call, req.model)
            target, named = (None, False) if pool is not None else _target(gw, call, req.model)
        except BaseException as e:
            if trace is not None:
                trace.route(routing_ns, req.model, None, False, e)
            raise
        if trace is not None:
            label = (
                "alias"
                if target is None
                else "local"
                if isinstance(target, Local)
                else target.target.provider.id
            )
            trace.route(routing_ns, req.model, label, named)
        if pool is not None:
            assert gw.router is not None
            trip = gw.router.trip(pool)
            try:
                rec.outcome = await trip.run(
                    lambda d, screen: _deployment(gw, call, req, forbid, d, screen, guard_headers)
                )
            finally:
                rec.provider = "unknown" if trip.selected is None else trip.selected.provider
        elif isinstance(target, Local):
            rec.provider = "local"
            rt = target.runtime
            lreq = _local_check(gw, call, rt, forbid)(req)
            served = await _serve_local(gw, call, req, rt, lreq, forbid, guard_headers)
            if isinstance(served, local.NoLocalWorker):
                reason, fallback = served.reason, rt.profile.remote_fallback
                refusal = local_fallback.refusal(rt, reason)
                plan = local_fallback.remote_plan(req)
                if (
                    fallback is None
                    or named
                    or lreq.forbid_remote
                    or reason not in rt.profile.triggers
                    or not plan.eligible
                ):
                    raise refusal
                if trace is not None:
                    trace.server.add_event(
                        "edgegw.fallback", {"edgegw.fallback.reason": reason, "to": fallback}
                    )
                try:
                    # A fallback names its provider in the profile; ?provider= only routes
                    # client models.
                    target = gw.resolver.remote(fallback, None)
                    rec.provider = target.target.provider.id
                    headers = local_fallback.served_remotely(rec.provider, reason, plan.dropped)
                    # One attempt, as SIE makes it: its failure restores the local refusal,
                    # which carries its own Retry-After.
                    rec.outcome = await _remote(
                        gw,
                        call,
                        req,
                        target,
                        (*headers, *guard_headers),
                        drop=plan.dropped,
                        retry="none",
                    )
                except GatewayError as e:
                    # Nothing reached the client: the local refusal answers, saying why.
                    raise local_fallback.restored(refusal, reason, e) from None
            else:
                rec.outcome = served
        else:
            assert target is not None
            rec.provider = target.target.provider.id
            if forbid:
                raise remote_target_forbidden()
            # A local model's remote profile, named: served remotely, no fallback reason.
            headers = local_fallback.served_remotely(rec.provider, None) if named else ()
            rec.outcome = await _remote(gw, call, req, target, (*headers, *guard_headers))


def _alias(gw: Gateway, call: Call, model: str) -> Pool | None:
    """The routing alias `model` names exactly (never with `?provider=`), allowed as sent."""
    if gw.router is None or call.provider_param() is not None:
        return None
    pool = gw.router.pool(model)
    if pool is not None:
        gw.resolver.check_name_allowed(model)
    return pool


async def _deployment(
    gw: Gateway,
    call: Call,
    req: ParsedRequest,
    forbid: bool,
    d: Deployment,
    screen: Screen,
    extra: Headers = (),
) -> Outcome:
    """One attempt of a routed request: deployment `d`, local or remote, as if named;
    `extra`: response headers of the request's own (the guardrails' warning). With tracing
    on, one `route.attempt` span (its upstream attempts are its siblings)."""
    if call.trace is None:
        return await _attempt(gw, call, req, forbid, d, screen, extra)
    attrs = {"gen_ai.provider.name": d.provider, "gen_ai.request.model": d.model[:256]}
    with call.trace.span("route.attempt", **attrs):
        return await _attempt(gw, call, req, forbid, d, screen, extra)


async def _attempt(
    gw: Gateway,
    call: Call,
    req: ParsedRequest,
    forbid: bool,
    d: Deployment,
    screen: Screen,
    extra: Headers,
) -> Outcome:
    headers = (*selected_headers(d), *extra)
    if d.provider == LOCAL:
        rt = gw.fleet.models[d.model]
        lreq = _local_check(gw, call, rt, forbid)(req)
        served = await _serve_local(gw, call, req, rt, lreq, forbid, headers, screen)
        if not isinstance(served, local.NoLocalWorker):
            return served
        if screen.last:
            raise local_fallback.refusal(rt, served.reason)
        raise Failover("no_worker")
    if forbid:  # X-SIE-Remote: forbid passes over the remote deployments
        if screen.last:
            raise remote_target_forbidden()
        raise Failover("remote_forbidden")
    remote = Remote(gw.resolver.target(d.provider, param="model"), d.model)
    return await _remote(gw, call, req, remote, headers, screen=screen)


def _target(gw: Gateway, call: Call, model: str) -> tuple[Local | Remote, bool]:
    """Where the request goes, and whether it named a local model's profile
    (`model:profile`, served as written: never a fallback)."""
    named = named_profile(gw.fleet.models, model) if call.provider_param() is None else None
    if named is None:
        return gw.resolver.generation(model, call.provider_param()), False
    rt, remote = named
    gw.resolver.check_allowed("local", rt.profile.name)
    if remote:
        assert rt.profile.remote_fallback is not None
        return gw.resolver.remote(rt.profile.remote_fallback, None), True
    return Local(rt), True


async def _remote(
    gw: Gateway,
    call: Call,
    req: ParsedRequest,
    remote: Remote,
    response_headers: Headers,
    drop: tuple[str, ...] = (),
    screen: Screen | None = None,
    retry: RetryScope = "all",
) -> Outcome:
    """`drop`: fields left out of the body (a local model's fallback), not refused;
    `screen`: model routing's look at the answer head (edgegw.routing.router), whose
    router fails over instead of retrying in place; `retry`: edgegw.retry's scope."""
    chat = req.endpoint == "chat"
    target = remote.target
    provider = target.provider
    if req.has_images and not gw.settings.enable_vision:
        raise fail(
            "vision_disabled",
            "Image content is not accepted: vision is disabled on this gateway "
            "(ENABLE_VISION=true enables it).",
            param="messages",
        )
    _refuse_unsupported(tuple(f for f in req.remote_unsupported if f not in drop), req.features)
    assert remote.model is not None
    offered = mcp_agent.offer(gw.mcp, call, req)
    body, ask_usage = provider_body(
        req, target, remote.model, drop, None if offered is None else offered.json
    )
    up = UpstreamRequest(
        origin=target.origin,
        target=target.path(provider.chat_path if chat else provider.completions_path),
        headers=target.sse_headers if req.stream else target.json_headers,
        body=body,
        secret=target.secret,
        screen=screen,
        hidden_usage=ask_usage,
        retry=retry if screen is None else "none",
    )
    guard = _guard(gw, call, req)
    if offered is not None:
        assert gw.mcp is not None
        if screen is not None:
            # Tools may have run before an upstream fails: the request is not tried twice.
            up.screen, screen.last = None, True
        model = RemoteModel(gw.exchanges, up)
        served = await mcp_agent.run(
            gw.exchanges,
            gw.mcp,
            offered,
            model,
            call,
            up.body,
            req.stream,
            response_headers,
            inspect=None if guard is None else guard.post_call,
            tool_check=None if guard is None else guard.tool,
        )
        assert isinstance(served, Outcome)  # only a local model goes unserved
        outcome = served
    elif req.stream:
        outcome = await gw.exchanges.relay_sse(
            call,
            up,
            response_headers=response_headers,
            check=None if guard is None else guard.stream(),
        )
    else:
        outcome = await gw.exchanges.forward(
            call,
            up,
            response_headers=response_headers,
            inspect=None if guard is None else guard.post_call,
        )
    if outcome.error is not None:
        # The stream's end decides what is recorded: an upstream failure's 5xx, a
        # guardrails block's 403 (the head said 200).
        outcome.status = CATALOGUE.get(outcome.error, (502,))[0]
    return outcome


def _local_check(
    gw: Gateway, call: Call, rt: LocalRuntime, forbid: bool
) -> Callable[[ParsedRequest], LocalRequest]:
    """The SIE contract's check of a request to local model `rt` (`forbid`: X-SIE-Remote's)."""

    def check(r: ParsedRequest) -> LocalRequest:
        return check_request(
            call,
            r,
            rt,
            default_max_tokens=gw.settings.default_max_tokens,
            sdk_versions=gw.sdk_versions,
            forbid_remote=forbid,
            gpu_aliases=gw.settings.gpu_aliases,
        )

    return check


async def _serve_local(
    gw: Gateway,
    call: Call,
    req: ParsedRequest,
    rt: LocalRuntime,
    lreq: LocalRequest,
    forbid: bool,
    headers: Headers,
    screen: Screen | None = None,
) -> Outcome | local.NoLocalWorker:
    """A checked request on local model `rt`'s workers, through the MCP loop when MCP
    tools are offered (a routed attempt is then its last: tools may run)."""
    offered = mcp_agent.offer(gw.mcp, call, req) if rt.profile.tools else None
    if offered is None:
        guard = _guard(gw, call, req)
        return await local.serve(
            gw.exchanges,
            gw.fleet,
            call,
            req,
            rt,
            lreq,
            headers,
            inspect=None if guard is None else guard.post_call,
            check=None if guard is None else guard.stream(),
        )
    if screen is not None:
        screen.last = True  # tools may run: the request is not tried twice
    return await _local_mcp(gw, call, req, rt, offered, forbid, headers)


async def _local_mcp(
    gw: Gateway,
    call: Call,
    req: ParsedRequest,
    rt: LocalRuntime,
    offered: Offered,
    forbid: bool,
    response_headers: Headers = (),
) -> Outcome | local.NoLocalWorker:
    """A local chat request with MCP tools: every round served as the client's request is,
    checked by the SIE contract (the tools added count against the profile's caps)."""
    assert gw.mcp is not None
    model = LocalModel(gw.exchanges, gw.fleet, rt, _local_check(gw, call, rt, forbid))
    first = req.upstream_body(req.model, tools=offered.json, keep=LOCAL_MESSAGE_MEMBERS)
    guard = _guard(gw, call, req)
    return await mcp_agent.run(
        gw.exchanges,
        gw.mcp,
        offered,
        model,
        call,
        first,
        req.stream,
        response_headers,
        tool_check=None if guard is None else guard.tool,
    )


def _guard(gw: Gateway, call: Call, req: ParsedRequest) -> RequestGuard | None:
    """The guardrails of a chat or completions request (None when they are off)."""
    return guard_request(
        gw.guardrails, call, CHAT if req.endpoint == "chat" else COMPLETIONS, req.model
    )


def _refuse_unsupported(fields: tuple[str, ...], features: tuple[str, ...]) -> None:
    """SIE extensions a remote provider cannot honour (the Rust tables say which): refused,
    never silently dropped."""
    for name in fields:
        raise unsupported_field(name)
    for feature in features:
        raise unsupported_field(
            "response_format.type",
            f"'{feature.partition('.')[2]}' response formats are not supported by the selected provider",
        )
