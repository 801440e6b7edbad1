"""One deployment's circuit breaker: a small state machine on a clock passed in (pure, so
its tests drive it with plain numbers; the router passes trio.current_time()).

    CLOSED ──(`failures` consecutive failures)──> OPEN
    OPEN ──(`cooldown_s` later, a request begins)──> HALF_OPEN (that request is the probe)
    HALF_OPEN ──(the probe succeeds)──> CLOSED
    HALF_OPEN ──(the probe fails)──> OPEN (for another cooldown)
    HALF_OPEN ──(the probe ends with no verdict: the client left)──> OPEN, probe again at once

While OPEN, and while a probe is out, the deployment takes no requests: the router passes
them to the alias's other deployments.
"""

from __future__ import annotations

import enum


class BreakerState(enum.Enum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


class Breaker:
    __slots__ = ("threshold", "cooldown_s", "state", "failures", "opened_at")

    def __init__(self, threshold: int, cooldown_s: float) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.state = BreakerState.CLOSED
        self.failures = 0  # consecutive
        self.opened_at = 0.0

    def admits(self, now: float) -> bool:
        """Whether a request may begin now (asking changes nothing)."""
        if self.state is BreakerState.CLOSED:
            return True
        return self.state is BreakerState.OPEN and now >= self.reopens_at

    @property
    def reopens_at(self) -> float:
        """When an open breaker lets its probe through."""
        return self.opened_at + self.cooldown_s

    def begin(self, now: float) -> None:
        """A request begins (after `admits(now)`): past the cooldown, it is the probe."""
        if self.state is BreakerState.OPEN and now >= self.reopens_at:
            self.state = BreakerState.HALF_OPEN

    def succeeded(self) -> None:
        self.state = BreakerState.CLOSED
        self.failures = 0

    def failed(self, now: float) -> None:
        self.failures += 1
        if self.state is BreakerState.HALF_OPEN or self.failures >= self.threshold:
            self.state = BreakerState.OPEN
            self.opened_at = now

    def abandoned(self) -> None:
        """A request ended with no verdict on the deployment (the client went away, or the
        request itself was refused): a probe's turn goes to the next request."""
        if self.state is BreakerState.HALF_OPEN:
            self.state = BreakerState.OPEN
            self.opened_at -= self.cooldown_s  # admitted again at once
