"""Rate limits as token buckets, pure: no clock of their own, no I/O.

A bucket holds up to `limit` units and refills `limit` per minute, continuously (so a
limit of 60 rpm admits a burst of 60, then one a second). A request needs one unit of a
requests bucket; a token bucket is charged the request's token estimate and may go into
debt (a request larger than what is left waits until the bucket is full, then is admitted:
otherwise a prompt above the limit could never pass), and is settled with the real usage
when the request ends. OpenAI's x-ratelimit-* headers are read off the bucket: its limit,
what remains, and the time until it is full again.
"""

from __future__ import annotations

import math

WINDOW_S = 60.0


class Bucket:
    __slots__ = ("level", "at")

    def __init__(self, limit: int, now: float) -> None:
        self.level = float(limit)
        self.at = now

    def refill(self, limit: int, now: float) -> float:
        """The level at `now` (a lowered limit caps it at once)."""
        if now > self.at:
            self.level = min(float(limit), self.level + (now - self.at) * limit / WINDOW_S)
            self.at = now
        elif self.level > limit:
            self.level = float(limit)
        return self.level


def need(limit: int, amount: int) -> float:
    """What the bucket must hold to admit `amount` (never more than a full bucket)."""
    return float(min(amount, limit))


def wait_s(limit: int, level: float, amount: int) -> float:
    """How long until the bucket holds `need(limit, amount)`; 0 when it does."""
    return max(0.0, (need(limit, amount) - level) * WINDOW_S / limit)


def reset_s(limit: int, level: float) -> float:
    """How long until the bucket is full again."""
    return max(0.0, (limit - level) * WINDOW_S / limit)


def duration_text(seconds: float) -> str:
    """OpenAI's reset format: `20ms`, `1s`, `6m0s`, `1h2m3s` (Go's duration, rounded up to
    the millisecond below a second and to the second above)."""
    if seconds < 1.0:
        return f"{math.ceil(seconds * 1000)}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def level_headers(levels: list[tuple[str, float, int]]) -> tuple[tuple[bytes, bytes], ...]:
    """The headers of the bucket with the least left, of each kind (r, t): its limit, what
    remains, and the time until it is full."""
    r = [(level, limit) for k, level, limit in levels if k == "r"]
    t = [(level, limit) for k, level, limit in levels if k == "t"]
    return kind_headers(b"requests", min(r) if r else None) + kind_headers(
        b"tokens", min(t) if t else None
    )


def kind_headers(
    name: bytes, tightest: tuple[float, int] | None
) -> tuple[tuple[bytes, bytes], ...]:
    """x-ratelimit-limit-, -remaining- and -reset-`name` of a bucket (level, limit)."""
    if tightest is None:
        return ()
    level, limit = tightest
    reset = reset_s(limit, level)
    return (
        (b"x-ratelimit-limit-" + name, b"%d" % limit),
        (b"x-ratelimit-remaining-" + name, b"%d" % level if level > 0 else b"0"),  # floored
        # Under a second, as every answer of a lightly used limit has it: duration_text's.
        (
            b"x-ratelimit-reset-" + name,
            b"%dms" % math.ceil(reset * 1000) if reset < 1.0 else duration_text(reset).encode(),
        ),
    )
