"""POST /v1/embeddings and /v1/rerank, in three steps, as generation's:

  read   the body, checked (edgegw.retrieval: strict JSON in the Rust core, the route's
         field table, the input bounds: 400), then the guardrails' pre_call on it (its
         texts: a block is 403, a redaction rewrites them and the body is checked again);
         no post_call: an answer of vectors or scores carries no text, and the documents a
         rerank answer repeats are the request's, judged on the way in;
  decide where it goes (edgegw.resolve, as a chat request): `?provider=`, a local model's
         name, or `provider/model` (routing aliases name generation deployments only);
  do     a local model's workers (its profile's `kind` must be the route's; SIE's
         disclosure headers, and on no worker the profile's remote fallback when its
         triggers list the reason), or a remote provider with the API (its record's
         `embeddings_path` / `rerank_path`; 400 `unsupported_provider` without).
`Recording` (edgegw.routes.record) admits the caller's tenant once decided (its scope and
limits: 403 / 429) and records each once: operation `embeddings` or `rerank`, the provider,
status and usage, the span.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from edgegw.answer import Outcome
from edgegw.asgi import Call
from edgegw.errors import GatewayError, Headers, fail
from edgegw.exchange import RetryScope, UpstreamRequest
from edgegw.gateway import Gateway
from edgegw.guardrails import apis
from edgegw.guardrails.apis import GuardedApi
from edgegw.guardrails.route import guard_request
from edgegw.local import fallback as local_fallback
from edgegw.local import retrieval as local
from edgegw.local.contract import check_kind, remote_forbidden, remote_target_forbidden
from edgegw.local.fleet import LocalRuntime
from edgegw.local.serve import NoLocalWorker
from edgegw.resolve import Local, Remote
from edgegw.retrieval import (
    EmbeddingsRequest,
    RerankRequest,
    embeddings_answer,
    parse_embeddings,
    parse_rerank,
    rerank_answer,
)
from edgegw.routes.record import Recording

Request = EmbeddingsRequest | RerankRequest


@dataclass(frozen=True, slots=True)
class RetrievalApi:
    """What differs between the two routes."""

    route: str
    operation: str  # telemetry's gen_ai.operation.name
    kind: str  # the local profile kind that serves it
    guarded: GuardedApi
    local_path: bytes
    parse: Callable[[Gateway, bytes], Request]


def _parse_embeddings(gw: Gateway, body: bytes) -> Request:
    s = gw.settings
    return parse_embeddings(
        body, max_inputs=s.embeddings_max_inputs, max_input_bytes=s.retrieval_max_input_bytes
    )


def _parse_rerank(gw: Gateway, body: bytes) -> Request:
    s = gw.settings
    return parse_rerank(
        body, max_documents=s.rerank_max_documents, max_input_bytes=s.retrieval_max_input_bytes
    )


EMBEDDINGS = RetrievalApi(
    "/v1/embeddings",
    "embeddings",
    "embedding",
    apis.EMBEDDINGS,
    local.EMBEDDINGS_PATH,
    _parse_embeddings,
)
RERANK = RetrievalApi(
    "/v1/rerank", "rerank", "rerank", apis.RERANK, local.RERANK_PATH, _parse_rerank
)


async def embeddings(gw: Gateway, call: Call) -> None:
    await _retrieval(gw, call, EMBEDDINGS)


async def rerank(gw: Gateway, call: Call) -> None:
    await _retrieval(gw, call, RERANK)


async def _retrieval(gw: Gateway, call: Call, api: RetrievalApi) -> None:
    body = await call.read_body(gw.settings.max_body_bytes)
    req = _parse_traced(gw, call, api, body)
    with Recording(gw, call, req.model, api.operation, False) as rec:
        extra: Headers = ()
        guard = guard_request(gw.guardrails, call, api.guarded, req.model)
        if guard is not None:
            forwarded, extra = await guard.pre_call(body)
            if forwarded is not body:  # redacted: checked again (its model is the same)
                req = api.parse(gw, forwarded)
        forbid = remote_forbidden(call)
        target = _decide_traced(gw, call, req.model)
        # The tenant's scope judges the local model's or `provider/model`'s name; the
        # estimate is the body's bytes (a token is at least a byte), with no answer tokens.
        scoped = (
            target.runtime.profile.name
            if isinstance(target, Local)
            else f"{target.target.provider.id}/{target.model}"
        )
        await rec.admit(scoped, len(body), 0)
        if isinstance(target, Local):
            rec.provider = "local"
            rec.outcome = await _local(gw, call, api, req, target.runtime, forbid, extra, rec)
            return
        if forbid:
            raise remote_target_forbidden()
        rec.provider = target.target.provider.id
        rec.outcome = await _remote(gw, call, api, req, target, extra)


def _parse_traced(gw: Gateway, call: Call, api: RetrievalApi, body: bytes) -> Request:
    """The body checked, with tracing on recorded as the `parse` span (chat's)."""
    trace = call.trace
    if trace is None:
        return api.parse(gw, body)
    started = time.time_ns()
    try:
        req = api.parse(gw, body)
    except BaseException as e:
        trace.parsed(started, body, e)
        raise
    trace.parsed(started, body)
    return req


def _decide_traced(gw: Gateway, call: Call, model: str) -> Local | Remote:
    """Where the request goes (edgegw.resolve), with tracing on as the `route` span."""
    trace = call.trace
    if trace is None:
        return gw.resolver.generation(model, call.provider_param())
    started = time.time_ns()
    try:
        target = gw.resolver.generation(model, call.provider_param())
    except BaseException as e:
        trace.route(started, model, None, False, e)
        raise
    trace.route(
        started, model, "local" if isinstance(target, Local) else target.target.provider.id, False
    )
    return target


async def _local(
    gw: Gateway,
    call: Call,
    api: RetrievalApi,
    req: Request,
    rt: LocalRuntime,
    forbid: bool,
    extra: Headers,
    rec: Recording,
) -> Outcome:
    check_kind(rt, api.kind, api.route)
    if isinstance(req, EmbeddingsRequest):
        if rt.tokenizer is not None and not req.tokens:
            # Counting 2,048 texts' tokens takes a while: off the event loop.
            await trio.to_thread.run_sync(local.check_embeddings, req, rt)
        else:
            local.check_embeddings(req, rt)
    name = rt.profile.name
    served = await local.serve(
        gw.exchanges,
        gw.fleet,
        call,
        rt,
        api.local_path,
        req.local_body(rt.profile.served_name),
        gw.settings.gpu_aliases,
    )
    if served is None:
        return Outcome(client_gone=True)
    if isinstance(served, local.Answered):
        if isinstance(req, EmbeddingsRequest):
            payload, usage = embeddings_answer(
                served.payload, encode=req.encoding_format == "base64", model=name
            )
        else:
            payload, usage = rerank_answer(
                served.payload, req, model=name, answer_id=f"rerank-{served.rid}"
            )
        headers = ((b"x-sie-served-by", b"local"), (b"x-sie-request-id", served.rid.encode()))
        await call.respond_json(200, payload, (*headers, *extra))
        return Outcome(usage=usage, response_model=name)
    return await _fallback(gw, call, api, req, rt, served, forbid, extra, rec)


async def _fallback(
    gw: Gateway,
    call: Call,
    api: RetrievalApi,
    req: Request,
    rt: LocalRuntime,
    served: NoLocalWorker,
    forbid: bool,
    extra: Headers,
    rec: Recording,
) -> Outcome:
    """No worker could serve: the profile's remote fallback when its triggers list the
    reason (one attempt, as generation's), else the local refusal."""
    reason = served.reason
    refusal = local_fallback.refusal(rt, reason)
    fallback = rt.profile.remote_fallback
    if fallback is None or forbid or reason not in rt.profile.triggers:
        raise refusal
    if call.trace is not None:
        call.trace.fallback(reason, fallback)
    try:
        remote = gw.resolver.remote(fallback, None)
        rec.provider = remote.target.provider.id
        headers = local_fallback.served_remotely(rec.provider, reason)
        return await _remote(gw, call, api, req, remote, (*headers, *extra), retry="none")
    except GatewayError as e:
        # Nothing reached the client: the local refusal answers, saying why.
        raise local_fallback.restored(refusal, reason, e) from None


async def _remote(
    gw: Gateway,
    call: Call,
    api: RetrievalApi,
    req: Request,
    remote: Remote,
    extra: Headers,
    retry: RetryScope = "all",
) -> Outcome:
    """A remote provider's endpoint for the route, and its answer in the route's shape."""
    target = remote.target
    provider = target.provider
    assert remote.model is not None
    path = provider.embeddings_path if api is EMBEDDINGS else provider.rerank_path
    if path is None:
        what = "an embeddings" if api is EMBEDDINGS else "a rerank"
        raise fail(
            "unsupported_provider",
            f"Provider '{provider.id}' has no {what} API that edgegw can reach "
            f"(README: Embeddings and rerank).",
            param="model",
        )
    seen: dict[str, Any] = {}
    if isinstance(req, EmbeddingsRequest):
        body, encode = req.upstream_body(remote.model, provider)

        async def normalize(payload: bytes) -> tuple[bytes, Headers]:
            out, seen["usage"] = embeddings_answer(payload, encode=True, model=None)
            return out, ()

        # An answer in the format the client asked for is relayed as it came.
        inspect = normalize if encode else None
    else:
        body = req.upstream_body(remote.model)
        rerank_req = req

        async def inspect(payload: bytes) -> tuple[bytes, Headers]:
            out, seen["usage"] = rerank_answer(
                payload, rerank_req, model=rerank_req.model, answer_id=f"rerank-{call.request_id}"
            )
            return out, ()

    up = UpstreamRequest(
        origin=target.origin,
        target=target.path(path),
        headers=target.json_headers,
        body=body,
        secret=target.secret,
        retry=retry,  # the same answer for the same inputs: safe to send again
    )
    outcome = await gw.exchanges.forward(call, up, response_headers=extra, inspect=inspect)
    if "usage" in seen:
        outcome.usage = seen["usage"]
    return outcome
