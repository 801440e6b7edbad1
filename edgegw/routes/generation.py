"""POST /v1/chat/completions and /v1/completions: the generation route, in three steps.

  read   the body (under SERVER_MAX_REQUEST_BODY_SIZE), parsed and validated by the Rust
         core (400 `invalid_request` / `unsupported_field`), then the guardrails' pre_call
         for every target (block 403; redacted, the body is parsed again);
  decide where it goes (`_decide`, before anything is sent, the `route` span): a routing
         alias (`Routed`), a local model checked by the SIE contract with the remote
         fallback it may take (`ServedLocally`), or a remote provider (`ServedRemotely`);
  admit  the caller's tenant checks the plan's model against its scope and charges its
         limits (`rec.admit`, edgegw.tenants; 403 / 429);
  do     the plan once (`_do`): an alias's deployments as its router hands them out, each
         as if named (X-Selected-* headers); a local model's workers, and with none able to
         serve the profile's `remote_fallback` when its triggers list the reason (SIE's
         disclosure headers; the local refusal answers a failed remote attempt); a remote
         provider (edgegw.routes.serving: the body the provider takes, its answer relayed
         and judged by the guardrails' post_call).
`Recording` (edgegw.routes.record) records what happened once, whatever ended it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial

from edgegw._core import ParsedRequest, parse_chat_request, parse_completions_request
from edgegw.answer import Outcome
from edgegw.asgi import Call
from edgegw.errors import GatewayError, Headers
from edgegw.gateway import Gateway
from edgegw.local import fallback as local_fallback
from edgegw.local import serve as local
from edgegw.local.contract import (
    LocalRequest,
    named_profile,
    remote_forbidden,
    remote_target_forbidden,
)
from edgegw.local.fleet import LocalRuntime
from edgegw.resolve import Local, Remote
from edgegw.routes.record import Recording
from edgegw.routes.serving import local_check, request_guard, serve_local, serve_remote
from edgegw.routing.config import LOCAL, Deployment
from edgegw.routing.router import Failover, Pool, Screen, selected_headers

log = logging.getLogger("edgegw.app")


async def _generation(parse: Callable[[bytes], ParsedRequest], gw: Gateway, call: Call) -> None:
    body = await call.read_body(gw.settings.max_body_bytes)
    req = parse(body) if call.trace is None else parse_traced(call, parse, body)
    operation = "chat" if req.endpoint == "chat" else "text_completion"
    with Recording(gw, call, req.model, operation, req.stream) as rec:
        rec.outcome = await generate(gw, call, req, body, parse, rec)


# Partials, not wrappers: a coroutine less a request (positional: a keyword would make
# each call merge two dicts).
chat_completions = partial(_generation, parse_chat_request)
completions = partial(_generation, parse_completions_request)


async def generate(
    gw: Gateway,
    call: Call,
    req: ParsedRequest,
    body: bytes,
    parse: Callable[[bytes], ParsedRequest],
    rec: Recording,
) -> Outcome:
    """A parsed request (`body` its bytes) judged, decided and done: what chat and
    completions do once read, and what a translated Messages or Responses request does
    (edgegw.routes.translated)."""
    guard_headers: Headers = ()
    if gw.guardrails is not None and (guard := request_guard(gw, call, req)) is not None:
        # pre_call, for every target: a block is raised (403); redacted, the body is
        # parsed again (its model is the same), so what is forwarded is the new one.
        forwarded, guard_headers = await guard.pre_call(body)
        if forwarded is not body:
            req = parse(forwarded)
    plan = _decide(gw, call, req) if call.trace is None else _decide_traced(gw, call, req)
    await rec.admit(_scoped(plan, req), _prompt_tokens(plan, body), _max_tokens(gw, req))
    return await _do(gw, call, req, plan, guard_headers, rec)


def parse_traced(call: Call, parse: Callable[[bytes], ParsedRequest], body: bytes) -> ParsedRequest:
    """`parse(body)`, with tracing on recorded whole as the `parse` span and the prompt
    event (one call)."""
    trace = call.trace
    if trace is None:
        return parse(body)
    started = time.time_ns()
    try:
        req = parse(body)
    except BaseException as e:
        trace.parsed(started, body, e)
        raise
    trace.parsed(started, body)
    return req


# -- decide: where the request goes, before anything is sent -------------------------------


# The plans are not frozen: edgegw.resolve.Remote says why.
@dataclass(slots=True)
class Routed:
    """A routing alias: its deployments tried in turn (edgegw.routing.router)."""

    pool: Pool
    forbid: bool  # X-SIE-Remote: forbid


@dataclass(slots=True)
class ServedLocally:
    """A local model, checked by the SIE contract; `fallback` is the profile's remote
    model when the request may fall back to it (never for `model:profile`, nor under
    X-SIE-Remote: forbid, nor for a request the remote cannot answer)."""

    rt: LocalRuntime
    lreq: LocalRequest
    forbid: bool  # X-SIE-Remote: forbid
    named: bool  # `model:profile`: served as written
    fallback: str | None
    dropped: tuple[str, ...]


@dataclass(slots=True)
class ServedRemotely:
    remote: Remote
    headers: Headers  # a local model's remote profile, named: SIE's disclosure


Plan = Routed | ServedLocally | ServedRemotely


def _decide_traced(gw: Gateway, call: Call, req: ParsedRequest) -> Plan:
    """`_decide` recorded whole as the `route` span (a traced request's)."""
    trace = call.trace
    assert trace is not None
    started = time.time_ns()
    try:
        plan = _decide(gw, call, req)
    except BaseException as e:
        trace.route(started, req.model, None, False, e)
        raise
    if isinstance(plan, Routed):
        trace.route(started, req.model, "alias", False)
    elif isinstance(plan, ServedLocally):
        trace.route(started, req.model, "local", plan.named)
    else:
        trace.route(started, req.model, plan.remote.target.provider.id, bool(plan.headers))
    return plan


def _decide(gw: Gateway, call: Call, req: ParsedRequest) -> Plan:
    # SIE: the header is checked for every target; `forbid` refuses a remote one.
    forbid = remote_forbidden(call)
    if (pool := _alias(gw, call, req.model)) is not None:
        return Routed(pool, forbid)
    target, named = _target(gw, call, req.model)
    if isinstance(target, Local):
        rt = target.runtime
        lreq = local_check(gw, call, rt, forbid)(req)
        plan = local_fallback.remote_plan(req)
        fallback = rt.profile.remote_fallback
        if named or lreq.forbid_remote or not plan.eligible:
            fallback = None
        return ServedLocally(rt, lreq, forbid, named, fallback, plan.dropped)
    if forbid:
        raise remote_target_forbidden()
    provider = target.target.provider.id
    # A local model's remote profile, named: served remotely, no fallback reason.
    return ServedRemotely(target, local_fallback.served_remotely(provider, None) if named else ())


def _scoped(plan: Plan, req: ParsedRequest) -> str:
    """The name a tenant's model scope judges: the alias, the local model, or
    `provider/model`."""
    if isinstance(plan, ServedRemotely):
        return f"{plan.remote.target.provider.id}/{plan.remote.model}"
    if isinstance(plan, ServedLocally):
        return plan.rt.profile.name
    return req.model


def _prompt_tokens(plan: Plan, body: bytes) -> int:
    """The prompt's tokens for the tenant's estimate: a local model's tokenizer's count,
    else the body's length in bytes (a token is at least a byte of the prompt's text)."""
    if isinstance(plan, ServedLocally) and plan.lreq.prompt_tokens is not None:
        return plan.lreq.prompt_tokens
    return len(body)


def _max_tokens(gw: Gateway, req: ParsedRequest) -> int:
    """The answer's token bound for the tenant's estimate (settled with the usage)."""
    choices = req.n  # at least 1; best_of, when set, at least n (the core's rules)
    if req.best_of is not None and req.best_of > choices:
        choices = req.best_of
    return (req.max_tokens or gw.settings.default_max_tokens) * choices


# -- do: one execution of the plan ---------------------------------------------------------


async def _do(
    gw: Gateway, call: Call, req: ParsedRequest, plan: Plan, extra: Headers, rec: Recording
) -> Outcome:
    """`extra`: the request's own response headers (the guardrails' warning)."""
    if isinstance(plan, ServedRemotely):
        rec.provider = plan.remote.target.provider.id
        return await serve_remote(gw, call, req, plan.remote, (*plan.headers, *extra))
    if isinstance(plan, Routed):
        return await _routed(gw, call, req, plan, extra, rec)
    rec.provider = "local"
    rt = plan.rt
    served = await serve_local(gw, call, req, rt, plan.lreq, plan.forbid, extra)
    if not isinstance(served, local.NoLocalWorker):
        return served
    reason = served.reason
    refusal = local_fallback.refusal(rt, reason)
    if plan.fallback is None or reason not in rt.profile.triggers:
        raise refusal
    if call.trace is not None:
        call.trace.fallback(reason, plan.fallback)
    try:
        # A fallback names its provider in the profile; ?provider= only routes client models.
        remote = gw.resolver.remote(plan.fallback, None)
        rec.provider = remote.target.provider.id
        headers = local_fallback.served_remotely(rec.provider, reason, plan.dropped)
        # One attempt, as SIE makes it: its failure restores the local refusal, which
        # carries its own Retry-After.
        return await serve_remote(
            gw, call, req, remote, (*headers, *extra), drop=plan.dropped, retry="none"
        )
    except GatewayError as e:
        # Nothing reached the client: the local refusal answers, saying why.
        raise local_fallback.restored(refusal, reason, e) from None


async def _routed(
    gw: Gateway, call: Call, req: ParsedRequest, plan: Routed, extra: Headers, rec: Recording
) -> Outcome:
    """An alias: each deployment the router hands out tried as if named, until one
    answers (edgegw.routing.router says when a failure moves on)."""
    assert gw.router is not None
    trip = gw.router.trip(plan.pool)
    try:
        async with aclosing(trip.attempts()) as attempts:
            async for attempt in attempts:
                try:
                    outcome = await _deployment(
                        gw, call, req, plan.forbid, attempt.deployment, attempt.screen, extra
                    )
                except BaseException as e:
                    if attempt.failed(e):
                        continue
                    raise
                return attempt.finished(outcome)
        raise trip.unavailable()
    finally:
        rec.provider = "unknown" if trip.selected is None else trip.selected.provider


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
    """One attempt of a routed request: deployment `d`, local or remote, as if named.
    With tracing on, one `route.attempt` span (its upstream attempts are its siblings)."""
    if call.trace is None:
        return await _attempt(gw, call, req, forbid, d, screen, extra)
    with call.trace.route_attempt(d.provider, d.model):
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
        lreq = local_check(gw, call, rt, forbid)(req)
        served = await serve_local(gw, call, req, rt, lreq, forbid, headers, screen)
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
    return await serve_remote(gw, call, req, remote, headers, screen=screen)


def _target(gw: Gateway, call: Call, model: str) -> tuple[Local | Remote, bool]:
    """Where the request goes, and whether it named a local model's profile
    (`model:profile`, served as written: never a fallback)."""
    param = call.provider_param()
    models = gw.fleet.models
    named = named_profile(models, model) if param is None and models else None
    if named is None:
        return gw.resolver.generation(model, param), False
    rt, remote = named
    gw.resolver.check_allowed("local", rt.profile.name)
    if remote:
        assert rt.profile.remote_fallback is not None
        return gw.resolver.remote(rt.profile.remote_fallback, None), True
    return Local(rt), True
