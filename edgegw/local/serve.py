"""Serving a local model on its SGLang workers: choose a worker, send, relay the answer in
the SIE shapes. The contract checks come first (edgegw.local.contract), the translation is
edgegw.local.sglang; this module does the I/O.

A worker is healthy, in the request's pool, chosen by rendezvous hashing on the affinity key
or as the least loaded (edgegw.local.fleet). A failure before any byte reached the client is
retried on another worker, never after. When no worker can serve, `serve()` says so and why
(`NoLocalWorker`); the generation route decides what happens next (remote fallback or 503).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import orjson
import trio

from edgegw._core import ParsedRequest, SseSplitter
from edgegw.answer import Outcome, SseWriter, StreamState
from edgegw.asgi import Call, Send, new_request_id
from edgegw.errors import CATALOGUE, GatewayError, Headers, fail
from edgegw.exchange import Exchanges, Inspect, send_traced
from edgegw.local.contract import LocalRequest
from edgegw.local.fleet import Fleet, LocalRuntime, WorkerState, unavailable
from edgegw.local.sglang import (
    ChatStream,
    WorkerFailure,
    answer_tool_names,
    loads_answer,
    normalize_answer,
    overloaded,
    sglang_chat_body,
    sglang_completions_body,
    worker_error,
)
from edgegw.pump import KeepAlive, StreamCheck, pump
from edgegw.upstream import Response

if TYPE_CHECKING:
    from edgegw.telemetry.tracing import Completion

log = logging.getLogger("edgegw.local")

ABORT_TIMEOUT_S = 1.5
# A comment line to the client after this much worker silence: proxies with idle limits
# (nginx's proxy_read_timeout is 60 s, many load balancers 30-60 s) keep the stream, and
# it comes well inside the profile's inter-chunk timeout (SIE's example: 15 s).
KEEPALIVE_S = 5.0
KEEPALIVE = b": keep-alive\n\n"
# SGLang writes its stream's chunked terminator right after [DONE]; a worker slower than
# this, or sending more than the terminator and its trailers, has its connection closed.
TERMINATOR_WAIT_S = 1.0
TERMINATOR_MAX_BYTES = 1024
# retry_after_s in a mid-stream error chunk, for the codes whose retry time is known.
RETRY_AFTER_S = {"shutting_down": 1.0}
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class NoLocalWorker:
    """No worker of the model could take the request; `reason` is SIE's fallback reason
    (`provisioning`, `model_loading`, `saturated`, `unhealthy`; see edgegw.local.fleet)."""

    reason: str


@dataclass(frozen=True, slots=True)
class _Opened:
    worker: WorkerState
    resp: Response
    # A stream's first piece, read before anything reached the client.
    first: bytes


def first_chunk_timeout() -> GatewayError:
    # SIE: a first-chunk timeout is a 504, not a reason to try another worker.
    return fail("first_chunk_timeout", "the model did not start answering in time")


def overall_timeout() -> GatewayError:
    return fail("overall_timeout", "the model did not finish in time")


async def serve(
    exchanges: Exchanges,
    fleet: Fleet,
    call: Call,
    req: ParsedRequest,
    rt: LocalRuntime,
    lreq: LocalRequest,
    response_headers: Headers = (),
    *,
    inspect: Inspect | None = None,
    check: StreamCheck | None = None,
) -> Outcome | NoLocalWorker:
    """`response_headers`: added to the answer (model routing's X-Selected-*); `inspect`
    sees a whole answer and `check` a stream's events before the client does (the
    guardrails' post_call, edgegw.exchange's protocols)."""
    chat = req.endpoint == "chat"
    candidates = fleet.candidates(rt, lreq.pool, lreq.machine_profile)
    if (lreq.pool or lreq.machine_profile) and not candidates:
        if lreq.machine_profile:
            raise fail(
                "transport_failure",
                f"machine profile is not configured for model '{rt.profile.name}'",
                param="X-SIE-MACHINE-PROFILE",
                headers=((b"retry-after", b"5"),),
            )
        raise fail("invalid_request", "no such pool for this model", param="X-SIE-Pool")
    # SIE's request id is the worker's `rid` (aborts match it exactly, SGLang refuses a
    # duplicate): the request's own id, unless the client chose that one.
    rid = new_request_id() if call.client_request_id else call.request_id
    if call.trace is not None and rid != call.request_id:
        call.trace.server.set_attribute("edgegw.sie_request_id", rid)
    stream = req.stream
    make_body = sglang_chat_body if chat else sglang_completions_body
    body = orjson.dumps(make_body(lreq.doc, rt, lreq.cap, rid, stream))
    path = b"/v1/chat/completions" if chat else b"/v1/completions"
    timeouts = rt.profile.timeouts
    started = trio.current_time()
    opened = await _open(
        exchanges, call, fleet, candidates, lreq.key, path, body, stream,
        min(timeouts.first_chunk_s, timeouts.overall_s),
    )  # fmt: skip
    if isinstance(opened, NoLocalWorker):
        return opened
    worker, resp = opened.worker, opened.resp
    extra = (
        (b"x-sie-served-by", b"local"),
        (b"x-sie-request-id", rid.encode()),
        *response_headers,
    )
    outcome = Outcome(response_model=rt.profile.name)
    normalizer = ChatStream(
        rid,
        rt.profile.name,
        req.n,
        req.include_usage,
        "logprobs" in req.fields,
        completions=not chat,
    )
    writer = SieSseWriter(call.send, outcome, extra, normalizer.error_event)
    finished = False
    remaining = max(0.0, started + timeouts.overall_s - trio.current_time())
    try:
        with exchanges.open(call, remaining) as ex:
            try:
                if stream:
                    sink = SieSink(writer, outcome, normalizer, call.trace_content, check)
                    await writer.start()
                    await pump(
                        resp,
                        sink,
                        timeouts.inter_chunk_s,
                        first=opened.first,
                        keepalive=KeepAlive(KEEPALIVE_S, lambda: writer.comment(KEEPALIVE)),
                        stalled=("inter_chunk_timeout", "the worker stopped sending"),
                    )
                    finished = sink.finished
                    if finished and not resp.complete:
                        # The client has its whole stream: a hang-up now ends nothing.
                        ex.answered()
                        await _read_terminator(resp)
                else:
                    payload = await resp.read(exchanges.max_response_bytes)
            finally:
                await resp.aclose()
        if stream:
            await writer.settle(ex, overall_timeout)
        elif ex.raise_unless_answerable(overall_timeout):
            answer = normalize_answer(
                loads_answer(payload),
                rid,
                rt.profile.name,
                req.n,
                req.best_of,
                "logprobs" in req.fields,
                not chat,
            )
            outcome.usage = answer.get("usage")
            outcome.tool_calls = answer_tool_names(answer)
            outcome.finish_reasons = [
                c["finish_reason"]
                for c in answer.get("choices") or ()
                if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)
            ]
            payload = orjson.dumps(answer)
            if inspect is not None:
                payload, added = await inspect(payload)
                extra = (*extra, *added)
            if call.trace_content is not None:
                call.trace_content.answer(payload)
            await call.respond_json(200, payload, extra)
            outcome.first_chunk_at = trio.current_time()
            finished = True
        else:
            outcome.client_gone = True
    finally:
        worker.in_flight -= 1
        if not finished:
            # The worker may still be generating for nobody: abort it by request id, and
            # each candidate by its own id (SGLang re-ids the candidates of n > 1, and
            # matches an abort's id exactly). A non-streaming n > 1 shows no ids: closing
            # its connection makes SGLang abort it.
            with trio.move_on_after(ABORT_TIMEOUT_S, shield=True):
                async with trio.open_nursery() as nursery:
                    for abort_id in {rid} | normalizer.worker_ids:
                        nursery.start_soon(_abort, exchanges, worker, abort_id)
    if writer.state is StreamState.ENDED and outcome.error is not None:
        outcome.status = 502
    return outcome


async def _open(
    exchanges: Exchanges,
    call: Call,
    fleet: Fleet,
    candidates: list[WorkerState],
    key: str | None,
    path: bytes,
    body: bytes,
    stream: bool,
    first_chunk_s: float,
) -> _Opened | NoLocalWorker:
    """A worker's response head (and for a stream its first piece), trying the next worker
    on a failure before any byte reached the client."""
    exclude: set[int] = set()
    # What the attempts found, when they found something (else the workers' states say).
    reason: str | None = None
    while (worker := fleet.pick(candidates, key, exclude)) is not None:
        exclude.add(id(worker))
        worker.in_flight += 1
        headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"text/event-stream" if stream else b"application/json"),
        ]
        # One deadline for the head and, on a stream, its first piece.
        deadline = trio.current_time() + first_chunk_s
        try:
            with trio.fail_at(deadline):
                resp = await send_traced(
                    exchanges.pool,
                    call,
                    worker.origin,
                    b"POST",
                    worker.origin.base_path.encode() + path,
                    headers,
                    body,
                )
        except trio.TooSlowError:
            worker.in_flight -= 1
            raise first_chunk_timeout() from None
        except GatewayError as e:
            worker.in_flight -= 1
            log.warning(
                "worker %s failed before the first byte (%s); trying another",
                worker.worker.url,
                e.code,
            )
            worker.healthy = False
            reason = "unhealthy"
            continue
        if resp.status == 200 and not stream:
            return _Opened(worker, resp, b"")
        if resp.status == 200:
            # SGLang answers a stream it cannot queue with 200 and then an error event (503):
            # read the first piece before anything reaches the client, so that is retried too.
            try:
                with trio.fail_at(deadline):
                    first = await resp.receive_chunk()
            except trio.TooSlowError:
                await resp.aclose()
                worker.in_flight -= 1
                raise first_chunk_timeout() from None
            except GatewayError:
                await resp.aclose()
                worker.in_flight -= 1
                log.warning(
                    "worker %s failed before the first chunk; trying another", worker.worker.url
                )
                reason = "unhealthy"
                continue
            if not overloaded(first):
                return _Opened(worker, resp, first)
            await resp.aclose()
            worker.in_flight -= 1
            log.warning("worker %s is overloaded; trying another", worker.worker.url)
            reason = "saturated"
            continue
        try:
            payload = await resp.read(1 << 20)
        finally:
            await resp.aclose()
            worker.in_flight -= 1
        if resp.status in RETRYABLE:
            log.warning(
                "worker %s answered %d before the first byte; trying another",
                worker.worker.url,
                resp.status,
            )
            reason = "saturated" if resp.status in (429, 503) else "unhealthy"
            continue
        raise worker_error(resp.status, payload)
    return NoLocalWorker(reason or unavailable(candidates))


async def _read_terminator(resp: Response) -> None:
    """What follows a worker's [DONE] (its body's chunked terminator), read so that its
    connection serves the next request; within TERMINATOR_WAIT_S, else it is closed."""
    with trio.move_on_after(TERMINATOR_WAIT_S):
        try:
            await resp.read(TERMINATOR_MAX_BYTES)
        except GatewayError:
            pass  # bytes after [DONE], or a fault: the connection is not kept


@dataclass(slots=True)
class SieSink:
    """A worker's stream (edgegw.pump's sink) rewritten into the SIE shape by `normalizer`;
    it ends at the worker's `[DONE]`. `completion` (TELEMETRY_TRACING_CONTENT) is fed the
    events the client gets; `check` judges them before they go (a verdict against them ends
    the stream with its error). `finished`: the stream ended cleanly."""

    passes_done: ClassVar[bool] = False  # its [DONE] ends the pump, the stream written whole
    writer: SieSseWriter
    outcome: Outcome
    normalizer: ChatStream
    completion: Completion | None = None
    check: StreamCheck | None = None
    splitter: SseSplitter = field(default_factory=SseSplitter)
    finished: bool = False

    async def events(
        self, data: bytes, n: int, done: bool, tapped: list[bytes], last: bool
    ) -> bool:
        normalizer, outcome, check = self.normalizer, self.outcome, self.check
        out: list[bytes] = []
        try:
            for event in self.splitter.feed(data):
                if event.is_done:
                    out += normalizer.close()
                    outcome.usage = normalizer.usage
                    outcome.tool_calls = normalizer.tool_names
                    outcome.finish_reasons = normalizer.finish_reasons
                    data = b"".join(out)
                    if check is not None and (
                        (stop := await check.events(data)) or (stop := await check.end())
                    ):
                        await self.writer.fail(stop.code, stop.message)
                        return False
                    await self.writer.close(data)
                    self.finished = True
                    return False
                produced = normalizer.feed(event.data)
                if self.completion is not None:
                    for piece in produced:
                        self.completion.delta(piece[6:-2])  # ChatStream's: b"data: <json>\n\n"
                out += produced
        except WorkerFailure as e:
            await self.fail(e.code, str(e))
            return False
        if out:
            data = b"".join(out)
            if check is not None and (stop := await check.events(data)):
                await self.writer.fail(stop.code, stop.message)
                return False
            await self.writer.write(data)
        return True

    async def fail(self, code: str, message: str) -> None:
        self.outcome.tool_calls = self.normalizer.tool_names
        self.outcome.finish_reasons = self.normalizer.finish_reasons
        await self.writer.fail(code, message)

    async def end(self) -> None:
        await self.fail("transport_failure", "the worker stream ended without [DONE]")


class SieSseWriter(SseWriter):
    """A local stream's writer: a failure after the head is SIE's final chunk (the
    choices unfinished, a top-level `error` and `request_id`), then `[DONE]` (sie-rules
    A7), where a remote stream ends with an error event alone."""

    __slots__ = ("_render",)

    def __init__(
        self,
        send: Send,
        outcome: Outcome,
        extra_headers: Headers,
        render: Callable[[str, str, str, float | None], bytes],
    ) -> None:
        super().__init__(send, outcome, extra_headers)
        self._render = render

    async def fail(self, code: str, message: str) -> None:
        if self.state is not StreamState.STREAMING:
            await super().fail(code, message)  # before the head: raises the error answer
            return
        self._outcome.error = code
        self.state = StreamState.ENDED
        type_ = CATALOGUE.get(code, (502, "server_error"))[1]
        retry_after = RETRY_AFTER_S.get(code)
        body = self._render(code, message, type_, retry_after) + b"data: [DONE]\n\n"
        await self._send({"type": "http.response.body", "body": body, "more_body": False})


async def _abort(exchanges: Exchanges, worker: WorkerState, rid: str) -> None:
    try:
        resp = await exchanges.pool.send(
            worker.origin,
            b"POST",
            worker.origin.base_path.encode() + b"/abort_request",
            [(b"content-type", b"application/json")],
            orjson.dumps({"rid": rid}),
        )
        await resp.aclose()
    except GatewayError:
        log.warning("could not abort request on worker %s", worker.worker.url)
