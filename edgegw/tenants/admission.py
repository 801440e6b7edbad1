"""A tenant's request admitted or refused, in process: the model scope, the budgets, then
the limits of the tenant and of its key (requests per minute, tokens per minute, requests
at once), all checked before any is charged, so a refusal costs nothing.

`Tenancy.admit` returns a `Ticket` (or raises the refusal: 403 `model_not_in_scope`, 429
`insufficient_quota` for a spent budget, 429 `rate_limit_exceeded` /
`concurrency_limit_exceeded`, each with `Retry-After`); the ticket's `headers` are OpenAI's
x-ratelimit-* of the tightest limit, for every answer of the request; `Ticket.settle(outcome)`
once the request ended returns the request's slot, corrects the token charge from the
estimate to the usage the answer reported, and adds its tokens and cost to the budgets'
usage. The check and the charge run with no await between them: under Trio, nothing else
runs in between.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import trio

from edgegw.answer import Outcome
from edgegw.errors import GatewayError, Headers, fail
from edgegw.keyfile import Budget, Caller, Limits
from edgegw.tenants.budgets import Usage, period_end
from edgegw.tenants.limits import Bucket, duration_text, reset_s, wait_s
from edgegw.tenants.pricing import Prices, usd_text

# A concurrency refusal cannot know when a slot frees: retry after this.
CONCURRENCY_RETRY_S = 1


class _Holder:
    """One tenant's or key's counters in this process."""

    __slots__ = ("requests", "tokens", "active")

    def __init__(self) -> None:
        self.requests: Bucket | None = None
        self.tokens: Bucket | None = None
        self.active = 0


class Tenancy:
    """This process's tenant counters, by tenant and by key (their limits are read from the
    caller's records at each request, so a re-read key file applies at once)."""

    def __init__(
        self,
        usage: Usage,
        prices: Prices,
        clock: Callable[[], float] = trio.current_time,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.usage = usage
        self.prices = prices
        self._clock = clock  # the limits' (monotonic; MockClock in tests)
        self._wall = wall  # the budgets' calendar
        self._holders: dict[tuple[str, ...], _Holder] = {}

    def admit(self, caller: Caller, model: str, prompt_tokens: int, max_tokens: int) -> Ticket:
        """Admit a request of `caller` for `model` (as the scope names it) whose prompt is
        at most `prompt_tokens` and whose answer at most `max_tokens`, or raise the refusal."""
        if not caller.allows(model):
            raise fail(
                "model_not_in_scope",
                f"The model {model[:200]!r} is not among the models this key may use.",
                param="model",
            )
        tenant, key = caller.tenant, caller.key
        scopes = (f"t/{tenant.name}", f"k/{tenant.name}/{key.name}")
        if tenant.budgets or key.budgets:
            self._check_budgets(scopes, (tenant.budgets, key.budgets))
        limited = [
            (self._holder(("t", tenant.name)), tenant.limits, f"tenant {tenant.name}"),
            (self._holder(("k", tenant.name, key.name)), key.limits, f"key {key.name}"),
        ]
        limited = [row for row in limited if row[1]]
        estimate = prompt_tokens + max_tokens
        if not limited:
            return Ticket(self, model, scopes, [], estimate, prompt_tokens, ())
        now = self._clock()
        for holder, limits, _ in limited:
            if limits.rpm is not None:
                holder.requests = holder.requests or Bucket(limits.rpm, now)
                holder.requests.refill(limits.rpm, now)
            if limits.tpm is not None:
                holder.tokens = holder.tokens or Bucket(limits.tpm, now)
                holder.tokens.refill(limits.tpm, now)
        refusal = _refusal(limited, estimate)
        headers = _headers(limited, 1 if refusal is None else 0, estimate if refusal is None else 0)
        if refusal is not None:
            raise refusal.replace(more_headers=headers)
        for holder, limits, _ in limited:
            if holder.requests is not None and limits.rpm is not None:
                holder.requests.level -= 1
            if holder.tokens is not None and limits.tpm is not None:
                holder.tokens.level -= estimate
            holder.active += 1
        held = [(h, lim) for h, lim, _ in limited]
        return Ticket(self, model, scopes, held, estimate, prompt_tokens, headers)

    def _check_budgets(
        self, scopes: tuple[str, str], budgets: tuple[tuple[Budget, ...], tuple[Budget, ...]]
    ) -> None:
        """429 `insufficient_quota` (OpenAI's code for a spent quota) when a budget of the
        tenant or the key is spent, with Retry-After the end of its period."""
        now = self._wall()
        for scope, held, who in zip(scopes, budgets, ("tenant", "key"), strict=True):
            for b in held:
                if self.usage.spent(scope, b.unit, b.period, now) < b.limit:
                    continue
                wait = max(1, math.ceil(period_end(b.period, now) - now))
                amount = f"{b.limit} tokens" if b.unit == "tokens" else f"{usd_text(b.limit)} USD"
                raise fail(
                    "insufficient_quota",
                    f"The {who}'s budget of {amount} per {b.period} is spent; it renews "
                    f"at the start of the next {b.period} (UTC).",
                    headers=((b"retry-after", b"%d" % wait),),
                )

    def _holder(self, name: tuple[str, ...]) -> _Holder:
        holder = self._holders.get(name)
        if holder is None:
            holder = self._holders[name] = _Holder()
        return holder


def _refusal(limited: list[tuple[_Holder, Limits, str]], estimate: int) -> GatewayError | None:
    """The refusal of the first limit the request does not fit, with the longest wait."""
    found: GatewayError | None = None
    wait = 0.0
    for holder, limits, who in limited:
        if limits.concurrency is not None and holder.active >= limits.concurrency:
            if found is None:
                found = fail(
                    "concurrency_limit_exceeded",
                    f"Too many requests at once for {who}: limit {limits.concurrency}. "
                    "Retry when one has finished.",
                )
                wait = max(wait, CONCURRENCY_RETRY_S)
        bucket, limit = holder.requests, limits.rpm
        if bucket is not None and limit is not None and (w := wait_s(limit, bucket.level, 1)):
            wait = max(wait, w)
            found = found or fail(
                "rate_limit_exceeded",
                f"Rate limit reached for {who} on requests per min (RPM): limit {limit}. "
                f"Please try again in {duration_text(w)}.",
            )
        bucket, limit = holder.tokens, limits.tpm
        if (
            bucket is not None
            and limit is not None
            and (w := wait_s(limit, bucket.level, estimate))
        ):
            wait = max(wait, w)
            found = found or fail(
                "rate_limit_exceeded",
                f"Rate limit reached for {who} on tokens per min (TPM): limit {limit}, "
                f"requested {estimate}. Please try again in {duration_text(w)}.",
                type="tokens",
            )
    if found is None:
        return None
    return found.replace(
        more_headers=(
            (b"retry-after", b"%d" % max(1, math.ceil(wait))),
            (b"retry-after-ms", b"%d" % max(1, math.ceil(wait * 1000))),
        )
    )


def _headers(limited: list[tuple[_Holder, Limits, str]], requests: int, tokens: int) -> Headers:
    """OpenAI's x-ratelimit-* for the tightest requests and tokens limits, after charging
    `requests` and `tokens`."""
    out: list[tuple[bytes, bytes]] = []
    for kind, tightest in (
        (b"requests", _tightest([(h.requests, lim.rpm) for h, lim, _ in limited], requests)),
        (b"tokens", _tightest([(h.tokens, lim.tpm) for h, lim, _ in limited], tokens)),
    ):
        if tightest is None:
            continue
        level, limit = tightest
        out += [
            (b"x-ratelimit-limit-" + kind, b"%d" % limit),
            (b"x-ratelimit-remaining-" + kind, b"%d" % max(0, math.floor(level))),
            (b"x-ratelimit-reset-" + kind, duration_text(reset_s(limit, level)).encode()),
        ]
    return tuple(out)


def _tightest(
    buckets: list[tuple[Bucket | None, int | None]], amount: int
) -> tuple[float, int] | None:
    """(level after `amount`, limit) of the bucket with the least left."""
    found: tuple[float, int] | None = None
    for bucket, limit in buckets:
        if bucket is not None and limit is not None:
            level = bucket.level - amount
            if found is None or level < found[0]:
                found = (level, limit)
    return found


class Ticket:
    """An admitted request's hold on its limits, settled once when it ends."""

    __slots__ = (
        "_tenancy",
        "model",
        "_scopes",
        "_held",
        "estimate",
        "prompt_tokens",
        "headers",
        "_open",
    )

    def __init__(
        self,
        tenancy: Tenancy,
        model: str,
        scopes: tuple[str, str],
        held: list[tuple[_Holder, Limits]],
        estimate: int,
        prompt_tokens: int,
        headers: Headers,
    ) -> None:
        self._tenancy = tenancy
        self.model = model
        self._scopes = scopes
        self._held = held
        self.estimate = estimate
        self.prompt_tokens = prompt_tokens
        self.headers = headers
        self._open = True

    def cost_headers(self, usage: dict[str, Any]) -> Headers:
        """`x-edgegw-cost-usd` for an answer's usage, when the model has a price."""
        nano = self._tenancy.prices.cost_nano(self.model, usage)
        return () if nano is None else ((b"x-edgegw-cost-usd", usd_text(nano).encode()),)

    def settle(self, outcome: Outcome | None) -> tuple[int, int | None]:
        """Return the slot, charge the real usage instead of the estimate, and add it to the
        budgets' usage: (tokens, cost in nano-USD or None without a price)."""
        if not self._open:
            return 0, None
        self._open = False
        used = used_tokens(outcome, self.prompt_tokens)
        for holder, limits in self._held:
            holder.active -= 1
            if holder.tokens is not None and limits.tpm is not None:
                holder.tokens.level = min(
                    float(limits.tpm), holder.tokens.level + self.estimate - used
                )
        tenancy = self._tenancy
        usage = None if outcome is None else outcome.usage
        if not usage and used:  # no usage reported: priced as what was charged
            usage = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": used - self.prompt_tokens,
            }
        nano = tenancy.prices.cost_nano(self.model, usage)
        tenancy.usage.add(self._scopes, used, nano or 0)
        return used, nano


def used_tokens(outcome: Outcome | None, prompt_tokens: int) -> int:
    """The tokens a request used: its answer's usage (Chat's prompt + completion, Messages'
    and Responses' input + output); without one, a client that hung up or a stream cut
    short is charged its prompt bound and a token per event it was sent, an answer without
    usage its prompt bound; a request that got no answer or an error, nothing."""
    if outcome is None:
        return 0
    usage = outcome.usage
    if usage:
        total = _count(usage, "total_tokens")
        if total is None:
            parts = [
                _count(usage, name)
                for name in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
            ]
            total = sum(p for p in parts if p is not None)
        return total
    if outcome.events or outcome.client_gone or outcome.error is not None:
        return prompt_tokens + outcome.events
    return prompt_tokens if outcome.status < 400 else 0


def _count(usage: dict[str, Any], name: str) -> int | None:
    value = usage.get(name)
    return value if isinstance(value, int) and value >= 0 else None
