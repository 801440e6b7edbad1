"""The router: one per process, built once with the Gateway; its state is the process's own.

For a request naming an alias, `Router.trip(alias).attempts()` orders the alias's
deployments by its strategy, skips the ones that cannot take a request now (breaker open,
a probe out, a 429's Retry-After not yet over) and hands them to the route in turn, at
most `max_attempts` (`Trip` shows the loop). The route sends each and hands its `screen`
to the relay (edgegw.exchange.UpstreamRequest.screen), which calls it with the upstream's
answer head before anything is written to the client; the route reports how the attempt
ended (`Attempt.failed` / `Attempt.finished`), and the router keeps the verdicts. Before that point a
connect error, a 429 or a 5xx moves the request to the next deployment; after it the answer
is the client's, whatever follows. The last deployment tried answers as it would without
routing (its error in the envelope, with its status and Retry-After).

Strategies: `round_robin` (a cursor per alias, as inference-gateway), `weighted` (nginx's
smooth weighted round robin: deterministic, each deployment's share exact over every
sum-of-weights requests), `least_latency` (the lowest EWMA of time to the answer head; a
deployment never measured goes first). The failover order after the first choice is the
strategy's order: the cursor's rotation, weights descending, latency ascending.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Protocol

import trio

from edgegw.answer import Outcome
from edgegw.errors import GatewayError, fail
from edgegw.retry import NO_RETRY, RetryPolicy
from edgegw.routing.breaker import Breaker, BreakerState
from edgegw.routing.config import Alias, Deployment, RoutingConfig
from edgegw.upstream import Response, retry_after_s

# The weight of a new sample in the latency EWMA (about the last five requests count).
EWMA_ALPHA = 0.3
# A 429 without Retry-After keeps its deployment out this long.
DEFAULT_RETRY_AFTER_S = 1.0


class Failover(Exception):
    """An attempt that ended before anything reached the client: try the next deployment.
    `reason` is a telemetry label (the status, "connect", "no_worker", "remote_forbidden")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RoutingMetrics(Protocol):
    def record_routing_attempt(self, alias: str, deployment: str, outcome: str) -> None: ...

    def record_routing_failover(self, alias: str, deployment: str, reason: str) -> None: ...

    def record_breaker_state(self, deployment: str, state: str) -> None: ...


class DeploymentState:
    """What this process knows of one deployment's upstream: its breaker, latency and
    Retry-After, shared by every alias naming it (a broken or rate-limited upstream is so
    for each of them). How an alias spreads its requests is the alias's own (`Pool`)."""

    __slots__ = ("name", "breaker", "latency_s", "retry_until")

    def __init__(self, name: str, breaker: Breaker) -> None:
        self.name = name  # provider/model
        self.breaker = breaker
        self.latency_s: float | None = None  # EWMA of the time to the answer head
        self.retry_until = 0.0

    def available(self, now: float) -> bool:
        return now >= self.retry_until and self.breaker.admits(now)

    def free_at(self) -> float:
        """When it may take a request again (for the Retry-After of a 503)."""
        if self.breaker.state is BreakerState.CLOSED:
            return self.retry_until
        return max(self.retry_until, self.breaker.reopens_at)

    def observe_latency(self, seconds: float) -> None:
        if self.latency_s is None:
            self.latency_s = seconds
        else:
            self.latency_s += EWMA_ALPHA * (seconds - self.latency_s)


@dataclass(frozen=True, slots=True)
class Member:
    """A deployment as one alias lists it (its weight) with its upstream's shared state."""

    deployment: Deployment
    state: DeploymentState


class Pool:
    """One alias: its members and its strategy's memory (the cursor, the weights' running
    counts), which no other alias shares."""

    __slots__ = ("alias", "members", "cursor", "current")

    def __init__(self, alias: Alias, states: Mapping[str, DeploymentState]) -> None:
        self.alias = alias
        self.members = [Member(d, states[d.name]) for d in alias.deployments]
        self.cursor = 0
        self.current = [0] * len(self.members)  # smooth weighted round robin

    def order(self) -> list[Member]:
        """This request's deployments, first choice first."""
        members = self.members
        n = len(members)
        start = self.cursor
        self.cursor = (start + 1) % n
        rotated = [members[(start + i) % n] for i in range(n)]
        strategy = self.alias.strategy
        if strategy == "weighted":
            weights = [m.deployment.weight for m in members]
            for i, w in enumerate(weights):
                self.current[i] += w
            pick = max(range(n), key=lambda i: (self.current[i], -i))
            self.current[pick] -= sum(weights)
            rest = sorted((i for i in range(n) if i != pick), key=lambda i: (-weights[i], i))
            return [members[pick], *(members[i] for i in rest)]
        if strategy == "least_latency":
            return sorted(
                rotated, key=lambda m: -1.0 if m.state.latency_s is None else m.state.latency_s
            )
        return rotated


class Router:
    def __init__(
        self, config: RoutingConfig, metrics: RoutingMetrics, retry: RetryPolicy = NO_RETRY
    ) -> None:
        self.config = config
        self.metrics = metrics
        # The wait between one deployment's failure and the next attempt (UPSTREAM_RETRY_*).
        self.retry = retry
        # One state per upstream, shared by the aliases naming it (a broken upstream is broken
        # for each); weights and cursors are each alias's own, in its Pool.
        self.states: dict[str, DeploymentState] = {}
        policy = config.breaker
        for alias in config.aliases.values():
            for d in alias.deployments:
                if d.name not in self.states:
                    breaker = Breaker(policy.failures, policy.cooldown_s)
                    self.states[d.name] = DeploymentState(d.name, breaker)
                    metrics.record_breaker_state(d.name, breaker.state.value)
        self.pools = {name: Pool(alias, self.states) for name, alias in config.aliases.items()}

    def pool(self, model: str) -> Pool | None:
        """The alias `model` names exactly, if any."""
        return self.pools.get(model)

    def trip(self, pool: Pool) -> Trip:
        return Trip(self, pool)

    def _breaker_changed(self, state: DeploymentState, before: BreakerState) -> None:
        if state.breaker.state is not before:
            self.metrics.record_breaker_state(state.name, state.breaker.state.value)


class Screen:
    """Handed to the relay for one attempt: called with the upstream's answer head."""

    __slots__ = ("last", "started", "answered_at", "status", "retry_after_s")

    def __init__(self, last: bool) -> None:
        # The last attempt of the request: its answer goes to the client, whatever it is
        # (set by the route too, when a retry could repeat what the attempt did).
        self.last = last
        self.started = trio.current_time()
        self.answered_at: float | None = None
        self.status = 0
        self.retry_after_s: float | None = None

    def __call__(self, resp: Response) -> None:
        self.answered_at = trio.current_time()
        self.status = resp.status
        if resp.status == 429:
            self.retry_after_s = retry_after_s(resp.header(b"retry-after"))
        if not self.last and (resp.status == 429 or resp.status >= 500):
            raise Failover(str(resp.status))


class Trip:
    """One request's way through an alias; `selected` is the deployment tried last.

    async with aclosing(trip.attempts()) as attempts:
        async for attempt in attempts:
            try:
                outcome = await send(attempt.deployment, attempt.screen)
            except BaseException as e:
                if attempt.failed(e):
                    continue  # spent: the next deployment
                raise
            return attempt.finished(outcome)
    raise trip.unavailable()
    """

    __slots__ = ("router", "pool", "selected")

    def __init__(self, router: Router, pool: Pool) -> None:
        self.router = router
        self.pool = pool
        self.selected: Deployment | None = None

    async def attempts(self) -> AsyncGenerator[Attempt, None]:
        """The deployments to try, in the strategy's order, skipping those that cannot take
        a request now, at most `max_attempts`, the retry backoff waited between them."""
        alias = self.pool.alias
        order = self.pool.order()
        tried = 0
        for i, member in enumerate(order):
            state, d = member.state, member.deployment
            now = trio.current_time()
            if tried == alias.max_attempts or not state.available(now):
                continue
            if tried:
                await trio.sleep(self.router.retry.backoff(tried - 1))
                now = trio.current_time()
            tried += 1
            later = order[i + 1 :]
            last = tried == alias.max_attempts or not any(m.state.available(now) for m in later)
            before = state.breaker.state
            state.breaker.begin(now)
            self.router._breaker_changed(state, before)
            self.selected = d
            yield Attempt(self, state, d, Screen(last))

    def unavailable(self) -> GatewayError:
        """Every deployment is out (breakers open, Retry-After pending): 503 at once."""
        now = trio.current_time()
        free = min(m.state.free_at() for m in self.pool.members)
        wait = max(1, math.ceil(free - now))
        return fail(
            "no_deployment_available",
            f"No deployment of '{self.pool.alias.name}' can take a request now; retry later.",
            param="model",
            headers=((b"retry-after", b"%d" % wait),),
        )

    def _settle(self, state: DeploymentState, screen: Screen, *, failed: bool) -> None:
        """The attempt's verdict on its deployment: breaker, latency, Retry-After."""
        before = state.breaker.state
        now = trio.current_time()
        if screen.answered_at is not None and not failed and screen.status != 429:
            # Only answers count: a deployment that fails fast must not look fast.
            state.observe_latency(screen.answered_at - screen.started)
        if screen.status == 429:
            wait = DEFAULT_RETRY_AFTER_S if screen.retry_after_s is None else screen.retry_after_s
            state.retry_until = max(state.retry_until, now + wait)
        if failed:
            state.breaker.failed(now)
        else:
            state.breaker.succeeded()
        self.router._breaker_changed(state, before)

    def _abandon(self, state: DeploymentState) -> None:
        before = state.breaker.state
        state.breaker.abandoned()
        self.router._breaker_changed(state, before)

    def _record(self, state: DeploymentState, outcome: str) -> None:
        self.router.metrics.record_routing_attempt(self.pool.alias.name, state.name, outcome)


class Attempt:
    """One deployment tried: what the route sends to, and the verdict it reports back."""

    __slots__ = ("trip", "state", "deployment", "screen")

    def __init__(
        self, trip: Trip, state: DeploymentState, deployment: Deployment, screen: Screen
    ) -> None:
        self.trip = trip
        self.state = state
        self.deployment = deployment
        self.screen = screen

    def failed(self, e: BaseException) -> bool:
        """The attempt raised `e`: True when the request moves on to the next deployment
        (`e` is spent), False when `e` is the client's answer (raise it)."""
        trip, state, screen, d = self.trip, self.state, self.screen, self.deployment
        metrics = trip.router.metrics
        if isinstance(e, Failover):
            if screen.answered_at is None:
                # Not sent (no free local worker, X-SIE-Remote: forbid): no verdict.
                trip._abandon(state)
            else:  # a 5xx counts against the breaker; a 429 is its Retry-After
                trip._settle(state, screen, failed=screen.status != 429)
            trip._record(state, "failover")
            metrics.record_routing_failover(trip.pool.alias.name, d.name, e.reason)
            return True
        if isinstance(e, GatewayError):
            unanswered = screen.answered_at is None
            transport = unanswered and e.status == 502
            if transport and not screen.last:
                trip._settle(state, screen, failed=True)
                trip._record(state, "failover")
                metrics.record_routing_failover(trip.pool.alias.name, d.name, "connect")
                return True
            if unanswered and not transport and e.code != "upstream_timeout":
                trip._abandon(state)  # refused before it was sent: no verdict
            else:
                trip._settle(state, screen, failed=unanswered or screen.status >= 500)
            trip._record(state, "error")
            e.headers = (*e.headers, *selected_headers(d))
            return False
        trip._abandon(state)
        return False

    def finished(self, outcome: Outcome) -> Outcome:
        """The attempt answered the client (or the client left): its verdict recorded."""
        trip, state, screen = self.trip, self.state, self.screen
        if outcome.client_gone and screen.answered_at is None:
            trip._abandon(state)  # the client left before the deployment answered
            trip._record(state, "client_gone")
            return outcome
        trip._settle(state, screen, failed=outcome.error is not None or screen.status >= 500)
        trip._record(state, "error" if outcome.error is not None else "ok")
        return outcome


def selected_headers(d: Deployment) -> tuple[tuple[bytes, bytes], ...]:
    """inference-gateway's headers naming the deployment that answered."""
    return ((b"x-selected-provider", d.provider.encode()), (b"x-selected-model", d.model.encode()))
