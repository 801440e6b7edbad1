"""`python -m bench.routing`: what model routing adds to a request that names an alias.

A routed request runs `Trip.run` around its one attempt: the strategy's order, the
deployments' availability, the screen on the answer head, the verdict (breaker, latency
EWMA) and the routing metrics. This measures that Python work in process, for each strategy
over three deployments, with the attempt itself reduced to calling the screen with a 200
head (the relay's cost is the same routed or not). Telemetry on, as a deployment would run
it. CPU time (process_time), medians of rounds; compare with a proxied request's server CPU in bench/README.md.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import trio

from edgegw.exchange import Outcome
from edgegw.routing.config import Alias, Deployment, RoutingConfig
from edgegw.routing.router import Router, Screen
from edgegw.settings import Settings
from edgegw.telemetry.recording import Telemetry

ROUNDS = 7
TRIPS = 20_000


@dataclass
class Head:
    """The part of an upstream Response the screen reads."""

    status: int = 200

    def header(self, name: bytes) -> bytes | None:
        return None


async def _trips(strategy: str) -> float:
    deployments = tuple(
        Deployment(p, f"model-{i}", 1 + i) for i, p in enumerate(("openai", "groq", "deepseek"))
    )
    config = RoutingConfig("routing.yaml", {"fast": Alias("fast", strategy, deployments, 3)})
    router = Router(config, Telemetry(Settings(telemetry_enabled=True)))
    pool = router.pools["fast"]
    head = Head()

    async def attempt(d: Deployment, screen: Screen) -> Outcome:
        screen(head)  # type: ignore[arg-type]
        return Outcome()

    rounds = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(TRIPS):
            await router.trip(pool).run(attempt)
        rounds.append((time.process_time() - started) / TRIPS * 1e6)
    return statistics.median(rounds)


def main() -> None:
    import os

    print(f"load average {os.getloadavg()[0]:.2f}; {ROUNDS} rounds x {TRIPS} trips, median")
    for strategy in ("round_robin", "weighted", "least_latency"):
        print(f"{strategy:14s} {trio.run(_trips, strategy):6.1f} µs per routed request")


if __name__ == "__main__":
    main()
