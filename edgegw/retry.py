"""Retrying an upstream request whose failure reached no client byte: a refused or reset
connection, a 429 whose Retry-After is short, a 502/503/504. The same target is tried
again after a jittered exponential backoff, within a bound on attempts and an overall
deadline; what is left after the last attempt goes to the client as it would have.

Who retries what (the route decides, through `UpstreamRequest.retry`):
- chat, completions, Messages and Responses: every case above, as LiteLLM, Portkey and
  Envoy AI Gateway do (a generation that failed with a 5xx produced nothing to repeat);
- Images: only a connection the upstream refused (nothing reached it), since a 5xx may
  follow work done and billed;
- /proxy: none (edgegw.routes.proxy streams the body through as it arrives; nothing is kept
  to send again);
- a local model's remote fallback: none (SIE's one attempt, then the local refusal);
- an attempt of a routing alias: none here; the router fails over to the next deployment
  and waits the same backoff between its rounds;
- MCP tool calls: none (a tool may act on the world); MCP model rounds are chat requests.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from edgegw.errors import GatewayError
from edgegw.upstream import Response, retry_after_s

# Statuses a retry may cure: the upstream's gateway, its overload, its timeout.
RETRIED_STATUSES = frozenset({502, 503, 504})
# Transport failures before any answer: refused and reset connections.
RETRIED_TRANSPORT = frozenset({"upstream_unreachable", "upstream_connection_lost"})
# Refused only: the request never reached the upstream, so any request may be sent again.
REFUSED_ONLY = frozenset({"upstream_unreachable"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """UPSTREAM_RETRY_*: `attempts` in all (1: no retry); the k-th wait is drawn from
    [b/2, b] with b = min(backoff_s * 2**k, max_backoff_s); a 429 or 503 is retried only
    when its Retry-After (or its absence, for a 503) is at most `max_retry_after_s`, which
    is then waited instead; no wait starts that would end past `deadline_s` after the
    first attempt."""

    attempts: int = 3
    backoff_s: float = 0.25
    max_backoff_s: float = 2.0
    max_retry_after_s: float = 5.0
    deadline_s: float = 15.0

    def backoff(self, k: int, rng: random.Random | None = None) -> float:
        ceiling = min(self.backoff_s * 2**k, self.max_backoff_s)
        return (rng or _rng).uniform(ceiling / 2, ceiling)

    def wait_for(self, resp: Response, k: int) -> float | None:
        """How long to wait before trying again after this answer; None: keep it."""
        status = resp.status
        if status != 429 and status not in RETRIED_STATUSES:
            return None
        told = retry_after_s(resp.header(b"retry-after"))
        if told is None:
            return None if status == 429 else self.backoff(k)
        return told if told <= self.max_retry_after_s else None


NO_RETRY = RetryPolicy(attempts=1, backoff_s=0.0, max_backoff_s=0.0)
# Jitter needs no secret: spreading retries does not depend on unpredictability.
_rng = random.Random()


async def send_retrying(
    send: Callable[[], Awaitable[Response]],
    policy: RetryPolicy,
    *,
    refused_only: bool = False,
    on_retry: Callable[[str], None] | None = None,
    nap: Callable[[float], Awaitable[None]] = trio.sleep,
    started: float | None = None,
) -> Response:
    """`send()` until an answer worth keeping, at most `policy.attempts` times. The answer
    returned is open; those given up on are closed. `on_retry(reason)` is told each retry;
    `nap` waits the backoff; `started`: when the first attempt began, if the caller knows."""
    deadline = (trio.current_time() if started is None else started) + policy.deadline_s
    transport = REFUSED_ONLY if refused_only else RETRIED_TRANSPORT
    k = 0
    while True:
        last = k + 1 >= policy.attempts
        try:
            resp = await send()
        except GatewayError as e:
            if last or e.code not in transport:
                raise
            wait = policy.backoff(k)
            if trio.current_time() + wait > deadline:
                raise
            reason = e.code
        else:
            keep = last or refused_only
            wait_or_none = None if keep else policy.wait_for(resp, k)
            if wait_or_none is None or trio.current_time() + wait_or_none > deadline:
                return resp
            wait = wait_or_none
            reason = str(resp.status)
            await resp.aclose()
        if on_retry is not None:
            on_retry(reason)
        await nap(wait)
        k += 1
