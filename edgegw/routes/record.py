"""What a generation route records once its request has ended, whatever its API: the
access log's provider and status, the WARNING of a failed stream, the GenAI span
attributes and the metrics, and the tenant's limits settled with the usage. Chat,
completions, Messages and Responses all end here."""

from __future__ import annotations

import logging
from types import TracebackType

import trio

from edgegw._core import RequestError
from edgegw.answer import Outcome
from edgegw.asgi import Call, Result
from edgegw.errors import GatewayError
from edgegw.gateway import Gateway
from edgegw.tenants.admission import Ticket

log = logging.getLogger("edgegw.app")

# Telemetry's status for a request that ended without an answer of its own: the client
# went away (nginx's 499), or an unexpected error (answered 500 by the boundary).
CLIENT_CLOSED = 499


class Recording:
    """`with Recording(...) as rec:` around a generation request's work, which sets
    `rec.provider` once it knows it and `rec.outcome` once its exchange returns. On the way
    out, whatever ended it, the request is recorded once with the status the client got:
    the outcome's (499 when the client went away), an error's own, 500 for anything else.

    `rec.admit(...)`, once the target is known, is the caller's tenant check (scope and
    limits, edgegw.tenants); its ticket is settled here with the usage, whatever ended it."""

    __slots__ = (
        "gw",
        "call",
        "model",
        "operation",
        "stream",
        "started",
        "provider",
        "outcome",
        "ticket",
    )

    def __init__(self, gw: Gateway, call: Call, model: str, operation: str, stream: bool) -> None:
        self.gw, self.call, self.model = gw, call, model
        self.operation, self.stream = operation, stream
        self.started = gw.exchanges.watch.now()
        self.provider = "unknown"
        self.outcome: Outcome | None = None
        self.ticket: Ticket | None = None

    async def admit(self, model: str, prompt_tokens: int, max_tokens: int) -> None:
        """The caller's tenant admits a request for `model` (`provider/model`, a local
        model's or an alias's name) of at most `prompt_tokens` + `max_tokens`, or raises
        its refusal (403 / 429); its rate-limit headers go on every answer."""
        call = self.call
        caller = call.caller or self.gw.client_keys.anonymous()
        self.ticket = ticket = await self.gw.tenancy.admit(caller, model, prompt_tokens, max_tokens)
        call.answer_headers += ticket.headers
        call.priced = ticket.cost_headers

    def __enter__(self) -> Recording:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        provider, model, outcome = self.provider, self.model, self.outcome
        settled = None if self.ticket is None else self.ticket.settle(outcome)
        if exc is None and outcome is not None:
            status = CLIENT_CLOSED if outcome.client_gone else outcome.status
            if outcome.client_gone:
                log.debug("client went away; upstream request to %s cancelled", provider)
            elif outcome.error is not None:
                log.warning("%s %.200r: stream ended with %.64r", provider, model, outcome.error)
        elif isinstance(exc, (GatewayError, RequestError)):  # what the boundary answers with
            status = exc.status
            if status >= 500:
                log.warning("%s %.200r: %d %.64r", provider, model, status, exc.code)
        elif isinstance(exc, trio.Cancelled):
            status = CLIENT_CLOSED
        else:
            status = 500
        record(
            self.gw,
            self.call,
            provider=provider,
            model=model,
            status=status,
            started=self.started,
            outcome=outcome,
            operation=self.operation,
            stream=self.stream,
            settled=settled,
        )


def record(
    gw: Gateway,
    call: Call,
    *,
    provider: str,
    model: str,
    status: int,
    started: float,
    outcome: Outcome | None,
    operation: str,
    stream: bool,
    settled: tuple[int, int | None, str | None] | None = None,
) -> None:
    """One ended generation request into its record (the access log's), its span and the
    metrics; `settled`: the tokens and cost its tenant was charged."""
    ttft_s = (
        None
        if outcome is None or outcome.first_chunk_at is None
        else outcome.first_chunk_at - started
    )
    cost = None if settled is None else settled[2]
    call.result = Result(provider, model, status, ttft_s if stream else None, cost)
    trace = call.trace
    caller = call.caller
    if settled is not None:
        tenant = gw.settings.tenants_default if caller is None else caller.tenant.name
        if gw.settings.telemetry_enabled:
            gw.telemetry.record_tenant(tenant, model, settled[0], settled[1])
        if trace is not None:
            attributes: dict[str, object] = {"edgegw.tenant": tenant, "edgegw.tokens": settled[0]}
            if caller is not None:
                attributes["edgegw.key"] = caller.key.name
            if cost is not None:
                attributes["edgegw.cost_usd"] = float(cost)
            trace.server.set_attributes(attributes)
    if trace is not None:
        trace.generation(
            operation=operation,
            provider=provider,
            model=model,
            response_model=None if outcome is None else outcome.response_model,
            usage=None if outcome is None else outcome.usage,
            finish_reasons=() if outcome is None else outcome.finish_reasons,
            ttft_s=ttft_s,
            choices=None if call.trace_content is None else call.trace_content.choices(),
        )
    if not gw.settings.telemetry_enabled:  # its arguments alone: 1 % of a request
        return
    gw.telemetry.record_generation(
        provider=provider,
        model=model,
        status=status,
        duration_s=gw.exchanges.watch.now() - started,
        ttft_s=ttft_s,
        usage=None if outcome is None else outcome.usage,
        tool_calls=[] if outcome is None else outcome.tool_calls,
        operation=operation,
        gaps=None if outcome is None else outcome.gaps,
        trace_id=None if trace is None else trace.trace_id,
    )
