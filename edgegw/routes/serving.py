"""How the generation route serves a decided request (edgegw.routes.generation): on a
remote provider (`remote`: the body the provider takes, forwarded or relayed, through the
MCP loop when tools are offered), on a local model's workers (`serve_local`, after the SIE
contract's `local_check`), with the request's guardrails (`guard`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from edgegw._core import ParsedRequest
from edgegw.answer import Outcome
from edgegw.asgi import Call
from edgegw.errors import CATALOGUE, Headers, fail, unsupported_field
from edgegw.exchange import RetryScope, UpstreamRequest
from edgegw.gateway import Gateway
from edgegw.guardrails.apis import CHAT, COMPLETIONS
from edgegw.guardrails.route import RequestGuard, guard_request
from edgegw.local import serve as local
from edgegw.local.contract import (
    LOCAL_MESSAGE_MEMBERS,
    LocalRequest,
    check_request,
)
from edgegw.local.fleet import LocalRuntime
from edgegw.mcp import agent as mcp_agent
from edgegw.mcp.models import RemoteModel, Unserved
from edgegw.mcp.tools import Offered
from edgegw.providers import provider_body
from edgegw.resolve import Remote
from edgegw.routes.mcp_local import LocalWorkerModel
from edgegw.routing.router import Screen

log = logging.getLogger("edgegw.app")


async def serve_remote(
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
    unsupported = req.remote_unsupported
    if drop:
        unsupported = tuple(f for f in unsupported if f not in drop)
    if unsupported or req.features:
        refuse_unsupported(unsupported, req.features)
    assert remote.model is not None
    offered = None if gw.mcp is None else mcp_agent.offer(gw.mcp, call, req)
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
    guard = None if gw.guardrails is None else request_guard(gw, call, req)
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


def local_check(
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


async def serve_local(
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
        guard = request_guard(gw, call, req)
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
    return await local_mcp(gw, call, req, rt, offered, forbid, headers)


async def local_mcp(
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
    model = LocalWorkerModel(gw.exchanges, gw.fleet, rt, local_check(gw, call, rt, forbid))
    first = req.upstream_body(req.model, tools=offered.json, keep=LOCAL_MESSAGE_MEMBERS)
    guard = request_guard(gw, call, req)
    served = await mcp_agent.run(
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
    return local.NoLocalWorker(served.reason) if isinstance(served, Unserved) else served


def request_guard(gw: Gateway, call: Call, req: ParsedRequest) -> RequestGuard | None:
    """The guardrails of a chat or completions request (None when they are off)."""
    return guard_request(
        gw.guardrails, call, CHAT if req.endpoint == "chat" else COMPLETIONS, req.model
    )


def refuse_unsupported(fields: tuple[str, ...], features: tuple[str, ...]) -> None:
    """SIE extensions a remote provider cannot honour (the Rust tables say which): refused,
    never silently dropped."""
    for name in fields:
        raise unsupported_field(name)
    for feature in features:
        raise unsupported_field(
            "response_format.type",
            f"'{feature.partition('.')[2]}' response formats are not supported by the selected provider",
        )
