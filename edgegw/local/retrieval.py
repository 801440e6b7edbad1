"""Embeddings and rerank on a local model's SGLang workers (`--is-embedding`): the profile's
checks (its `kind`, the inputs' tokens against the context window), then one whole
request to a worker chosen as local generation chooses (edgegw.local.fleet: the pool of
`X-SIE-Pool` / `X-SIE-MACHINE-PROFILE`, the affinity-free least loaded, healthy and listing
the model), tried on the next worker when one fails before answering. When none can
serve, `serve()` says why (`NoLocalWorker`, SIE's fallback reason); the route decides what
follows (the profile's remote fallback, or the local refusal).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from edgegw.asgi import Call, new_request_id
from edgegw.errors import GatewayError, fail
from edgegw.exchange import Exchanges, send_traced
from edgegw.local.contract import placement
from edgegw.local.fleet import Fleet, LocalRuntime, unavailable
from edgegw.local.serve import RETRYABLE, NoLocalWorker, overall_timeout
from edgegw.local.sglang import worker_error
from edgegw.retrieval import EmbeddingsRequest

log = logging.getLogger("edgegw.local")

EMBEDDINGS_PATH = b"/v1/embeddings"
RERANK_PATH = b"/v1/rerank"


@dataclass(frozen=True, slots=True)
class Answered:
    """A worker's 200 answer, and the SIE request id it was sent with."""

    payload: bytes
    rid: str


def check_embeddings(req: EmbeddingsRequest, rt: LocalRuntime) -> None:
    """Every input within the model's context window: token arrays by their length (and
    ids below the vocabulary), texts counted with the profile's tokenizer when it has one."""
    window = rt.context_window
    if req.tokens:
        vocab = rt.vocab_size or (rt.tokenizer.get_vocab_size() if rt.tokenizer else None)
        for i, ids in enumerate(req.inputs):
            assert isinstance(ids, list)
            if window and len(ids) > window:
                raise _too_long(i, len(ids), window)
            if vocab and max(ids) >= vocab:
                raise fail(
                    "invalid_request",
                    f"'input' token ids must be below the vocabulary size ({vocab})",
                    param="input",
                )
        return
    tok = rt.tokenizer
    if not window or tok is None:
        return
    texts = [t for t in req.inputs if isinstance(t, str)]
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=True)):
        if len(enc.ids) > window:
            raise _too_long(i, len(enc.ids), window)


def _too_long(i: int, tokens: int, window: int) -> GatewayError:
    return fail(
        "input_too_long",
        f"input {i} has {tokens} tokens; the model's context window is {window}",
        param="input",
    )


async def serve(
    exchanges: Exchanges,
    fleet: Fleet,
    call: Call,
    rt: LocalRuntime,
    path: bytes,
    body: bytes,
    gpu_aliases: Mapping[str, str],
) -> Answered | NoLocalWorker | None:
    """One request (`body`, already in the worker's shape) to `path` on a worker of `rt`;
    None when the client went away first (the worker's request is closed with the scope)."""
    pool, machine = placement(call, gpu_aliases)
    candidates = fleet.candidates(rt, pool, machine)
    if (pool or machine) and not candidates:
        param = "X-SIE-MACHINE-PROFILE" if machine else "X-SIE-Pool"
        raise fail("invalid_request", "no such pool or machine profile for this model", param=param)
    rid = new_request_id() if call.client_request_id else call.request_id
    overall_s = rt.profile.timeouts.overall_s
    exclude: set[int] = set()
    reason: str | None = None
    with exchanges.open(call, overall_s) as ex:
        while (worker := fleet.pick(candidates, None, exclude)) is not None:
            exclude.add(id(worker))
            worker.in_flight += 1
            headers = [
                (b"content-type", b"application/json"),
                (b"accept", b"application/json"),
                (b"x-request-id", rid.encode()),
            ]
            try:
                resp = await send_traced(
                    exchanges.pool,
                    call,
                    worker.origin,
                    b"POST",
                    worker.origin.base_path.encode() + path,
                    headers,
                    body,
                )
                try:
                    payload = await resp.read(exchanges.max_response_bytes)
                finally:
                    await resp.aclose()
            except GatewayError as e:
                log.warning("worker %s failed (%s); trying another", worker.worker.url, e.code)
                worker.healthy = False
                reason = "unhealthy"
                continue
            finally:
                worker.in_flight -= 1
            if resp.status == 200:
                return Answered(payload, rid)
            if resp.status in RETRYABLE:
                log.warning("worker %s answered %d; trying another", worker.worker.url, resp.status)
                reason = "saturated" if resp.status in (429, 503) else "unhealthy"
                continue
            raise worker_error(resp.status, payload)
    if not ex.raise_unless_answerable(overall_timeout):
        return None  # the client went away: nobody to answer
    return NoLocalWorker(reason or unavailable(candidates))
