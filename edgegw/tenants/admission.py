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

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import trio

from edgegw._core import Ledger, duration_text, rate_limit_headers
from edgegw.answer import Outcome
from edgegw.errors import GatewayError, Headers, fail
from edgegw.keyfile import NO_LIMITS, Budget, Caller
from edgegw.tenants.budgets import LiveKeys, Usage, period_end, period_keys
from edgegw.tenants.pricing import Prices, usd_text
from edgegw.tenants.redis_link import RedisUnavailable
from edgegw.tenants.shared import PREFIX, Admitted, SharedLimits, row_limit

log = logging.getLogger("edgegw.tenants")


class Tenancy:
    """This process's tenant counters, by tenant and by key, in the core's `Ledger` (their
    limits are read from the caller's records at each request, so a re-read key file applies
    at once)."""

    def __init__(
        self,
        usage: Usage,
        prices: Prices,
        clock: Callable[[], float] | None = None,
        wall: Callable[[], float] = time.time,
        shared: SharedLimits | None = None,
        limits_fail: str = "local",
        budgets_fail: str = "closed",
        counted: bool = True,
    ) -> None:
        self.usage = usage
        # False when nothing can ever read the usage (no key file, tenant, store or admin
        # API): it is not added up then (bench/README.md).
        self.counted = counted
        self.prices = prices
        # Through Redis when TENANTS_REDIS_URL is set; what an unanswered call falls back to.
        self.shared = shared
        self.limits_fail = limits_fail
        self.budgets_fail = budgets_fail
        # The limits' (monotonic): None, the run's clock (MockClock in tests), bound at the
        # first request (trio.current_time would be four Python calls a request).
        self._clock = clock
        self._wall = wall  # the budgets' calendar
        self._ledger = Ledger()  # the limits' counters, by tenant and by key

    async def admit(
        self, caller: Caller, model: str, prompt_tokens: int, max_tokens: int
    ) -> Ticket:
        """Admit a request of `caller` for `model` (as the scope names it) whose prompt is
        at most `prompt_tokens` and whose answer at most `max_tokens`, or raise the refusal."""
        estimate = prompt_tokens + max_tokens
        tenant, key = caller.tenant, caller.key
        if (
            tenant.limits is NO_LIMITS
            and key.limits is NO_LIMITS
            and not (tenant.budgets or key.budgets or tenant.scope.patterns or key.scope.patterns)
        ):
            # Nothing to check or hold (every request of a gateway without tenants): the
            # ticket settles its usage and cost only. The checks below cost 1 % of a request.
            scopes = _scopes(caller) if self.counted else None
            return Ticket(self, model, scopes, 0, estimate, prompt_tokens, ())
        if not caller.allows(model):
            raise fail(
                "model_not_in_scope",
                f"The model {model[:200]!r} is not among the models this key may use.",
                param="model",
            )
        scopes = _scopes(caller)
        if self.shared is None:
            return self._admit_here(caller, model, scopes, prompt_tokens, estimate, True)
        try:
            return await self._admit_shared(caller, model, scopes, prompt_tokens, estimate)
        except RedisUnavailable as e:
            log.warning("Redis did not answer for the tenants' limits (%s)", e)
            if (tenant.budgets or key.budgets) and self.budgets_fail == "closed":
                raise _store_unavailable() from None
            if self.limits_fail == "closed" and (tenant.limits or key.limits):
                raise _store_unavailable() from None
            if self.limits_fail == "open":
                return Ticket(self, model, scopes, 0, estimate, prompt_tokens, ())
            # This process's own limits, as a stop-gap (budgets: skipped, or refused above).
            return self._admit_here(caller, model, scopes, prompt_tokens, estimate, False)

    @property
    def admin_keys(self) -> LiveKeys:
        """The admin API's live keys: Redis' with TENANTS_REDIS_URL, else the SQLite store's."""
        return self.usage.admin_keys if self.shared is None else self.shared.admin_keys

    async def save_key(self, tenant: str, name: str, line: str) -> bool:
        """Store an admin key's line; False when the tenant has a live key of that name.
        Raises StoreError without a store, RedisUnavailable when Redis does not answer."""
        if self.shared is None:
            return await self.usage.save_key(tenant, name, line)
        return await self.shared.save_key(tenant, name, line)

    async def revoke_key(self, tenant: str, name: str) -> bool:
        if self.shared is None:
            return await self.usage.revoke_key(tenant, name)
        return await self.shared.revoke_key(tenant, name)

    def _admit_here(
        self,
        caller: Caller,
        model: str,
        scopes: tuple[str, str],
        prompt_tokens: int,
        estimate: int,
        budgets: bool,
    ) -> Ticket:
        """In this process: the budgets (from the usage it counts), then the ledger's token
        buckets, refilled, checked and charged in one call into the core."""
        tenant, key = caller.tenant, caller.key
        if budgets and (tenant.budgets or key.budgets):
            now = self._wall()
            keys, usage = period_keys(now), self.usage
            if (
                tenant.budgets
                and (b := usage.spent_budget(scopes[0], tenant.budgets, keys)) is not None
            ):
                raise _budget_refusal("tenant", b, now)
            if key.budgets and (b := usage.spent_budget(scopes[1], key.budgets, keys)) is not None:
                raise _budget_refusal("key", b, now)
        if tenant.limits is NO_LIMITS and key.limits is NO_LIMITS:
            return Ticket(self, model, scopes, 0, estimate, prompt_tokens, ())
        clock = self._clock
        if clock is None:
            clock = self._clock = trio.lowlevel.current_clock().current_time
        headers, held, refused = self._ledger.admit(
            scopes[0], tenant.limits, scopes[1], key.limits, estimate, clock()
        )
        if refused is not None:
            row, kind, limit, wait, longest = refused
            who = f"tenant {tenant.name}" if row == 0 else f"key {key.name}"
            if kind == "c":
                error = _concurrency_refusal(who, limit)
            else:
                error = _rate_refusal(who, kind, limit, wait, estimate)
            raise error.replace(more_headers=(*_retry_headers(longest), *headers))
        return Ticket(self, model, scopes, held, estimate, prompt_tokens, headers)

    async def _admit_shared(
        self,
        caller: Caller,
        model: str,
        scopes: tuple[str, str],
        prompt_tokens: int,
        estimate: int,
    ) -> Ticket:
        """Through Redis (edgegw.tenants.shared): one script checks and charges."""
        tenant, key = caller.tenant, caller.key
        if not (tenant.budgets or key.budgets or tenant.limits or key.limits):
            return Ticket(self, model, scopes, 0, estimate, prompt_tokens, ())
        assert self.shared is not None
        now = self._wall()
        result, rows = await self.shared.admit(caller, estimate, now)
        headers = _tightest_headers(
            (kind, result.levels[PREFIX + k], row_limit(kind, what))
            for k, kind, what in rows
            if kind in ("r", "t") and PREFIX + k in result.levels
        )
        if isinstance(result, Admitted):
            ticket = Ticket(self, model, scopes, 0, estimate, prompt_tokens, headers)
            ticket.shared = result
            return ticket
        row = next(r for r in rows if PREFIX + r[0] == result.key)
        who = (
            f"tenant {tenant.name}" if row[0].split(":")[1].startswith("t/") else f"key {key.name}"
        )
        what = row[2]
        if isinstance(what, Budget):
            raise _budget_refusal(who, what, now)
        if result.kind == "c":
            error = _concurrency_refusal(who, row_limit("c", what))
        else:
            error = _rate_refusal(
                who, result.kind, row_limit(result.kind, what), result.wait_s, estimate
            )
        raise error.replace(more_headers=(*_retry_headers(result.wait_s), *headers))


def _budget_refusal(who: str, b: Budget, now: float) -> GatewayError:
    """429 `insufficient_quota` (OpenAI's code for a spent quota), with Retry-After the end
    of the budget's period."""
    wait = max(1, math.ceil(period_end(b.period, now) - now))
    amount = f"{b.limit} tokens" if b.unit == "tokens" else f"{usd_text(b.limit)} USD"
    return fail(
        "insufficient_quota",
        f"The {who.split()[0]}'s budget of {amount} per {b.period} is spent; it renews "
        f"at the start of the next {b.period} (UTC).",
        headers=((b"retry-after", b"%d" % wait),),
    )


def _concurrency_refusal(who: str, limit: int) -> GatewayError:
    return fail(
        "concurrency_limit_exceeded",
        f"Too many requests at once for {who}: limit {limit}. Retry when one has finished.",
    )


def _rate_refusal(who: str, kind: str, limit: int, wait: float, estimate: int) -> GatewayError:
    if kind == "r":
        return fail(
            "rate_limit_exceeded",
            f"Rate limit reached for {who} on requests per min (RPM): limit {limit}. "
            f"Please try again in {duration_text(wait)}.",
        )
    return fail(
        "rate_limit_exceeded",
        f"Rate limit reached for {who} on tokens per min (TPM): limit {limit}, "
        f"requested {estimate}. Please try again in {duration_text(wait)}.",
        type="tokens",
    )


def _retry_headers(wait: float) -> Headers:
    return (
        (b"retry-after", b"%d" % max(1, math.ceil(wait))),
        (b"retry-after-ms", b"%d" % max(1, math.ceil(wait * 1000))),
    )


def _scopes(caller: Caller) -> tuple[str, str]:
    """The ledger's and the usage's rows of `caller`: its tenant's, its key's."""
    tenant = caller.tenant.name
    return f"t/{tenant}", f"k/{tenant}/{caller.key.name}"


def _store_unavailable() -> GatewayError:
    return fail(
        "tenant_store_unavailable",
        "The store of this gateway's limits and budgets is unavailable; retry shortly.",
        headers=((b"retry-after", b"1"),),
    )


def _tightest_headers(levels: Iterable[tuple[str, float, int]]) -> Headers:
    """The x-ratelimit-* of the bucket with the least left of each kind (r, t), from the
    levels Redis returned."""
    r = t = None
    for kind, level, limit in levels:
        if kind == "r":
            r = (level, limit) if r is None else min(r, (level, limit))
        else:
            t = (level, limit) if t is None else min(t, (level, limit))
    return rate_limit_headers(r, t)


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
        "shared",
        "_priced",
        "_priced_text",
        "_open",
    )

    def __init__(
        self,
        tenancy: Tenancy,
        model: str,
        scopes: tuple[str, str] | None,
        held: int,
        estimate: int,
        prompt_tokens: int,
        headers: Headers,
    ) -> None:
        self._tenancy = tenancy
        self.model = model
        self._scopes = scopes  # None: nothing reads them (nothing held or counted)
        self._held = held  # the ledger's rows charged (bits: 1 the tenant, 2 the key)
        self.estimate = estimate
        self.prompt_tokens = prompt_tokens
        self.headers = headers
        # What Redis charged (edgegw.tenants.shared), settled there.
        self.shared: Admitted | None = None
        self._priced: tuple[dict[str, Any], int | None] | None = None
        self._priced_text: str | None = None  # the cost header's, formatted once
        self._open = True

    def cost_headers(self, usage: dict[str, Any]) -> Headers:
        """`x-edgegw-cost-usd` for an answer's usage, when the model has a price."""
        nano = self._tenancy.prices.cost_nano(self.model, usage)
        self._priced = (usage, nano)  # the same answer's settle needs it again
        if nano is None:
            return ()
        self._priced_text = text = usd_text(nano)
        return ((b"x-edgegw-cost-usd", text.encode()),)

    def settle(self, outcome: Outcome | None) -> tuple[int, int | None, str | None]:
        """Return the slot, charge the real usage instead of the estimate, and add it to the
        budgets' usage: (tokens, cost in nano-USD and as USD text, or None without a price)."""
        if not self._open:
            return 0, None, None
        self._open = False
        used = used_tokens(outcome, self.prompt_tokens)
        tenancy = self._tenancy
        scopes = self._scopes
        if self._held:
            assert scopes is not None
            tenancy._ledger.settle(scopes[0], scopes[1], self._held, self.estimate, used)
        usage = None if outcome is None else outcome.usage
        if not usage and used:  # no usage reported: priced as what was charged
            usage = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": used - self.prompt_tokens,
            }
        priced, text = self._priced, self._priced_text
        if priced is not None and priced[0] is usage:
            nano = priced[1]
        else:
            nano, text = tenancy.prices.cost_nano(self.model, usage), None
        if self.shared is not None and tenancy.shared is not None:
            assert scopes is not None
            back = self.estimate - used
            tenancy.shared.settle(self.shared, scopes, back, used, nano or 0, tenancy._wall())
        elif tenancy.counted:
            assert scopes is not None
            tenancy.usage.add(scopes, used, nano or 0)
        if nano is not None and text is None:
            text = usd_text(nano)
        return used, nano, text


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
